//! `key create`, `key list` and `key revoke`: an account's named keys, each command printing one
//! JSON object. The key's value appears only in `key create`'s answer.

use anyhow::Result;
use serde::Serialize;
use toolgate_app::{KeyRequest, KeyView};

use crate::commands::{Pieces, app, print_json};
use crate::config::Settings;

/// `key create --email E --name N [--month-cap-usd X] [--day-cap-usd Y] [--tools read,ai]
/// [--fields a,b]`: prints the key with `api_key` and `personal_url`.
pub async fn create(settings: &Settings, email: &str, request: &KeyRequest<'_>) -> Result<()> {
    let app = app(Pieces::from_settings(settings, false)?).await?;
    let account = app.keys().account_of(email).await?;
    let created = app.keys().create(&account, request).await?;
    print_json(&created)
}

/// `key list --email E`: prints `{keys: [...]}`, live and revoked, oldest first.
pub async fn list(settings: &Settings, email: &str) -> Result<()> {
    #[derive(Serialize)]
    struct Listed {
        keys: Vec<KeyView>,
    }
    let app = app(Pieces::from_settings(settings, false)?).await?;
    let account = app.keys().account_of(email).await?;
    let keys = app.keys().list(&account).await?;
    print_json(&Listed { keys })
}

/// `key revoke --email E --key KEY` (its id or name): prints the key with `revoked`, whether
/// this command revoked it (`false`: it was revoked already).
pub async fn revoke(settings: &Settings, email: &str, key: &str) -> Result<()> {
    #[derive(Serialize)]
    struct Revoked {
        #[serde(flatten)]
        key: KeyView,
        revoked: bool,
    }
    let app = app(Pieces::from_settings(settings, false)?).await?;
    let account = app.keys().account_of(email).await?;
    let (key, _, revoked) = app.keys().revoke(&account, key).await?;
    print_json(&Revoked { key, revoked })
}

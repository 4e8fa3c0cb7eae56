//! The operator commands: each prints one JSON object on success.

use anyhow::Result;
use serde::Serialize;
use toolgate_app::{App, Services};

use crate::config::Settings;

async fn app(settings: &Settings) -> Result<App> {
    app_with_vault(settings, false).await
}

/// The use cases over the configured store, with the vault when `vault` (it must exist then).
pub async fn app_with_vault(settings: &Settings, vault: bool) -> Result<App> {
    let store = crate::backend::open(settings, crate::backend::Opener::Command).await?;
    let vault = if vault {
        Some(crate::vault::open(settings, &store).await?)
    } else {
        None
    };
    Ok(App::new(
        store,
        settings.brand()?,
        settings.pricing()?,
        &settings.public_url()?,
        Services {
            vault,
            ..Services::default()
        },
    ))
}

fn print_json(value: &impl Serialize) -> Result<()> {
    println!("{}", serde_json::to_string(value)?);
    Ok(())
}

/// `account create --email E`.
pub async fn create_account(settings: &Settings, email: &str) -> Result<()> {
    // with the vault, so the key is also kept sealed for the owner's dashboard
    let issued = app_with_vault(settings, true)
        .await?
        .admin()
        .create_account(email)
        .await?;
    print_json(&issued)
}

/// `account rotate-key --email E`.
pub async fn rotate_key(settings: &Settings, email: &str) -> Result<()> {
    let issued = app_with_vault(settings, true)
        .await?
        .admin()
        .rotate_key(email)
        .await?;
    print_json(&issued)
}

/// `wallet credit --email E --usd AMOUNT`.
pub async fn credit_wallet(
    settings: &Settings,
    email: &str,
    usd: &str,
    reference: Option<&str>,
) -> Result<()> {
    let status = app(settings)
        .await?
        .admin()
        .credit_wallet(email, usd, reference)
        .await?;
    print_json(&status)
}

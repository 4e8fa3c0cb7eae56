//! The account owner's dashboard under `/dashboard`, the sign-in request `POST /magic-link` and
//! the payment provider's callback `POST /billing/stripe/webhook`.
//!
//! Pages are rendered on the server (maud, escaped by default) with one stylesheet and one small
//! script served from here: no external asset, usable without the script except "Copy". Every
//! form is checked for its origin, and every signed-in form for an anti-forgery value derived
//! from the session cookie.

mod assets;
mod consent;
mod cookie;
mod guard;
mod history;
mod keys;
mod limits;
mod network;
mod pages;
mod payment_status;
mod sign_in;
mod views;
mod webhook;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use toolgate_app::App;
use toolgate_domain::{AccountId, KeyId, Origin};

/// What the dashboard needs from the server around it.
#[derive(Clone)]
pub struct DashboardSettings {
    /// The externally visible base URL: links, redirects, and the session cookie's name and
    /// scope (`__Host-`, `Secure`, `Path=/` behind https).
    pub public_url: String,
    /// Called after an owner rotated the key: the server ends the old key's open MCP sessions.
    pub on_key_rotated: Arc<dyn Fn(&AccountId) + Send + Sync>,
    /// Called after an owner revoked a named key: the server ends that key's open MCP sessions.
    pub on_key_revoked: KeyRevoked,
}

/// What the dashboard calls after revoking a named key, and waits for before it answers (so the
/// key's sessions are closed everywhere, their durable records included, by then).
pub type KeyRevoked = Arc<
    dyn Fn(&AccountId, &KeyId) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        + Send
        + Sync,
>;

impl std::fmt::Debug for DashboardSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DashboardSettings")
            .field("public_url", &self.public_url)
            .finish_non_exhaustive()
    }
}

/// State of every dashboard handler.
#[derive(Clone)]
pub(crate) struct Dash(Arc<DashState>);

pub(crate) struct DashState {
    app: App,
    /// The public URL's origin: forms must come from it (`None`: a public URL naming none, so
    /// no form naming its origin passes).
    origin: Option<Origin>,
    /// The session cookie's name and scope, chosen by the public URL's scheme.
    cookie: cookie::SignInCookie,
    on_key_rotated: Arc<dyn Fn(&AccountId) + Send + Sync>,
    on_key_revoked: KeyRevoked,
}

impl std::ops::Deref for Dash {
    type Target = DashState;
    fn deref(&self) -> &DashState {
        &self.0
    }
}

/// The dashboard's routes, to be merged into the server's router.
pub fn router(app: App, settings: DashboardSettings) -> Router {
    let public_url = settings.public_url.trim_end_matches('/').to_owned();
    let state = Dash(Arc::new(DashState {
        app,
        origin: Origin::parse(&public_url),
        cookie: cookie::SignInCookie::for_public_url(&public_url),
        on_key_rotated: settings.on_key_rotated,
        on_key_revoked: settings.on_key_revoked,
    }));
    Router::new()
        .route("/magic-link", post(sign_in::request_link))
        .route("/billing/stripe/webhook", post(webhook::stripe))
        .route("/dashboard/sign-in", get(sign_in::page))
        .route(
            "/dashboard/sign-in/confirm",
            get(sign_in::confirm_page).post(sign_in::confirm),
        )
        .route("/dashboard/sign-out", post(sign_in::sign_out))
        .route(
            "/dashboard/sign-out-everywhere",
            post(sign_in::sign_out_everywhere),
        )
        .route("/dashboard", get(pages::overview))
        .route("/dashboard/", get(pages::overview))
        .route("/dashboard/key/rotate", post(pages::rotate_key))
        .route("/dashboard/keys", get(keys::page))
        .route("/dashboard/keys/create", post(keys::create))
        .route("/dashboard/keys/caps", post(keys::caps))
        .route("/dashboard/keys/revoke", post(keys::revoke))
        .route("/dashboard/secrets", get(pages::secrets))
        .route("/dashboard/secrets/set", post(pages::set_secret))
        .route("/dashboard/secrets/delete", post(pages::delete_secret))
        .route("/dashboard/usage", get(pages::usage))
        .route("/dashboard/history", get(history::page))
        .route("/dashboard/history.csv", get(history::export))
        .route("/dashboard/history/{id}", get(history::record))
        .route("/dashboard/wallet", get(pages::wallet))
        .route("/dashboard/wallet/top-up", post(pages::top_up))
        .route("/dashboard/limits", get(limits::page))
        .route("/dashboard/limits/set", post(limits::set))
        .route("/dashboard/sessions", get(pages::sessions))
        .route("/dashboard/sessions/end", post(pages::end_session))
        .route("/dashboard/network", get(network::page))
        .route("/dashboard/network/set", post(network::set))
        .route(
            "/dashboard/oauth/authorize",
            get(consent::page).post(consent::decide),
        )
        .route("/dashboard/apps", get(consent::apps))
        .route("/dashboard/apps/revoke", post(consent::revoke))
        .route("/dashboard/assets/app.css", get(assets::css))
        .route("/dashboard/assets/app.js", get(assets::js))
        .with_state(state)
}

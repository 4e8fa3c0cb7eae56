//! The signed-in pages and their forms. Each handler takes the [`Signed`] owner and reaches
//! only that account's data; each form is checked before it changes anything.

use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use toolgate_app::SecretsError;
use toolgate_domain::SecretName;

use crate::guard::{self, Signed};
use crate::views::{self, Chrome, Tab};
use crate::{Dash, payment_status};

/// A notice named in the query after a form (fixed texts only: nothing is reflected).
#[derive(Deserialize, Default)]
pub struct NoticeQuery {
    notice: Option<String>,
    paid: Option<String>,
}

pub(crate) fn notice_text(query: &NoticeQuery) -> Option<&'static str> {
    if query.paid.is_some() {
        return Some(
            "Thank you: the payment is confirmed by the provider within a minute, then the balance below includes it.",
        );
    }
    Some(match query.notice.as_deref()? {
        "welcome" => "Welcome! Your account is ready: copy your personal URL into your MCP client.",
        "rotated" => {
            "Key rotated: the old URL stopped working. Update your clients with the URL below."
        }
        "secret-saved" => "Secret saved. Its value is not shown again.",
        "secret-deleted" => "Secret deleted.",
        "secret-gone" => "There was no secret of that name.",
        "session-ended" => "Session ended.",
        "session-gone" => "That session had already ended.",
        "network-saved" => "Host lists saved: runs from now on apply them.",
        "limits-saved" => "Spend caps and alert saved: calls from now on are held to them.",
        "key-caps-saved" => "Caps saved: the key's next call is decided on them.",
        "key-revoked" => "Key revoked: it stopped working and its MCP sessions were closed.",
        _ => return None,
    })
}

pub(crate) fn chrome<'a>(signed: &'a Signed, tab: Tab, notice: Option<&'a str>) -> Chrome<'a> {
    Chrome {
        email: signed.account.email.as_str(),
        csrf: signed.csrf(),
        tab,
        notice,
        error: None,
    }
}

/// `GET /dashboard`: the personal URL, setup snippets, key rotation.
pub async fn overview(
    State(state): State<Dash>,
    signed: Signed,
    Query(query): Query<NoticeQuery>,
) -> Response {
    let url = match state.app.owner().personal_url(&signed.account.id).await {
        Ok(url) => url,
        Err(err) => return guard::failed("cannot read the personal URL", &err),
    };
    let chrome = chrome(&signed, Tab::Overview, notice_text(&query));
    guard::page(
        StatusCode::OK,
        views::overview::page(&chrome, url.as_deref(), &read_tool(&state)),
    )
}

#[derive(Deserialize)]
pub struct RotateForm {
    #[serde(default)]
    csrf: String,
    confirm: Option<String>,
}

/// The read tool's name under the operator's brand, for the setup snippets.
fn read_tool(state: &Dash) -> String {
    state
        .app
        .tools()
        .iter()
        .find(|tool| tool.name.ends_with("_read"))
        .map_or_else(|| "svc_read".to_owned(), |tool| tool.name.clone())
}

/// `POST /dashboard/key/rotate`.
pub async fn rotate_key(
    State(state): State<Dash>,
    signed: Signed,
    headers: HeaderMap,
    Form(form): Form<RotateForm>,
) -> Response {
    if !guard::form_ok(&state, &headers, &signed, &form.csrf) {
        return guard::forbidden();
    }
    if form.confirm.is_none() {
        let url = state
            .app
            .owner()
            .personal_url(&signed.account.id)
            .await
            .ok()
            .flatten();
        let mut chrome = chrome(&signed, Tab::Overview, None);
        chrome.error = Some("Tick the box to confirm: the old URL stops working at once.");
        let markup = views::overview::page(&chrome, url.as_deref(), &read_tool(&state));
        return guard::page(StatusCode::BAD_REQUEST, markup);
    }
    match state.app.owner().rotate_key(&signed.account.id).await {
        Ok(_) => {
            (state.on_key_rotated)(&signed.account.id);
            guard::see_other("/dashboard?notice=rotated")
        }
        Err(err) => guard::failed("key rotation failed", &err),
    }
}

/// `GET /dashboard/secrets`.
pub async fn secrets(
    State(state): State<Dash>,
    signed: Signed,
    Query(query): Query<NoticeQuery>,
) -> Response {
    secrets_page(&state, &signed, notice_text(&query), None, StatusCode::OK).await
}

async fn secrets_page(
    state: &Dash,
    signed: &Signed,
    notice: Option<&str>,
    error: Option<&str>,
    status: StatusCode,
) -> Response {
    let Some(vault) = state.app.secrets() else {
        let mut chrome = chrome(signed, Tab::Secrets, notice);
        chrome.error = Some("This service has no secrets vault.");
        return guard::page(status, views::secrets::page(&chrome, None));
    };
    match vault.list(&signed.account.id).await {
        Ok(list) => {
            let mut chrome = chrome(signed, Tab::Secrets, notice);
            chrome.error = error;
            guard::page(status, views::secrets::page(&chrome, Some(&list)))
        }
        Err(err) => guard::failed("cannot list secrets", &err),
    }
}

#[derive(Deserialize)]
pub struct SecretForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    value: String,
    /// Host patterns, separated by commas, spaces or lines; empty keeps a replaced secret's.
    #[serde(default)]
    hosts: String,
    /// `on`: bind the secret to no host.
    #[serde(default)]
    unbind: Option<String>,
}

impl SecretForm {
    /// The hosts to store, as `secret_set`'s `hosts`: `None` keeps them.
    fn hosts(&self) -> Option<Vec<String>> {
        if self.unbind.is_some() {
            return Some(Vec::new());
        }
        let hosts: Vec<String> = self
            .hosts
            .split([',', ' ', '\n', '\r', '\t'])
            .filter(|h| !h.is_empty())
            .map(str::to_owned)
            .collect();
        (!hosts.is_empty()).then_some(hosts)
    }
}

/// `POST /dashboard/secrets/set`: add or replace.
pub async fn set_secret(
    State(state): State<Dash>,
    signed: Signed,
    headers: HeaderMap,
    Form(form): Form<SecretForm>,
) -> Response {
    if !guard::form_ok(&state, &headers, &signed, &form.csrf) {
        return guard::forbidden();
    }
    let name = match SecretName::parse(form.name.trim()) {
        Ok(name) => name,
        Err(err) => {
            let message = format!("Invalid secret name: {err}");
            return secrets_page(
                &state,
                &signed,
                None,
                Some(&message),
                StatusCode::BAD_REQUEST,
            )
            .await;
        }
    };
    let Some(vault) = state.app.secrets() else {
        return guard::unavailable();
    };
    let hosts = form.hosts();
    match vault
        .set(&signed.account.id, &name, &form.value, hosts.as_deref())
        .await
    {
        Ok(_) => guard::see_other("/dashboard/secrets?notice=secret-saved"),
        Err(SecretsError::Refused(message)) => {
            secrets_page(
                &state,
                &signed,
                None,
                Some(&message),
                StatusCode::BAD_REQUEST,
            )
            .await
        }
        Err(err) => guard::failed("cannot store a secret", &err),
    }
}

/// `POST /dashboard/secrets/delete`.
pub async fn delete_secret(
    State(state): State<Dash>,
    signed: Signed,
    headers: HeaderMap,
    Form(form): Form<SecretForm>,
) -> Response {
    if !guard::form_ok(&state, &headers, &signed, &form.csrf) {
        return guard::forbidden();
    }
    let (Ok(name), Some(vault)) = (SecretName::parse(form.name.trim()), state.app.secrets()) else {
        return secrets_page(
            &state,
            &signed,
            None,
            Some("No such secret."),
            StatusCode::BAD_REQUEST,
        )
        .await;
    };
    match vault.delete(&signed.account.id, &name).await {
        Ok(true) => guard::see_other("/dashboard/secrets?notice=secret-deleted"),
        Ok(false) => guard::see_other("/dashboard/secrets?notice=secret-gone"),
        Err(err) => guard::failed("cannot delete a secret", &err),
    }
}

/// `GET /dashboard/usage`.
pub async fn usage(State(state): State<Dash>, signed: Signed) -> Response {
    let owner = state.app.owner();
    let (report, split) = match (
        owner.usage(&signed.account).await,
        owner.spend_split(&signed.account).await,
    ) {
        (Ok(report), Ok(split)) => (report, split),
        (Err(err), _) | (_, Err(err)) => return guard::failed("cannot read usage", &err),
    };
    let tokens = match state
        .app
        .call_history()
        .model_tokens(&signed.account.id)
        .await
    {
        Ok(tokens) => tokens,
        Err(err) => return guard::failed("cannot read model tokens", &err),
    };
    let chrome = chrome(&signed, Tab::Usage, None);
    guard::page(
        StatusCode::OK,
        views::usage::page(&chrome, &report, &split, &tokens),
    )
}

/// `GET /dashboard/wallet`.
pub async fn wallet(
    State(state): State<Dash>,
    signed: Signed,
    Query(query): Query<NoticeQuery>,
) -> Response {
    wallet_page(&state, &signed, notice_text(&query), None, StatusCode::OK).await
}

async fn wallet_page(
    state: &Dash,
    signed: &Signed,
    notice: Option<&str>,
    error: Option<&str>,
    status: StatusCode,
) -> Response {
    let wallets = state.app.wallets();
    match wallets.report(&signed.account).await {
        Ok(report) => {
            let mut chrome = chrome(signed, Tab::Wallet, notice);
            chrome.error = error;
            let payments = wallets.payments_enabled();
            guard::page(status, views::wallet::page(&chrome, &report, payments))
        }
        Err(err) => guard::failed("cannot read the wallet", &err),
    }
}

#[derive(Deserialize)]
pub struct TopUpForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    amount: String,
}

/// `POST /dashboard/wallet/top-up`: 303 to the provider's payment page.
pub async fn top_up(
    State(state): State<Dash>,
    signed: Signed,
    headers: HeaderMap,
    Form(form): Form<TopUpForm>,
) -> Response {
    if !guard::form_ok(&state, &headers, &signed, &form.csrf) {
        return guard::forbidden();
    }
    match state
        .app
        .wallets()
        .start_top_up(&signed.account, &form.amount)
        .await
    {
        Ok(checkout) => guard::see_other(&checkout.url),
        Err(err) => {
            let status = payment_status::status_of(&err);
            if status != StatusCode::BAD_REQUEST {
                tracing::error!(error = ?err, "a top-up was not started");
            }
            let message = err.to_string();
            wallet_page(&state, &signed, None, Some(&message), status).await
        }
    }
}

/// `GET /dashboard/sessions`.
pub async fn sessions(
    State(state): State<Dash>,
    signed: Signed,
    Query(query): Query<NoticeQuery>,
) -> Response {
    let list = state.app.owner().sandbox_sessions(&signed.account.id).await;
    let chrome = chrome(&signed, Tab::Sessions, notice_text(&query));
    guard::page(StatusCode::OK, views::sessions::page(&chrome, &list))
}

#[derive(Deserialize)]
pub struct EndSessionForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    id: String,
}

/// `POST /dashboard/sessions/end`.
pub async fn end_session(
    State(state): State<Dash>,
    signed: Signed,
    headers: HeaderMap,
    Form(form): Form<EndSessionForm>,
) -> Response {
    if !guard::form_ok(&state, &headers, &signed, &form.csrf) {
        return guard::forbidden();
    }
    let ended = state
        .app
        .owner()
        .end_sandbox_session(&signed.account.id, &form.id)
        .await;
    guard::see_other(if ended {
        "/dashboard/sessions?notice=session-ended"
    } else {
        "/dashboard/sessions?notice=session-gone"
    })
}

//! `GET /dashboard/keys` and its forms: the account's named keys listed with their last use,
//! created (the new key's personal URL shown once, on the answer to the form), their caps
//! changed, revoked after a confirmation. A refused form shows the error and changes nothing.

use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use toolgate_app::{KeyError, KeyRequest};

use crate::Dash;
use crate::guard::{self, Signed};
use crate::pages::{NoticeQuery, chrome, notice_text};
use crate::views::keys::{Created, KeysView};
use crate::views::{self, Tab};

/// `GET /dashboard/keys`.
pub async fn page(
    State(state): State<Dash>,
    signed: Signed,
    Query(query): Query<NoticeQuery>,
) -> Response {
    keys_page(
        &state,
        &signed,
        notice_text(&query),
        None,
        None,
        StatusCode::OK,
    )
    .await
}

async fn keys_page(
    state: &Dash,
    signed: &Signed,
    notice: Option<&str>,
    error: Option<&str>,
    created: Option<Created<'_>>,
    status: StatusCode,
) -> Response {
    let keys = match state.app.keys().list(&signed.account.id).await {
        Ok(keys) => keys,
        Err(err) => return guard::failed("cannot list the named keys", &err),
    };
    let mut chrome = chrome(signed, Tab::Keys, notice);
    chrome.error = error;
    let view = KeysView {
        keys: &keys,
        created,
    };
    guard::page(status, views::keys::page(&chrome, &view))
}

/// The create form: a name, optional caps, and the tool kinds ticked (none ticked: all).
#[derive(Deserialize)]
pub struct CreateForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    month_cap_usd: String,
    #[serde(default)]
    day_cap_usd: String,
    tool_read: Option<String>,
    tool_write: Option<String>,
    tool_ai: Option<String>,
}

/// A refused form's answer: the page again, with what to change.
async fn refused(state: &Dash, signed: &Signed, err: &KeyError) -> Response {
    if let KeyError::Internal(_) = err {
        return guard::failed("a named key was not changed", err);
    }
    let message = err.to_string();
    keys_page(
        state,
        signed,
        None,
        Some(&message),
        None,
        StatusCode::BAD_REQUEST,
    )
    .await
}

/// `POST /dashboard/keys/create`: answers the page with the new key's URL, shown this once.
pub async fn create(
    State(state): State<Dash>,
    signed: Signed,
    headers: HeaderMap,
    Form(form): Form<CreateForm>,
) -> Response {
    if !guard::form_ok(&state, &headers, &signed, &form.csrf) {
        return guard::forbidden();
    }
    let ticked = [
        (form.tool_read.is_some(), "read"),
        (form.tool_write.is_some(), "write"),
        (form.tool_ai.is_some(), "ai"),
    ];
    let tools: Vec<&str> = ticked
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, kind)| *kind)
        .collect();
    let tools = tools.join(",");
    let request = KeyRequest {
        name: &form.name,
        month_cap_usd: Some(&form.month_cap_usd),
        day_cap_usd: Some(&form.day_cap_usd),
        tools: Some(&tools),
        fields: None,
    };
    match state.app.keys().create(&signed.account.id, &request).await {
        Ok(created) => {
            let shown = Created {
                name: &created.key.name,
                personal_url: &created.personal_url,
            };
            let notice = "Key created. Copy its personal URL now: it is not shown again.";
            keys_page(
                &state,
                &signed,
                Some(notice),
                None,
                Some(shown),
                StatusCode::OK,
            )
            .await
        }
        Err(err) => refused(&state, &signed, &err).await,
    }
}

/// The caps form of one key.
#[derive(Deserialize)]
pub struct CapsForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    key: String,
    #[serde(default)]
    month_cap_usd: String,
    #[serde(default)]
    day_cap_usd: String,
}

/// `POST /dashboard/keys/caps`: replaces one key's caps (empty: no cap).
pub async fn caps(
    State(state): State<Dash>,
    signed: Signed,
    headers: HeaderMap,
    Form(form): Form<CapsForm>,
) -> Response {
    if !guard::form_ok(&state, &headers, &signed, &form.csrf) {
        return guard::forbidden();
    }
    let Some(key) = key_id_of(&form.key) else {
        return refused(&state, &signed, &KeyError::NoSuchKey).await;
    };
    match state
        .app
        .keys()
        .set_caps(
            &signed.account.id,
            key,
            Some(&form.month_cap_usd),
            Some(&form.day_cap_usd),
        )
        .await
    {
        Ok(_) => guard::see_other("/dashboard/keys?notice=key-caps-saved"),
        Err(err) => refused(&state, &signed, &err).await,
    }
}

/// The revoke form of one key.
#[derive(Deserialize)]
pub struct RevokeForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    key: String,
    confirm: Option<String>,
}

/// `POST /dashboard/keys/revoke`: revokes one key once the box is ticked; its open MCP
/// sessions are closed at once.
pub async fn revoke(
    State(state): State<Dash>,
    signed: Signed,
    headers: HeaderMap,
    Form(form): Form<RevokeForm>,
) -> Response {
    if !guard::form_ok(&state, &headers, &signed, &form.csrf) {
        return guard::forbidden();
    }
    let Some(key) = key_id_of(&form.key) else {
        return refused(&state, &signed, &KeyError::NoSuchKey).await;
    };
    if form.confirm.is_none() {
        let message = "Tick the box to confirm: the key stops working at once.";
        return keys_page(
            &state,
            &signed,
            None,
            Some(message),
            None,
            StatusCode::BAD_REQUEST,
        )
        .await;
    }
    match state.app.keys().revoke(&signed.account.id, key).await {
        Ok((_, id, _)) => {
            (state.on_key_revoked)(&signed.account.id, &id).await;
            guard::see_other("/dashboard/keys?notice=key-revoked")
        }
        Err(err) => refused(&state, &signed, &err).await,
    }
}

/// The forms name a key by its id only (a name could be any text).
fn key_id_of(raw: &str) -> Option<&str> {
    toolgate_domain::KeyId::parse(raw.trim()).map(|_| raw.trim())
}

//! The authorization endpoint's pages: consent to an app's request (`/dashboard/oauth/authorize`,
//! under `/dashboard` so that the owner's session cookie reaches it) and the connected apps.

use axum::Form;
use axum::extract::{Query, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use serde::Deserialize;
use toolgate_domain::AccountId;
use toolgate_oauth::{AuthorizeError, AuthorizeParams, AuthorizeRequest};

use crate::Dash;
use crate::guard::{self, Signed};
use crate::views::{self, Chrome, Tab};

/// `GET /dashboard/oauth/authorize?…`: checks the request, then asks the signed-in owner (or
/// sends them to sign in first, coming back here). A refusal goes back to the client only when
/// the owner is signed in; otherwise it is shown on this service's own page.
pub async fn page(
    State(state): State<Dash>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let query = query.unwrap_or_default();
    let pairs: Vec<(String, String)> = match serde_urlencoded::from_str(&query) {
        Ok(pairs) => pairs,
        Err(_) => return refused("The authorization request's query could not be read."),
    };
    let signed = match guard::current(&state, &headers).await {
        Ok(signed) => signed,
        Err(refused) => return refused,
    };
    // A metadata-document client (its id an https URL) costs an outbound fetch and a stored
    // client: only a signed-in owner, whose sign-in is itself limited, may make us do that.
    let fetches = pairs
        .iter()
        .any(|(name, value)| name == "client_id" && value.starts_with("https://"));
    if signed.is_none() && fetches {
        return to_sign_in(&query);
    }
    let owner = signed.as_ref().map(|signed| &signed.account.id);
    let request = match checked(&state, &pairs, owner).await {
        Ok(request) => request,
        Err(error) => return answer(&error, signed.is_some()),
    };
    let Some(signed) = signed else {
        return to_sign_in(&query);
    };
    let chrome = chrome(&signed, Tab::Apps);
    guard::page(StatusCode::OK, views::apps::consent(&chrome, &request))
}

/// Sends a signed-out owner to sign in, coming back to this authorization request afterwards.
fn to_sign_in(query: &str) -> Response {
    let next = format!("/dashboard/oauth/authorize?{query}");
    let next = serde_urlencoded::to_string([("next", next)]).unwrap_or_default();
    guard::see_other(&format!("/dashboard/sign-in?{next}"))
}

/// `POST /dashboard/oauth/authorize`: the owner's answer, checked again from the start.
pub async fn decide(
    State(state): State<Dash>,
    signed: Signed,
    headers: HeaderMap,
    Form(pairs): Form<Vec<(String, String)>>,
) -> Response {
    let csrf = pairs
        .iter()
        .find(|(name, _)| name == "csrf")
        .map_or("", |(_, value)| value.as_str());
    if !guard::form_ok(&state, &headers, &signed, csrf) {
        return guard::forbidden();
    }
    let allow = pairs
        .iter()
        .any(|(name, value)| name == "decision" && value == "allow");
    let request = match checked(&state, &pairs, Some(&signed.account.id)).await {
        Ok(request) => request,
        Err(error) => return answer(&error, true),
    };
    let oauth = state.app.oauth();
    if !allow {
        return guard::see_other(&oauth.deny(&request));
    }
    match oauth.approve(&signed.account.id, &request).await {
        Ok(url) => guard::see_other(&url),
        Err(err) => guard::failed("an authorization was not stored", &err),
    }
}

/// The request checked by the authorization server for `owner`, the signed-in account if any.
async fn checked(
    state: &Dash,
    pairs: &[(String, String)],
    owner: Option<&AccountId>,
) -> Result<AuthorizeRequest, AuthorizeError> {
    let params = AuthorizeParams::from_pairs(pairs)?;
    state.app.oauth().authorize(&params, owner).await
}

/// The answer to a refused request. Only a signed-in owner is sent back to the client: anyone
/// may register a client, so before sign-in its redirect URI would make the service an open
/// redirector (RFC 9700 §4.11.2), and every refusal is shown here instead.
fn answer(error: &AuthorizeError, signed_in: bool) -> Response {
    match error {
        AuthorizeError::Redirect(back) if signed_in => guard::see_other(&back.url),
        AuthorizeError::TooManyFetches(wait) => {
            let mut response = guard::page(
                StatusCode::TOO_MANY_REQUESTS,
                views::message_page("Too many apps at once", &error.to_string(), true),
            );
            if let Ok(value) = HeaderValue::from_str(&wait.as_secs().max(1).to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            response
        }
        AuthorizeError::Unavailable => guard::unavailable(),
        AuthorizeError::NoRedirect(_) | AuthorizeError::Redirect(_) => refused(&error.to_string()),
    }
}

/// An error page that never sends the browser back to the app (its address is not trusted).
fn refused(message: &str) -> Response {
    guard::page(
        StatusCode::BAD_REQUEST,
        views::message_page("The app's request was refused", message, true),
    )
}

fn chrome(signed: &Signed, tab: Tab) -> Chrome<'_> {
    Chrome {
        email: signed.account.email.as_str(),
        csrf: signed.csrf(),
        tab,
        notice: None,
        error: None,
    }
}

#[derive(Deserialize, Default)]
pub struct AppsQuery {
    notice: Option<String>,
}

/// `GET /dashboard/apps`: the apps holding access, with revoke.
pub async fn apps(
    State(state): State<Dash>,
    signed: Signed,
    Query(query): Query<AppsQuery>,
) -> Response {
    let list = match state.app.oauth().connected_apps(&signed.account.id).await {
        Ok(list) => list,
        Err(err) => return guard::failed("cannot list connected apps", &err),
    };
    let mut chrome = chrome(&signed, Tab::Apps);
    chrome.notice = (query.notice.as_deref() == Some("revoked"))
        .then_some("Access revoked: the app's tokens stopped working.");
    guard::page(StatusCode::OK, views::apps::list(&chrome, &list))
}

#[derive(Deserialize)]
pub struct RevokeForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    client_id: String,
}

/// `POST /dashboard/apps/revoke`.
pub async fn revoke(
    State(state): State<Dash>,
    signed: Signed,
    headers: HeaderMap,
    Form(form): Form<RevokeForm>,
) -> Response {
    if !guard::form_ok(&state, &headers, &signed, &form.csrf) {
        return guard::forbidden();
    }
    match state
        .app
        .oauth()
        .revoke_client(&signed.account.id, &form.client_id)
        .await
    {
        Ok(_) => guard::see_other("/dashboard/apps?notice=revoked"),
        Err(err) => guard::failed("cannot revoke an app", &err),
    }
}

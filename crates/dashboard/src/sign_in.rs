//! `POST /magic-link`, the sign-in page, the link's confirmation page, and signing out.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::Form;
use axum::body::{Body, to_bytes};
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use toolgate_app::owner::SignInError;

use crate::guard::{self, Signed};
use crate::{Dash, views};

/// A sign-in request's body is an address and little else.
const MAX_LINK_REQUEST_BYTES: usize = 4096;

/// What the answer to `POST /magic-link` says, whether or not the address has an account.
const SENT: &str = "If this address can receive mail, a sign-in link valid for 15 minutes \
                    is on its way to it.";

#[derive(Deserialize)]
struct LinkRequest {
    email: Option<String>,
    /// Where to go after signing in (an authorization request of this service).
    next: Option<String>,
}

#[derive(Deserialize)]
pub struct SignInQuery {
    notice: Option<String>,
    next: Option<String>,
}

/// `GET /dashboard/sign-in` (`?next=` when an app's authorization request sent the owner here).
pub async fn page(Query(query): Query<SignInQuery>) -> Response {
    let notice = match (query.notice.as_deref(), &query.next) {
        (Some("signed-out"), _) => Some("You are signed out."),
        (_, Some(_)) => Some("Sign in to continue connecting the app."),
        _ => None,
    };
    let next = query.next.as_deref().and_then(guard::safe_next);
    guard::page(
        StatusCode::OK,
        views::sign_in::form_full(None, notice, next),
    )
}

/// `POST /magic-link`: JSON `{"email": …}` (API) or a form post from the sign-in page.
pub async fn request_link(State(state): State<Dash>, request: Request) -> Response {
    let client = client_address(&request);
    let (parts, body) = request.into_parts();
    let form = is_form(&parts.headers);
    let reply = |status, message: &str| link_reply(form, status, message);
    if form && !guard::same_origin(&state, &parts.headers) {
        return guard::forbidden();
    }
    let (email, next) = match read_email(&parts.headers, body, form).await {
        Ok(read) => read,
        Err(message) => return reply(StatusCode::BAD_REQUEST, &message),
    };
    let next = next
        .as_deref()
        .and_then(guard::safe_next)
        .and_then(|next| serde_urlencoded::to_string([("next", next)]).ok());
    let Some(sign_in) = state.app.sign_in() else {
        return reply(
            StatusCode::SERVICE_UNAVAILABLE,
            "sign-in by e-mail is not set up on this service",
        );
    };
    match sign_in
        .request_link_to(&email, client, next.as_deref())
        .await
    {
        Ok(()) => reply(StatusCode::ACCEPTED, SENT),
        Err(SignInError::InvalidEmail(detail)) => reply(
            StatusCode::BAD_REQUEST,
            &format!("invalid e-mail address: {detail}"),
        ),
        Err(err @ SignInError::TooMany(wait)) => {
            let mut response = reply(StatusCode::TOO_MANY_REQUESTS, &err.to_string());
            if let Ok(value) = HeaderValue::from_str(&wait.as_secs().max(1).to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            response
        }
        Err(err) => {
            tracing::error!(error = ?err, "a sign-in link was not created");
            reply(StatusCode::SERVICE_UNAVAILABLE, &err.to_string())
        }
    }
}

fn client_address(request: &Request) -> IpAddr {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |info| info.0.ip())
}

fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"))
}

async fn read_email(
    headers: &HeaderMap,
    body: Body,
    form: bool,
) -> Result<(String, Option<String>), String> {
    let bytes = to_bytes(body, MAX_LINK_REQUEST_BYTES)
        .await
        .map_err(|_| format!("the request body is larger than {MAX_LINK_REQUEST_BYTES} bytes"))?;
    let parsed: LinkRequest = if form {
        serde_urlencoded::from_bytes(&bytes)
            .map_err(|_| "the form could not be read: send `email=ADDRESS`".to_owned())?
    } else {
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_none_or(|v| v.starts_with("application/json"));
        if !json {
            return Err("send JSON (`Content-Type: application/json`) or a form".to_owned());
        }
        // an object only: serde's derived structs would also take an array (`["a@b.c"]`)
        serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .filter(serde_json::Value::is_object)
            .and_then(|value| serde_json::from_value(value).ok())
            .ok_or_else(|| {
                "the body is not a JSON object like {\"email\": \"you@example.com\"}".to_owned()
            })?
    };
    let email = parsed
        .email
        .filter(|e| !e.trim().is_empty())
        .ok_or_else(|| "`email` is missing: give the address to send the link to".to_owned())?;
    Ok((email, parsed.next))
}

fn link_reply(form: bool, status: StatusCode, message: &str) -> Response {
    if form {
        let markup = if status == StatusCode::ACCEPTED {
            views::sign_in::sent(message)
        } else {
            views::sign_in::form(Some(message))
        };
        return guard::page(status, markup);
    }
    let body = if status == StatusCode::ACCEPTED {
        serde_json::json!({"status": "sent", "message": message})
    } else {
        serde_json::json!({"error": message})
    };
    (status, axum::Json(body)).into_response()
}

#[derive(Deserialize)]
pub struct TokenQuery {
    token: Option<String>,
    next: Option<String>,
}

/// `GET /dashboard/sign-in/confirm?token=…`: a button, so that a mail scanner's fetch of the
/// link uses nothing.
pub async fn confirm_page(State(state): State<Dash>, Query(query): Query<TokenQuery>) -> Response {
    let Some(sign_in) = state.app.sign_in() else {
        return guard::unavailable();
    };
    let token = query.token.unwrap_or_default();
    let next = query.next.as_deref().and_then(guard::safe_next);
    match sign_in.peek(&token).await {
        Ok(email) => guard::page(
            StatusCode::OK,
            views::sign_in::confirm(&token, email.as_str(), next),
        ),
        Err(err) => link_error(err),
    }
}

/// `POST /dashboard/sign-in/confirm`: uses the link, starts the session.
pub async fn confirm(
    State(state): State<Dash>,
    headers: HeaderMap,
    Form(form): Form<TokenQuery>,
) -> Response {
    // a cross-site post could sign a victim into the poster's account
    if !guard::same_origin(&state, &headers) {
        return guard::forbidden();
    }
    let Some(sign_in) = state.app.sign_in() else {
        return guard::unavailable();
    };
    let next = form.next.as_deref().and_then(guard::safe_next);
    match sign_in.confirm(&form.token.unwrap_or_default()).await {
        Ok(started) => {
            let location = match next {
                Some(next) => next,
                None if started.created => "/dashboard?notice=welcome",
                None => "/dashboard",
            };
            guard::with_cookie(
                guard::see_other(location),
                &state.cookie.set(&started.token),
            )
        }
        Err(err) => link_error(err),
    }
}

fn link_error(err: SignInError) -> Response {
    match err {
        SignInError::BadLink => guard::page(
            StatusCode::BAD_REQUEST,
            views::sign_in::form(Some(&err.to_string())),
        ),
        other => {
            tracing::error!(error = ?other, "sign-in failed");
            guard::unavailable()
        }
    }
}

#[derive(Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /dashboard/sign-out`.
pub async fn sign_out(
    State(state): State<Dash>,
    signed: Signed,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    sign_out_with(state, signed, headers, form, false).await
}

/// `POST /dashboard/sign-out-everywhere`.
pub async fn sign_out_everywhere(
    State(state): State<Dash>,
    signed: Signed,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    sign_out_with(state, signed, headers, form, true).await
}

async fn sign_out_with(
    state: Dash,
    signed: Signed,
    headers: HeaderMap,
    form: CsrfForm,
    everywhere: bool,
) -> Response {
    if !guard::form_ok(&state, &headers, &signed, &form.csrf) {
        return guard::forbidden();
    }
    let Some(sign_in) = state.app.sign_in() else {
        return guard::unavailable();
    };
    let ended = if everywhere {
        sign_in
            .sign_out_everywhere(&signed.account.id)
            .await
            .map(drop)
    } else {
        sign_in.sign_out(&signed.token).await
    };
    if let Err(err) = ended {
        tracing::error!(error = ?err, "sign-out failed");
        return guard::unavailable();
    }
    guard::with_cookie(
        guard::see_other("/dashboard/sign-in?notice=signed-out"),
        &state.cookie.clear(),
    )
}

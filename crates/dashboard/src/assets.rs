//! The dashboard's one stylesheet and one script, compiled into the binary.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

const CSS: &str = include_str!("../assets/app.css");
const JS: &str = include_str!("../assets/app.js");

/// `GET /dashboard/assets/app.css`.
pub async fn css() -> Response {
    asset(CSS, "text/css; charset=utf-8")
}

/// `GET /dashboard/assets/app.js`.
pub async fn js() -> Response {
    asset(JS, "text/javascript; charset=utf-8")
}

fn asset(body: &'static str, kind: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

//! `/files/<link>`: signed links to one workspace file, usable without the key. `GET` reads the
//! file a download link names; `PUT` writes the one file an upload link names, once. A link that
//! is bad in any way is 404 alike, and nothing here lists anything.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use futures::StreamExt;
use toolgate_app::links::{DownloadError, UploadError};

use crate::Shared;
use crate::routes::json;

/// `GET /files/{link}[/{name}]`: the file, whole, as an attachment that never runs in the
/// service's origin (`nosniff`, a sandboxing CSP), or 404.
pub async fn download(
    State(state): State<Shared>,
    Path(params): Path<HashMap<String, String>>,
) -> Response {
    let Some(links) = state.app.links() else {
        return no_such_file();
    };
    let token = params.get("link").map_or("", String::as_str);
    let file = match links.download(token).await {
        Ok(file) => file,
        Err(DownloadError::NoSuchFile) => return no_such_file(),
        Err(busy @ DownloadError::Busy) => return try_again(&busy.to_string()),
    };
    let kind = content_type(&file.bytes);
    // the one copy of the file this request holds is moved into the body
    let mut response = Response::new(Body::from(file.bytes));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    if let Ok(disposition) = HeaderValue::from_str(&format!(
        "attachment; filename=\"{}\"",
        attachment_name(&file.name)
    )) {
        headers.insert(header::CONTENT_DISPOSITION, disposition);
    }
    no_sniffing(headers);
    response
}

/// `PUT /files/{link}[/{name}]`: the body becomes the file the upload link names, in its
/// session. Refused before a byte is read when the link is bad (404) or `Content-Length` is over
/// the workspace limit (413); read as it comes and refused as soon as it passes that limit.
pub async fn upload(
    State(state): State<Shared>,
    Path(params): Path<HashMap<String, String>>,
    request: Request,
) -> Response {
    let Some(links) = state.app.links() else {
        return no_such_file();
    };
    let token = params.get("link").map_or("", String::as_str);
    let target = match links.check_upload(token) {
        Ok(target) => target,
        Err(error) => return refused(&error),
    };
    let _turn = match links.upload_turn(&target).await {
        Ok(turn) => turn,
        Err(error) => return refused(&error),
    };
    let limit = links.upload_limit();
    let too_large = UploadError::TooLarge { limit };
    let announced = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if announced.is_some_and(|length| length > limit) {
        return refused(&too_large);
    }
    let capacity = announced.unwrap_or(0).min(limit).min(64 << 20);
    let mut content = Vec::with_capacity(usize::try_from(capacity).unwrap_or(0));
    let mut body = request.into_body().into_data_stream();
    while let Some(chunk) = body.next().await {
        let Ok(chunk) = chunk else {
            return json(
                StatusCode::BAD_REQUEST,
                error_body("the upload was cut off; nothing was written"),
            );
        };
        if (content.len() + chunk.len()) as u64 > limit {
            return refused(&too_large);
        }
        content.extend_from_slice(&chunk);
    }
    match links.upload(&target, content).await {
        Ok(bytes) => json(
            StatusCode::CREATED,
            serde_json::json!({
                "path": target.path,
                "session_id": target.session,
                "bytes": bytes,
            })
            .to_string(),
        ),
        Err(error) => refused(&error),
    }
}

/// An upload refused, with the status that says why.
fn refused(error: &UploadError) -> Response {
    let status = match error {
        UploadError::Refused => return no_such_file(),
        UploadError::Used => StatusCode::GONE,
        UploadError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        UploadError::NotWritten(_) => StatusCode::UNPROCESSABLE_ENTITY,
        UploadError::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        UploadError::Busy => return try_again(&error.to_string()),
    };
    json(status, error_body(&error.to_string()))
}

/// 503 with `Retry-After`: the workspace reads' turns are all taken.
fn try_again(message: &str) -> Response {
    let mut response = json(StatusCode::SERVICE_UNAVAILABLE, error_body(message));
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    response
}

/// The one answer to every link that leads nowhere.
fn no_such_file() -> Response {
    let mut response = json(StatusCode::NOT_FOUND, error_body("no such file"));
    no_sniffing(response.headers_mut());
    response
}

fn error_body(message: &str) -> String {
    serde_json::json!({ "error": message }).to_string()
}

/// A file of a tenant's workspace is never shown as a page of this origin.
fn no_sniffing(headers: &mut HeaderMap) {
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox; default-src 'none'"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, no-store"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}

/// The type a download is sent as: the image types by their magic numbers, UTF-8 text as
/// text, anything else as bytes (never HTML, whatever it holds).
fn content_type(bytes: &[u8]) -> &'static str {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        "image/png"
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        "image/jpeg"
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        "image/gif"
    } else if std::str::from_utf8(bytes).is_ok() {
        "text/plain; charset=utf-8"
    } else {
        "application/octet-stream"
    }
}

/// A file name fit for a quoted `Content-Disposition` parameter.
fn attachment_name(name: &str) -> String {
    name.chars()
        .take(200)
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downloads_are_never_html() {
        assert_eq!(content_type(b"<html><script>"), "text/plain; charset=utf-8");
        assert_eq!(
            content_type(&[0xff, 0xfe, 0x00]),
            "application/octet-stream"
        );
        assert_eq!(content_type(b"\x89PNG\r\n\x1a\nrest"), "image/png");
        assert_eq!(attachment_name("a \"b\"\\.csv"), "a__b__.csv");
    }
}

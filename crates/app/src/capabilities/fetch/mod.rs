//! Requests on the caller's behalf through the Fetcher port (which passes the egress guard): `url`
//! (a GET) on the read tool and `http` (POST, PUT, PATCH, DELETE) on the write tool.
//! `{{secret:NAME}}` in the URL, a header value or the body is replaced by the secret's value,
//! and every such value is redacted from what the call returns.

mod http;
mod url;

use std::sync::Arc;

use serde_json::{Map, Value, json};
use toolgate_domain::SecretName;

use crate::capability::{CallContext, ContentItem, Failure, JsonObject, Output, TypedOutput};
use crate::secrets::{OpenedSecrets, Secrets};
use toolgate_ports::fetch::{FetchRequest, FetchedPage, Fetcher, Method, PageContent};

pub use http::SendHttp;
pub use url::FetchUrl;

/// Longest URL, in bytes.
pub(crate) const MAX_URL_BYTES: usize = 8 * 1024;
/// Body bytes read by default, and at most.
const DEFAULT_MAX_BYTES: usize = 1024 * 1024;
pub(crate) const MAX_MAX_BYTES: usize = 8 * 1024 * 1024;

/// What both capabilities share.
pub(crate) struct Client {
    fetcher: Arc<dyn Fetcher>,
    secrets: Option<Arc<Secrets>>,
}

/// The parts of one request as the caller wrote them (placeholders not yet filled).
pub(crate) struct Written<'a> {
    pub method: Method,
    pub url: &'a str,
    pub headers: Option<&'a Map<String, Value>>,
    pub body: Option<&'a str>,
    pub max_bytes: Option<u64>,
}

impl Written<'_> {
    /// Every text a placeholder may be in: the URL, each header value, the body.
    fn texts(&self) -> Vec<&str> {
        let mut texts = vec![self.url];
        if let Some(headers) = self.headers {
            texts.extend(headers.values().map(|v| v.as_str().unwrap_or_default()));
        }
        texts.extend(self.body);
        texts
    }

    /// Fails on a malformed placeholder, before the call is metered.
    pub fn check_placeholders(&self) -> Result<(), String> {
        for text in self.texts() {
            placeholders(text).map_err(|f| f.message)?;
        }
        Ok(())
    }
}

impl Client {
    pub fn new(fetcher: Arc<dyn Fetcher>, secrets: Option<Arc<Secrets>>) -> Self {
        Self { fetcher, secrets }
    }

    /// Fills the placeholders, sends, and renders the answer; every used secret is registered
    /// with the call, which redacts it from the answer (what a site echoes: the page, the final
    /// URL, the `Content-Type`, a binary answer's first bytes) and from errors.
    pub async fn send(
        &self,
        ctx: &CallContext<'_>,
        written: Written<'_>,
    ) -> Result<Output, Failure> {
        let texts = written.texts();
        let (filled, opened) = self.fill(ctx, &texts).await?;
        ctx.secrets
            .add(opened.iter().map(|(name, value)| (name, value.as_bytes())));
        drop(opened);
        let mut filled = filled.into_iter();
        let url = filled.next().unwrap_or_default();
        let headers: Vec<(String, String)> = written
            .headers
            .map(|h| h.keys().cloned().zip(filled.by_ref()).collect())
            .unwrap_or_default();
        let body = written.body.and_then(|_| filled.next());
        // a body with a placeholder never follows a redirect to another origin
        let body_holds_secret = written
            .body
            .is_some_and(|text| placeholders(text).is_ok_and(|names| !names.is_empty()));
        let max_bytes = written
            .max_bytes
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(DEFAULT_MAX_BYTES);
        let page = self
            .fetcher
            .send(FetchRequest {
                method: written.method,
                url,
                headers,
                body,
                body_holds_secret,
                max_bytes,
            })
            .await
            .map_err(|e| Failure::new(e.to_string()))?;
        Ok(rendered(page))
    }

    /// Opens the secrets `texts` name and replaces their placeholders.
    async fn fill(
        &self,
        ctx: &CallContext<'_>,
        texts: &[&str],
    ) -> Result<(Vec<String>, OpenedSecrets), Failure> {
        let mut names: Vec<SecretName> = Vec::new();
        for text in texts {
            for name in placeholders(text)? {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        let unchanged = || texts.iter().map(|t| (*t).to_owned()).collect();
        if names.is_empty() {
            return Ok((unchanged(), OpenedSecrets::default()));
        }
        let secrets = self.secrets.as_ref().ok_or_else(|| {
            Failure::new("this service has no vault, so {{secret:…}} cannot be used")
        })?;
        let opened = secrets
            .open(&ctx.account.id, &names)
            .await
            .map_err(|e| Failure::new(e.to_string()))?;
        let filled = texts
            .iter()
            .map(|text| {
                opened
                    .iter()
                    .fold((*text).to_owned(), |acc, (name, value)| {
                        acc.replace(&format!("{{{{secret:{name}}}}}"), value)
                    })
            })
            .collect();
        Ok((filled, opened))
    }
}

/// The secret names a text refers to as `{{secret:NAME}}`.
fn placeholders(text: &str) -> Result<Vec<SecretName>, Failure> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{secret:") {
        let after = &rest[start + "{{secret:".len()..];
        let end = after
            .find("}}")
            .ok_or_else(|| Failure::new("a `{{secret:NAME}}` placeholder is not closed"))?;
        let name = SecretName::parse(&after[..end])
            .map_err(|e| Failure::new(format!("in a {{{{secret:…}}}} placeholder: {e}")))?;
        names.push(name);
        rest = &after[end + 2..];
    }
    Ok(names)
}

/// The structured output both capabilities share.
fn output_schema() -> Value {
    let text = json!({"type": "string"});
    json!({"type": "object", "properties": {
        "status": {"type": "integer"}, "final_url": text, "content_type": text,
        "format": text, "bytes": {"type": "integer"}, "truncated": {"type": "boolean"}},
        "required": ["status", "final_url", "content_type", "format", "bytes", "truncated"]})
}

fn rendered(page: FetchedPage) -> Output {
    let (item, format) = match page.content.clone() {
        PageContent::Text { text, format } => (ContentItem::Text(text), format),
        PageContent::Image { data, mime_type } => (ContentItem::Image { data, mime_type }, "image"),
        PageContent::Binary { summary } => (ContentItem::Text(summary), "binary"),
    };
    let mut content = vec![item];
    if page.truncated {
        content.push(ContentItem::Text(format!(
            "(cut after {} bytes: raise max_bytes to read more)",
            page.bytes
        )));
    }
    Output {
        content,
        structured: json!({
            "status": page.status, "final_url": page.final_url,
            "content_type": page.content_type, "format": format, "bytes": page.bytes,
            "truncated": page.truncated,
        }),
        // the answer arrived, but it says the request failed
        is_error: page.status >= 400,
        typed: Some(TypedOutput::Page(page)),
        ..Output::default()
    }
}

/// `max_bytes`, shared by both.
pub(crate) fn max_bytes_of(args: &JsonObject) -> Option<u64> {
    args.get("max_bytes").and_then(Value::as_u64)
}

//! `url` on the read tool: an HTTP GET on the caller's behalf, through the web seam (which
//! passes the egress guard). `{{secret:NAME}}` in the URL or a header value is replaced by the
//! secret's value, and the value is redacted from everything the call returns.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolgate_domain::SecretName;
use toolgate_vault::Redactor;

use crate::capability::{
    CallContext, Capability, ContentItem, Failure, Field, JsonObject, Output, ToolKind,
};
use crate::schema::FieldKind;
use crate::secrets::{OpenedSecrets, Secrets};
use crate::web::{Web, WebContent, WebPage, WebRequest};

/// Longest URL, in bytes.
const MAX_URL_BYTES: usize = 8 * 1024;
/// Body bytes read by default, and at most.
const DEFAULT_MAX_BYTES: usize = 1024 * 1024;
const MAX_MAX_BYTES: usize = 8 * 1024 * 1024;

/// `url` (+ `headers`, `max_bytes`).
pub struct FetchUrl {
    web: Arc<dyn Web>,
    secrets: Option<Arc<Secrets>>,
}

impl FetchUrl {
    /// Fetches through `web`, with `secrets` for `{{secret:NAME}}`.
    pub fn new(web: Arc<dyn Web>, secrets: Option<Arc<Secrets>>) -> Self {
        Self { web, secrets }
    }

    /// Opens the secrets the texts name and replaces their placeholders.
    async fn substitute(
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
        if names.is_empty() {
            return Ok((
                texts.iter().map(|t| (*t).to_owned()).collect(),
                OpenedSecrets::default(),
            ));
        }
        let secrets = self.secrets.as_ref().ok_or_else(|| {
            Failure::new("this service has no vault, so {{secret:…}} cannot be used")
        })?;
        let opened = secrets
            .open(&ctx.account.id, &names)
            .await
            .map_err(|e| Failure::new(e.to_string()))?;
        let replaced = texts
            .iter()
            .map(|text| {
                opened
                    .iter()
                    .fold((*text).to_owned(), |acc, (name, value)| {
                        acc.replace(&format!("{{{{secret:{name}}}}}"), value)
                    })
            })
            .collect();
        Ok((replaced, opened))
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

#[async_trait]
impl Capability for FetchUrl {
    fn key(&self) -> &'static str {
        "url"
    }

    fn tool(&self) -> ToolKind {
        ToolKind::Read
    }

    fn summary(&self) -> &'static str {
        "`url`: an HTTP GET of a public http(s) URL (private, loopback and cloud metadata \
         addresses are refused, redirects included). HTML comes back as Markdown, JSON \
         pretty-printed, images as images; status, final URL and content type in the \
         structured result. `headers` adds request headers; `{{secret:NAME}}` in a header \
         value or the URL is replaced by that vault secret, which never appears in the answer."
    }

    fn fields(&self) -> Vec<Field> {
        vec![
            Field {
                name: "url",
                kind: FieldKind::String {
                    max_len: MAX_URL_BYTES,
                },
                description: "an http:// or https:// URL to GET",
            },
            Field {
                name: "headers",
                kind: FieldKind::Headers { max_items: 32 },
                description: "request headers for `url`, name to value; a value may hold \
                              {{secret:NAME}}",
            },
            Field {
                name: "max_bytes",
                kind: FieldKind::Integer {
                    min: 1,
                    max: MAX_MAX_BYTES as i64,
                },
                description: "most body bytes to read for `url` (default 1 MiB, at most 8 MiB); \
                              a longer body is cut and the result says so",
            },
        ]
    }

    fn output_schema(&self) -> Value {
        let text = json!({"type": "string"});
        json!({"type": "object", "properties": {
            "status": {"type": "integer"}, "final_url": text, "content_type": text,
            "format": text, "bytes": {"type": "integer"}, "truncated": {"type": "boolean"}},
            "required": ["status", "final_url", "content_type", "format", "bytes", "truncated"]})
    }

    fn wants(&self, args: &JsonObject) -> bool {
        args.contains_key("url")
    }

    fn validate(&self, args: &JsonObject) -> Result<(), String> {
        for text in request_texts(args) {
            placeholders(text).map_err(|f| f.message)?;
        }
        Ok(())
    }

    /// A fetch reads no metering state, so it starts while the charge commits.
    fn overlaps_commit(&self) -> bool {
        true
    }

    async fn run(&self, ctx: &CallContext<'_>, args: &JsonObject) -> Result<Output, Failure> {
        let texts = request_texts(args);
        let (replaced, opened) = self.substitute(ctx, &texts).await?;
        let redactor = opened.redactor();
        let mut replaced = replaced.into_iter();
        let url = replaced.next().unwrap_or_default();
        let headers = args
            .get("headers")
            .and_then(Value::as_object)
            .map(|h| h.keys().cloned().zip(replaced).collect())
            .unwrap_or_default();
        let max_bytes = args
            .get("max_bytes")
            .and_then(Value::as_u64)
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(DEFAULT_MAX_BYTES);
        let page = self
            .web
            .get(WebRequest {
                url,
                headers,
                max_bytes,
            })
            .await
            .map_err(|e| Failure::new(redactor.redact(&e.to_string())))?;
        Ok(rendered(page, &redactor))
    }
}

/// The URL, then each header value, in the order of the `headers` object.
fn request_texts(args: &JsonObject) -> Vec<&str> {
    let mut texts = vec![args.get("url").and_then(Value::as_str).unwrap_or_default()];
    if let Some(headers) = args.get("headers").and_then(Value::as_object) {
        texts.extend(headers.values().map(|v| v.as_str().unwrap_or_default()));
    }
    texts
}

fn rendered(page: WebPage, redactor: &Redactor) -> Output {
    let (item, format) = match page.content {
        WebContent::Text { text, format } => (ContentItem::Text(redactor.redact(&text)), format),
        WebContent::Image { data, mime_type } => (ContentItem::Image { data, mime_type }, "image"),
        WebContent::Binary { summary } => (ContentItem::Text(summary), "binary"),
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
            "status": page.status, "final_url": redactor.redact(&page.final_url),
            "content_type": page.content_type, "format": format, "bytes": page.bytes,
            "truncated": page.truncated,
        }),
        // the page arrived, but it says the request failed
        is_error: page.status >= 400,
    }
}

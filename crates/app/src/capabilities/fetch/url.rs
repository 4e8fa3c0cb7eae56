//! `url` (+ `headers`, `max_bytes`) on the read tool: a GET.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::{Client, MAX_MAX_BYTES, MAX_URL_BYTES, Written, max_bytes_of, output_schema};
use crate::capability::{CallContext, Capability, Failure, Field, JsonObject, Output, ToolKind};
use crate::schema::FieldKind;
use crate::secrets::Secrets;
use toolgate_ports::fetch::{Fetcher, Method};

/// `url`.
pub struct FetchUrl(Client);

impl FetchUrl {
    /// Fetches through `web`, with `secrets` for `{{secret:NAME}}`.
    pub fn new(fetcher: Arc<dyn Fetcher>, secrets: Option<Arc<Secrets>>) -> Self {
        Self(Client::new(fetcher, secrets))
    }
}

fn written(args: &JsonObject) -> Written<'_> {
    Written {
        method: Method::Get,
        url: args.get("url").and_then(Value::as_str).unwrap_or_default(),
        headers: args.get("headers").and_then(Value::as_object),
        body: None,
        max_bytes: max_bytes_of(args),
    }
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
        output_schema()
    }

    /// The open web.
    fn reaches_outside(&self) -> bool {
        true
    }

    fn wants(&self, args: &JsonObject) -> bool {
        args.contains_key("url")
    }

    fn validate(&self, args: &JsonObject) -> Result<(), String> {
        written(args).check_placeholders()
    }

    /// A fetch reads no metering state, so it starts while the charge commits.
    fn overlaps_commit(&self) -> bool {
        true
    }

    fn turn_kind(&self, _args: &JsonObject) -> Option<crate::turns::TurnKind> {
        Some(crate::turns::TurnKind::Fetch)
    }

    async fn run(&self, ctx: &CallContext<'_>, args: &JsonObject) -> Result<Output, Failure> {
        self.0.send(ctx, written(args)).await
    }
}

//! `http {method, url, headers?, body?, max_bytes?}` on the write tool: a request that may
//! change something elsewhere (POST, PUT, PATCH, DELETE).

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{Client, MAX_MAX_BYTES, Written, output_schema};
use crate::capability::{CallContext, Capability, Failure, Field, JsonObject, Output, ToolKind};
use crate::schema::FieldKind;
use crate::secrets::Secrets;
use toolgate_ports::fetch::{Fetcher, Method};

/// `http`.
pub struct SendHttp(Client);

impl SendHttp {
    /// Sends through `web`, with `secrets` for `{{secret:NAME}}`.
    pub fn new(fetcher: Arc<dyn Fetcher>, secrets: Option<Arc<Secrets>>) -> Self {
        Self(Client::new(fetcher, secrets))
    }
}

/// The call's `http` object as a request; `None` if it is not one (the field check refuses
/// such calls before they run).
fn written(args: &JsonObject) -> Option<Written<'_>> {
    let http = args.get("http")?.as_object()?;
    Some(Written {
        method: Method::parse(http.get("method")?.as_str()?)?,
        url: http.get("url")?.as_str()?,
        headers: http.get("headers").and_then(Value::as_object),
        body: http.get("body").and_then(Value::as_str),
        max_bytes: http.get("max_bytes").and_then(Value::as_u64),
    })
}

#[async_trait]
impl Capability for SendHttp {
    fn key(&self) -> &'static str {
        "http"
    }

    fn tool(&self) -> ToolKind {
        ToolKind::Write
    }

    fn summary(&self) -> &'static str {
        "`http: {method, url, headers?, body?, max_bytes?}`: a POST, PUT, PATCH or DELETE to a \
         public URL, as the read tool's `url`; `{{secret:NAME}}` may stand in the URL, a header \
         or the body."
    }

    fn fields(&self) -> Vec<Field> {
        vec![Field {
            name: "http",
            kind: FieldKind::HttpCall {
                max_body: MAX_MAX_BYTES,
            },
            description: "{method: POST|PUT|PATCH|DELETE, url, headers?: {name: value}, body?: \
                          string, max_bytes?: most answer bytes to read (default 1 MiB)}",
        }]
    }

    fn output_schema(&self) -> Value {
        output_schema()
    }

    /// The open web.
    fn reaches_outside(&self) -> bool {
        true
    }

    fn wants(&self, args: &JsonObject) -> bool {
        args.contains_key("http")
    }

    fn turn_kind(&self, _args: &JsonObject) -> Option<crate::turns::TurnKind> {
        Some(crate::turns::TurnKind::Fetch)
    }

    fn validate(&self, args: &JsonObject) -> Result<(), String> {
        written(args)
            .ok_or_else(|| "`http` needs a method and a url".to_owned())?
            .check_placeholders()
    }

    async fn run(&self, ctx: &CallContext<'_>, args: &JsonObject) -> Result<Output, Failure> {
        let written =
            written(args).ok_or_else(|| Failure::new("`http` needs a method and a url"))?;
        let mut output = self.0.send(ctx, written).await?;
        if let Some(object) = output.structured.as_object_mut() {
            object.insert("method".to_owned(), json!(args["http"]["method"]));
        }
        Ok(output)
    }
}

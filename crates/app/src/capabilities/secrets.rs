//! The vault's fields: `secret_set` and `secret_delete` on the write tool, `list_secrets` on the
//! read tool. A value goes in once and is never shown again, by these or anything else.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolgate_domain::SecretName;
use toolgate_domain::time_reexport::OffsetDateTime;

use crate::capability::{
    CallContext, Capability, ContentItem, Failure, Field, JsonObject, Output, ToolKind, TypedOutput,
};
use crate::schema::FieldKind;
use crate::secrets::Secrets;

/// `secret_set`, `secret_delete` and `list_secrets` over one vault.
pub fn capabilities(secrets: &Arc<Secrets>) -> Vec<Arc<dyn Capability>> {
    vec![
        Arc::new(SecretSet(secrets.clone())),
        Arc::new(SecretDelete(secrets.clone())),
        Arc::new(ListSecrets(secrets.clone())),
    ]
}

fn name_in(args: &JsonObject, path: &[&str]) -> Result<SecretName, Failure> {
    let mut value = args.get(path[0]);
    for key in &path[1..] {
        value = value.and_then(|v| v.get(key));
    }
    value
        .and_then(Value::as_str)
        .and_then(|text| SecretName::parse(text).ok())
        .ok_or_else(|| Failure::new("a secret's name is missing or malformed"))
}

fn text(message: String, structured: Value) -> Output {
    Output {
        content: vec![ContentItem::Text(message)],
        structured,
        is_error: false,
        ..Output::default()
    }
}

/// `secret_set {name, value}`: creates or replaces a secret.
struct SecretSet(Arc<Secrets>);

#[async_trait]
impl Capability for SecretSet {
    fn key(&self) -> &'static str {
        "secret_set"
    }

    fn tool(&self) -> ToolKind {
        ToolKind::Write
    }

    fn summary(&self) -> &'static str {
        "`secret_set: {name, value, hosts?}` stores a secret, encrypted, never shown again; \
         `secrets: [\"NAME\"]` on `code`/`bash` sets it as a variable of that run (printed \
         [REDACTED:NAME]). With `hosts`, code never holds it: the network proxy fills \
         `{{secret:NAME}}` in request headers to those hosts."
    }

    fn fields(&self) -> Vec<Field> {
        vec![Field {
            name: "secret_set",
            kind: FieldKind::SecretEntry,
            description: "{name, value, hosts?}: store a secret (create or replace); the name \
                          is letters, digits and _, not starting with a digit (e.g. \
                          OPENAI_API_KEY); the value at most 64 KiB; hosts: the host patterns \
                          code's requests may carry it to as {{secret:NAME}} in a header",
        }]
    }

    fn output_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "name": {"type": "string"}, "created": {"type": "boolean"},
            "hosts": {"type": "array", "items": {"type": "string"}}},
            "required": ["name", "created"]})
    }

    fn wants(&self, args: &JsonObject) -> bool {
        args.contains_key("secret_set")
    }

    async fn run(&self, ctx: &CallContext<'_>, args: &JsonObject) -> Result<Output, Failure> {
        let name = name_in(args, &["secret_set", "name"])?;
        let value = args
            .get("secret_set")
            .and_then(|v| v.get("value"))
            .and_then(Value::as_str)
            .ok_or_else(|| Failure::new("`secret_set.value` must be a string"))?;
        let hosts: Option<Vec<String>> = match args.get("secret_set").and_then(|v| v.get("hosts")) {
            None => None,
            Some(Value::Array(items)) => Some(
                items
                    .iter()
                    .map(|h| h.as_str().map(str::to_owned))
                    .collect::<Option<_>>()
                    .ok_or_else(|| Failure::new("`secret_set.hosts` must be strings"))?,
            ),
            Some(_) => return Err(Failure::new("`secret_set.hosts` must be an array")),
        };
        let created = self
            .0
            .set(&ctx.account.id, &name, value, hosts.as_deref())
            .await
            .map_err(|e| Failure::new(e.to_string()))?;
        let what = if created { "stored" } else { "replaced" };
        let Some(hosts) = hosts else {
            return Ok(text(
                format!("{what} the secret {name}"),
                json!({"name": name.as_str(), "created": created}),
            ));
        };
        let hosts =
            crate::secrets::secret_hosts(hosts.iter().map(String::as_str)).map_err(Failure::new)?;
        let bound = if hosts.is_empty() {
            "; it is bound to no host".to_owned()
        } else {
            format!(
                "; code's requests to {} may carry it as {{{{secret:{name}}}}} in a header",
                hosts.join(", ")
            )
        };
        Ok(text(
            format!("{what} the secret {name}{bound}"),
            json!({"name": name.as_str(), "created": created, "hosts": hosts}),
        ))
    }
}

/// `secret_delete: NAME`.
struct SecretDelete(Arc<Secrets>);

#[async_trait]
impl Capability for SecretDelete {
    fn key(&self) -> &'static str {
        "secret_delete"
    }

    fn tool(&self) -> ToolKind {
        ToolKind::Write
    }

    fn summary(&self) -> &'static str {
        "`secret_delete: \"NAME\"` deletes a secret from your vault."
    }

    fn fields(&self) -> Vec<Field> {
        vec![Field {
            name: "secret_delete",
            kind: FieldKind::SecretName,
            description: "the name of a secret to delete",
        }]
    }

    fn output_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "name": {"type": "string"}, "deleted": {"type": "boolean"}},
            "required": ["name", "deleted"]})
    }

    fn wants(&self, args: &JsonObject) -> bool {
        args.contains_key("secret_delete")
    }

    async fn run(&self, ctx: &CallContext<'_>, args: &JsonObject) -> Result<Output, Failure> {
        let name = name_in(args, &["secret_delete"])?;
        let deleted = self
            .0
            .delete(&ctx.account.id, &name)
            .await
            .map_err(|e| Failure::new(e.to_string()))?;
        if !deleted {
            return Err(Failure::new(format!("there is no secret named {name}")));
        }
        Ok(text(
            format!("deleted the secret {name}"),
            json!({"name": name.as_str(), "deleted": true}),
        ))
    }
}

/// `list_secrets: true`: names and dates, never values.
struct ListSecrets(Arc<Secrets>);

#[async_trait]
impl Capability for ListSecrets {
    fn key(&self) -> &'static str {
        "list_secrets"
    }

    fn tool(&self) -> ToolKind {
        ToolKind::Read
    }

    fn summary(&self) -> &'static str {
        "`list_secrets: true` lists the names of your vault's secrets with when each was \
         created and last replaced and the hosts it is bound to (never their values)."
    }

    fn fields(&self) -> Vec<Field> {
        vec![Field {
            name: "list_secrets",
            kind: FieldKind::Boolean,
            description: "true: list your secrets' names, dates and hosts",
        }]
    }

    fn output_schema(&self) -> Value {
        let text = json!({"type": "string"});
        json!({"type": "object", "properties": {"secrets": {"type": "array", "items": {
            "type": "object",
            "properties": {"name": text, "created_at": text, "updated_at": text,
                           "hosts": {"type": "array", "items": text}},
            "required": ["name", "created_at", "updated_at", "hosts"]}}},
            "required": ["secrets"]})
    }

    fn wants(&self, args: &JsonObject) -> bool {
        args.get("list_secrets").and_then(Value::as_bool) == Some(true)
    }

    async fn run(&self, ctx: &CallContext<'_>, _args: &JsonObject) -> Result<Output, Failure> {
        let listed = self
            .0
            .list(&ctx.account.id)
            .await
            .map_err(|e| Failure::new(e.to_string()))?;
        let rows: Vec<Value> = listed
            .iter()
            .map(|s| {
                json!({"name": s.name.as_str(), "created_at": rfc3339(s.created_ms),
                       "updated_at": rfc3339(s.updated_ms), "hosts": s.hosts})
            })
            .collect();
        let message = if listed.is_empty() {
            "your vault holds no secrets".to_owned()
        } else {
            let lines: Vec<String> = listed
                .iter()
                .map(|s| {
                    let bound = if s.hosts.is_empty() {
                        String::new()
                    } else {
                        format!("; bound to {}", s.hosts.join(", "))
                    };
                    format!("{} (updated {}{bound})", s.name, rfc3339(s.updated_ms))
                })
                .collect();
            format!("{} secret(s):\n{}", listed.len(), lines.join("\n"))
        };
        let names = listed.iter().map(|s| s.name.as_str().to_owned()).collect();
        Ok(Output {
            typed: Some(TypedOutput::SecretNames(names)),
            ..text(message, json!({"secrets": rows}))
        })
    }
}

/// Unix milliseconds as RFC 3339 in UTC with exactly three fractional digits, so that the
/// texts sort as the times do.
pub(crate) fn rfc3339(millis: i64) -> String {
    let Ok(at) = OffsetDateTime::from_unix_timestamp_nanos(i128::from(millis) * 1_000_000) else {
        return String::new();
    };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second(),
        at.millisecond()
    )
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn times_have_a_fixed_width_and_sort_as_text() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_634_804_450), "2026-11-25T19:26:44.450Z");
        assert!(rfc3339(1_000_100) < rfc3339(1_000_120));
    }
}

#[cfg(test)]
#[path = "secrets_tests.rs"]
mod hosts_tests;

//! `network` on both tools: the account's host lists, which the session network proxy applies
//! to its sessions' code. On the write tool `{allow?, deny?}` replaces the lists it gives; on
//! the read tool `true` shows them. Both answer the lists in force.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolgate_store::HostLists;

use crate::capability::{
    CallContext, Capability, ContentItem, Failure, Field, JsonObject, Output, ToolKind,
};
use crate::egress_rules::{EgressRules, EgressRulesError, MAX_PATTERNS, canonical_list, describe};
use crate::schema::FieldKind;

/// Both capabilities over one set of lists; `has_network`: sessions reach the network at all.
pub fn capabilities(rules: &Arc<EgressRules>, has_network: bool) -> Vec<Arc<dyn Capability>> {
    vec![
        Arc::new(SetNetwork {
            rules: Arc::clone(rules),
            has_network,
        }),
        Arc::new(ShowNetwork {
            rules: Arc::clone(rules),
            has_network,
        }),
    ]
}

/// The two lists' keys.
const LISTS: [&str; 2] = ["allow", "deny"];

fn set_schema(description: &str) -> Value {
    let list = json!({"type": "array", "maxItems": MAX_PATTERNS,
        "items": {"type": "string", "maxLength": toolgate_egress::MAX_HOST_PATTERN_CHARS}});
    json!({
        "type": "object",
        "properties": {"allow": list, "deny": list},
        "additionalProperties": false,
        "minProperties": 1,
        "description": description,
    })
}

/// The field's shape, and every pattern parsed, before the call is metered.
fn check_set(field: &str, value: &Value) -> Result<(), String> {
    lists_in(field, value).map(|_| ())
}

/// The lists a `network` value gives, as texts; `Err` names what does not fit.
fn lists_in<'v>(field: &str, value: &'v Value) -> Result<[Option<Vec<&'v str>>; 2], String> {
    let Some(object) = value.as_object() else {
        return Err(format!(
            "field `{field}` must be an object {{allow?, deny?}} of host pattern lists"
        ));
    };
    if let Some(key) = object.keys().find(|k| !LISTS.contains(&k.as_str())) {
        let shown: String = key.chars().filter(|c| !c.is_control()).take(64).collect();
        return Err(format!(
            "field `{field}` has an unknown key `{shown}`; the keys are allow, deny"
        ));
    }
    if object.is_empty() {
        return Err(format!(
            "field `{field}` names no list: give `allow`, `deny` or both"
        ));
    }
    let mut lists = [None, None];
    for (slot, which) in lists.iter_mut().zip(LISTS) {
        let Some(given) = object.get(which) else {
            continue;
        };
        let Some(items) = given.as_array() else {
            return Err(format!(
                "`{field}.{which}` must be an array of host patterns"
            ));
        };
        let mut texts = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let Some(text) = item.as_str() else {
                return Err(format!("`{field}.{which}[{index}]` must be a string"));
            };
            texts.push(text);
        }
        canonical_list(&format!("{field}.{which}"), &texts)?;
        *slot = Some(texts);
    }
    Ok(lists)
}

fn output_schema() -> Value {
    let list = json!({"type": "array", "items": {"type": "string"}});
    json!({"type": "object", "properties": {
        "allow": list, "deny": list, "sessions_have_network": {"type": "boolean"}},
        "required": ["allow", "deny", "sessions_have_network"]})
}

/// The answer of both: the lists in force, in a sentence and as structured content.
fn answer(lists: &HostLists, has_network: bool) -> Output {
    let mut text = describe(lists);
    if !has_network {
        text.push_str(" Sessions have no network on this service, so the lists apply once it gives them some.");
    }
    Output {
        content: vec![ContentItem::Text(text)],
        structured: json!({"allow": lists.allow, "deny": lists.deny,
                           "sessions_have_network": has_network}),
        ..Output::default()
    }
}

fn failure(err: EgressRulesError) -> Failure {
    if let EgressRulesError::Unavailable(source) = &err {
        tracing::error!(error = %source, "host lists: storage failed");
    }
    Failure::new(err.to_string())
}

/// `network: {allow?, deny?}` on the write tool.
struct SetNetwork {
    rules: Arc<EgressRules>,
    has_network: bool,
}

#[async_trait]
impl Capability for SetNetwork {
    fn key(&self) -> &'static str {
        "network"
    }

    fn tool(&self) -> ToolKind {
        ToolKind::Write
    }

    fn summary(&self) -> &'static str {
        // short: this tool's description is at the 2 KB clients read (the field says the rest)
        "`{allow, deny}`: hosts code may reach."
    }

    fn fields(&self) -> Vec<Field> {
        vec![Field {
            name: "network",
            kind: FieldKind::Custom {
                schema: set_schema,
                check: check_set,
            },
            description: "your sessions' host lists, each replaced whole when given (at most \
                          100 patterns: api.example.org, *.example.org for every host beneath \
                          it, * for all): `allow` the hosts code may reach (empty: every public \
                          host), `deny` those it may not, applied after `allow`. Private \
                          addresses stay refused. Answers the lists in force",
        }]
    }

    fn output_schema(&self) -> Value {
        output_schema()
    }

    fn wants(&self, args: &JsonObject) -> bool {
        args.contains_key("network")
    }

    async fn run(&self, ctx: &CallContext<'_>, args: &JsonObject) -> Result<Output, Failure> {
        let value = args.get("network").unwrap_or(&Value::Null);
        let [allow, deny] = lists_in("network", value).map_err(Failure::new)?;
        let lists = self
            .rules
            .change(&ctx.account.id, allow.as_deref(), deny.as_deref())
            .await
            .map_err(failure)?;
        Ok(answer(&lists, self.has_network))
    }
}

/// `network: true` on the read tool.
struct ShowNetwork {
    rules: Arc<EgressRules>,
    has_network: bool,
}

#[async_trait]
impl Capability for ShowNetwork {
    fn key(&self) -> &'static str {
        "network"
    }

    fn tool(&self) -> ToolKind {
        ToolKind::Read
    }

    fn summary(&self) -> &'static str {
        "`network: true` shows the hosts sessions' code may reach."
    }

    fn fields(&self) -> Vec<Field> {
        vec![Field {
            name: "network",
            kind: FieldKind::Boolean,
            description: "true: your sessions' host lists (`allow`, `deny`) and whether \
                          sessions have network on this service",
        }]
    }

    fn output_schema(&self) -> Value {
        output_schema()
    }

    fn wants(&self, args: &JsonObject) -> bool {
        args.get("network").and_then(Value::as_bool) == Some(true)
    }

    async fn run(&self, ctx: &CallContext<'_>, _args: &JsonObject) -> Result<Output, Failure> {
        let lists = self.rules.lists(&ctx.account.id).await.map_err(failure)?;
        Ok(answer(&lists, self.has_network))
    }
}

#[cfg(test)]
#[path = "network_tests.rs"]
mod tests;

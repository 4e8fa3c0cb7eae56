//! The three tools, composed at start-up from the registered capabilities: their schemas and
//! descriptions for `tools/list`, argument validation, and the dispatcher that runs every
//! capability a call asks for.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use toolgate_domain::Brand;

use crate::capability::{
    CallContext, Capability, ContentItem, Failure, Field, JsonObject, Output, ToolKind, ToolOutcome,
};
use crate::turns::TurnKind;

/// Behaviour hints shown to clients as MCP tool annotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hints {
    /// does not modify its environment
    pub read_only: bool,
    /// may perform destructive updates
    pub destructive: bool,
    /// repeating a call has no further effect
    pub idempotent: bool,
    /// talks to the world outside the service
    pub open_world: bool,
}

/// One tool as `tools/list` shows it.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// Full name, e.g. `svc_read`.
    pub name: String,
    /// Which tool.
    pub kind: ToolKind,
    /// Short human title.
    pub title: &'static str,
    /// Description including every enabled capability.
    pub description: String,
    /// JSON Schema of the arguments.
    pub input_schema: JsonObject,
    /// JSON Schema of `structuredContent`.
    pub output_schema: JsonObject,
    /// Annotations.
    pub hints: Hints,
    /// The tool may outlast a client's patience (code, models): it runs as an MCP task where
    /// the client accepts one (`execution.taskSupport: "optional"`).
    pub runs_long: bool,
}

/// A validated call: which capabilities will run, with the arguments they read.
#[derive(Debug)]
pub struct Plan {
    kind: ToolKind,
    selected: Vec<usize>,
    args: JsonObject,
    overlaps_commit: bool,
    turn_kinds: Vec<TurnKind>,
}

impl Plan {
    /// The budgets the call takes a turn of, in the order it takes them.
    pub fn turn_kinds(&self) -> &[TurnKind] {
        &self.turn_kinds
    }

    /// Whether every capability of the call may run while its charge is being committed.
    pub fn overlaps_commit(&self) -> bool {
        self.overlaps_commit
    }
}

/// What one capability of a call did.
#[derive(Debug)]
pub struct Ran {
    /// The capability's key in `structuredContent`.
    pub key: &'static str,
    /// Its output, or why it failed.
    pub result: Result<Output, Failure>,
}

/// The capability registry.
pub struct Registry {
    capabilities: Vec<Arc<dyn Capability>>,
    tools: Vec<ToolSpec>,
}

impl Registry {
    /// Composes the three tools of `brand` from `capabilities`.
    pub fn new(brand: &Brand, capabilities: Vec<Arc<dyn Capability>>) -> Self {
        let tools = ToolKind::ALL
            .into_iter()
            .map(|kind| compose(brand, kind, &capabilities))
            .collect();
        Self {
            capabilities,
            tools,
        }
    }

    /// The three tools.
    pub fn tools(&self) -> &[ToolSpec] {
        &self.tools
    }

    /// The tool called `name`, if it is one of the three.
    pub fn tool(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.iter().find(|tool| tool.name == name)
    }

    /// Checks the arguments and picks the capabilities to run, before anything is metered.
    pub fn plan(&self, kind: ToolKind, args: Option<JsonObject>) -> Result<Plan, Failure> {
        self.plan_as(kind, args, false)
    }

    /// [`Registry::plan`] for a call that may run as an MCP task (`as_task`) or not.
    pub fn plan_as(
        &self,
        kind: ToolKind,
        args: Option<JsonObject>,
        as_task: bool,
    ) -> Result<Plan, Failure> {
        let args = args.unwrap_or_default();
        let tool_name = self
            .tools
            .iter()
            .find(|t| t.kind == kind)
            .map_or("", |t| t.name.as_str());
        let owned = self.fields_of(kind);
        for (name, value) in &args {
            let field = owned.iter().find(|f| f.name == name).ok_or_else(|| {
                Failure::new(format!(
                    "{tool_name} has no field `{}`. {}",
                    printable(name),
                    accepted(&owned)
                ))
            })?;
            // a wrong type names every accepted field too, as an unknown field does
            field
                .kind
                .check(name, value)
                .map_err(|err| Failure::new(format!("{err}. {}", accepted(&owned))))?;
        }
        let selected: Vec<usize> = self
            .capabilities
            .iter()
            .enumerate()
            .filter(|(_, cap)| cap.tool() == kind && cap.wants(&args))
            .map(|(index, _)| index)
            .collect();
        for &index in &selected {
            if let Some(cap) = self.capabilities.get(index) {
                cap.validate_as(&args, as_task).map_err(Failure::new)?;
            }
        }
        if selected.is_empty() {
            return Err(Failure::new(format!(
                "{tool_name} was called without a field that asks it to do something. {}",
                accepted(&owned)
            )));
        }
        let overlaps_commit = selected.iter().all(|&index| {
            self.capabilities
                .get(index)
                .is_some_and(|cap| cap.overlaps_commit())
        });
        let mut turn_kinds: Vec<TurnKind> = selected
            .iter()
            .filter_map(|&index| self.capabilities.get(index)?.turn_kind(&args))
            .collect();
        // always in one order, so two calls never wait for each other's second kind
        turn_kinds.sort_unstable();
        turn_kinds.dedup();
        Ok(Plan {
            kind,
            selected,
            args,
            overlaps_commit,
            turn_kinds,
        })
    }

    /// Runs every capability of the plan, in registry order (see [`merge`] for their answer).
    pub async fn run(&self, plan: &Plan, ctx: &CallContext<'_>) -> Vec<Ran> {
        let mut ran = Vec::with_capacity(plan.selected.len());
        for &index in &plan.selected {
            let Some(cap) = self
                .capabilities
                .get(index)
                .filter(|c| c.tool() == plan.kind)
            else {
                continue;
            };
            ran.push(Ran {
                key: cap.key(),
                result: cap.run(ctx, &plan.args).await,
            });
        }
        ran
    }

    fn fields_of(&self, kind: ToolKind) -> Vec<Field> {
        let mut fields: Vec<Field> = Vec::new();
        for cap in self.capabilities.iter().filter(|c| c.tool() == kind) {
            for field in cap.fields() {
                // Shared fields such as `session_id` are declared by several capabilities.
                if !fields.iter().any(|known| known.name == field.name) {
                    fields.push(field);
                }
            }
        }
        fields
    }
}

/// The results of a call's capabilities as one answer: their content in order, their outputs
/// under their keys, a failure as `{"error": message}` and a line of text.
pub fn merge(ran: Vec<Ran>) -> ToolOutcome {
    let mut outcome = ToolOutcome {
        content: Vec::new(),
        structured: Map::new(),
        is_error: false,
        typed: Vec::new(),
    };
    for Ran { key, result } in ran {
        match result {
            Ok(output) => {
                outcome.is_error |= output.is_error;
                outcome.content.extend(output.content);
                outcome.structured.insert(key.to_owned(), output.structured);
                outcome.typed.extend(output.typed);
            }
            Err(failure) => {
                outcome.is_error = true;
                outcome
                    .content
                    .push(ContentItem::Text(format!("{key}: {}", failure.message)));
                outcome
                    .structured
                    .insert(key.to_owned(), json!({"error": failure.message}));
            }
        }
    }
    outcome
}

fn compose(brand: &Brand, kind: ToolKind, capabilities: &[Arc<dyn Capability>]) -> ToolSpec {
    let mine: Vec<&Arc<dyn Capability>> =
        capabilities.iter().filter(|c| c.tool() == kind).collect();
    let mut properties = Map::new();
    for cap in &mine {
        for field in cap.fields() {
            properties
                .entry(field.name)
                .or_insert_with(|| field.kind.schema(field.description));
        }
    }
    let mut outputs = Map::new();
    for cap in &mine {
        let mut schema = cap.output_schema();
        if let Value::Object(object) = &mut schema {
            // A failed capability reports `{"error": …}` in its slot, so the slot admits that too.
            schema = json!({"anyOf": [Value::Object(object.clone()), error_schema()]});
        }
        outputs.insert(cap.key().to_owned(), schema);
    }
    let input = json!({"type": "object", "properties": properties, "additionalProperties": false});
    let output = json!({"type": "object", "properties": outputs});
    let (title, intro, mut hints) = identity(kind);
    hints.open_world = mine.iter().any(|cap| cap.reaches_outside());
    ToolSpec {
        name: brand.tool_name(kind.suffix()),
        kind,
        title,
        description: describe(intro, &mine),
        input_schema: as_object(input),
        output_schema: as_object(output),
        hints,
        runs_long: kind != ToolKind::Read,
    }
}

fn identity(kind: ToolKind) -> (&'static str, &'static str, Hints) {
    // whether the tool reaches outside is its capabilities' to say (see `compose`)
    let hints = |read_only, destructive| Hints {
        read_only,
        destructive,
        idempotent: read_only,
        open_world: false,
    };
    match kind {
        ToolKind::Read => (
            "Read-only queries",
            "Read-only queries about your account and the outside world; never changes anything.",
            hints(true, false),
        ),
        ToolKind::Write => (
            "Run code and change state",
            "Runs code and performs operations that change state in your private workspace.",
            hints(false, true),
        ),
        ToolKind::Ai => (
            "Language models and web search",
            "Calls language models from any provider and searches the live web.",
            hints(true, false),
        ),
    }
}

fn describe(intro: &str, capabilities: &[&Arc<dyn Capability>]) -> String {
    let mut text = String::from(intro);
    if capabilities.is_empty() {
        text.push_str(" No capability of this tool is enabled on this server yet; calls are refused with a tool error.");
        return text;
    }
    text.push_str(" Fields combine: every capability a call's fields ask for runs, its output in structuredContent under its name, and the call is metered once.");
    for cap in capabilities {
        text.push_str(&format!("\n- `{}`: {}", cap.key(), cap.summary()));
    }
    text
}

fn accepted(fields: &[Field]) -> String {
    if fields.is_empty() {
        return "No capability of this tool is enabled on this server yet, so it accepts no fields.".to_owned();
    }
    let names: Vec<String> = fields.iter().map(|f| format!("`{}`", f.name)).collect();
    format!("Accepted fields: {}.", names.join(", "))
}

/// A caller-chosen field name, cut short and stripped of control characters for the error text.
fn printable(name: &str) -> String {
    let clean: String = name.chars().filter(|c| !c.is_control()).take(64).collect();
    if clean.len() < name.len() {
        format!("{clean}…")
    } else {
        clean
    }
}

fn error_schema() -> Value {
    json!({"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]})
}

fn as_object(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::capability::{Answer, CallError, CallIo, MakeCall};
    use crate::schema::FieldKind;
    use async_trait::async_trait;
    use toolgate_domain::{Account, AccountId, Email};

    /// A capability whose behaviour the test controls.
    struct Echo {
        key: &'static str,
        fail: bool,
        outside: bool,
    }

    #[async_trait]
    impl Capability for Echo {
        fn key(&self) -> &'static str {
            self.key
        }
        fn tool(&self) -> ToolKind {
            ToolKind::Read
        }
        fn summary(&self) -> &'static str {
            "echoes"
        }
        fn reaches_outside(&self) -> bool {
            self.outside
        }
        fn fields(&self) -> Vec<Field> {
            vec![
                Field {
                    name: self.key,
                    kind: FieldKind::String { max_len: 8 },
                    description: "text",
                },
                Field {
                    name: "session_id",
                    kind: FieldKind::String { max_len: 8 },
                    description: "shared",
                },
            ]
        }
        fn output_schema(&self) -> Value {
            json!({"type": "string"})
        }
        fn wants(&self, args: &JsonObject) -> bool {
            args.contains_key(self.key)
        }
        async fn run(&self, _ctx: &CallContext<'_>, args: &JsonObject) -> Result<Output, Failure> {
            if self.fail {
                return Err(Failure::new("boom"));
            }
            let value = args[self.key].clone();
            Ok(Output {
                content: vec![ContentItem::Text(value.to_string())],
                structured: value,
                ..Output::default()
            })
        }
    }

    /// A call-back for capabilities that make no calls of their own.
    struct NoCalls;

    #[async_trait]
    impl MakeCall for NoCalls {
        async fn make_call(
            self: Arc<Self>,
            _caller: &Account,
            _kind: ToolKind,
            _args: JsonObject,
            _io: CallIo<'_>,
        ) -> Result<Answer, CallError> {
            Err(CallError::UnknownTool)
        }
    }

    fn registry() -> Registry {
        let caps: Vec<Arc<dyn Capability>> = vec![
            Arc::new(Echo {
                key: "alpha",
                fail: false,
                outside: false,
            }),
            Arc::new(Echo {
                key: "beta",
                fail: true,
                outside: false,
            }),
        ];
        Registry::new(&Brand::parse("svc").unwrap(), caps)
    }

    #[test]
    fn a_tool_reaches_outside_when_any_of_its_capabilities_does() {
        let echo = |outside| -> Arc<dyn Capability> {
            Arc::new(Echo {
                key: "alpha",
                fail: false,
                outside,
            })
        };
        let brand = Brand::parse("svc").unwrap();
        let inside = Registry::new(&brand, vec![echo(false)]);
        assert!(!inside.tool("svc_read").unwrap().hints.open_world);
        let both = Registry::new(&brand, vec![echo(false), echo(true)]);
        assert!(both.tool("svc_read").unwrap().hints.open_world);
        assert!(
            !both.tool("svc_write").unwrap().hints.open_world,
            "a tool with no such capability does not"
        );
    }

    fn args(value: Value) -> Option<JsonObject> {
        Some(as_object(value))
    }

    #[test]
    fn schemas_are_composed_from_capabilities() {
        let registry = registry();
        let names: Vec<&str> = registry.tools().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["svc_read", "svc_write", "svc_ai"]);
        let read = registry.tool("svc_read").unwrap();
        let props = read.input_schema["properties"].as_object().unwrap();
        assert_eq!(
            props.keys().collect::<Vec<_>>(),
            ["alpha", "beta", "session_id"]
        );
        assert!(read.description.contains("- `alpha`: echoes"));
        assert!(read.output_schema["properties"]["beta"].is_object());
        let write = registry.tool("svc_write").unwrap();
        assert!(
            write.input_schema["properties"]
                .as_object()
                .unwrap()
                .is_empty()
        );
        assert!(write.hints.destructive && !write.hints.read_only);
        assert!(registry.tool("svc_other").is_none());
    }

    #[test]
    fn bad_arguments_are_refused_with_the_accepted_fields() {
        let registry = registry();
        let unknown = registry
            .plan(ToolKind::Read, args(json!({"gamma\u{7}": 1})))
            .unwrap_err();
        assert!(
            unknown.message.contains("no field `gamma"),
            "{}",
            unknown.message
        );
        assert!(
            unknown.message.contains("`alpha`, `session_id`, `beta`"),
            "{}",
            unknown.message
        );
        let typed = registry
            .plan(ToolKind::Read, args(json!({"alpha": 5})))
            .unwrap_err();
        assert!(
            typed.message.contains("must be a string"),
            "{}",
            typed.message
        );
        let nothing = registry
            .plan(ToolKind::Read, args(json!({"session_id": "s"})))
            .unwrap_err();
        assert!(
            nothing.message.contains("without a field"),
            "{}",
            nothing.message
        );
        let none = registry.plan(ToolKind::Write, None).unwrap_err();
        assert!(
            none.message.contains("accepts no fields"),
            "{}",
            none.message
        );
    }

    #[tokio::test]
    async fn every_requested_capability_runs_and_failures_are_marked() {
        let registry = registry();
        let account = Account {
            id: AccountId::generate(),
            email: Email::parse("a@b.org").unwrap(),
            tier: "free".into(),
            caps: Default::default(),
            via: Default::default(),
        };
        let scratch = crate::capability::CallScratch::default();
        let secrets = crate::capability::CallSecrets::default();
        let calls: Arc<dyn MakeCall> = Arc::new(NoCalls);
        let ctx = CallContext {
            scratch: &scratch,
            secrets: &secrets,
            account: &account,
            tool: "svc_read",
            call_id: 1,
            usage_after: None,
            calls: &calls,
            progress: None,
            cancel: None,
            as_task: false,
            result_chars: None,
        };
        let only_alpha = registry
            .plan(ToolKind::Read, args(json!({"alpha": "hi"})))
            .unwrap();
        let outcome = merge(registry.run(&only_alpha, &ctx).await);
        assert!(!outcome.is_error);
        assert_eq!(Value::Object(outcome.structured), json!({"alpha": "hi"}));
        let both = registry
            .plan(ToolKind::Read, args(json!({"alpha": "hi", "beta": "x"})))
            .unwrap();
        let outcome = merge(registry.run(&both, &ctx).await);
        assert!(outcome.is_error);
        assert_eq!(
            Value::Object(outcome.structured),
            json!({"alpha": "hi", "beta": {"error": "boom"}})
        );
        assert_eq!(outcome.content.len(), 2);
    }
}

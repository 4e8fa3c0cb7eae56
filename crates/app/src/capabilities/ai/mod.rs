//! `svc_ai`'s model call: `prompt` or `messages` with `model` (`provider/model`, split on the
//! first `/`), through the model seam. The key is the vault secret named by `api_key_secret`,
//! else the account's secret with the provider's conventional name (`OPENAI_API_KEY`, …), else
//! the operator's; every key used is registered with the call, which redacts it from the answer
//! and its errors. With a progress token the answer streams as progress notifications; a
//! cancelled call drops the request. A call on the operator's key is capped and counted
//! (`operator`).

mod messages;
mod operator;
mod search;

pub use operator::OperatorKeyLimits;
pub(crate) use operator::OperatorKeys;
pub use search::SearchCall;

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use toolgate_domain::{LlmAnswer, SecretName};
use toolgate_vault::Zeroizing;

use crate::capability::{
    CallContext, Capability, ContentItem, Failure, Field, JsonObject, Output, ToolKind, TypedOutput,
};
use crate::schema::FieldKind;
use crate::secrets::{Secrets, SecretsError};
use toolgate_ports::ai::{Message, ModelAnswer, ModelRequest, Models, Part, Role};

/// Longest `prompt` or `system`, in bytes.
const MAX_PROMPT_BYTES: usize = 1024 * 1024;
/// Longest `model`, in bytes.
const MAX_MODEL_BYTES: usize = 256;
/// Streamed pieces that may wait for the caller.
const PIECES_QUEUE: usize = 256;

/// The model call.
pub struct ModelCall {
    models: Arc<dyn Models>,
    secrets: Option<Arc<Secrets>>,
    /// The operator's keys' limits; `None`: not limited (tests of other things).
    operator_keys: Option<Arc<OperatorKeys>>,
}

impl ModelCall {
    /// Calls through `models`, with keys from `secrets`.
    pub fn new(models: Arc<dyn Models>, secrets: Option<Arc<Secrets>>) -> Self {
        Self {
            models,
            secrets,
            operator_keys: None,
        }
    }

    /// The same, lending the operator's keys only within `keys`' limits.
    pub(crate) fn lending(mut self, keys: OperatorKeys) -> Self {
        self.operator_keys = Some(Arc::new(keys));
        self
    }

    /// The key for this call, from the vault (registered with the call, which redacts it);
    /// `None` leaves it to the operator's key.
    async fn key(
        &self,
        ctx: &CallContext<'_>,
        named: Option<&str>,
        conventional: &str,
    ) -> Result<Option<Zeroizing<String>>, Failure> {
        let Some(secrets) = &self.secrets else {
            return Ok(None);
        };
        let (name, required) = match named {
            Some(name) => (name, true),
            None => (conventional, false),
        };
        let Ok(name) = SecretName::parse(name) else {
            return Ok(None);
        };
        match secrets
            .open(&ctx.account.id, std::slice::from_ref(&name))
            .await
        {
            Ok(opened) => {
                ctx.secrets
                    .add(opened.iter().map(|(n, v)| (n, v.as_bytes())));
                Ok(opened
                    .iter()
                    .next()
                    .map(|(_, v)| Zeroizing::new(v.to_owned())))
            }
            Err(SecretsError::Unknown(_)) if !required => Ok(None),
            Err(e) => Err(Failure::new(e.to_string())),
        }
    }
}

/// `provider/model`, split on the first `/`.
fn split_model(model: &str) -> Result<(&str, &str), String> {
    let (provider, name) = model
        .split_once('/')
        .filter(|(p, m)| !p.is_empty() && !m.is_empty())
        .ok_or("`model` must be provider/model, e.g. openai/gpt-4o-mini")?;
    let fine = |c: char| c.is_ascii_alphanumeric() || "._:/@+-".contains(c);
    if !name.chars().all(fine) || name.contains("..") || !provider.chars().all(fine) {
        return Err("`model` may hold letters, digits and . _ : / @ + - only".to_owned());
    }
    Ok((provider, name))
}

#[async_trait]
impl Capability for ModelCall {
    fn key(&self) -> &'static str {
        "llm"
    }

    fn tool(&self) -> ToolKind {
        ToolKind::Ai
    }

    fn summary(&self) -> &'static str {
        "`prompt` (or `messages`) with `model` as provider/model (openai, anthropic, google, \
         mistral, groq, openrouter, deepseek, xai, together, ollama, or the operator's own \
         endpoints) calls that model; `system`, `max_tokens`, `temperature`, `response_format` \
         (\"json\" or a JSON Schema) tune it. The key is the vault secret named by \
         `api_key_secret`, else your secret with the provider's usual name (OPENAI_API_KEY, \
         ANTHROPIC_API_KEY, GEMINI_API_KEY, …), else the operator's, within its limits \
         (max_tokens capped, tokens counted against a daily limit per account). The answer is \
         the text; model, finish reason, token usage and latency are in structuredContent."
    }

    fn fields(&self) -> Vec<Field> {
        let text = |max_len| FieldKind::String { max_len };
        vec![
            Field {
                name: "prompt",
                kind: text(MAX_PROMPT_BYTES),
                description: "what to ask the model",
            },
            Field {
                name: "messages",
                kind: FieldKind::Custom {
                    schema: messages::messages_schema,
                    check: messages::check_messages,
                },
                description: "a conversation instead of `prompt`: [{role: user|assistant, content: text or [{type: text, text} | {type: image, data: base64, mime_type}]}]",
            },
            Field {
                name: "model",
                kind: text(MAX_MODEL_BYTES),
                description: "provider/model, e.g. openai/gpt-4o-mini or anthropic/claude-sonnet-4-5",
            },
            Field {
                name: "system",
                kind: text(MAX_PROMPT_BYTES),
                description: "instructions for the model",
            },
            Field {
                name: "max_tokens",
                kind: FieldKind::Integer {
                    min: 1,
                    max: 1_000_000,
                },
                description: "most tokens of the answer (Anthropic: 1024 when not given)",
            },
            Field {
                name: "temperature",
                kind: FieldKind::Number { min: 0.0, max: 2.0 },
                description: "sampling temperature",
            },
            Field {
                name: "response_format",
                kind: FieldKind::Custom {
                    schema: messages::format_schema,
                    check: messages::check_format,
                },
                description: "\"json\" for a JSON object, or a JSON Schema the answer must follow",
            },
            Field {
                name: "api_key_secret",
                kind: FieldKind::SecretName,
                description: "the vault secret holding the provider key to use",
            },
        ]
    }

    fn output_schema(&self) -> Value {
        let text = json!({"type": "string"});
        json!({"type": "object", "properties": {
            "model": text, "provider": text, "finish_reason": text,
            "usage": {"type": "object", "properties": {
                "input_tokens": {"type": "integer"}, "output_tokens": {"type": "integer"}}},
            "latency_ms": {"type": "number"}, "attempts": {"type": "integer"},
            "operator_key": operator::schema()},
            "required": ["model", "provider", "finish_reason", "usage", "latency_ms", "attempts"]})
    }

    fn overlaps_commit(&self) -> bool {
        true
    }

    /// Model providers.
    fn reaches_outside(&self) -> bool {
        true
    }

    fn wants(&self, args: &JsonObject) -> bool {
        (args.contains_key("prompt") || args.contains_key("messages"))
            && !args.contains_key("search")
    }

    fn turn_kind(&self, _args: &JsonObject) -> Option<crate::turns::TurnKind> {
        Some(crate::turns::TurnKind::Models)
    }

    fn validate(&self, args: &JsonObject) -> Result<(), String> {
        if args.contains_key("prompt") == args.contains_key("messages") {
            return Err("give either `prompt` or `messages`, not both".to_owned());
        }
        let model = args
            .get("model")
            .and_then(Value::as_str)
            .ok_or("a model call needs `model`: provider/model, e.g. openai/gpt-4o-mini")?;
        let (provider, _) = split_model(model)?;
        if self.models.provider(provider).is_none() {
            return Err(format!(
                "unknown provider {provider:?} in `model`: known are {}",
                self.models.providers().join(", ")
            ));
        }
        Ok(())
    }

    async fn run(&self, ctx: &CallContext<'_>, args: &JsonObject) -> Result<Output, Failure> {
        let text = |key: &str| args.get(key).and_then(Value::as_str);
        let (provider, model) =
            split_model(text("model").unwrap_or_default()).map_err(Failure::new)?;
        let info = self
            .models
            .provider(provider)
            .ok_or_else(|| Failure::new(format!("unknown provider {provider:?}")))?;
        let messages = match args.get("messages") {
            Some(value) => messages::parse_messages(value).map_err(Failure::new)?,
            None => vec![Message {
                role: Role::User,
                parts: vec![Part::Text(text("prompt").unwrap_or_default().to_owned())],
            }],
        };
        let api_key = self
            .key(ctx, text("api_key_secret"), &info.key_secret)
            .await?;
        let asked = args
            .get("max_tokens")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok());
        let system = text("system").map(str::to_owned);
        // Without a key of the caller's the provider uses the operator's (if it needs one).
        // The call holds its turn (`turn_kind`) from before it is charged, so only the calls
        // in flight at once (a few per account) can pass the day's limit before their tokens
        // are counted.
        let lent = match &self.operator_keys {
            Some(keys) if api_key.is_none() && info.operator_key && !info.keyless => {
                let estimate = operator::input_estimate(system.as_deref(), &messages);
                let lent = keys
                    .lend(&ctx.account.id, &info.key_secret, asked, estimate)
                    .await?;
                Some(lent)
            }
            _ => None,
        };
        let request = ModelRequest {
            provider: provider.to_owned(),
            model: model.to_owned(),
            system,
            messages,
            max_tokens: lent.as_ref().map_or(asked, |lent| Some(lent.max_tokens())),
            temperature: args.get("temperature").and_then(Value::as_f64),
            json: messages::json_request(args.get("response_format")),
            api_key,
        };
        let started = Instant::now();
        let (answer, spent) = self.complete(ctx, request).await;
        let operator_key = match lent {
            Some(lent) => lent.settle(spent).await,
            None => None,
        };
        let answer = answer?;
        let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
        Ok(rendered(LlmAnswer {
            text: answer.text,
            model: answer.model,
            provider: provider.to_owned(),
            finish_reason: answer.finish_reason,
            usage: answer.usage,
            latency_ms: (latency_ms * 1000.0).round() / 1000.0,
            attempts: answer.attempts,
            operator_key,
        }))
    }
}

/// The answer as the tool shows it: the text as the content, the rest as `structuredContent.llm`.
fn rendered(answer: LlmAnswer) -> Output {
    let mut structured = json!({
        "model": answer.model, "provider": answer.provider, "finish_reason": answer.finish_reason,
        "usage": {"input_tokens": answer.usage.input_tokens,
                  "output_tokens": answer.usage.output_tokens},
        "latency_ms": answer.latency_ms, "attempts": answer.attempts,
    });
    if let Some(loan) = &answer.operator_key {
        structured["operator_key"] = json!({
            "max_tokens": loan.max_tokens,
            "capped": loan.capped,
            "tokens_today": loan.tokens_today,
            "tokens_per_day": loan.tokens_per_day,
        });
    }
    Output {
        content: vec![ContentItem::Text(answer.text.clone())],
        structured,
        typed: Some(TypedOutput::Llm(answer)),
        ..Output::default()
    }
}

impl ModelCall {
    /// The call, its text streamed as progress when the caller wants it (redacted per stream
    /// with the call's redactor, as a key may be split between two pieces), given up when the
    /// caller cancels (dropping the request stops it upstream); and what it used, as far as is
    /// known.
    async fn complete(
        &self,
        ctx: &CallContext<'_>,
        request: ModelRequest,
    ) -> (Result<ModelAnswer, Failure>, operator::Spent) {
        let (tokens, mut pieces) = match ctx.progress {
            Some(_) => {
                let (tx, rx) = mpsc::channel(PIECES_QUEUE);
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let call = self.models.complete(request, tokens);
        tokio::pin!(call);
        let redactor = ctx.secrets.stream_redactor();
        let mut stream = redactor.stream();
        let mut sent = 0u64;
        let cancelled = async {
            match ctx.cancel {
                Some(token) => token.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(cancelled);
        loop {
            tokio::select! {
                // pieces first: what has streamed is passed on before the end is
                biased;
                Some(piece) = async { match pieces.as_mut() { Some(rx) => rx.recv().await, None => None } } => {
                    let shown = stream.push(&piece);
                    if let (Some(sink), false) = (ctx.progress, shown.is_empty()) {
                        sent += shown.len() as u64;
                        sink.report(sent as f64, &shown);
                    }
                }
                result = &mut call => {
                    // what streamed just before the end is still passed on, then the held tail
                    let mut rest = String::new();
                    if let Some(rx) = pieces.as_mut() {
                        while let Ok(piece) = rx.try_recv() {
                            rest.push_str(&stream.push(&piece));
                        }
                    }
                    rest.push_str(&stream.finish());
                    if let (Some(sink), false) = (ctx.progress, rest.is_empty()) {
                        sink.report((sent + rest.len() as u64) as f64, &rest);
                    }
                    let spent = operator::Spent::of(&result);
                    let result = result.map_err(|e| Failure::new(e.to_string()));
                    return (result, spent);
                }
                () = &mut cancelled => {
                    return (Err(Failure::new("the call was cancelled")), operator::Spent::Unknown);
                }
            }
        }
    }
}

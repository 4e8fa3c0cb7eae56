//! The model seam: what `svc_ai` needs from a client of language-model providers, as values.
//! The binary wires in the real one (crate `providers`: three wire formats behind the egress
//! guard); `app` never speaks a provider's protocol itself. Keys are found by `app` (the
//! vault) and handed over per call; a call without one uses the operator's key, if any.

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::mpsc;
use zeroize::Zeroizing;

// The records the tools answer with are the domain's: the model's usage and a search result
// reach an upcall's answer unchanged.
pub use toolgate_domain::{SearchResult, Usage};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// the caller
    User,
    /// the model, earlier in the conversation
    Assistant,
}

/// A piece of a message.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// text
    Text(String),
    /// an image, base64 of its bytes
    Image {
        /// `image/png`, `image/jpeg`, …
        mime_type: String,
        /// base64
        data: String,
    },
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// who wrote it
    pub role: Role,
    /// what it says
    pub parts: Vec<Part>,
}

/// One call of a model.
#[derive(Clone)]
pub struct ModelRequest {
    /// The provider's name (`openai`, `anthropic`, `google`, an operator's endpoint, …).
    pub provider: String,
    /// The model, as the provider names it.
    pub model: String,
    /// Instructions before the conversation.
    pub system: Option<String>,
    /// The conversation, ending with the caller's message.
    pub messages: Vec<Message>,
    /// Most tokens of the answer.
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Ask for JSON: `Some(Value::Null)` any JSON object, else this JSON Schema.
    pub json: Option<Value>,
    /// The key from the caller's vault; `None`: the operator's key for the provider.
    pub api_key: Option<Zeroizing<String>>,
}

impl std::fmt::Debug for ModelRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelRequest")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("messages", &self.messages.len())
            .field("max_tokens", &self.max_tokens)
            .field("api_key", &self.api_key.as_ref().map(|_| "<vault>"))
            .finish_non_exhaustive()
    }
}

/// A model's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelAnswer {
    /// The answer's text.
    pub text: String,
    /// The model that answered, as the provider reports it.
    pub model: String,
    /// Why it stopped (`stop`, `length`, …, as the provider says it).
    pub finish_reason: String,
    /// Tokens used.
    pub usage: Usage,
    /// Requests sent (more than one when a 429 or 5xx was retried).
    pub attempts: u32,
}

/// What a provider is to a caller: where its key is looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderInfo {
    /// The vault secret looked for when the call names none (`OPENAI_API_KEY`, …).
    pub key_secret: String,
    /// The operator has a key for it.
    pub operator_key: bool,
    /// It needs no key at all (a local endpoint).
    pub keyless: bool,
}

/// Why a model call failed; messages are safe to show the caller (never a key).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ModelError {
    /// unknown provider, no key, the egress guard; nothing was sent
    #[error("{0}")]
    Refused(String),
    /// the provider answered with an error status (after any retries): it generated nothing
    #[error("{0}")]
    Rejected(String),
    /// the provider failed while answering, or did not answer in time: what it generated is
    /// unknown
    #[error("{0}")]
    Failed(String),
}

/// Calls language models.
#[async_trait]
pub trait Models: Send + Sync {
    /// What `provider` is, if this service knows it.
    fn provider(&self, provider: &str) -> Option<ProviderInfo>;

    /// The names of the providers known, for descriptions and errors.
    fn providers(&self) -> Vec<String>;

    /// Calls the model. With `tokens`, the answer's text is also sent there piece by piece as
    /// it streams (never waited for: pieces a full channel cannot take are dropped).
    async fn complete(
        &self,
        request: ModelRequest,
        tokens: Option<mpsc::Sender<String>>,
    ) -> Result<ModelAnswer, ModelError>;
}

/// How recent search results must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// the last day
    Day,
    /// the last week
    Week,
    /// the last month
    Month,
    /// the last year
    Year,
}

impl Freshness {
    /// The word a caller writes.
    pub const WORDS: [&'static str; 4] = ["day", "week", "month", "year"];

    /// Reads a caller's word.
    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "day" => Some(Self::Day),
            "week" => Some(Self::Week),
            "month" => Some(Self::Month),
            "year" => Some(Self::Year),
            _ => None,
        }
    }
}

/// One web search.
#[derive(Clone)]
pub struct SearchQuery {
    /// What to search for.
    pub query: String,
    /// Results wanted at most.
    pub max_results: u32,
    /// How recent they must be.
    pub freshness: Option<Freshness>,
    /// The engine and the caller's key for it, from the vault; `None`: the operator's engine.
    pub engine: Option<(String, Zeroizing<String>)>,
}

impl std::fmt::Debug for SearchQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchQuery")
            .field("max_results", &self.max_results)
            .field("freshness", &self.freshness)
            .field("engine", &self.engine.as_ref().map(|(e, _)| e))
            .finish_non_exhaustive()
    }
}

/// What a search found, and which engine found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchAnswer {
    /// `searxng`, `brave`, `tavily` or `exa`.
    pub engine: String,
    /// The results, best first.
    pub results: Vec<SearchResult>,
}

/// Searches the web.
#[async_trait]
pub trait Searches: Send + Sync {
    /// The engines a caller's vault key may choose, in the order they are tried: the engine's
    /// name and its secret's name (`BRAVE_API_KEY`, …).
    fn key_secrets(&self) -> Vec<(String, String)>;

    /// Searches with the caller's engine and key, else the operator's engine.
    async fn search(&self, query: SearchQuery) -> Result<SearchAnswer, ModelError>;
}

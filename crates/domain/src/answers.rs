//! What the AI tool answers with, as records: a language model's answer and web search
//! results. The capability that calls the model or the engine returns them; the tool's MCP
//! rendering and an upcall's answer to code in a session both read them, so neither depends
//! on the other's key names.

use serde::{Deserialize, Serialize};

/// Tokens a model call used, as the provider counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// of the prompt
    pub input_tokens: u64,
    /// of the answer
    pub output_tokens: u64,
}

/// The operator's provider key, as a model call was lent it: the cap it ran under and the
/// account's count of the day afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorLoan {
    /// The `max_tokens` sent.
    pub max_tokens: u32,
    /// Whether the caller's `max_tokens` (or its absence) was lowered to the cap.
    pub capped: bool,
    /// The account's tokens on the operator's keys today, this call included.
    pub tokens_today: i64,
    /// The daily limit of those tokens.
    pub tokens_per_day: u64,
}

/// A language model's answer to one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmAnswer {
    /// The answer's text.
    pub text: String,
    /// The model that answered, as the provider reports it.
    pub model: String,
    /// The provider called (`openai`, …, or an operator's endpoint).
    pub provider: String,
    /// Why it stopped (`stop`, `length`, …, as the provider says it).
    pub finish_reason: String,
    /// Tokens used.
    pub usage: Usage,
    /// From the request to the answer, in milliseconds (three decimals).
    pub latency_ms: f64,
    /// Requests sent (more than one when a 429 or 5xx was retried).
    pub attempts: u32,
    /// Present when the call ran on the operator's key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_key: Option<OperatorLoan>,
}

/// One web search result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchResult {
    /// The page's title.
    pub title: String,
    /// Its address.
    pub url: String,
    /// A short passage.
    pub snippet: String,
    /// When it was published, where the engine says.
    pub date: Option<String>,
}

//! The three wire formats: how a request is written and an answer read, whole or streamed.
//! Hand-written against the providers' published shapes (checked in the stand-in tests), so
//! that every field sent is one chosen here: no default `max_tokens` a library picks, no header
//! a library adds.

mod anthropic;
mod gemini;
mod openai;

use serde_json::Value;
use toolgate_ports::ai::{ModelRequest, Part, Usage};

use crate::sse::Event;

/// Which wire format a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenAI chat completions (and every OpenAI-compatible endpoint)
    OpenAi,
    /// Anthropic Messages
    Anthropic,
    /// Gemini generateContent
    Gemini,
}

/// A request ready to send.
#[derive(Debug)]
pub struct Prepared {
    pub url: String,
    /// Header name and value; values may hold the key (never logged).
    pub headers: Vec<(&'static str, String)>,
    pub body: Value,
}

/// An answer, whole or as far as it has streamed.
#[derive(Debug, Default, Clone)]
pub struct Answer {
    pub text: String,
    pub model: String,
    pub finish_reason: String,
    pub usage: Usage,
    /// the stream said it is complete
    pub done: bool,
}

impl Format {
    /// The request for `request` at `base`, with `key` if there is one.
    pub fn prepare(
        self,
        base: &str,
        key: Option<&str>,
        request: &ModelRequest,
        stream: bool,
    ) -> Prepared {
        let base = base.trim_end_matches('/');
        match self {
            Self::OpenAi => openai::prepare(base, key, request, stream),
            Self::Anthropic => anthropic::prepare(base, key, request, stream),
            Self::Gemini => gemini::prepare(base, key, request, stream),
        }
    }

    /// Reads a whole answer.
    pub fn parse(self, body: &Value) -> Result<Answer, String> {
        let answer = match self {
            Self::OpenAi => openai::parse(body),
            Self::Anthropic => anthropic::parse(body),
            Self::Gemini => gemini::parse(body),
        };
        answer.ok_or_else(|| "the provider's answer is not in its format".to_owned())
    }

    /// Reads one streamed event into `answer`; the text it added.
    pub fn on_event(self, event: &Event, answer: &mut Answer) -> Result<String, String> {
        match self {
            Self::OpenAi => openai::on_event(event, answer),
            Self::Anthropic => anthropic::on_event(event, answer),
            Self::Gemini => gemini::on_event(event, answer),
        }
    }

    /// The provider's own words in an error body, if it has any.
    pub fn error_message(self, body: &Value) -> Option<String> {
        let error = body.get("error")?;
        error
            .get("message")
            .and_then(Value::as_str)
            .or_else(|| error.as_str())
            .map(str::to_owned)
    }
}

/// The text parts of a message joined, and its images, in the order given.
fn text_of(parts: &[Part]) -> String {
    parts
        .iter()
        .filter_map(|p| match p {
            Part::Text(text) => Some(text.as_str()),
            Part::Image { .. } => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// An event's data as JSON.
fn json_of(event: &Event) -> Result<Value, String> {
    serde_json::from_str(&event.data).map_err(|_| "a streamed event is not JSON".to_owned())
}

fn u64_at(value: &Value, pointer: &str) -> u64 {
    value.pointer(pointer).and_then(Value::as_u64).unwrap_or(0)
}

fn str_at(value: &Value, pointer: &str) -> Option<String> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_owned)
}

//! The providers this service knows: name, wire format, default endpoint, and the vault secret
//! a caller's key is looked for under. The operator may move an endpoint (`<name>_base_url`),
//! give a key of their own (`<name>_api_key`) and add OpenAI-compatible endpoints by name.

use crate::formats::Format;

/// One built-in provider.
#[derive(Debug, Clone, Copy)]
pub struct Builtin {
    pub name: &'static str,
    pub format: Format,
    pub base_url: &'static str,
    pub key_secret: &'static str,
    /// a local server that takes no key
    pub keyless: bool,
}

const fn p(
    name: &'static str,
    format: Format,
    base_url: &'static str,
    key_secret: &'static str,
) -> Builtin {
    Builtin {
        name,
        format,
        base_url,
        key_secret,
        keyless: false,
    }
}

/// Every built-in provider; `google` and `gemini` are one.
pub const BUILTIN: [Builtin; 11] = [
    p(
        "openai",
        Format::OpenAi,
        "https://api.openai.com/v1",
        "OPENAI_API_KEY",
    ),
    p(
        "anthropic",
        Format::Anthropic,
        "https://api.anthropic.com",
        "ANTHROPIC_API_KEY",
    ),
    p(
        "google",
        Format::Gemini,
        "https://generativelanguage.googleapis.com/v1beta",
        "GEMINI_API_KEY",
    ),
    p(
        "gemini",
        Format::Gemini,
        "https://generativelanguage.googleapis.com/v1beta",
        "GEMINI_API_KEY",
    ),
    p(
        "mistral",
        Format::OpenAi,
        "https://api.mistral.ai/v1",
        "MISTRAL_API_KEY",
    ),
    p(
        "groq",
        Format::OpenAi,
        "https://api.groq.com/openai/v1",
        "GROQ_API_KEY",
    ),
    p(
        "openrouter",
        Format::OpenAi,
        "https://openrouter.ai/api/v1",
        "OPENROUTER_API_KEY",
    ),
    p(
        "deepseek",
        Format::OpenAi,
        "https://api.deepseek.com/v1",
        "DEEPSEEK_API_KEY",
    ),
    p("xai", Format::OpenAi, "https://api.x.ai/v1", "XAI_API_KEY"),
    p(
        "together",
        Format::OpenAi,
        "https://api.together.xyz/v1",
        "TOGETHER_API_KEY",
    ),
    Builtin {
        name: "ollama",
        format: Format::OpenAi,
        base_url: "http://127.0.0.1:11434/v1",
        key_secret: "OLLAMA_API_KEY",
        keyless: true,
    },
];

/// The settings' name of a provider's endpoint or key: `google` and `gemini` share `gemini_`.
pub fn setting_prefix(name: &str) -> &str {
    if name == "google" { "gemini" } else { name }
}

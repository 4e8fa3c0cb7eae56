//! The model providers `serve` uses, from the settings: each built-in provider's
//! `<name>_base_url` and `<name>_api_key`, and the operator's OpenAI-compatible endpoints.

use std::time::Duration;

use anyhow::{Result, bail};
use toolgate_app::capabilities::OperatorKeyLimits;
use toolgate_egress::EgressPolicy;
use toolgate_providers::{ModelClients, ProviderSettings, SearchEngines, SearchSettings};
use toolgate_vault::Zeroizing;

use crate::config::{Secret, Settings};

/// The clients, reached only where `policy` allows.
pub fn models(settings: &Settings, policy: EgressPolicy) -> Result<ModelClients> {
    let mut providers = ProviderSettings {
        timeout: settings.ai_timeout_s.map(Duration::from_secs),
        ..ProviderSettings::default()
    };
    let each: [(&str, &Option<String>, &Option<Secret>); 10] = [
        (
            "openai",
            &settings.openai_base_url,
            &settings.openai_api_key,
        ),
        (
            "anthropic",
            &settings.anthropic_base_url,
            &settings.anthropic_api_key,
        ),
        (
            "gemini",
            &settings.gemini_base_url,
            &settings.gemini_api_key,
        ),
        (
            "mistral",
            &settings.mistral_base_url,
            &settings.mistral_api_key,
        ),
        ("groq", &settings.groq_base_url, &settings.groq_api_key),
        (
            "openrouter",
            &settings.openrouter_base_url,
            &settings.openrouter_api_key,
        ),
        (
            "deepseek",
            &settings.deepseek_base_url,
            &settings.deepseek_api_key,
        ),
        ("xai", &settings.xai_base_url, &settings.xai_api_key),
        (
            "together",
            &settings.together_base_url,
            &settings.together_api_key,
        ),
        (
            "ollama",
            &settings.ollama_base_url,
            &settings.ollama_api_key,
        ),
    ];
    for (name, base_url, key) in each {
        if let Some(url) = base_url {
            providers.base_urls.insert(name.to_owned(), url.clone());
        }
        if let Some(key) = key {
            providers
                .api_keys
                .insert(name.to_owned(), Zeroizing::new(key.expose().to_owned()));
        }
    }
    let keys: Vec<(String, String)> = settings
        .ai_endpoint_keys
        .iter()
        .flatten()
        .map(|entry| split(entry.expose(), "ai_endpoint_keys"))
        .collect::<Result<_>>()?;
    for entry in settings.ai_endpoints.iter().flatten() {
        let (name, url) = split(entry, "ai_endpoints")?;
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            bail!("ai_endpoints: the name {name:?} may hold letters, digits, - and _ only");
        }
        let key = keys
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, k)| Zeroizing::new(k.clone()));
        providers.compatible.push((name, url, key));
    }
    ModelClients::new(policy, providers).map_err(anyhow::Error::msg)
}

/// What model calls on the operator's keys may use: `operator_max_tokens` (at least 1) and
/// `operator_tokens_per_day`.
pub fn operator_key_limits(settings: &Settings) -> Result<OperatorKeyLimits> {
    let defaults = OperatorKeyLimits::default();
    let max_tokens = settings.operator_max_tokens.unwrap_or(defaults.max_tokens);
    if max_tokens == 0 {
        bail!("operator_max_tokens must be at least 1 (operator_tokens_per_day = 0 lends no key)");
    }
    Ok(OperatorKeyLimits {
        max_tokens,
        tokens_per_day: settings
            .operator_tokens_per_day
            .unwrap_or(defaults.tokens_per_day),
    })
}

/// `NAME=VALUE`; the error never repeats the value (it may be a key).
fn split(entry: &str, setting: &str) -> Result<(String, String)> {
    match entry.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() && !value.trim().is_empty() => {
            Ok((name.trim().to_owned(), value.trim().to_owned()))
        }
        _ => bail!("{setting}: each entry is NAME=VALUE"),
    }
}

/// The search engines, reached only where `policy` allows.
pub fn searches(settings: &Settings, policy: EgressPolicy) -> Result<SearchEngines> {
    let mut search = SearchSettings {
        searxng_url: settings.searxng_url.clone(),
        ..SearchSettings::default()
    };
    let each: [(&str, &Option<String>, &Option<Secret>); 3] = [
        ("brave", &settings.brave_base_url, &settings.brave_api_key),
        (
            "tavily",
            &settings.tavily_base_url,
            &settings.tavily_api_key,
        ),
        ("exa", &settings.exa_base_url, &settings.exa_api_key),
    ];
    for (name, base_url, key) in each {
        if let Some(url) = base_url {
            search.base_urls.insert(name.to_owned(), url.clone());
        }
        if let Some(key) = key {
            search
                .api_keys
                .insert(name.to_owned(), Zeroizing::new(key.expose().to_owned()));
        }
    }
    SearchEngines::new(policy, search, SEARCH_TIMEOUT).map_err(anyhow::Error::msg)
}

/// A search's time limit.
const SEARCH_TIMEOUT: Duration = Duration::from_secs(20);

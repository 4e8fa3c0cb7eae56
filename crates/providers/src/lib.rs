//! Language-model providers: the implementation of the model seam
//! ([`toolgate_ports::ai::Models`]). Three hand-written wire formats ([`formats`]) cover every
//! provider of [`catalog`] and any OpenAI-compatible endpoint the operator adds; requests go
//! through the egress-guarded client of `toolgate-fetch` (no redirects), are retried on 429 and
//! 5xx within the call's time limit, and stream their text when the caller wants it.

mod catalog;
mod formats;
mod retry;
mod search;
mod sse;

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;
use toolgate_egress::EgressPolicy;
use toolgate_ports::ai::{ModelAnswer, ModelError, ModelRequest, Models, ProviderInfo};
use toolgate_vault::Zeroizing;

pub use catalog::{BUILTIN, setting_prefix};
pub use formats::Format;
pub use search::{SEARCH_ENGINES, SearchEngines, SearchSettings};

/// A whole answer read at most, in bytes.
pub const MAX_ANSWER_BYTES: usize = 8 << 20;
/// The longest provider error passed on, in characters.
const MAX_ERROR_CHARS: usize = 1000;

/// One provider as this server reaches it.
#[derive(Clone)]
pub struct Provider {
    pub format: Format,
    pub base_url: String,
    /// the vault secret a caller's key is looked for under
    pub key_secret: String,
    /// the operator's own key
    pub operator_key: Option<Zeroizing<String>>,
    pub keyless: bool,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("format", &self.format)
            .field("base_url", &self.base_url)
            .field("operator_key", &self.operator_key.is_some())
            .finish_non_exhaustive()
    }
}

/// The operator's settings for providers.
#[derive(Debug, Default, Clone)]
pub struct ProviderSettings {
    /// `<name>_base_url`, by provider name
    pub base_urls: BTreeMap<String, String>,
    /// `<name>_api_key`, by provider name
    pub api_keys: BTreeMap<String, Zeroizing<String>>,
    /// OpenAI-compatible endpoints by name: base URL and an optional key
    pub compatible: Vec<(String, String, Option<Zeroizing<String>>)>,
    /// A whole call's time limit, retries included [default: 120 s]
    pub timeout: Option<Duration>,
}

/// Calls models of every known provider.
pub struct ModelClients {
    http: reqwest::Client,
    /// also checked on each URL: an address written in it is never resolved, so never meets
    /// the guarded resolver
    policy: EgressPolicy,
    providers: BTreeMap<String, Provider>,
    timeout: Duration,
}

impl std::fmt::Debug for ModelClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelClients")
            .field("providers", &self.providers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl ModelClients {
    /// The built-in providers as `settings` place them, and the operator's own endpoints,
    /// reached only where `policy` allows.
    pub fn new(policy: EgressPolicy, settings: ProviderSettings) -> Result<Self, String> {
        let timeout = settings.timeout.unwrap_or(Duration::from_secs(120));
        // the base URLs the operator set are reachable at exactly their host and port, also
        // on loopback or a private network (a local model server), without opening those
        // ranges to anything else
        let configured = settings
            .base_urls
            .values()
            .chain(settings.compatible.iter().map(|(_, url, _)| url))
            .map(String::as_str);
        let policy = policy.with_endpoints(configured)?;
        let http = toolgate_fetch::api_client(policy.clone(), timeout)?;
        let mut providers = BTreeMap::new();
        for builtin in BUILTIN {
            let prefix = setting_prefix(builtin.name);
            providers.insert(
                builtin.name.to_owned(),
                Provider {
                    format: builtin.format,
                    base_url: settings
                        .base_urls
                        .get(prefix)
                        .cloned()
                        .unwrap_or_else(|| builtin.base_url.to_owned()),
                    key_secret: builtin.key_secret.to_owned(),
                    operator_key: settings.api_keys.get(prefix).cloned(),
                    keyless: builtin.keyless,
                },
            );
        }
        for (name, base_url, key) in settings.compatible {
            if providers.contains_key(&name) {
                return Err(format!(
                    "the endpoint {name:?} has the name of a built-in provider"
                ));
            }
            let key_secret = format!("{}_API_KEY", name.to_ascii_uppercase().replace('-', "_"));
            providers.insert(
                name,
                Provider {
                    format: Format::OpenAi,
                    base_url,
                    key_secret,
                    keyless: key.is_none(),
                    operator_key: key,
                },
            );
        }
        Ok(Self {
            http,
            policy,
            providers,
            timeout,
        })
    }

    async fn call(
        &self,
        provider: &Provider,
        request: &ModelRequest,
        tokens: Option<mpsc::Sender<String>>,
    ) -> Result<ModelAnswer, ModelError> {
        let key = request
            .api_key
            .as_ref()
            .or(provider.operator_key.as_ref())
            .map(|k| k.as_str());
        if key.is_none() && !provider.keyless {
            return Err(ModelError::Refused(format!(
                "no key for {}: store yours as the secret {} (or name one with api_key_secret)",
                request.provider, provider.key_secret
            )));
        }
        let scrub = |text: String| match key {
            Some(key) if !key.is_empty() => text.replace(key, "[REDACTED]"),
            _ => text,
        };
        let prepared = provider
            .format
            .prepare(&provider.base_url, key, request, tokens.is_some());
        let deadline = Instant::now() + self.timeout;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let response = self.send(&prepared, deadline).await.map_err(|e| {
                ModelError::Failed(scrub(format!(
                    "{} could not be reached: {e}",
                    request.provider
                )))
            })?;
            let status = response.status().as_u16();
            if (200..300).contains(&status) {
                let answer = match tokens {
                    Some(tokens) => streamed(provider.format, response, deadline, &tokens).await,
                    None => whole(provider.format, response, deadline).await,
                }
                .map_err(|e| ModelError::Failed(scrub(format!("{}: {e}", request.provider))))?;
                return Ok(ModelAnswer {
                    text: answer.text,
                    model: if answer.model.is_empty() {
                        request.model.clone()
                    } else {
                        answer.model
                    },
                    finish_reason: answer.finish_reason,
                    usage: answer.usage,
                    attempts,
                });
            }
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let message = error_text(provider.format, response, deadline).await;
            let wait = retry::wait(attempts, retry_after.as_deref());
            if retry::retryable(status)
                && attempts < retry::MAX_ATTEMPTS
                && Instant::now() + wait < deadline
            {
                tracing::debug!(provider = %request.provider, status, attempts, "retrying a model call");
                tokio::time::sleep(wait).await;
                continue;
            }
            return Err(ModelError::Rejected(scrub(format!(
                "{} answered {status}: {message}",
                request.provider
            ))));
        }
    }

    async fn send(
        &self,
        prepared: &formats::Prepared,
        deadline: Instant,
    ) -> Result<reqwest::Response, String> {
        let url = reqwest::Url::parse(&prepared.url).map_err(|e| format!("not a URL: {e}"))?;
        self.policy.check_url(&url).map_err(|r| r.to_string())?;
        let mut builder = self.http.post(url).json(&prepared.body);
        for (name, value) in &prepared.headers {
            builder = builder.header(*name, value);
        }
        match tokio::time::timeout_at(deadline, builder.send()).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err(toolgate_fetch::describe_error(e)),
            Err(_) => Err("no answer within the time limit".to_owned()),
        }
    }
}

/// A whole answer, read within the cap and the deadline.
async fn whole(
    format: Format,
    response: reqwest::Response,
    deadline: Instant,
) -> Result<formats::Answer, String> {
    let body = bounded_body(response, deadline).await?;
    let value: Value =
        serde_json::from_slice(&body).map_err(|_| "the answer is not JSON".to_owned())?;
    format.parse(&value)
}

/// A streamed answer, each piece of text passed on as it comes.
async fn streamed(
    format: Format,
    response: reqwest::Response,
    deadline: Instant,
    tokens: &mpsc::Sender<String>,
) -> Result<formats::Answer, String> {
    let mut answer = formats::Answer::default();
    let mut reader = sse::Reader::default();
    let mut body = response.bytes_stream();
    let mut read = 0usize;
    loop {
        let piece = match tokio::time::timeout_at(deadline, body.next()).await {
            Err(_) => return Err("the answer did not finish within the time limit".to_owned()),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(format!("the stream broke: {e}")),
            Ok(Some(Ok(piece))) => piece,
        };
        read += piece.len();
        if read > MAX_ANSWER_BYTES {
            return Err(format!(
                "the answer is longer than {MAX_ANSWER_BYTES} bytes"
            ));
        }
        for event in reader.feed(&piece)? {
            let text = format.on_event(&event, &mut answer)?;
            if !text.is_empty() {
                // never waited for: a caller that does not keep up loses pieces, not time
                let _ = tokens.try_send(text);
            }
        }
    }
    if !answer.done {
        return Err(format!(
            "the stream ended before the answer was complete ({} characters came)",
            answer.text.chars().count()
        ));
    }
    Ok(answer)
}

async fn bounded_body(response: reqwest::Response, deadline: Instant) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => return Err("the answer did not finish within the time limit".to_owned()),
            Ok(None) => return Ok(body),
            Ok(Some(Err(e))) => return Err(format!("the answer broke off: {e}")),
            Ok(Some(Ok(piece))) => {
                if body.len() + piece.len() > MAX_ANSWER_BYTES {
                    return Err(format!(
                        "the answer is longer than {MAX_ANSWER_BYTES} bytes"
                    ));
                }
                body.extend_from_slice(&piece);
            }
        }
    }
}

/// The provider's own words for an error status, else the start of its body.
async fn error_text(format: Format, response: reqwest::Response, deadline: Instant) -> String {
    let body = bounded_body(response, deadline).await.unwrap_or_default();
    let text = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| format.error_message(&v))
        .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
    let text: String = text.chars().take(MAX_ERROR_CHARS).collect();
    if text.trim().is_empty() {
        "(no message)".to_owned()
    } else {
        text
    }
}

#[async_trait]
impl Models for ModelClients {
    fn provider(&self, provider: &str) -> Option<ProviderInfo> {
        self.providers.get(provider).map(|p| ProviderInfo {
            key_secret: p.key_secret.clone(),
            operator_key: p.operator_key.is_some(),
            keyless: p.keyless,
        })
    }

    fn providers(&self) -> Vec<String> {
        self.providers.keys().cloned().collect()
    }

    async fn complete(
        &self,
        request: ModelRequest,
        tokens: Option<mpsc::Sender<String>>,
    ) -> Result<ModelAnswer, ModelError> {
        let provider = self.providers.get(&request.provider).ok_or_else(|| {
            ModelError::Refused(format!(
                "unknown provider {:?}: known are {}",
                request.provider,
                self.providers().join(", ")
            ))
        })?;
        self.call(provider, &request, tokens).await
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
#[path = "hostile_tests.rs"]
mod hostile_tests;

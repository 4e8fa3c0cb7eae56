//! The service's HTTP client for tenants' requests: reqwest behind the egress guard. Every
//! address a name resolves to is checked before a connection is made (so DNS rebinding and a
//! name pointing at 127.0.0.1 gain nothing), every redirect's URL is checked again, proxies from
//! the environment are ignored, and time and size are bounded. Bodies are rendered for a
//! language model to read: HTML as Markdown, JSON pretty-printed, images as images.

mod html;
mod render;
mod resolve;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use reqwest::StatusCode;
use reqwest::header::{
    CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, LOCATION,
};
use reqwest::redirect;
use tokio::time::Instant;
use toolgate_egress::EgressPolicy;
use toolgate_ports::fetch::{
    FetchError, FetchRequest, FetchedPage, Fetcher, MAX_ANSWER_HEADER_CHARS, MAX_ANSWER_HEADERS,
};
use url::Url;

/// Makes ring the process's TLS crypto provider, which every reqwest client of this build needs
/// before it is built (reqwest is built without a provider of its own, so as not to compile a
/// second one); a second call changes nothing.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A client for providers' APIs (models, search): the same guard on every address, no proxy
/// from the environment, no redirects, and `timeout` for the whole of each request.
pub fn api_client(policy: EgressPolicy, timeout: Duration) -> Result<reqwest::Client, String> {
    install_tls_provider();
    reqwest::Client::builder()
        .no_proxy()
        .dns_resolver(Arc::new(resolve::GuardedResolver::new(Arc::new(policy))))
        .redirect(redirect::Policy::none())
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .timeout(timeout)
        .user_agent(concat!("toolgate/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// Why a request failed, in words safe to show (the egress guard's refusal when it was that;
/// never the URL).
pub fn describe_error(err: reqwest::Error) -> String {
    match failed(err) {
        FetchError::Refused(message) | FetchError::Failed(message) => message,
    }
}

/// The longest Content-Type passed on, in characters.
const MAX_CONTENT_TYPE: usize = 256;

/// Redirects followed at most.
pub const MAX_REDIRECTS: usize = 5;

/// The client and its limits.
pub struct FetchClient {
    client: reqwest::Client,
    policy: Arc<EgressPolicy>,
    /// The most a request may take, redirects included.
    timeout: Duration,
}

impl std::fmt::Debug for FetchClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FetchClient").finish_non_exhaustive()
    }
}

impl FetchClient {
    /// A client that connects only where `policy` allows, giving up after `timeout`.
    pub fn new(policy: EgressPolicy, timeout: Duration) -> Result<Self, String> {
        install_tls_provider();
        let policy = Arc::new(policy);
        // redirects are followed here, hop by hop, not by reqwest: what the caller set must
        // not follow a redirect to another origin (reqwest keeps custom headers such as
        // X-Api-Key, sends the first URL with its query as Referer, and resends a 307's body)
        let client = reqwest::Client::builder()
            .no_proxy()
            .dns_resolver(Arc::new(resolve::GuardedResolver::new(policy.clone())))
            .redirect(redirect::Policy::none())
            .referer(false)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .timeout(timeout)
            .user_agent(concat!("toolgate/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Self {
            client,
            policy,
            timeout,
        })
    }

    async fn fetch(&self, request: FetchRequest) -> Result<FetchedPage, FetchError> {
        let deadline = Instant::now() + self.timeout;
        let mut url =
            Url::parse(&request.url).map_err(|e| FetchError::Refused(format!("not a URL: {e}")))?;
        self.policy
            .check_url(&url)
            .map_err(|r| FetchError::Refused(r.to_string()))?;
        let origin = url.origin();
        let mut headers = header_map(&request.headers)?;
        let mut method = reqwest::Method::from_bytes(request.method.as_str().as_bytes())
            .map_err(|_| FetchError::Refused("unknown method".to_owned()))?;
        let mut body = request.body;
        let mut hops = 0;
        let response = loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(FetchError::Failed("the request timed out".to_owned()));
            }
            let mut builder = self
                .client
                .request(method.clone(), url.clone())
                .headers(headers.clone())
                .timeout(remaining);
            if let Some(body) = &body {
                builder = builder.body(body.clone());
            }
            let response = builder.send().await.map_err(failed)?;
            let Some(next) = redirect_target(&response, &url)? else {
                break response;
            };
            hops += 1;
            if hops > MAX_REDIRECTS {
                return Err(FetchError::Refused(format!(
                    "redirect refused: more than {MAX_REDIRECTS} redirects"
                )));
            }
            self.policy
                .check_url(&next)
                .map_err(|r| FetchError::Refused(format!("redirect refused: {r}")))?;
            let keeps_body = matches!(
                response.status(),
                StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT
            );
            if !keeps_body {
                // 301, 302 and 303 continue as a GET without the body, as browsers do
                if method != reqwest::Method::HEAD {
                    method = reqwest::Method::GET;
                }
                body = None;
                for header in [CONTENT_TYPE, CONTENT_LENGTH, CONTENT_ENCODING] {
                    headers.remove(header);
                }
            }
            if next.origin() != origin {
                if body.is_some() && request.body_holds_secret {
                    return Err(FetchError::Refused(format!(
                        "redirect refused: the answer ({}) sends the request to another \
                         origin, and its body holds a secret, which is not sent there",
                        response.status()
                    )));
                }
                headers.clear();
            }
            url = next;
        };
        let status = response.status().as_u16();
        let final_url = response.url().to_string();
        // the site chooses this header: only a type's worth of it is passed on
        let content_type: String = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .chars()
            .take(MAX_CONTENT_TYPE)
            .collect();
        let answer_headers = answer_headers(response.headers());
        let (body, truncated) = read_bounded(response, request.max_bytes).await?;
        let bytes = body.len();
        // Markdown of megabytes of HTML takes a while: not on the threads that serve requests
        let kind = content_type.clone();
        let content = tokio::task::spawn_blocking(move || render::render(&kind, &body))
            .await
            .map_err(|_| FetchError::Failed("the page could not be rendered".to_owned()))?;
        Ok(FetchedPage {
            status,
            final_url,
            bytes,
            truncated,
            content,
            content_type,
            headers: answer_headers,
        })
    }
}

/// The answer's headers as the caller gets them: bounded in number and length, text only.
fn answer_headers(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter_map(|(name, value)| {
            let value = value.to_str().ok()?;
            Some((
                name.as_str().to_owned(),
                value.chars().take(MAX_ANSWER_HEADER_CHARS).collect(),
            ))
        })
        .take(MAX_ANSWER_HEADERS)
        .collect()
}

/// Where a redirect answer sends the request next, if it is one to follow.
fn redirect_target(response: &reqwest::Response, current: &Url) -> Result<Option<Url>, FetchError> {
    let followed = matches!(
        response.status(),
        StatusCode::MOVED_PERMANENTLY
            | StatusCode::FOUND
            | StatusCode::SEE_OTHER
            | StatusCode::TEMPORARY_REDIRECT
            | StatusCode::PERMANENT_REDIRECT
    );
    let Some(location) = response.headers().get(LOCATION).filter(|_| followed) else {
        return Ok(None);
    };
    let location = location
        .to_str()
        .map_err(|_| FetchError::Failed("a redirect's Location is not text".to_owned()))?;
    current
        .join(location)
        .map(Some)
        .map_err(|e| FetchError::Failed(format!("a redirect's Location is not a URL: {e}")))
}

#[async_trait]
impl Fetcher for FetchClient {
    async fn send(&self, request: FetchRequest) -> Result<FetchedPage, FetchError> {
        self.fetch(request).await
    }
}

fn header_map(headers: &[(String, String)]) -> Result<HeaderMap, FetchError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| FetchError::Refused(format!("{name:?} is not a header name")))?;
        // the value may hold a secret: the message names only the header
        let value = HeaderValue::from_str(value)
            .map_err(|_| FetchError::Refused(format!("the value of header {name} is not valid")))?;
        map.append(name, value);
    }
    Ok(map)
}

/// Reads at most `max` bytes of the body; `true` when there was more.
async fn read_bounded(
    response: reqwest::Response,
    max: usize,
) -> Result<(Vec<u8>, bool), FetchError> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(failed)?;
        let room = max - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

/// A failed request, said plainly: the refusal of the guard when that is what stopped it.
fn failed(err: reqwest::Error) -> FetchError {
    let mut source: Option<&dyn std::error::Error> = Some(&err);
    while let Some(current) = source {
        if let Some(refusal) = current.downcast_ref::<toolgate_egress::Refusal>() {
            return FetchError::Refused(refusal.to_string());
        }
        source = current.source();
    }
    if err.is_timeout() {
        return FetchError::Failed("the request timed out".to_owned());
    }
    if err.is_redirect() {
        return FetchError::Refused(format!("redirect refused: {}", chain(err)));
    }
    FetchError::Failed(format!("the request failed: {}", chain(err)))
}

/// The error and its causes, without the URL (which may hold a secret; the caller shows it).
fn chain(err: reqwest::Error) -> String {
    let err = err.without_url();
    let mut parts = vec![err.to_string()];
    let mut source = std::error::Error::source(&err);
    while let Some(current) = source {
        parts.push(current.to_string());
        source = current.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod redirect_tests;
#[cfg(test)]
mod tests;

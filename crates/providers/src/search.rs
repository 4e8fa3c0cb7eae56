//! Web search through SearXNG (the operator's instance), Brave, Tavily or Exa: each engine's
//! request and the parse of its answer into title, URL, snippet and date. A caller's key for
//! Brave, Tavily or Exa (from the vault) chooses that engine; else the operator's SearXNG, else
//! the first engine the operator has a key for.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolgate_egress::EgressPolicy;
use toolgate_ports::ai::{
    Freshness, ModelError, SearchAnswer, SearchQuery, SearchResult, Searches,
};
use toolgate_vault::Zeroizing;

/// The longest snippet kept, in characters.
const MAX_SNIPPET: usize = 500;
/// A search engine's answer read at most, in bytes.
const MAX_SEARCH_BYTES: usize = 2 << 20;

/// The engines a key chooses (name, default endpoint, secret name): the one list of engines,
/// which also drives the binary's `<engine>_base_url` and `<engine>_api_key` settings.
pub const SEARCH_ENGINES: [(&str, &str, &str); 3] = [
    (
        "brave",
        "https://api.search.brave.com/res/v1",
        "BRAVE_API_KEY",
    ),
    ("tavily", "https://api.tavily.com", "TAVILY_API_KEY"),
    ("exa", "https://api.exa.ai", "EXA_API_KEY"),
];

/// The operator's search settings.
#[derive(Debug, Default, Clone)]
pub struct SearchSettings {
    /// `searxng_url`: the base URL of a SearXNG instance
    pub searxng_url: Option<String>,
    /// `<engine>_base_url`, by engine
    pub base_urls: BTreeMap<String, String>,
    /// `<engine>_api_key`, by engine: the operator's keys
    pub api_keys: BTreeMap<String, Zeroizing<String>>,
}

/// Searches the web.
pub struct SearchEngines {
    http: reqwest::Client,
    policy: EgressPolicy,
    settings: SearchSettings,
}

impl std::fmt::Debug for SearchEngines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchEngines")
            .field("searxng", &self.settings.searxng_url.is_some())
            .finish_non_exhaustive()
    }
}

impl SearchEngines {
    /// The engines of `settings`, reached only where `policy` allows, each search within
    /// `timeout`.
    pub fn new(
        policy: EgressPolicy,
        settings: SearchSettings,
        timeout: Duration,
    ) -> Result<Self, String> {
        // the operator's SearXNG and base URLs are reachable at exactly their host and port
        let configured = settings
            .searxng_url
            .iter()
            .chain(settings.base_urls.values())
            .map(String::as_str);
        let policy = policy.with_endpoints(configured)?;
        Ok(Self {
            http: toolgate_fetch::api_client(policy.clone(), timeout)?,
            policy,
            settings,
        })
    }

    fn base(&self, engine: &str) -> String {
        self.settings
            .base_urls
            .get(engine)
            .cloned()
            .unwrap_or_else(|| {
                SEARCH_ENGINES
                    .iter()
                    .find(|(name, _, _)| *name == engine)
                    .map(|(_, url, _)| (*url).to_owned())
                    .unwrap_or_default()
            })
    }

    /// The engine and key to use: the caller's, else the operator's.
    fn choose(
        &self,
        query: &SearchQuery,
    ) -> Result<(String, Option<Zeroizing<String>>), ModelError> {
        if let Some((engine, key)) = &query.engine {
            return Ok((engine.clone(), Some(key.clone())));
        }
        if self.settings.searxng_url.is_some() {
            return Ok(("searxng".to_owned(), None));
        }
        for (engine, _, _) in SEARCH_ENGINES {
            if let Some(key) = self.settings.api_keys.get(engine) {
                return Ok((engine.to_owned(), Some(key.clone())));
            }
        }
        Err(ModelError::Refused(
            "no search engine: store a key as BRAVE_API_KEY, TAVILY_API_KEY or EXA_API_KEY"
                .to_owned(),
        ))
    }

    async fn send(&self, request: reqwest::RequestBuilder, engine: &str) -> Result<Value, String> {
        let request = request.build().map_err(toolgate_fetch::describe_error)?;
        self.policy
            .check_url(request.url())
            .map_err(|r| r.to_string())?;
        let mut response = self
            .http
            .execute(request)
            .await
            .map_err(toolgate_fetch::describe_error)?;
        let status = response.status().as_u16();
        let mut body = Vec::new();
        while let Some(piece) = response
            .chunk()
            .await
            .map_err(toolgate_fetch::describe_error)?
        {
            if body.len() + piece.len() > MAX_SEARCH_BYTES {
                return Err(format!(
                    "the answer is longer than {MAX_SEARCH_BYTES} bytes"
                ));
            }
            body.extend_from_slice(&piece);
        }
        let value: Option<Value> = serde_json::from_slice(&body).ok();
        if !(200..300).contains(&status) {
            let message = value
                .as_ref()
                .and_then(|v| {
                    v.pointer("/error/message")
                        .or_else(|| v.get("error"))
                        .or_else(|| v.get("detail"))
                        .or_else(|| v.get("message"))
                })
                .map(|m| m.as_str().map_or_else(|| m.to_string(), str::to_owned))
                .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned())
                .chars()
                .take(300)
                .collect::<String>();
            return Err(format!("{engine} answered {status}: {message}"));
        }
        value.ok_or_else(|| format!("{engine}'s answer is not JSON"))
    }

    fn request(
        &self,
        engine: &str,
        key: Option<&str>,
        query: &SearchQuery,
    ) -> Result<reqwest::RequestBuilder, String> {
        let n = query.max_results;
        let q = query.query.as_str();
        let base = |engine| self.base(engine).trim_end_matches('/').to_owned();
        Ok(match engine {
            "searxng" => {
                let url = self.settings.searxng_url.clone().unwrap_or_default();
                let mut params = vec![("q", q.to_owned()), ("format", "json".to_owned())];
                if let Some(f) = query.freshness {
                    params.push(("time_range", word(f).to_owned()));
                }
                self.http.get(with_params(
                    &format!("{}/search", url.trim_end_matches('/')),
                    &params,
                )?)
            }
            "brave" => {
                let mut params = vec![("q", q.to_owned()), ("count", n.to_string())];
                if let Some(f) = query.freshness {
                    let code = match f {
                        Freshness::Day => "pd",
                        Freshness::Week => "pw",
                        Freshness::Month => "pm",
                        Freshness::Year => "py",
                    };
                    params.push(("freshness", code.to_owned()));
                }
                self.http
                    .get(with_params(
                        &format!("{}/web/search", base("brave")),
                        &params,
                    )?)
                    .header("accept", "application/json")
                    .header("x-subscription-token", key.unwrap_or_default())
            }
            "tavily" => {
                let mut body = json!({"query": q, "max_results": n});
                if let Some(f) = query.freshness {
                    body["time_range"] = json!(word(f));
                }
                self.http
                    .post(format!("{}/search", base("tavily")))
                    .bearer_auth(key.unwrap_or_default())
                    .json(&body)
            }
            "exa" => self
                .http
                .post(format!("{}/search", base("exa")))
                .header("x-api-key", key.unwrap_or_default())
                .json(&json!({"query": q, "numResults": n, "contents": {"highlights": true}})),
            other => return Err(format!("unknown search engine {other:?}")),
        })
    }
}

/// `url` with `params` as its query, each escaped.
fn with_params(url: &str, params: &[(&str, String)]) -> Result<reqwest::Url, String> {
    reqwest::Url::parse_with_params(url, params).map_err(|e| format!("not a URL: {e}"))
}

fn word(f: Freshness) -> &'static str {
    match f {
        Freshness::Day => "day",
        Freshness::Week => "week",
        Freshness::Month => "month",
        Freshness::Year => "year",
    }
}

/// The engine's results in one shape.
pub fn parse(engine: &str, body: &Value) -> Vec<SearchResult> {
    let (list, snippet, date): (&str, &[&str], &[&str]) = match engine {
        "brave" => ("/web/results", &["description"], &["age", "page_age"]),
        "tavily" => ("/results", &["content"], &["published_date"]),
        "exa" => (
            "/results",
            &["highlights", "text", "summary"],
            &["publishedDate"],
        ),
        _ => ("/results", &["content"], &["publishedDate"]),
    };
    let text = |item: &Value, keys: &[&str]| {
        keys.iter().find_map(|k| match item.get(*k) {
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(Value::Array(a)) => a.first().and_then(Value::as_str).map(str::to_owned),
            _ => None,
        })
    };
    body.pointer(list)
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|item| {
                    let url = item.get("url")?.as_str()?.to_owned();
                    let mut snippet = text(item, snippet).unwrap_or_default();
                    if engine == "brave" {
                        // Brave marks the query's words up: <strong>word</strong>
                        snippet = plain(&snippet);
                    }
                    Some(SearchResult {
                        title: text(item, &["title"]).unwrap_or_else(|| url.clone()),
                        snippet: snippet.chars().take(MAX_SNIPPET).collect(),
                        date: text(item, date),
                        url,
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `text` without its inline tags (`<strong>`, `</b>`, …) and with the common entities read.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('<') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        // A tag is `<`, any `/`, letters or digits, `>`. Only that far is read from each `<`
        // (not on to the next `>`, which made a snippet of many `<` quadratic: 2 MiB of them
        // held a thread for hours).
        let name_start = after.len() - after.trim_start_matches('/').len();
        let name_len = after[name_start..]
            .bytes()
            .take_while(u8::is_ascii_alphanumeric)
            .count();
        let end = name_start + name_len;
        if name_len > 0 && after.as_bytes().get(end) == Some(&b'>') {
            rest = &after[end + 1..];
        } else {
            out.push('<');
            rest = after;
        }
    }
    out.push_str(rest);
    out.replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

#[async_trait]
impl Searches for SearchEngines {
    fn key_secrets(&self) -> Vec<(String, String)> {
        SEARCH_ENGINES
            .iter()
            .map(|(engine, _, secret)| ((*engine).to_owned(), (*secret).to_owned()))
            .collect()
    }

    async fn search(&self, query: SearchQuery) -> Result<SearchAnswer, ModelError> {
        let (engine, key) = self.choose(&query)?;
        let scrub = |text: String| match &key {
            Some(key) if !key.is_empty() => text.replace(key.as_str(), "[REDACTED]"),
            _ => text,
        };
        let request = self
            .request(&engine, key.as_deref().map(String::as_str), &query)
            .map_err(ModelError::Refused)?;
        let body = self
            .send(request, &engine)
            .await
            .map_err(|e| ModelError::Failed(scrub(format!("search: {e}"))))?;
        let mut results = parse(&engine, &body);
        results.truncate(query.max_results as usize);
        Ok(SearchAnswer { engine, results })
    }
}

#[cfg(test)]
#[path = "search_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "search_hostile_tests.rs"]
mod hostile_tests;

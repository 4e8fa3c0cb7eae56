//! The authorization server against the real SQLite store, with a clock the tests move and a
//! fake Fetcher serving canned client metadata documents.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod authorize;
mod bearer;
mod clients;
mod discovery;
mod hostile;
mod register;
mod token;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use tempfile::TempDir;
use toolgate_domain::{Account, AccountId, ApiKey, Brand, Email};
use toolgate_ports::fetch::{FetchError, FetchRequest, FetchedPage, Fetcher, PageContent};
use toolgate_store::{Accounts, NewAccount, now_millis};
use toolgate_store_sqlite::{Durability, SqliteStore};

use super::AuthServer;
use toolgate_oauth::{AuthorizeParams, TokenAnswer};

/// The public URL the server is built with (its trailing slash is dropped).
pub(crate) const PUBLIC_URL: &str = "https://tg.example/";
/// The issuer that follows from it.
pub(crate) const ISSUER: &str = "https://tg.example";
/// The resource tokens are for.
pub(crate) const RESOURCE: &str = "https://tg.example/mcp";
/// The address registrations come from.
pub(crate) const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// A registered client's redirect URI.
pub(crate) const REDIRECT: &str = "https://app.example/cb";
/// The verifier of most tests, and a second one.
pub(crate) const VERIFIER: &str = "verifier-0123456789-abcdefghijklmnopqrstuvwxyz";
pub(crate) const OTHER_VERIFIER: &str = "verifier-9876543210-abcdefghijklmnopqrstuvwxyz";

/// One canned answer of the fake Fetcher.
#[derive(Clone)]
pub(crate) struct Canned {
    pub status: u16,
    /// Where the fetch ended after redirects (`None`: the URL asked for).
    pub final_url: Option<String>,
    pub content_type: &'static str,
    pub body: String,
}

impl Canned {
    /// A 200 JSON answer.
    pub fn json(body: String) -> Self {
        Self {
            status: 200,
            final_url: None,
            content_type: "application/json",
            body,
        }
    }
}

/// A Fetcher that serves canned pages and counts requests; unknown URLs fail.
#[derive(Default)]
pub(crate) struct FakeFetcher {
    pages: Mutex<HashMap<String, Canned>>,
    pub calls: AtomicUsize,
}

impl FakeFetcher {
    pub fn serve(&self, url: &str, answer: Canned) {
        self.pages.lock().unwrap().insert(url.to_owned(), answer);
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Fetcher for FakeFetcher {
    async fn send(&self, request: FetchRequest) -> Result<FetchedPage, FetchError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let Some(canned) = self.pages.lock().unwrap().get(&request.url).cloned() else {
            return Err(FetchError::Failed("connection refused".to_owned()));
        };
        // as the real client does: read at most max_bytes, say whether there was more
        let truncated = canned.body.len() > request.max_bytes;
        let body = &canned.body.as_bytes()[..canned.body.len().min(request.max_bytes)];
        let content = match canned.content_type {
            "application/octet-stream" => PageContent::Binary {
                summary: "binary".to_owned(),
            },
            "application/json" => match serde_json::from_slice::<serde_json::Value>(body) {
                Ok(value) => PageContent::Text {
                    text: serde_json::to_string_pretty(&value).unwrap(),
                    format: "json",
                },
                Err(_) => PageContent::Binary {
                    summary: "binary".to_owned(),
                },
            },
            _ => PageContent::Text {
                text: String::from_utf8_lossy(body).into_owned(),
                format: "text",
            },
        };
        Ok(FetchedPage {
            status: canned.status,
            final_url: canned.final_url.unwrap_or(request.url),
            content_type: canned.content_type.to_owned(),
            bytes: body.len(),
            truncated,
            content,
            headers: Vec::new(),
        })
    }
}

/// A server over a fresh SQLite file, with one account and a movable clock.
pub(crate) struct Harness {
    pub server: AuthServer,
    pub store: Arc<SqliteStore>,
    pub fetcher: Arc<FakeFetcher>,
    pub account: Account,
    offset: Arc<AtomicI64>,
    _dir: TempDir,
}

impl Harness {
    /// With the fake Fetcher.
    pub async fn new() -> Self {
        Self::build(true).await
    }

    /// Without a Fetcher: metadata documents cannot be fetched.
    pub async fn without_web() -> Self {
        Self::build(false).await
    }

    async fn build(with_fetcher: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(
            SqliteStore::open(&dir.path().join("db"), Durability::Normal)
                .await
                .unwrap(),
        );
        let account = create_account(&store, "owner@example.com").await;
        let fetcher = Arc::new(FakeFetcher::default());
        let offset = Arc::new(AtomicI64::new(0));
        let clock_offset = offset.clone();
        let seam: Option<Arc<dyn Fetcher>> =
            with_fetcher.then(|| fetcher.clone() as Arc<dyn Fetcher>);
        let server =
            AuthServer::new(store.clone(), seam, PUBLIC_URL).with_clock(Arc::new(move || {
                now_millis() + clock_offset.load(Ordering::SeqCst)
            }));
        Self {
            server,
            store,
            fetcher,
            account,
            offset,
            _dir: dir,
        }
    }

    /// Moves the server's clock forward.
    pub fn advance(&self, span: Duration) {
        let millis = i64::try_from(span.as_millis()).unwrap();
        self.offset.fetch_add(millis, Ordering::SeqCst);
    }

    /// Registers a client with these redirect URIs; its id.
    pub async fn register(&self, uris: &[&str]) -> String {
        let body = serde_json::json!({ "client_name": "Test App", "redirect_uris": uris });
        let answer = self
            .server
            .register(CLIENT, body.to_string().as_bytes())
            .await
            .unwrap();
        answer["client_id"].as_str().unwrap().to_owned()
    }

    /// Authorizes and approves `client_id` for the harness's account; the code.
    pub async fn code(&self, client_id: &str, scope: Option<&str>, verifier: &str) -> String {
        self.code_for(&self.account.id, client_id, scope, verifier)
            .await
    }

    /// As [`Harness::code`], for another account.
    pub async fn code_for(
        &self,
        account: &AccountId,
        client_id: &str,
        scope: Option<&str>,
        verifier: &str,
    ) -> String {
        let mut params = params(client_id, verifier);
        params.scope = scope.map(str::to_owned);
        let request = self.server.authorize(&params, Some(account)).await.unwrap();
        let url = self.server.approve(account, &request).await.unwrap();
        query(&url)["code"].clone()
    }

    /// Exchanges `code` as `client_id` would.
    pub async fn exchange(
        &self,
        client_id: &str,
        code: &str,
        verifier: &str,
    ) -> Result<TokenAnswer, toolgate_oauth::OAuthError> {
        self.server
            .token(&form(&[
                ("grant_type", "authorization_code"),
                ("code", code),
                ("redirect_uri", REDIRECT),
                ("client_id", client_id),
                ("code_verifier", verifier),
                ("resource", RESOURCE),
            ]))
            .await
    }

    /// A registered client and a token pair for the harness's account.
    pub async fn tokens(&self, scope: Option<&str>) -> (String, TokenAnswer) {
        let client_id = self.register(&[REDIRECT]).await;
        let code = self.code(&client_id, scope, VERIFIER).await;
        let answer = self.exchange(&client_id, &code, VERIFIER).await.unwrap();
        (client_id, answer)
    }

    /// Uses a refresh token as `client_id` would.
    pub async fn refresh(
        &self,
        client_id: &str,
        refresh_token: &str,
        scope: Option<&str>,
    ) -> Result<TokenAnswer, toolgate_oauth::OAuthError> {
        let mut pairs = vec![
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
            ("client_id", client_id),
        ];
        if let Some(scope) = scope {
            pairs.push(("scope", scope));
        }
        self.server.token(&form(&pairs)).await
    }
}

/// Creates an account in `store`.
pub(crate) async fn create_account(store: &SqliteStore, email: &str) -> Account {
    let key = ApiKey::generate(&Brand::parse("svc").unwrap()).unwrap();
    store
        .create_account(&NewAccount {
            id: AccountId::generate(),
            email: Email::parse(email).unwrap(),
            key_hash: key.hash(),
        })
        .await
        .unwrap()
}

/// The S256 challenge of `verifier`.
pub(crate) fn challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// A valid authorization request of `client_id` to [`REDIRECT`].
pub(crate) fn params(client_id: &str, verifier: &str) -> AuthorizeParams {
    AuthorizeParams {
        response_type: Some("code".to_owned()),
        client_id: Some(client_id.to_owned()),
        redirect_uri: Some(REDIRECT.to_owned()),
        state: Some("st-1".to_owned()),
        scope: None,
        code_challenge: Some(challenge(verifier)),
        code_challenge_method: Some("S256".to_owned()),
        resource: Some(RESOURCE.to_owned()),
    }
}

/// Form pairs as the HTTP layer decodes them.
pub(crate) fn form(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect()
}

/// The part of a redirect URL before its query.
pub(crate) fn base(url: &str) -> &str {
    url.split('?').next().unwrap()
}

/// The decoded query of a redirect URL.
pub(crate) fn query(url: &str) -> HashMap<String, String> {
    let (_, query) = url.split_once('?').unwrap();
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap();
            (decode(name), decode(value))
        })
        .collect()
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            out.push(u8::from_str_radix(&text[at + 1..at + 3], 16).unwrap());
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

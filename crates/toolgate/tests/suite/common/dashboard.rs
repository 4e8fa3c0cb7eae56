//! The owner's dashboard as a browser meets it, without a browser: a client that follows no
//! redirect and keeps no cookie (the tests read `Set-Cookie` and send `Cookie` themselves),
//! form posts, the sign-in mail in the outbox, and a few readers of the pages' HTML.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{Reply, Server, Storage, send};

/// The session cookie's name over plain http.
pub const COOKIE: &str = "toolgate_session";
/// The session cookie's name behind an https public URL.
pub const HOST_COOKIE: &str = "__Host-toolgate_session";

/// A client that follows no redirect and keeps no cookie.
pub fn browser() -> reqwest::Client {
    super::client_builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .expect("build the browser client")
}

/// A server of its own over a fresh SQLite file, with the sandbox off.
pub struct Dash {
    pub storage: Storage,
    pub server: Server,
    pub http: reqwest::Client,
    /// The public URL the server was given (`TOOLGATE_PUBLIC_URL`), else its own address.
    pub public: String,
    // last: the server is killed before its directory goes
    _dir: super::SandboxDir,
}

/// A dashboard signed in: the cookie pair to send and the session's anti-forgery value.
#[derive(Clone, Debug)]
pub struct SignInSession {
    /// `toolgate_session=<token>`.
    pub cookie: String,
    /// The token alone.
    pub token: String,
    /// The `csrf` value of the session's forms.
    pub csrf: String,
}

impl Dash {
    /// Starts `toolgate serve --sandbox off` with extra environment variables.
    pub async fn start(env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::sqlite(dir.path());
        Self::start_on(dir, storage, env).await
    }

    /// The same on `storage`, whose data directory is `dir`.
    pub async fn start_on(dir: tempfile::TempDir, storage: Storage, env: &[(&str, &str)]) -> Self {
        let server = Server::start_with_env(&storage, &["--sandbox", "off"], env).await;
        let public = env
            .iter()
            .find(|(name, _)| *name == "TOOLGATE_PUBLIC_URL")
            .map_or_else(|| server.base.clone(), |(_, url)| (*url).to_owned());
        Self {
            storage,
            server,
            http: browser(),
            public,
            _dir: dir.into(),
        }
    }

    /// Starts `toolgate serve` with the sandbox on (the sessions page lists real sessions).
    pub async fn start_sandboxed() -> Self {
        Self::start_sandboxed_with(&[]).await
    }

    /// The same, with extra flags.
    pub async fn start_sandboxed_with(extra: &[&str]) -> Self {
        let dir = super::sandbox_dir();
        let storage = Storage::sqlite(dir.path());
        let mut flags = super::sandbox_flags(dir.path());
        flags.extend(extra.iter().map(|s| (*s).to_owned()));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let server = Server::start(&storage, &flags).await;
        Self {
            storage,
            public: server.base.clone(),
            server,
            http: browser(),
            _dir: dir,
        }
    }

    /// The key of a signed-in owner, read from the overview's revealed URL.
    pub async fn key_of(&self, session: &SignInSession) -> String {
        let overview = self.page("/dashboard", session).await;
        let url = text_of_id(&overview, "personal-url-full").expect("the overview shows the URL");
        url.rsplit_once("/u/").expect("a personal URL").1.to_owned()
    }

    /// The dashboard's origin, as a browser sends it in `Origin`.
    pub fn origin(&self) -> String {
        self.public.trim_end_matches('/').to_owned()
    }

    /// `POST /magic-link` with the JSON `{"email": …}`.
    pub async fn ask_link(&self, email: &str) -> Reply {
        self.ask_link_raw("application/json", json!({ "email": email }).to_string())
            .await
    }

    /// `POST /magic-link` with any content type and body.
    pub async fn ask_link_raw(&self, content_type: &str, body: String) -> Reply {
        send(
            self.http
                .post(self.server.url("/magic-link"))
                .header("Content-Type", content_type)
                .body(body),
        )
        .await
    }

    /// The outbox folder of the server's mail.
    pub fn outbox(&self) -> PathBuf {
        self.storage.data_dir.join("outbox")
    }

    /// `(file, token)` of every finished message to `email` in the outbox, oldest first.
    pub fn mails_to(&self, email: &str) -> Vec<(PathBuf, String)> {
        let Ok(entries) = std::fs::read_dir(self.outbox()) else {
            return Vec::new();
        };
        let mut found: Vec<(PathBuf, String)> = entries
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "eml"))
            .filter_map(|path| {
                let text = std::fs::read_to_string(&path).ok()?;
                let to = text
                    .lines()
                    .find_map(|line| line.strip_prefix("To: "))?
                    .to_ascii_lowercase();
                if !to.contains(&email.to_ascii_lowercase()) {
                    return None;
                }
                let token = link_token(&text, self.public.trim_end_matches('/'))
                    .unwrap_or_else(|| panic!("no sign-in link in {path:?}:\n{text}"));
                Some((path, token))
            })
            .collect();
        found.sort();
        found
    }

    /// Waits (up to 10 s) until the outbox holds `count` messages to `email`; returns their
    /// tokens, oldest first.
    pub async fn wait_mails(&self, email: &str, count: usize) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mails = self.mails_to(email);
            if mails.len() >= count {
                return mails.into_iter().map(|(_, token)| token).collect();
            }
            assert!(
                Instant::now() < deadline,
                "{} of {count} mails to {email} arrived; outbox: {:?}",
                mails.len(),
                std::fs::read_dir(self.outbox()).map(|d| d.count())
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Asks for a link for `email` (must be accepted) and returns the token of the new mail.
    pub async fn new_link(&self, email: &str) -> String {
        let before: BTreeSet<String> = self
            .mails_to(email)
            .into_iter()
            .map(|(_, token)| token)
            .collect();
        let reply = self.ask_link(email).await;
        assert_eq!(reply.status, 202, "{reply:?}");
        let tokens = self.wait_mails(email, before.len() + 1).await;
        tokens
            .into_iter()
            .find(|token| !before.contains(token))
            .expect("a new token")
    }

    /// `GET /dashboard/sign-in/confirm?token=…`.
    pub async fn confirm_page(&self, token: &str) -> Reply {
        let url = self.server.url(&format!(
            "/dashboard/sign-in/confirm?token={}",
            encode(token)
        ));
        send(self.http.get(url)).await
    }

    /// `POST /dashboard/sign-in/confirm` as the page's form posts it from this origin.
    pub async fn confirm(&self, token: &str) -> Reply {
        self.confirm_from(token, Some(&self.origin())).await
    }

    /// `POST /dashboard/sign-in/confirm` with `origin` in `Origin` (none: no header).
    pub async fn confirm_from(&self, token: &str, origin: Option<&str>) -> Reply {
        let mut request = self
            .http
            .post(self.server.url("/dashboard/sign-in/confirm"))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(form(&[("token", token)]));
        if let Some(origin) = origin {
            request = request.header("Origin", origin);
        }
        send(request).await
    }

    /// Uses `token` and returns the session it starts (its csrf read off the overview).
    pub async fn session_from(&self, token: &str) -> SignInSession {
        let reply = self.confirm(token).await;
        assert_eq!(reply.status, 303, "{reply:?}");
        let token =
            session_cookie(&reply).unwrap_or_else(|| panic!("no session cookie in {reply:?}"));
        let cookie = format!("{COOKIE}={token}");
        let page = self.get("/dashboard", Some(&cookie)).await;
        assert_eq!(page.status, 200, "{page:?}");
        SignInSession {
            cookie,
            token,
            csrf: csrf_of(&page.body),
        }
    }

    /// A new link for `email`, used: a signed-in session.
    pub async fn sign_in(&self, email: &str) -> SignInSession {
        let token = self.new_link(email).await;
        self.session_from(&token).await
    }

    /// `GET path` with an optional `Cookie` header value.
    pub async fn get(&self, path: &str, cookie: Option<&str>) -> Reply {
        let mut request = self.http.get(self.server.url(path));
        if let Some(cookie) = cookie {
            request = request.header("Cookie", cookie);
        }
        send(request).await
    }

    /// A signed-in page, which must answer 200.
    pub async fn page(&self, path: &str, session: &SignInSession) -> String {
        let reply = self.get(path, Some(&session.cookie)).await;
        assert_eq!(reply.status, 200, "GET {path}: {reply:?}");
        reply.body
    }

    /// A form post from this origin with the session's cookie.
    pub async fn post(
        &self,
        path: &str,
        session: &SignInSession,
        fields: &[(&str, &str)],
    ) -> Reply {
        self.post_from(path, Some(&session.cookie), fields, Some(&self.origin()))
            .await
    }

    /// A form post with any cookie and origin.
    pub async fn post_from(
        &self,
        path: &str,
        cookie: Option<&str>,
        fields: &[(&str, &str)],
        origin: Option<&str>,
    ) -> Reply {
        let mut request = self
            .http
            .post(self.server.url(path))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(form(fields));
        if let Some(cookie) = cookie {
            request = request.header("Cookie", cookie);
        }
        if let Some(origin) = origin {
            request = request.header("Origin", origin);
        }
        send(request).await
    }
}

/// The token of the one sign-in link in a mail: `{base}/dashboard/sign-in/confirm?token=<64 hex>`.
pub fn link_token(mail: &str, base: &str) -> Option<String> {
    let prefix = format!("{base}/dashboard/sign-in/confirm?token=");
    let mut links = mail
        .lines()
        .filter_map(|line| line.trim().strip_prefix(&prefix));
    let token = links.next()?;
    assert!(links.next().is_none(), "two links in one mail:\n{mail}");
    assert!(
        is_hex64(token),
        "the link's token is not 64 hex digits: {token:?}"
    );
    Some(token.to_owned())
}

/// 64 lowercase hex digits.
pub fn is_hex64(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A random token of the links' shape that no link has.
pub fn forged_token() -> String {
    toolgate_domain::SecretToken::generate()
        .unwrap()
        .expose()
        .to_owned()
}

/// The `Set-Cookie` values of a response.
pub fn set_cookies(reply: &Reply) -> Vec<String> {
    reply
        .headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect()
}

/// The session token a response sets, if it sets a non-empty one.
pub fn session_cookie(reply: &Reply) -> Option<String> {
    session_cookie_as(reply, COOKIE)
}

/// The session token a response sets under `name`; it must set one.
pub fn session_cookie_named(reply: &Reply, name: &str) -> String {
    session_cookie_as(reply, name).unwrap_or_else(|| panic!("no {name} cookie: {reply:?}"))
}

fn session_cookie_as(reply: &Reply, name: &str) -> Option<String> {
    set_cookies(reply).iter().find_map(|cookie| {
        let value = cookie.strip_prefix(&format!("{name}="))?;
        let value = value.split(';').next().unwrap_or("");
        (!value.is_empty()).then(|| value.to_owned())
    })
}

/// Whether a response tells the browser to forget the session cookie.
pub fn clears_cookie(reply: &Reply) -> bool {
    set_cookies(reply)
        .iter()
        .any(|cookie| cookie.starts_with(&format!("{COOKIE}=;")) && cookie.contains("Max-Age=0"))
}

/// `Location` of a redirect.
pub fn location(reply: &Reply) -> String {
    reply
        .header("location")
        .unwrap_or_else(|| panic!("no Location: {reply:?}"))
}

/// Checks a 303 to `to`.
pub fn assert_see_other(reply: &Reply, to: &str) {
    assert_eq!(reply.status, 303, "{reply:?}");
    assert_eq!(location(reply), to, "{reply:?}");
}

/// The one anti-forgery value of a page (every `csrf` field of it must carry the same).
pub fn csrf_of(html: &str) -> String {
    let values = csrf_values(html);
    let first = values
        .first()
        .unwrap_or_else(|| panic!("no csrf field in:\n{html}"))
        .clone();
    assert!(
        values.iter().all(|v| *v == first),
        "csrf values differ: {values:?}"
    );
    first
}

/// Every `csrf` field's value in a page.
pub fn csrf_values(html: &str) -> Vec<String> {
    const FIELD: &str = r#"name="csrf" value=""#;
    html.match_indices(FIELD)
        .map(|(at, _)| {
            let rest = &html[at + FIELD.len()..];
            rest[..rest.find('"').unwrap()].to_owned()
        })
        .collect()
}

/// The text inside the element with `id` (up to its first child tag), unescaped.
pub fn text_of_id(html: &str, id: &str) -> Option<String> {
    let at = html.find(&format!(r#"id="{id}""#))?;
    let open_end = at + html[at..].find('>')? + 1;
    let rest = &html[open_end..];
    let end = rest.find('<').unwrap_or(rest.len());
    Some(unescape(rest[..end].trim()))
}

/// Whether the page has an element with `id`.
pub fn has_id(html: &str, id: &str) -> bool {
    html.contains(&format!(r#"id="{id}""#))
}

/// HTML's five escapes undone.
pub fn unescape(text: &str) -> String {
    text.replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// `application/x-www-form-urlencoded` of `fields`.
pub fn form(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .map(|(name, value)| format!("{}={}", encode(name), encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Percent-encodes everything but the unreserved characters.
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// An HTML page with `status` and an `#error`.
pub fn assert_error_page(reply: &Reply, status: u16) {
    assert_eq!(reply.status, status, "{reply:?}");
    assert!(
        reply
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/html")),
        "{reply:?}"
    );
    assert!(has_id(&reply.body, "error"), "no #error: {reply:?}");
}

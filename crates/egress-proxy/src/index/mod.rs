//! The package index sessions install from: `http://pypi.toolgate.internal/simple/`, a name
//! only the proxy knows, answered by the proxy itself. It mirrors the operator's indexes
//! (`pip_index_url`, then `pip_extra_index_url`): a project's page is fetched from upstream,
//! kept for [`PAGE_TTL`], and re-served with every file linked at
//! `http://pypi.toolgate.internal/files/<sha256>/<name>`; a file is served from the host's
//! content-addressed cache ([`store`]), downloaded once on a miss and checked against the
//! index's SHA-256 before it is stored or served. A file the index gives no SHA-256 for is
//! refused. What a session is served counts against its run's byte budget.

mod page;
mod store;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use reqwest::Url;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use toolgate_egress::EgressPolicy;

use crate::head::Head;
use crate::run::Run;
use crate::traffic::{Traffic, refusal};
use page::FileLink;
use store::FileStore;

/// The index's host name in sessions (resolved by nobody: the proxy answers for it).
pub const INDEX_HOST: &str = "pypi.toolgate.internal";
/// How long a project's page is served from memory before it is fetched again.
pub(crate) const PAGE_TTL: Duration = Duration::from_secs(600);
/// Largest upstream project page read.
pub(crate) const MAX_PAGE_BYTES: usize = 32 << 20;
/// Project pages kept in memory at most.
const MAX_PAGES: usize = 2048;
/// Files known from kept pages at most (older pages are dropped past it).
const MAX_KNOWN_FILES: usize = 1_000_000;
/// How long fetching one project page upstream may take.
const PAGE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long downloading one file upstream may take.
const FILE_TIMEOUT: Duration = Duration::from_secs(600);
/// Bytes read from the cache per write to the session.
const CHUNK: usize = 64 * 1024;

/// Where the index mirrors from and where it caches (the operator's `pip_*` settings).
#[derive(Debug, Clone)]
pub struct IndexSettings {
    /// The upstream simple indexes, the main one first (`https://pypi.org/simple/`).
    pub urls: Vec<String>,
    /// The content-addressed file cache (`<data_dir>/wheels`).
    pub cache_dir: PathBuf,
    /// The cache's bound in bytes.
    pub cache_bytes: u64,
    /// The largest file downloaded for a session (its workspace could not hold more).
    pub max_file_bytes: u64,
}

/// The index of a process, shared by every session's gate.
#[derive(Debug)]
pub(crate) struct Index {
    upstreams: Vec<Url>,
    client: Result<reqwest::Client, String>,
    policy: EgressPolicy,
    store: FileStore,
    max_file_bytes: u64,
    pages: Mutex<Pages>,
    page_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// The kept project pages and the files they link, by SHA-256.
#[derive(Debug, Default)]
struct Pages {
    by_project: HashMap<String, Arc<Page>>,
    order: VecDeque<String>,
    files: HashMap<String, Arc<FileLink>>,
}

/// A project's page as served, and the SHA-256s it links.
#[derive(Debug)]
struct Page {
    fetched: Instant,
    html: String,
    hashes: Vec<String>,
}

/// Why a request was refused: the status answered and the message (for the session's code);
/// an empty status when part of the answer was already sent, so the connection is only closed.
struct Refusal(&'static str, String);

impl Index {
    /// The index for `settings`, connecting where `policy` allows and to the indexes themselves.
    pub(crate) fn new(settings: IndexSettings, policy: &EgressPolicy) -> Self {
        let upstreams: Vec<Url> = settings
            .urls
            .iter()
            .filter_map(|u| {
                let with_slash = if u.ends_with('/') {
                    u.clone()
                } else {
                    format!("{u}/")
                };
                Url::parse(&with_slash).ok()
            })
            .collect();
        let policy = policy
            .clone()
            .with_endpoints(upstreams.iter().map(Url::as_str))
            .unwrap_or_else(|_| policy.clone());
        let client = toolgate_fetch::api_client(policy.clone(), FILE_TIMEOUT);
        Self {
            upstreams,
            client,
            policy,
            store: FileStore::new(settings.cache_dir, settings.cache_bytes),
            max_file_bytes: settings.max_file_bytes,
            pages: Mutex::new(Pages::default()),
            page_locks: Mutex::new(HashMap::new()),
        }
    }

    async fn answer(
        &self,
        client: &mut TcpStream,
        head: &Head,
        path: &str,
        run: &Run,
        traffic: &Traffic,
    ) -> Result<(), Refusal> {
        let body = !head.method.eq_ignore_ascii_case("HEAD");
        if body && !head.method.eq_ignore_ascii_case("GET") {
            return Err(Refusal(
                "405 Method Not Allowed",
                "the package index answers GET and HEAD only".to_owned(),
            ));
        }
        let path = path.split(['?', '#']).next().unwrap_or_default();
        if let Some(project) = path.strip_prefix("/simple/") {
            let project = project.strip_suffix('/').unwrap_or(project);
            let html = self.project_page(project).await?;
            let head = response_head("text/html; charset=utf-8", html.len() as u64);
            let mut answer = head.into_bytes();
            if body {
                answer.extend_from_slice(html.as_bytes());
            }
            return send(client, &answer, true, run, traffic).await;
        }
        if let Some(file) = path.strip_prefix("/files/") {
            let (hash, name) = file.split_once('/').unwrap_or((file, ""));
            return self.file(client, hash, name, body, run, traffic).await;
        }
        Err(Refusal(
            "404 Not Found",
            format!(
                "the package index has /simple/<project>/ pages and their files only, not {:?}",
                path.chars().take(100).collect::<String>()
            ),
        ))
    }

    /// The page of `project` as served: from memory while fresh, else fetched upstream (a
    /// stale copy if upstream fails).
    async fn project_page(&self, project: &str) -> Result<Arc<str>, Refusal> {
        let Some(name) = page::normalize(project) else {
            return Err(Refusal(
                "404 Not Found",
                format!(
                    "{:?} is not a project name",
                    project.chars().take(100).collect::<String>()
                ),
            ));
        };
        if let Some(page) = self.kept(&name).filter(|p| p.fetched.elapsed() < PAGE_TTL) {
            return Ok(page.html.as_str().into());
        }
        let lock = single_flight(&self.page_locks, &name);
        let _held = lock.lock().await;
        if let Some(page) = self.kept(&name).filter(|p| p.fetched.elapsed() < PAGE_TTL) {
            return Ok(page.html.as_str().into());
        }
        match self.fetch_page(&name).await {
            Ok(files) => {
                let html = page::render(&name, &files, &format!("http://{INDEX_HOST}/files"));
                self.keep(&name, html.clone(), files);
                Ok(html.into())
            }
            Err(refusal) => match self.kept(&name) {
                Some(stale) => Ok(stale.html.as_str().into()),
                None => Err(refusal),
            },
        }
    }

    fn kept(&self, name: &str) -> Option<Arc<Page>> {
        self.lock_pages().by_project.get(name).cloned()
    }

    fn lock_pages(&self) -> std::sync::MutexGuard<'_, Pages> {
        self.pages.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `name`'s page and its files, dropping the oldest pages past the bounds.
    fn keep(&self, name: &str, html: String, files: Vec<FileLink>) {
        let mut pages = self.lock_pages();
        pages.drop_page(name);
        let hashes: Vec<String> = files.iter().filter_map(|f| f.sha256.clone()).collect();
        for file in files {
            if let Some(sha) = file.sha256.clone() {
                pages.files.insert(sha, Arc::new(file));
            }
        }
        pages.by_project.insert(
            name.to_owned(),
            Arc::new(Page {
                fetched: Instant::now(),
                html,
                hashes,
            }),
        );
        pages.order.push_back(name.to_owned());
        while pages.by_project.len() > MAX_PAGES || pages.files.len() > MAX_KNOWN_FILES {
            let Some(oldest) = pages.order.front().cloned() else {
                break;
            };
            if oldest == name {
                break;
            }
            pages.drop_page(&oldest);
        }
    }

    /// Every file of `name` on the upstream indexes (the main one's first; a file name an
    /// earlier index has is not taken from a later one).
    async fn fetch_page(&self, name: &str) -> Result<Vec<FileLink>, Refusal> {
        let client = self.client()?;
        if self.upstreams.is_empty() {
            return Err(no_index());
        }
        let mut files: Vec<FileLink> = Vec::new();
        let mut found = false;
        for base in &self.upstreams {
            let Some(more) = self.fetch_one_page(client, base, name).await? else {
                continue;
            };
            found = true;
            for file in more {
                if !files.iter().any(|f| f.filename == file.filename) {
                    files.push(file);
                }
            }
        }
        if !found {
            return Err(Refusal(
                "404 Not Found",
                format!("the package index has no project {name:?}"),
            ));
        }
        Ok(files)
    }

    /// `name`'s files on the index at `base`; `None` when it has no such project.
    async fn fetch_one_page(
        &self,
        client: &reqwest::Client,
        base: &Url,
        name: &str,
    ) -> Result<Option<Vec<FileLink>>, Refusal> {
        let upstream_error = |why: String| {
            Refusal(
                "502 Bad Gateway",
                format!("the upstream package index's page for {name:?}: {why}"),
            )
        };
        let url = base
            .join(&format!("{name}/"))
            .map_err(|e| upstream_error(e.to_string()))?;
        self.policy
            .check_url(&url)
            .map_err(|e| upstream_error(e.to_string()))?;
        let fetch = async {
            let response = client
                .get(url.clone())
                .header(
                    reqwest::header::ACCEPT,
                    format!("{}, text/html;q=0.1", page::JSON_TYPE),
                )
                .send()
                .await
                .map_err(|e| upstream_error(toolgate_fetch::describe_error(e)))?;
            if response.status() == reqwest::StatusCode::NOT_FOUND {
                return Ok(None);
            }
            if !response.status().is_success() {
                return Err(upstream_error(format!("HTTP {}", response.status())));
            }
            let content_type = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("text/html")
                .to_owned();
            let body = read_bounded(response, MAX_PAGE_BYTES)
                .await
                .map_err(upstream_error)?;
            page::parse(&body, &content_type, &url)
                .map(Some)
                .map_err(|e| upstream_error(e.to_string()))
        };
        tokio::time::timeout(PAGE_TIMEOUT, fetch)
            .await
            .map_err(|_| upstream_error(format!("no answer within {} s", PAGE_TIMEOUT.as_secs())))?
    }

    fn client(&self) -> Result<&reqwest::Client, Refusal> {
        self.client
            .as_ref()
            .map_err(|e| Refusal("503 Service Unavailable", e.clone()))
    }

    /// Serves the file `hash` (named `name` in the link), downloading it first on a miss.
    async fn file(
        &self,
        client: &mut TcpStream,
        hash: &str,
        name: &str,
        body: bool,
        run: &Run,
        traffic: &Traffic,
    ) -> Result<(), Refusal> {
        if hash == "unchecked" {
            return Err(Refusal(
                "403 Forbidden",
                format!(
                    "the package index gives no SHA-256 for {:?}: this service installs only \
                     files it can check",
                    name.chars().take(255).collect::<String>()
                ),
            ));
        }
        if !page::is_sha256(hash) {
            return Err(Refusal(
                "404 Not Found",
                "a file of the package index is /files/<sha256>/<name>".to_owned(),
            ));
        }
        let (mut file, length) = match self.store.open(hash).await {
            Some(found) => found,
            None => self.download(hash).await?,
        };
        let head = response_head("application/octet-stream", length);
        send(client, head.as_bytes(), true, run, traffic).await?;
        if !body {
            return Ok(());
        }
        let mut buffer = vec![0u8; CHUNK];
        loop {
            let n = file
                .read(&mut buffer)
                .await
                .map_err(|e| Refusal("500 Internal Server Error", e.to_string()))?;
            if n == 0 {
                return Ok(());
            }
            send(client, &buffer[..n], false, run, traffic).await?;
        }
    }

    /// Downloads the file `hash` from where its project's page said, checks and stores it (once
    /// however many sessions ask at the same time), and opens it.
    async fn download(&self, hash: &str) -> Result<(tokio::fs::File, u64), Refusal> {
        let lock = self.store.lock(hash);
        let _held = lock.lock().await;
        if let Some(found) = self.store.open(hash).await {
            return Ok(found);
        }
        let Some(link) = self.lock_pages().files.get(hash).cloned() else {
            return Err(Refusal(
                "404 Not Found",
                "the package index does not know this file (any more): ask for its project's \
                 page again"
                    .to_owned(),
            ));
        };
        let client = self.client()?;
        let failed = |why: String| {
            Refusal(
                "502 Bad Gateway",
                format!(
                    "downloading {} from the upstream index: {why}",
                    link.filename
                ),
            )
        };
        let url = Url::parse(&link.url).map_err(|e| failed(e.to_string()))?;
        self.policy
            .check_url(&url)
            .map_err(|e| failed(e.to_string()))?;
        let mut response = client
            .get(url)
            .send()
            .await
            .map_err(|e| failed(toolgate_fetch::describe_error(e)))?;
        if !response.status().is_success() {
            return Err(failed(format!("HTTP {}", response.status())));
        }
        let too_big = || {
            Refusal(
                "403 Forbidden",
                format!(
                    "{} is larger than {} bytes, the most a session's workspace holds",
                    link.filename, self.max_file_bytes
                ),
            )
        };
        if response
            .content_length()
            .is_some_and(|len| len > self.max_file_bytes)
        {
            return Err(too_big());
        }
        let internal = |e: std::io::Error| Refusal("500 Internal Server Error", e.to_string());
        let mut writing = self.store.begin(hash).await.map_err(internal)?;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| failed(toolgate_fetch::describe_error(e)))?
        {
            if writing.written() + chunk.len() as u64 > self.max_file_bytes {
                return Err(too_big());
            }
            writing.write(&chunk).await.map_err(internal)?;
        }
        writing
            .finish(&self.store, hash)
            .await
            .map_err(|e| match e {
                store::StoreError::Mismatch { .. } => failed(e.to_string()),
                store::StoreError::Io(e) => internal(e),
            })?;
        self.store.open(hash).await.ok_or_else(|| {
            Refusal(
                "500 Internal Server Error",
                "the file was stored but is gone: the package cache is too small for it".to_owned(),
            )
        })
    }
}

impl Pages {
    fn drop_page(&mut self, name: &str) {
        if let Some(page) = self.by_project.remove(name) {
            for hash in &page.hashes {
                self.files.remove(hash);
            }
            self.order.retain(|n| n != name);
        }
    }
}

/// Answers one request of a session to [`INDEX_HOST`] from `index` (refused when the proxy has
/// none); `Err` is the refusal it got.
pub(crate) async fn serve(
    index: Option<&Index>,
    client: &mut TcpStream,
    head: &Head,
    path: &str,
    run: &Run,
    traffic: &Traffic,
) -> Result<(), String> {
    let answer = match index {
        Some(index) => index.answer(client, head, path, run, traffic).await,
        None => Err(no_index()),
    };
    // the caller closes the connection once it has recorded it
    match answer {
        Ok(()) => Ok(()),
        // the answer had begun: the session sees it cut short
        Err(Refusal("", message)) => Err(message),
        Err(Refusal(status, message)) => {
            let _ = client.write_all(refusal(status, &message).as_bytes()).await;
            Err(message)
        }
    }
}

/// The refusal when no upstream index is configured.
fn no_index() -> Refusal {
    Refusal(
        "503 Service Unavailable",
        "this service has no package index configured (pip_index_url)".to_owned(),
    )
}

/// The shared lock of `key` in `locks`, dropping locks nobody holds.
fn single_flight(
    locks: &Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    key: &str,
) -> Arc<tokio::sync::Mutex<()>> {
    let mut locks = locks.lock().unwrap_or_else(PoisonError::into_inner);
    locks.retain(|_, lock| Arc::strong_count(lock) > 1);
    Arc::clone(locks.entry(key.to_owned()).or_default())
}

fn response_head(content_type: &str, length: u64) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n"
    )
}

/// Writes `bytes` to the session (the `first` of its answer, or more), charged to its run and
/// counted as received.
async fn send(
    client: &mut TcpStream,
    bytes: &[u8],
    first: bool,
    run: &Run,
    traffic: &Traffic,
) -> Result<(), Refusal> {
    run.budget
        .charge(bytes.len())
        .await
        .map_err(|e| Refusal(if first { "403 Forbidden" } else { "" }, e.to_string()))?;
    client
        .write_all(bytes)
        .await
        .map_err(|e| Refusal("", format!("the session closed the connection: {e}")))?;
    traffic
        .received
        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
    Ok(())
}

/// The body of `response`, refused past `max` bytes.
async fn read_bounded(mut response: reqwest::Response, max: usize) -> Result<Vec<u8>, String> {
    if response
        .content_length()
        .is_some_and(|len| len > max as u64)
    {
        return Err(format!("it is larger than {max} bytes"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(toolgate_fetch::describe_error)?
    {
        if body.len() + chunk.len() > max {
            return Err(format!("it is larger than {max} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests;

//! The index through a session's gate, against a loopback upstream index.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::State;
use axum::http::{Response, Uri};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use toolgate_sandbox::{EgressGrant, EgressLimits};

use crate::{EgressProxy, IndexSettings, ProxySettings, SessionGate};

/// A loopback upstream index: paths to (content type, body), and how often each was asked.
#[derive(Default)]
struct Upstream {
    routes: Mutex<HashMap<String, (String, Vec<u8>)>>,
    hits: Mutex<HashMap<String, usize>>,
    /// While set, file answers wait this long (so concurrent askers overlap).
    slow_files_ms: AtomicUsize,
}

impl Upstream {
    fn route(&self, path: &str, content_type: &str, body: impl Into<Vec<u8>>) {
        self.routes
            .lock()
            .unwrap()
            .insert(path.to_owned(), (content_type.to_owned(), body.into()));
    }

    fn hits(&self, path: &str) -> usize {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    /// A project page (PEP 691 JSON) listing `files` (name, bytes, the SHA-256 the page gives);
    /// each file served at /packages/<name>.
    fn project(&self, project: &str, files: &[(&str, &[u8], String)]) {
        let listed: Vec<String> = files
            .iter()
            .map(|(name, bytes, sha)| {
                self.route(
                    &format!("/packages/{name}"),
                    "application/octet-stream",
                    bytes.to_vec(),
                );
                format!(
                    r#"{{"filename":"{name}","url":"../../packages/{name}","hashes":{{"sha256":"{sha}"}},"requires-python":">=3.8"}}"#
                )
            })
            .collect();
        self.route(
            &format!("/simple/{project}/"),
            "application/vnd.pypi.simple.v1+json",
            format!(
                r#"{{"meta":{{"api-version":"1.0"}},"name":"{project}","files":[{}]}}"#,
                listed.join(",")
            ),
        );
    }
}

async fn answer(State(upstream): State<Arc<Upstream>>, uri: Uri) -> Response<Body> {
    let path = uri.path().to_owned();
    *upstream
        .hits
        .lock()
        .unwrap()
        .entry(path.clone())
        .or_default() += 1;
    let wait = upstream.slow_files_ms.load(Ordering::Relaxed);
    if wait > 0 && path.starts_with("/packages/") {
        tokio::time::sleep(std::time::Duration::from_millis(wait as u64)).await;
    }
    let found = upstream.routes.lock().unwrap().get(&path).cloned();
    match found {
        Some((content_type, body)) => Response::builder()
            .header("content-type", content_type)
            .body(Body::from(body))
            .unwrap(),
        None => Response::builder()
            .status(404)
            .body(Body::from("not found"))
            .unwrap(),
    }
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A gate with the index over a fresh loopback upstream, and its cache directory.
struct Setup {
    upstream: Arc<Upstream>,
    gate: SessionGate,
    cache: tempfile::TempDir,
    proxy: String,
}

async fn setup(max_file_bytes: u64, cache_bytes: u64) -> Setup {
    let upstream = Arc::new(Upstream::default());
    let app = axum::Router::new()
        .fallback(answer)
        .with_state(Arc::clone(&upstream));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let cache = tempfile::tempdir().unwrap();
    let proxy = EgressProxy::new(ProxySettings {
        index: Some(IndexSettings {
            urls: vec![format!("http://127.0.0.1:{port}/simple")],
            cache_dir: cache.path().join("wheels"),
            cache_bytes,
            max_file_bytes,
        }),
        ..ProxySettings::default()
    });
    let mut gate = proxy.gate();
    gate.serve(crate::listen_on_loopback().unwrap()).unwrap();
    let proxy = gate.env()["HTTP_PROXY"]
        .trim_start_matches("http://")
        .to_owned();
    Setup {
        upstream,
        gate,
        cache,
        proxy,
    }
}

/// `GET http://pypi.toolgate.internal<path>` through the proxy at `proxy`: status and body.
async fn get(proxy: &str, path: &str) -> (u16, Vec<u8>) {
    let mut stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
    let request = format!(
        "GET http://pypi.toolgate.internal{path} HTTP/1.1\r\nHost: pypi.toolgate.internal\r\n\
         Accept: */*\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP answer");
    let status = std::str::from_utf8(&answer[9..12])
        .unwrap()
        .parse()
        .unwrap();
    (status, answer[split + 4..].to_vec())
}

fn text(body: &[u8]) -> String {
    String::from_utf8_lossy(body).into_owned()
}

fn cached(setup: &Setup) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(setup.cache.path().join("wheels"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

const WHEEL: &str = "demo_pkg-1.0-py3-none-any.whl";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_is_mirrored_and_its_file_served_from_the_cache() {
    let s = setup(1 << 20, 1 << 20).await;
    let wheel = b"PK\x03\x04 a wheel's bytes".repeat(5000);
    let sha = sha256(&wheel);
    s.upstream
        .project("demo-pkg", &[(WHEEL, &wheel, sha.clone())]);
    let run = s.gate.begin(Some(EgressGrant::default())).unwrap();

    let (status, page) = get(&s.proxy, "/simple/Demo_Pkg/").await;
    assert_eq!(status, 200, "{}", text(&page));
    let link = format!(
        "<a href=\"http://pypi.toolgate.internal/files/{sha}/{WHEEL}#sha256={sha}\" \
         data-requires-python=\"&gt;=3.8\">{WHEEL}</a>"
    );
    assert!(text(&page).contains(&link), "{}", text(&page));
    assert!(!text(&page).contains("127.0.0.1"));

    let file = format!("/files/{sha}/{WHEEL}");
    let (status, body) = get(&s.proxy, &file).await;
    assert_eq!(status, 200, "{}", text(&body));
    assert_eq!(body, wheel);
    assert_eq!(cached(&s), vec![sha.clone()]);
    assert_eq!(s.upstream.hits(&format!("/packages/{WHEEL}")), 1);
    let mode = std::fs::metadata(s.cache.path().join("wheels"))
        .unwrap()
        .permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o700
    );

    // the page from memory, the file from the cache: upstream is not asked again
    let (_, again) = get(&s.proxy, "/simple/demo-pkg").await;
    assert_eq!(again, page);
    let (status, body) = get(&s.proxy, &file).await;
    assert_eq!((status, body == wheel), (200, true));
    assert_eq!(s.upstream.hits(&format!("/packages/{WHEEL}")), 1);
    assert_eq!(s.upstream.hits("/simple/demo-pkg/"), 1);

    let destinations = run.finish();
    assert_eq!(destinations.len(), 4, "{destinations:?}");
    for d in &destinations {
        assert_eq!(
            (d.host.as_str(), d.kind.as_str()),
            ("pypi.toolgate.internal", "index")
        );
        assert_eq!(d.refused, None);
    }
    assert!(destinations[1].bytes_received > wheel.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_file_is_refused_and_not_cached() {
    let s = setup(1 << 20, 1 << 20).await;
    let claimed = sha256(b"the wheel the index vouches for");
    s.upstream.project(
        "demo-pkg",
        &[(WHEEL, b"something else entirely", claimed.clone())],
    );
    let _run = s.gate.begin(Some(EgressGrant::default())).unwrap();
    get(&s.proxy, "/simple/demo-pkg/").await;
    for attempt in 1..=2 {
        let (status, body) = get(&s.proxy, &format!("/files/{claimed}/{WHEEL}")).await;
        assert_eq!(status, 502);
        assert!(text(&body).contains("SHA-256"), "{}", text(&body));
        assert!(cached(&s).is_empty(), "{:?}", cached(&s));
        assert_eq!(s.upstream.hits(&format!("/packages/{WHEEL}")), attempt);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_upstream_pages_get_clear_errors() {
    let s = setup(1 << 20, 1 << 20).await;
    let json = "application/vnd.pypi.simple.v1+json";
    s.upstream.route(
        "/simple/huge/",
        "text/html",
        vec![b' '; super::MAX_PAGE_BYTES + 1],
    );
    let deep = format!(
        "{{\"files\":[{{\"filename\":\"a.whl\",\"url\":\"a.whl\",\"yanked\":{}{}}}]}}",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    s.upstream.route("/simple/deep/", json, deep);
    s.upstream
        .route("/simple/malformed/", json, "{\"files\": [{\"url\": 7");
    s.upstream.route(
        "/simple/unhashed/",
        "text/html",
        "<a href=\"/packages/unhashed-1.0.tar.gz\">unhashed-1.0.tar.gz</a>",
    );
    let _run = s.gate.begin(Some(EgressGrant::default())).unwrap();
    for (project, expected) in [
        ("huge", "larger than"),
        ("deep", "recursion limit"),
        ("malformed", "could not be read"),
        ("absent", "has no project \"absent\""),
    ] {
        let (status, body) = get(&s.proxy, &format!("/simple/{project}/")).await;
        let body = text(&body);
        assert!(matches!(status, 404 | 502), "{project}: {status} {body}");
        assert!(body.contains(expected), "{project}: {body}");
    }
    let (status, page) = get(&s.proxy, "/simple/unhashed/").await;
    assert_eq!(status, 200);
    assert!(text(&page).contains("/files/unchecked/unhashed-1.0.tar.gz"));
    let (status, body) = get(&s.proxy, "/files/unchecked/unhashed-1.0.tar.gz").await;
    assert_eq!(status, 403);
    assert!(text(&body).contains("no SHA-256"), "{}", text(&body));
    for (path, status) in [
        ("/files/abc/x.whl", 404),
        ("/elsewhere", 404),
        ("/simple/..%2f/", 404),
    ] {
        assert_eq!(get(&s.proxy, path).await.0, status, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_misses_download_once() {
    let s = setup(1 << 20, 1 << 20).await;
    let wheel = vec![42u8; 200_000];
    let sha = sha256(&wheel);
    s.upstream
        .project("demo-pkg", &[(WHEEL, &wheel, sha.clone())]);
    s.upstream.slow_files_ms.store(300, Ordering::Relaxed);
    let _run = s.gate.begin(Some(EgressGrant::default())).unwrap();
    get(&s.proxy, "/simple/demo-pkg/").await;
    let file = format!("/files/{sha}/{WHEEL}");
    let askers: Vec<_> = (0..8)
        .map(|_| {
            let (proxy, file) = (s.proxy.clone(), file.clone());
            tokio::spawn(async move { get(&proxy, &file).await })
        })
        .collect();
    for asker in askers {
        let (status, body) = asker.await.unwrap();
        assert_eq!((status, body.len()), (200, wheel.len()));
    }
    assert_eq!(s.upstream.hits(&format!("/packages/{WHEEL}")), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_and_each_download_are_bounded() {
    // room for two files of 40,000 bytes, not three; a file may be 50,000 bytes at most
    let s = setup(50_000, 100_000).await;
    let files: Vec<(String, Vec<u8>)> = (0..3u8)
        .map(|i| (format!("demo_pkg-1.{i}-py3-none-any.whl"), vec![i; 40_000]))
        .collect();
    let listed: Vec<(&str, &[u8], String)> = files
        .iter()
        .map(|(name, bytes)| (name.as_str(), bytes.as_slice(), sha256(bytes)))
        .chain(std::iter::once((
            "demo_pkg-2.0-py3-none-any.whl",
            &[7u8; 60_000][..],
            sha256(&[7u8; 60_000]),
        )))
        .collect();
    s.upstream.project("demo-pkg", &listed);
    let _run = s.gate.begin(Some(EgressGrant::default())).unwrap();
    get(&s.proxy, "/simple/demo-pkg/").await;
    let fetch = |i: usize| format!("/files/{}/{}", listed[i].2, listed[i].0);
    assert_eq!(get(&s.proxy, &fetch(0)).await.0, 200);
    assert_eq!(get(&s.proxy, &fetch(1)).await.0, 200);
    // the first used again, so the second is the least recently used when the third comes
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(get(&s.proxy, &fetch(0)).await.0, 200);
    assert_eq!(get(&s.proxy, &fetch(2)).await.0, 200);
    let mut expected = vec![listed[0].2.clone(), listed[2].2.clone()];
    expected.sort();
    assert_eq!(cached(&s), expected);

    let (status, body) = get(&s.proxy, &fetch(3)).await;
    assert_eq!(status, 403);
    assert!(
        text(&body).contains("larger than 50000 bytes"),
        "{}",
        text(&body)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_session_is_served_counts_against_its_run() {
    let s = setup(1 << 20, 1 << 20).await;
    let wheel = vec![1u8; 100_000];
    let sha = sha256(&wheel);
    s.upstream
        .project("demo-pkg", &[(WHEEL, &wheel, sha.clone())]);
    let grant = EgressGrant {
        limits: EgressLimits {
            max_bytes: 50_000,
            ..EgressLimits::default()
        },
        ..EgressGrant::default()
    };
    let run = s.gate.begin(Some(grant)).unwrap();
    assert_eq!(get(&s.proxy, "/simple/demo-pkg/").await.0, 200);
    let (_, body) = get(&s.proxy, &format!("/files/{sha}/{WHEEL}")).await;
    assert!(body.len() < wheel.len());
    let destinations = run.finish();
    let refused = destinations[1].refused.as_deref().unwrap_or_default();
    assert!(refused.contains("limit of 50000 bytes"), "{destinations:?}");
}

#[tokio::test]
async fn without_an_index_pip_is_told_so() {
    let proxy = EgressProxy::new(ProxySettings::default());
    let mut gate = proxy.gate();
    gate.serve(crate::listen_on_loopback().unwrap()).unwrap();
    let env = gate.env();
    assert!(!env.contains_key("PIP_INDEX_URL"));
    let address = env["HTTP_PROXY"].trim_start_matches("http://").to_owned();
    let _run = gate.begin(Some(EgressGrant::default())).unwrap();
    let (status, body) = get(&address, "/simple/demo/").await;
    assert_eq!(status, 503);
    assert!(text(&body).contains("no package index"), "{}", text(&body));
}

#[tokio::test]
async fn sessions_are_pointed_at_the_index() {
    let s = setup(1 << 20, 1 << 20).await;
    let env = s.gate.env();
    assert_eq!(
        env["PIP_INDEX_URL"],
        "http://pypi.toolgate.internal/simple/"
    );
    assert_eq!(env["PIP_TRUSTED_HOST"], "pypi.toolgate.internal");
}

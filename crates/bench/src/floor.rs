//! A bare axum server that answers every POST with a small fixed body. Measured with the same
//! load generator as toolgate, it shows what the HTTP stack and the generator itself reach on
//! this machine: if toolgate's figure is far below it, the generator is not what limits it.
//! For `--ai` it is also the model provider and the search upstream ([`crate::stand_in`]).
//! Given a Python (`--floor-echo`), it also answers `/echo/…` through a Python process that
//! echoes what it reads from a pipe: the hops of a warm sandbox call (client → HTTP server on a
//! multi-thread runtime → a Python process → back) with no service and no code in them, the
//! floor the machine puts under `--sandbox`'s warm `1+1`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use http::{StatusCode, header};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Mutex;

/// The fixed answer; it names `svc_read` so the generator's check passes as it does for toolgate.
const BODY: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"svc_read"}]}}"#;

/// The echo's answer: shaped like a warm `1+1`'s, so the same workload's check passes.
const ECHO_BODY: &str =
    r#"{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"2"}],"isError":false}}"#;

/// What the echo process runs: every read written straight back, until end of file.
const ECHO_SCRIPT: &str = "import os\nwhile True:\n    b = os.read(0, 4096)\n    if not b:\n        break\n    os.write(1, b)\n";

/// Serves on `addr` until SIGTERM (the parent's stop) or for at most `limit`, then exits by
/// itself: a parent that died without stopping it must not leave it running. With `python`,
/// `/echo/{key}` answers through a Python echo process (see the module's head).
pub fn serve(addr: SocketAddr, limit: Duration, python: Option<PathBuf>) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let echo = match python {
            Some(python) => Some(Arc::new(Echo::start(&python)?)),
            None => None,
        };
        let router = Router::new()
            .route(
                "/echo/{key}",
                post(move || {
                    let echo = echo.clone();
                    async move {
                        match echo {
                            Some(echo) => echo.answer().await.into_response(),
                            None => StatusCode::NOT_FOUND.into_response(),
                        }
                    }
                }),
            )
            .route("/healthz", get(|| async { "ok" }))
            .route(
                "/u/{key}",
                post(|| async { ([(header::CONTENT_TYPE, "application/json")], BODY) }),
            )
            .route("/v1/chat/completions", post(crate::stand_in::chat))
            .route("/search", get(crate::stand_in::search))
            .route("/drip", get(crate::fairness::drip));
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        axum::serve(listener, router)
            .with_graceful_shutdown(stop_signal(limit))
            .await
            .context("floor server failed")
    })
}

/// A Python process echoing its stdin to its stdout; one exchange at a time.
struct Echo {
    pipes: Mutex<(ChildStdin, ChildStdout)>,
    /// Killed with the server (it also ends by itself when its stdin closes).
    _child: Child,
}

impl Echo {
    fn start(python: &Path) -> Result<Self> {
        let mut child = Command::new(python)
            .args(["-I", "-c", ECHO_SCRIPT])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", python.display()))?;
        let stdin = child.stdin.take().context("the echo's stdin")?;
        let stdout = child.stdout.take().context("the echo's stdout")?;
        Ok(Self {
            pipes: Mutex::new((stdin, stdout)),
            _child: child,
        })
    }

    /// Sends a line of four bytes through the echo and answers once all four are back.
    async fn answer(&self) -> axum::response::Response {
        const LINE: &[u8] = b"1+1\n";
        let mut pipes = self.pipes.lock().await;
        let (stdin, stdout) = &mut *pipes;
        if stdin.write_all(LINE).await.is_err() {
            return StatusCode::BAD_GATEWAY.into_response();
        }
        let mut back = [0u8; 16];
        let mut got = 0;
        while got < LINE.len() {
            match stdout.read(&mut back[got..]).await {
                Ok(0) | Err(_) => return StatusCode::BAD_GATEWAY.into_response(),
                Ok(n) => got += n,
            }
        }
        ([(header::CONTENT_TYPE, "application/json")], ECHO_BODY).into_response()
    }
}

async fn stop_signal(limit: Duration) {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                () = tokio::time::sleep(limit) => {}
            }
        }
        Err(_) => tokio::time::sleep(limit).await,
    }
}

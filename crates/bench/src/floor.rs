//! A bare axum server that answers every POST with a small fixed body. Measured with the same
//! load generator as toolgate, it shows what the HTTP stack and the generator itself reach on
//! this machine: if toolgate's figure is far below it, the generator is not what limits it.
//! For `--ai` it is also the model provider and the search upstream ([`crate::stand_in`]).
//! Given a Python (`--floor-echo`), it also answers `/echo/…` through a Python process that
//! echoes what it reads from a pipe: the hops of a warm sandbox call (client → HTTP server on a
//! multi-thread runtime → a Python process → back) with no service and no code in them, the
//! floor the machine puts under `--sandbox`'s warm `1+1`. `/cell/…` goes further: the
//! least any service that runs a cell in Python can do (the JSON-RPC body parsed, the code sent
//! as a JSON line to a Python process that compiles and evaluates it in globals kept between
//! calls and answers a JSON line, the answer built from it), with no key, no charge and no
//! sandbox.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::body::Bytes;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use http::{StatusCode, header};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Mutex;

/// The fixed answer; it names `svc_read` so the generator's check passes as it does for toolgate.
const BODY: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"svc_read"}]}}"#;

/// The echo's answer: shaped like a warm `1+1`'s, so the same workload's check passes.
const ECHO_BODY: &str =
    r#"{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"2"}],"isError":false}}"#;

/// What the echo process runs: every read written straight back, until end of file.
const ECHO_SCRIPT: &str = "import os\nwhile True:\n    b = os.read(0, 4096)\n    if not b:\n        break\n    os.write(1, b)\n";

/// What the cell process runs: each line `{"code": …}` compiled (as an expression if it is
/// one) and run in globals kept between lines, answered `{"text": repr}` or `{"error": …}`.
const CELL_SCRIPT: &str = r#"import json, sys
g = {"__name__": "__main__"}
for line in sys.stdin:
    code = json.loads(line)["code"]
    try:
        try:
            compiled = compile(code, "<cell>", "eval")
        except SyntaxError:
            compiled = compile(code, "<cell>", "exec")
        value = eval(compiled, g)
        answer = {"text": "" if value is None else repr(value)}
    except Exception as e:
        answer = {"error": f"{type(e).__name__}: {e}"}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
"#;

/// Serves on `addr` until SIGTERM (the parent's stop) or for at most `limit`, then exits by
/// itself: a parent that died without stopping it must not leave it running. With `python`,
/// `/echo/{key}` answers through a Python echo process (see the module's head).
pub fn serve(addr: SocketAddr, limit: Duration, python: Option<PathBuf>) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let (echo, cell) = match python {
            Some(python) => (
                Some(Arc::new(Echo::start(&python)?)),
                Some(Arc::new(Cell::start(&python)?)),
            ),
            None => (None, None),
        };
        let router = Router::new()
            .route(
                "/cell/{key}",
                post(move |body: Bytes| {
                    let cell = cell.clone();
                    async move {
                        match cell {
                            Some(cell) => cell.answer(&body).await,
                            None => StatusCode::NOT_FOUND.into_response(),
                        }
                    }
                }),
            )
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

/// `python -I -c script` with its stdin and stdout piped; killed with the server (it also ends
/// by itself when its stdin closes).
fn start_python(python: &Path, script: &str) -> Result<(Child, ChildStdin, ChildStdout)> {
    let mut child = Command::new(python)
        .args(["-I", "-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {}", python.display()))?;
    let stdin = child.stdin.take().context("the Python's stdin")?;
    let stdout = child.stdout.take().context("the Python's stdout")?;
    Ok((child, stdin, stdout))
}

/// A Python process echoing its stdin to its stdout; one exchange at a time.
struct Echo {
    pipes: Mutex<(ChildStdin, ChildStdout)>,
    _child: Child,
}

impl Echo {
    fn start(python: &Path) -> Result<Self> {
        let (child, stdin, stdout) = start_python(python, ECHO_SCRIPT)?;
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

/// A Python process running cells (`CELL_SCRIPT`); one cell at a time.
struct Cell {
    pipes: Mutex<(ChildStdin, BufReader<ChildStdout>)>,
    _child: Child,
}

impl Cell {
    fn start(python: &Path) -> Result<Self> {
        let (child, stdin, stdout) = start_python(python, CELL_SCRIPT)?;
        Ok(Self {
            pipes: Mutex::new((stdin, BufReader::new(stdout))),
            _child: child,
        })
    }

    /// Runs the `code` argument of a `tools/call` body and answers as a tool's text result.
    async fn answer(&self, body: &[u8]) -> axum::response::Response {
        let Ok(request) = serde_json::from_slice::<Value>(body) else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        let Some(code) = request
            .pointer("/params/arguments/code")
            .and_then(Value::as_str)
        else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        let mut line = json!({ "code": code }).to_string();
        line.push('\n');
        let mut pipes = self.pipes.lock().await;
        let (stdin, stdout) = &mut *pipes;
        if stdin.write_all(line.as_bytes()).await.is_err() {
            return StatusCode::BAD_GATEWAY.into_response();
        }
        line.clear();
        if !matches!(stdout.read_line(&mut line).await, Ok(n) if n > 0) {
            return StatusCode::BAD_GATEWAY.into_response();
        }
        drop(pipes);
        let Ok(ran) = serde_json::from_str::<Value>(&line) else {
            return StatusCode::BAD_GATEWAY.into_response();
        };
        let (text, is_error) = match (ran.get("text"), ran.get("error")) {
            (Some(text), _) => (text.clone(), false),
            (None, Some(error)) => (error.clone(), true),
            (None, None) => return StatusCode::BAD_GATEWAY.into_response(),
        };
        let answer = json!({
            "jsonrpc": "2.0",
            "id": request.get("id").cloned().unwrap_or(Value::Null),
            "result": {"content": [{"type": "text", "text": text}], "isError": is_error},
        });
        (
            [(header::CONTENT_TYPE, "application/json")],
            answer.to_string(),
        )
            .into_response()
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

#[cfg(test)]
mod tests {
    use super::*;

    async fn run(cell: &Cell, body: &str) -> (StatusCode, Value) {
        let response = cell.answer(body.as_bytes()).await;
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("the answer's body");
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    fn call(code: &str) -> String {
        json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
               "params": {"name": "svc_write", "arguments": {"code": code}}})
        .to_string()
    }

    #[tokio::test]
    async fn the_cell_floor_runs_the_cell_and_keeps_its_globals() {
        let cell = Cell::start(Path::new("python3")).expect("python3 on PATH");
        let (status, answer) = run(&cell, &call("1+1")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(answer["id"], 9);
        assert_eq!(answer["result"]["content"][0]["text"], "2");
        assert_eq!(answer["result"]["isError"], false);
        run(&cell, &call("x = 20")).await;
        let (_, answer) = run(&cell, &call("x * 2")).await;
        assert_eq!(answer["result"]["content"][0]["text"], "40");
        let (_, answer) = run(&cell, &call("1/0")).await;
        assert_eq!(answer["result"]["isError"], true);
        let text = answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or("");
        assert!(text.starts_with("ZeroDivisionError"), "{text}");
        let (status, _) = run(&cell, "{not json").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let (status, _) = run(&cell, r#"{"params": {"arguments": {}}}"#).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        // still in step after the refusals
        let (_, answer) = run(&cell, &call("'a' * 3")).await;
        assert_eq!(answer["result"]["content"][0]["text"], "'aaa'");
    }
}

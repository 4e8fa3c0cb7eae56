//! `pip install` in sessions: through the proxy's package index, which mirrors a loopback PEP 503
//! index (pypiserver, from PyPI, serving a directory of wheels the test builds) and caches its
//! files on the host. Real binary, real confined sessions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::*;
use crate::sandbox::{is_error, text};

/// Builds the pure-Python wheel `NAME-1.0-py3-none-any.whl` (a module holding `VALUE = 42`) in
/// `dir`, with the runtime's Python (zipfile).
fn build_wheel(dir: &Path, name: &str) {
    /// One script for the suite and the bench.
    const BUILD: &str = include_str!("../../../../tests/fixtures/build_wheel.py");
    let python = checkout().join(".deps/python-runtime/bin/python");
    let status = Command::new(python)
        .args(["-c", BUILD, dir.to_str().unwrap(), name])
        .status()
        .unwrap();
    assert!(status.success());
}

/// pypiserver's `pypi-server`: `TOOLGATE_TEST_PYPI_SERVER`, else the test venv's
/// (`scripts/deps.sh` installs it there).
fn pypi_server() -> PathBuf {
    let path = std::env::var("TOOLGATE_TEST_PYPI_SERVER").map_or_else(
        |_| checkout().join(".deps/venv/bin/pypi-server"),
        PathBuf::from,
    );
    assert!(
        path.is_file(),
        "no pypi-server at {}: run scripts/deps.sh (or set TOOLGATE_TEST_PYPI_SERVER)",
        path.display()
    );
    path
}

/// A PEP 503 index on loopback serving `dir`, killed when dropped.
struct Index {
    child: Child,
    port: u16,
}

impl Index {
    async fn start(dir: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(pypi_server())
            .args(["run", "-i", "127.0.0.1", "-p", &port.to_string()])
            .args(["-a", ".", "-P", ".", "--hash-algo", "sha256"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let index = Self { child, port };
        let started = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "pypi-server did not start"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        index
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Index {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The run's network record (of a `code` or a `bash` call).
fn network(result: &Value) -> Vec<Value> {
    let content = &result["structuredContent"];
    let run = if content["bash"].is_object() {
        &content["bash"]
    } else {
        &content["python"]
    };
    run["network"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn pip_installs_from_the_operators_index_and_a_second_session_from_the_cache() {
    let wheels = tempfile::tempdir().unwrap();
    build_wheel(wheels.path(), "tgsuite_demo");
    let mut index = Index::start(wheels.path()).await;
    let url = format!("http://127.0.0.1:{}/simple/", index.port);
    let f = fixture_with(&["--pip-index-url", &url]).await;

    // bash's pip, then the package imported in the next call
    let result = f
        .write(json!({"bash": "pip install tgsuite_demo", "session_id": "pip-1"}))
        .await;
    assert!(!is_error(&result), "{result}");
    assert!(
        text(&result).contains("Successfully installed tgsuite_demo-1.0"),
        "{result}"
    );
    let reached = network(&result);
    assert!(!reached.is_empty(), "{result}");
    for record in &reached {
        assert_eq!(record["host"], "pypi.toolgate.internal", "{record}");
        assert_eq!(record["kind"], "index", "{record}");
        assert!(record.get("refused").is_none(), "{record}");
    }
    // the wheel is in the host's cache, named by its SHA-256
    let cached: Vec<String> = std::fs::read_dir(f._dir.path().join("wheels"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(cached.len(), 1, "{cached:?}");
    assert!(
        cached[0].len() == 64 && cached[0].bytes().all(|b| b.is_ascii_hexdigit()),
        "{cached:?}"
    );
    let result = f
        .write(json!({"code": "import tgsuite_demo\nprint(tgsuite_demo.VALUE, tgsuite_demo.__file__)", "session_id": "pip-1"}))
        .await;
    assert!(!is_error(&result), "{result}");
    assert!(
        text(&result).starts_with("42 /workspace/.local/lib/python3"),
        "{result}"
    );

    // the upstream index gone: another session installs from the host's cache, from Python
    index.stop();
    let code = "import subprocess, sys, time\n\
                t0 = time.perf_counter()\n\
                r = subprocess.run([sys.executable, '-m', 'pip', 'install', 'tgsuite_demo'],\n\
                \x20                  capture_output=True, text=True)\n\
                took = time.perf_counter() - t0\n\
                print(r.returncode, r.stdout[-300:], r.stderr[-600:])\n\
                print(f'pip install took {took:.3f} s')";
    let result = f.write(json!({"code": code, "session_id": "pip-2"})).await;
    assert!(!is_error(&result), "{result}");
    let out = text(&result);
    assert!(out.starts_with("0 "), "{result}");
    assert!(
        out.contains("Successfully installed tgsuite_demo-1.0"),
        "{result}"
    );
    eprintln!(
        "second session, cached wheel: {}",
        out.lines().last().unwrap_or_default()
    );
    let result = f
        .write(json!({"code": "import tgsuite_demo\ntgsuite_demo.VALUE", "session_id": "pip-2"}))
        .await;
    assert!(!is_error(&result), "{result}");
    assert!(text(&result).contains("42"), "{result}");
}

//! Shared harness for the binary's integration tests: start the real `toolgate` on a free
//! loopback port over a real SQLite file (or a fresh PostgreSQL database), run its operator
//! commands, and speak JSON-RPC to it over real HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

mod cluster;
mod dashboard;
mod oauth;
mod rpc;
mod sandboxed;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use toolgate_domain::{AccountId, MonthKey};
use toolgate_store::Store;
use toolgate_store_postgres::PgStore;
use toolgate_store_sqlite::{Durability, SqliteStore};

pub use cluster::*;
pub use dashboard::*;
pub use oauth::*;
pub use rpc::*;
pub use sandboxed::*;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

/// The eight fields of the billing status record.
pub const BILLING_FIELDS: [&str; 8] = [
    "tier",
    "free_remaining_this_month",
    "free_monthly_limit",
    "wallet_balance_usd",
    "paid_calls_available",
    "paid_call_cost_usd",
    "min_topup_usd",
    "max_topup_usd",
];

/// Where a server and the operator commands keep their data.
#[derive(Clone, Debug)]
pub struct Storage {
    /// `--data-dir` (always given, also with PostgreSQL, so nothing lands in the cwd).
    pub data_dir: PathBuf,
    /// `--database-url`, for PostgreSQL.
    pub database_url: Option<String>,
}

impl Storage {
    /// The embedded SQLite file inside `dir`.
    pub fn sqlite(dir: &Path) -> Self {
        Self {
            data_dir: dir.to_owned(),
            database_url: None,
        }
    }

    /// PostgreSQL at `url`; `dir` still serves as the data directory.
    pub fn postgres(dir: &Path, url: &str) -> Self {
        Self {
            data_dir: dir.to_owned(),
            database_url: Some(url.to_owned()),
        }
    }

    pub fn args(&self) -> Vec<String> {
        let mut args = vec!["--data-dir".to_owned(), self.data_dir.display().to_string()];
        if let Some(url) = &self.database_url {
            args.push("--database-url".to_owned());
            args.push(url.clone());
        }
        args
    }

    /// Opens the same storage the server uses, directly, to read the ledger.
    pub async fn open_store(&self) -> Arc<dyn Store> {
        match &self.database_url {
            Some(url) => Arc::new(
                PgStore::connect(url)
                    .await
                    .expect("open the PostgreSQL store"),
            ),
            None => Arc::new(
                SqliteStore::open(&self.data_dir.join("toolgate.db"), Durability::Normal)
                    .await
                    .expect("open the SQLite store"),
            ),
        }
    }

    /// `(free, paid)` ledger rows of `account_id` this month, read from storage directly.
    pub async fn ledger_counts(&self, account_id: &str) -> (i64, i64) {
        let store = self.open_store().await;
        store
            .ledger_counts(
                &AccountId::from_stored(account_id.to_owned()),
                &MonthKey::now(),
            )
            .await
            .expect("ledger_counts")
    }
}

/// How a server process is started: its role (`serve`, `node`) and a wrapper it runs under
/// (e.g. `setpriv` dropping root), if any.
#[derive(Debug, Clone)]
pub struct Launch {
    pub role: &'static str,
    pub wrapper: Vec<String>,
    /// `--listen` [default: 127.0.0.1:0]
    pub listen: Option<String>,
}

impl Launch {
    /// `toolgate serve`, as the test runs.
    pub fn serve() -> Self {
        Self {
            role: "serve",
            wrapper: Vec::new(),
            listen: None,
        }
    }

    fn command(&self) -> Command {
        match self.wrapper.split_first() {
            None => toolgate(),
            Some((program, args)) => {
                let mut command = toolgate_under(program);
                command.args(args).arg(BIN);
                command
            }
        }
    }
}

/// A `Command` for the binary with an environment free of the caller's `TOOLGATE_*` settings.
pub fn toolgate() -> Command {
    toolgate_under(BIN)
}

/// A `Command` for `program` (the binary, or what starts it) with that clean environment.
fn toolgate_under(program: &str) -> Command {
    let mut command = Command::new(program);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("TOOLGATE_") {
            command.env_remove(&name);
        }
    }
    // Most tests are about the spine; the sandbox tests turn it on with `--sandbox on`.
    command
        .env("NO_COLOR", "1")
        .env("TOOLGATE_SANDBOX", "off")
        .stdin(Stdio::null());
    command
}

/// What a finished command printed.
#[derive(Debug)]
pub struct CliOutput {
    /// `Some(0)` on success.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl CliOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// Longest a command may run before it is killed (a `serve` that should have refused to start).
const CLI_LIMIT: Duration = Duration::from_secs(60);

/// Runs `toolgate ARGS [storage args]` with extra environment variables. A command still
/// running after a minute is killed and reported with `code: None`.
pub fn cli(storage: Option<&Storage>, args: &[&str], env: &[(&str, &str)]) -> CliOutput {
    let mut command = toolgate();
    command.args(args);
    if let Some(storage) = storage {
        command.args(storage.args());
    }
    command.envs(env.iter().copied());
    let stdout = tempfile::NamedTempFile::new().expect("a file for stdout");
    let stderr = tempfile::NamedTempFile::new().expect("a file for stderr");
    command
        .stdout(stdout.reopen().expect("reopen stdout file"))
        .stderr(stderr.reopen().expect("reopen stderr file"));
    let mut child = command.spawn().expect("run the toolgate binary");
    let deadline = Instant::now() + CLI_LIMIT;
    let code = loop {
        if let Some(status) = child.try_wait().expect("poll the command") {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let read = |file: &tempfile::NamedTempFile| {
        String::from_utf8_lossy(&std::fs::read(file.path()).unwrap_or_default()).into_owned()
    };
    CliOutput {
        code,
        stdout: read(&stdout),
        stderr: read(&stderr),
    }
}

/// Runs a command that must succeed and print one JSON object.
pub fn cli_json(storage: &Storage, args: &[&str]) -> Value {
    let out = cli(Some(storage), args, &[]);
    assert!(out.success(), "toolgate {args:?} failed: {out:?}");
    serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("toolgate {args:?} printed no JSON ({e}): {out:?}"))
}

/// An account as `account create` / `account rotate-key` print it.
#[derive(Clone, Debug)]
pub struct Account {
    pub id: String,
    pub email: String,
    pub key: String,
    pub personal_url: String,
}

impl Account {
    fn from_json(value: &Value) -> Self {
        let text = |name: &str| {
            value[name]
                .as_str()
                .unwrap_or_else(|| panic!("no string `{name}` in {value}"))
                .to_owned()
        };
        Self {
            id: text("account_id"),
            email: text("email"),
            key: text("api_key"),
            personal_url: text("personal_url"),
        }
    }
}

/// `account create --email E`; checks the printed key's shape.
pub fn create_account(storage: &Storage, email: &str) -> Account {
    let account = Account::from_json(&cli_json(storage, &["account", "create", "--email", email]));
    assert_key_shape(&account.key);
    assert!(
        account
            .personal_url
            .ends_with(&format!("/u/{}", account.key)),
        "{account:?}"
    );
    account
}

/// `account rotate-key --email E`.
pub fn rotate_key(storage: &Storage, email: &str) -> Account {
    let account = Account::from_json(&cli_json(
        storage,
        &["account", "rotate-key", "--email", email],
    ));
    assert_key_shape(&account.key);
    account
}

/// `wallet credit --email E --usd X`: the billing status record it prints.
pub fn credit(storage: &Storage, email: &str, usd: &str) -> Value {
    let record = cli_json(
        storage,
        &["wallet", "credit", "--email", email, "--usd", usd],
    );
    assert_billing_record(&record);
    record
}

/// `svck_` followed by 64 lowercase hex characters.
pub fn assert_key_shape(key: &str) {
    let hex = key
        .strip_prefix("svck_")
        .unwrap_or_else(|| panic!("key without svck_ prefix: {key}"));
    assert_eq!(hex.len(), 64, "{key}");
    assert!(
        hex.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{key}"
    );
}

/// The record has exactly the eight fields with the specified types and formats.
pub fn assert_billing_record(record: &Value) {
    let object = record
        .as_object()
        .unwrap_or_else(|| panic!("billing record is not an object: {record}"));
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    let mut expected = BILLING_FIELDS.to_vec();
    expected.sort_unstable();
    assert_eq!(keys, expected, "billing record fields: {record}");
    for name in [
        "tier",
        "wallet_balance_usd",
        "paid_call_cost_usd",
        "min_topup_usd",
        "max_topup_usd",
    ] {
        assert!(
            record[name].is_string(),
            "{name} must be a string: {record}"
        );
    }
    for name in [
        "free_remaining_this_month",
        "free_monthly_limit",
        "paid_calls_available",
    ] {
        assert!(
            record[name].as_i64().is_some_and(|n| n >= 0),
            "{name} must be a non-negative integer: {record}"
        );
    }
    for name in ["wallet_balance_usd", "min_topup_usd", "max_topup_usd"] {
        assert!(
            is_two_decimals(record[name].as_str().unwrap()),
            "{name} must have two decimals: {record}"
        );
    }
    assert_eq!(record["tier"], "free", "{record}");
}

fn is_two_decimals(text: &str) -> bool {
    match text.split_once('.') {
        Some((whole, cents)) => {
            !whole.is_empty()
                && whole.bytes().all(|b| b.is_ascii_digit())
                && cents.len() == 2
                && cents.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}

/// Micro-dollars as the record shows a wallet: two decimals, truncated.
pub fn usd_cents(micros: i64) -> String {
    let cents = micros / 10_000;
    format!("{}.{:02}", cents / 100, cents % 100)
}

/// A running `toolgate serve`; killed (SIGKILL) when dropped.
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    /// `http://127.0.0.1:PORT`, also the public URL.
    pub base: String,
    /// stdout and stderr of the process.
    pub log: PathBuf,
}

impl Server {
    /// Starts `toolgate serve` on `storage` with extra flags and waits for `/healthz`.
    pub async fn start(storage: &Storage, extra: &[&str]) -> Server {
        Self::start_with_env(storage, extra, &[]).await
    }

    /// Like [`Server::start`], with extra environment variables. The server binds port 0 and
    /// announces the port it got on stdout: nothing binds a port here to hand it over later.
    pub async fn start_with_env(storage: &Storage, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut args = storage.args();
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        Self::launch(&Launch::serve(), &storage.data_dir, &args, env).await
    }

    /// Starts `toolgate <role>` (behind the launch's wrapper, if any) with `args`, its log in
    /// `log_dir`, and waits until it announces its address (and, for `serve`, is healthy).
    pub async fn launch(
        launch: &Launch,
        log_dir: &Path,
        args: &[String],
        env: &[(&str, &str)],
    ) -> Server {
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = log_dir.join(format!(
            "{}-{n}.log",
            if launch.role == "serve" {
                "server"
            } else {
                launch.role
            }
        ));
        let file = File::create(&log).expect("create the server log");
        let mut command = launch.command();
        command
            .arg(launch.role)
            .args([
                "--listen",
                launch.listen.as_deref().unwrap_or("127.0.0.1:0"),
            ])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(file);
        let mut child = command.spawn().expect("spawn toolgate");
        let stdout = child.stdout.take().expect("the server's stdout");
        let mut server = Server {
            child: Some(child),
            port: 0,
            base: String::new(),
            log,
        };
        let Some(bound) = announced(stdout).await else {
            let log = server.log_text();
            server.kill();
            panic!(
                "toolgate {} announced no address; its log:\n{log}",
                launch.role
            );
        };
        server.port = bound.port();
        server.base = format!("http://127.0.0.1:{}", server.port);
        if launch.role != "serve" {
            // a node may listen in a network namespace of the test's, on its own address
            server.base = format!("http://{bound}");
            return server;
        }
        let healthy = client()
            .get(server.url("/healthz"))
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .is_ok_and(|response| response.status() == 200);
        if !healthy {
            let log = server.log_text();
            server.kill();
            panic!("toolgate serve did not answer /healthz; its log:\n{log}");
        }
        server
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The personal URL of `key`.
    pub fn personal(&self, key: &str) -> String {
        self.url(&format!("/u/{key}"))
    }

    /// SIGKILL and reap; a no-op when already done.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the server runs").id()
    }

    /// The server's resident memory, in KiB (`VmRSS`).
    pub fn rss_kib(&self) -> u64 {
        let pid = self.pid();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/PID/status")
    }

    /// Waits until the log holds `marker` (the access log is written by a background thread),
    /// then returns the whole log; fails when the marker has not come within 10 s.
    pub async fn log_after(&self, marker: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = self.log_text();
            if text.contains(marker) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "{marker:?} did not reach the server's log within 10 s; the log:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The log up to now, complete: a request of its own is answered and its access-log line
    /// awaited. The log writer keeps the order in which lines were logged, so every line logged
    /// before the marker's is in the file. For checks that something is *not* in the log while
    /// the server goes on; at the end of a test [`Server::stop_and_read_log`] is surer.
    pub async fn settled_log(&self) -> String {
        static MARKS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = MARKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // short: the access log hides any run of 16 or more key-like characters
        let marker = format!("log-marker={}:{n}", std::process::id());
        let reply = send(client().get(self.url(&format!("/healthz?{marker}")))).await;
        assert_eq!(reply.status, 200, "the marker request: {reply:?}");
        self.log_after(&marker).await
    }

    /// Stops the server as an operator does (SIGTERM) and returns its whole log. The server
    /// must exit on its own, which flushes its log writer, and the log must run from the
    /// start-up line to the shutdown line: a check that something is absent from it then
    /// reads everything the server wrote, not a file still being written.
    pub fn stop_and_read_log(&mut self) -> String {
        let exited = self.stop();
        let log = self.log_text();
        assert!(
            exited,
            "the server did not stop within 20 s of SIGTERM and was killed, so its log may be cut short:\n{log}"
        );
        assert!(
            log.contains("toolgate serving") && log.contains("shutting down"),
            "the server's log lacks its start-up or shutdown line:\n{log}"
        );
        log
    }

    /// Everything the process wrote so far; a log that cannot be read fails the test (an
    /// unreadable log would make every "never in the log" check pass).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log)
            .unwrap_or_else(|e| panic!("cannot read the server's log {}: {e}", self.log.display()))
    }

    /// `GET /billing/status` with a bearer key; must answer 200 with the record.
    pub async fn billing(&self, key: &str) -> Value {
        let reply = send(client().get(self.url("/billing/status")).bearer_auth(key)).await;
        assert_eq!(reply.status, 200, "billing status: {reply:?}");
        let record = reply.json();
        assert_billing_record(&record);
        record
    }

    /// Free calls left, from `GET /billing/status`.
    pub async fn free_remaining(&self, key: &str) -> i64 {
        self.billing(key).await["free_remaining_this_month"]
            .as_i64()
            .unwrap()
    }
}

impl Server {
    /// Stops the server as an operator does (SIGTERM: drain, then end every sandbox session with
    /// its processes, mounts and cgroups), killing it only if it has not exited within 20 s.
    /// Whether it exited on its own (`true` also when it was already stopped).
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The address a starting `toolgate serve` announces on its stdout once it is bound (its one
/// line there), or `None` if it ends, or says nothing within 60 s. The rest of its stdout is
/// drained so that the server never blocks on it.
async fn announced(stdout: std::process::ChildStdout) -> Option<std::net::SocketAddr> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(stdout).lines();
        let first = lines.next().and_then(Result::ok);
        let _ = tx.send(first);
        for _ in lines {}
    });
    let line = tokio::time::timeout(Duration::from_secs(60), rx)
        .await
        .ok()?
        .ok()??;
    let announced: Value = serde_json::from_str(&line).ok()?;
    announced["listening"].as_str()?.parse().ok()
}

/// A builder for the tests' HTTP clients: the build's reqwest carries no TLS provider of its own
/// (see toolgate-fetch), so the process's is installed first.
pub fn client_builder() -> reqwest::ClientBuilder {
    toolgate_fetch::install_tls_provider();
    reqwest::Client::builder()
}

/// A plain HTTP client (no proxy, bounded waits). It reuses a keep-alive connection only while
/// it has been idle under 5 s, as httpx (the Python SDK's client) does: the server closes one
/// idle for 10 s (`header_read_timeout`), and a request sent on it just then is reset.
pub fn client() -> reqwest::Client {
    client_builder()
        .no_proxy()
        .pool_idle_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(60))
        .build()
        .expect("build the HTTP client")
}

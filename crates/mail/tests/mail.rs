//! Both mailers against the real thing: `Smtp` against an aiosmtpd server
//! (scripts/smtp-sink.py, installed by scripts/deps.sh), `Outbox` against the file system; every
//! message is read back by Python's own RFC 5322 parser.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use toolgate_domain::Email;
use toolgate_mail::{Outbox, Smtp};
use toolgate_ports::mail::{Mail, MailError, Mailer};

const PYTHON: &str = "/usr/bin/python3";
const SINK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/smtp-sink.py");
const FROM: &str = "Toolgate <login@toolgate.example>";
const PASSWORD: &str = "hunter2-s3cr3t";

/// A running smtp-sink.py, killed when dropped.
struct Sink {
    _child: Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl Sink {
    /// Starts the sink with `args` after its folder.
    async fn start(args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut command = Command::new(PYTHON);
        command.arg(SINK).arg(dir.path()).args(args);
        if args.contains(&"--starttls") {
            // The refused handshake is the point of that test; aiosmtpd prints its traceback.
            command.stderr(Stdio::null());
        }
        let mut child = command
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs scripts/smtp-sink.py (scripts/deps.sh installs aiosmtpd)");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("the sink starts within 20 s")
            .unwrap()
            .expect("the sink prints READY <port> (is python3-aiosmtpd installed?)");
        let port = line
            .strip_prefix("READY ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        Self {
            _child: child,
            dir,
            port,
        }
    }

    /// The `n`th message the sink saved (it saves before it answers 250).
    fn message(&self, n: usize) -> PathBuf {
        let path = self.dir.path().join(format!("{n}.eml"));
        assert!(path.exists(), "{} was not saved", path.display());
        path
    }
}

/// What Python's `email` package reads from a message file.
#[derive(Debug)]
struct Parsed {
    to: String,
    from: String,
    subject: String,
    body: String,
    defects: Vec<String>,
    raw: String,
}

fn parse(path: &Path) -> Parsed {
    let script = r#"
import email, email.policy, json, sys
raw = open(sys.argv[1], "rb").read()
m = email.message_from_bytes(raw, policy=email.policy.default)
print(json.dumps({
    "to": str(m["To"]), "from": str(m["From"]), "subject": str(m["Subject"]),
    "body": m.get_content(), "defects": [repr(d) for d in m.defects],
    "raw": raw.decode("utf-8"),
}))
"#;
    let output = std::process::Command::new(PYTHON)
        .args(["-c", script])
        .arg(path)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let value: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let text = |key: &str| value[key].as_str().unwrap().to_owned();
    Parsed {
        to: text("to"),
        from: text("from"),
        subject: text("subject"),
        body: text("body"),
        defects: value["defects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap().to_owned())
            .collect(),
        raw: text("raw"),
    }
}

/// A sign-in link longer than quoted-printable's 76-character lines.
fn link() -> String {
    format!(
        "https://toolgate.example/magic-link/verify?token={}&next=%2Fdashboard",
        "Zx9_".repeat(30)
    )
}

fn mail(to: &str, text: String) -> Mail {
    Mail {
        to: Email::parse(to).unwrap(),
        subject: "Your Toolgate sign-in link — valid 15 minutes".to_owned(),
        text,
        link: Some(link()),
    }
}

fn sign_in_text() -> String {
    format!(
        "Hello,\n\nOpen this link to sign in:\n\n{}\n\nIf you did not ask for it, ignore this mail.\n",
        link()
    )
}

/// Checks a delivered sign-in mail as a reader would see it.
fn assert_sign_in_mail(parsed: &Parsed, to: &str, text: &str) {
    assert!(parsed.defects.is_empty(), "{parsed:?}");
    assert_eq!(parsed.to, to);
    assert_eq!(parsed.from, FROM);
    assert_eq!(
        parsed.subject,
        "Your Toolgate sign-in link — valid 15 minutes"
    );
    // lettre ends DATA with CRLF.CRLF after a body that already ends in CRLF: one blank line
    // more at the end over SMTP, which changes nothing a reader sees.
    assert_eq!(
        parsed.body.replace("\r\n", "\n").trim_end(),
        text.trim_end()
    );
    // The link is one unbroken line of the raw message, clickable as it stands.
    let link = link();
    assert!(
        parsed.raw.split("\r\n").any(|line| line == link),
        "the link is not one line of the raw message:\n{}",
        parsed.raw
    );
}

#[tokio::test]
async fn smtp_delivers_to_a_real_server_without_auth() {
    let sink = Sink::start(&[]).await;
    let smtp = Smtp::from_url(&format!("smtp://127.0.0.1:{}", sink.port), FROM).unwrap();
    smtp.send(&mail("alice@example.com", sign_in_text()))
        .await
        .unwrap();
    let parsed = parse(&sink.message(1));
    assert_sign_in_mail(&parsed, "alice@example.com", &sign_in_text());
    assert!(
        parsed.raw.contains("Content-Transfer-Encoding: 7bit"),
        "{}",
        parsed.raw
    );
}

#[tokio::test]
async fn smtp_authenticates_and_sends_utf8_as_8bit() {
    let sink = Sink::start(&["--auth", &format!("mailer:{PASSWORD}")]).await;
    let smtp = Smtp::from_url(
        &format!("smtp://mailer:{PASSWORD}@localhost:{}", sink.port),
        FROM,
    )
    .unwrap();
    let text = format!("Grüße — hier ist Ihr Link:\n\n{}\n", link());
    smtp.send(&mail("bob@example.com", text.clone()))
        .await
        .unwrap();
    smtp.send(&mail("carol@example.com", sign_in_text()))
        .await
        .unwrap();
    let first = parse(&sink.message(1));
    assert_sign_in_mail(&first, "bob@example.com", &text);
    assert!(
        first.raw.contains("Content-Transfer-Encoding: 8bit"),
        "{}",
        first.raw
    );
    assert_sign_in_mail(
        &parse(&sink.message(2)),
        "carol@example.com",
        &sign_in_text(),
    );
}

#[tokio::test]
async fn smtp_without_auth_or_with_a_wrong_password_is_refused_without_the_password() {
    let sink = Sink::start(&["--auth", &format!("mailer:{PASSWORD}")]).await;
    for url in [
        format!("smtp://127.0.0.1:{}", sink.port),
        format!("smtp://mailer:wrong-{PASSWORD}@127.0.0.1:{}", sink.port),
    ] {
        let smtp = Smtp::from_url(&url, FROM).unwrap();
        let MailError::Unavailable(detail) = smtp
            .send(&mail("alice@example.com", sign_in_text()))
            .await
            .unwrap_err();
        assert!(!detail.contains(PASSWORD), "{detail}");
        assert!(!detail.contains("token="), "{detail}");
        assert!(detail.contains(&sink.port.to_string()), "{detail}");
    }
    assert!(!sink.dir.path().join("1.eml").exists());
}

#[tokio::test]
async fn a_closed_port_is_unavailable_at_once_and_names_no_password() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let smtp = Smtp::from_url(&format!("smtp://mailer:{PASSWORD}@127.0.0.1:{port}"), FROM).unwrap();
    let started = Instant::now();
    let MailError::Unavailable(detail) = smtp
        .send(&mail("alice@example.com", sign_in_text()))
        .await
        .unwrap_err();
    assert!(started.elapsed() < toolgate_mail_timeout(), "{detail}");
    assert!(!detail.contains(PASSWORD), "{detail}");
    assert!(!detail.contains("token="), "{detail}");
    assert!(detail.contains(&format!("127.0.0.1:{port}")), "{detail}");
}

#[tokio::test]
async fn a_silent_server_is_given_up_on_after_the_timeout() {
    // Accepts the connection and never greets: the send must not hang past its bound.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let holder = tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(socket);
    });
    let smtp = Smtp::from_url(&format!("smtp://mailer:{PASSWORD}@127.0.0.1:{port}"), FROM).unwrap();
    let started = Instant::now();
    let MailError::Unavailable(detail) = smtp
        .send(&mail("alice@example.com", sign_in_text()))
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        elapsed >= toolgate_mail_timeout() - Duration::from_millis(500),
        "{elapsed:?}"
    );
    assert!(
        elapsed < toolgate_mail_timeout() + Duration::from_secs(3),
        "{elapsed:?}"
    );
    assert!(!detail.contains(PASSWORD), "{detail}");
    holder.abort();
}

/// The address the STARTTLS test gives itself in its own network namespace: a host `Smtp`
/// does not treat as loopback (a documentation address, routed nowhere).
const OTHER_HOST: &str = "192.0.2.25";

/// Set in the copy of this test binary that runs inside the namespace.
const IN_OWN_NETWORK: &str = "TOOLGATE_MAIL_TEST_IN_OWN_NETWORK";

/// Runs this binary's test `name` again, alone, in a network namespace of its own (`unshare
/// --net`, util-linux), and fails with its output unless it ran there and passed. No machine
/// lacks the address the test needs, so the test never skips; a machine where the namespace
/// cannot be made (not root, no `unshare`) fails here, saying so.
async fn run_in_own_network(name: &str) {
    let exe = std::env::current_exe().unwrap();
    let output = Command::new("unshare")
        .args(["--net", "--"])
        .arg(&exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(IN_OWN_NETWORK, "1")
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run util-linux's unshare: {e}"));
    let shown = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !shown.contains("unshare failed"),
        "this test needs a network namespace of its own: run it as root (CAP_SYS_ADMIN)\n{shown}"
    );
    assert!(
        output.status.success(),
        "{name} failed in its own network namespace:\n{shown}"
    );
    assert!(
        shown.contains("1 passed"),
        "{name} did not run in its own network namespace:\n{shown}"
    );
}

/// Inside the namespace: loopback up, and [`OTHER_HOST`] on one end of a veth pair (a virtual
/// cable whose two ends both live here; a dummy interface would do, but not every kernel has
/// that module). Nothing outside the namespace changes.
fn own_network() -> std::net::IpAddr {
    for args in [
        &["link", "set", "lo", "up"][..],
        &[
            "link",
            "add",
            "tg-mail",
            "type",
            "veth",
            "peer",
            "name",
            "tg-mail-peer",
        ],
        &["addr", "add", &format!("{OTHER_HOST}/24"), "dev", "tg-mail"],
        &["link", "set", "tg-mail", "up"],
        &["link", "set", "tg-mail-peer", "up"],
    ] {
        let out = std::process::Command::new("ip")
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run `ip` (Debian's iproute2): {e}"));
        assert!(
            out.status.success(),
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    OTHER_HOST.parse().unwrap()
}

/// A self-signed certificate and key for `localhost`, which no client trusts.
fn self_signed(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `openssl` to make a certificate: {e}"));
    assert!(
        out.status.success(),
        "openssl made no certificate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

#[tokio::test]
async fn smtp_to_another_host_takes_starttls_when_offered_and_loopback_stays_plain() {
    if std::env::var_os(IN_OWN_NETWORK).is_none() {
        return run_in_own_network(
            "smtp_to_another_host_takes_starttls_when_offered_and_loopback_stays_plain",
        )
        .await;
    }
    let ip = own_network();
    let keys = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(keys.path());
    // Not offered: opportunistic STARTTLS delivers in plain.
    let plain = Sink::start(&["--host", "0.0.0.0"]).await;
    Smtp::from_url(&format!("smtp://{ip}:{}", plain.port), FROM)
        .unwrap()
        .send(&mail("alice@example.com", sign_in_text()))
        .await
        .unwrap();
    assert_sign_in_mail(
        &parse(&plain.message(1)),
        "alice@example.com",
        &sign_in_text(),
    );

    // Offered with a certificate nobody trusts: the upgrade is attempted (and fails on the
    // certificate) rather than the password and the link going out in the clear.
    let starttls = format!("{}:{}", cert.display(), key.display());
    let offering = Sink::start(&["--host", "0.0.0.0", "--starttls", &starttls]).await;
    let url = format!("smtp://mailer:{PASSWORD}@{ip}:{}", offering.port);
    let MailError::Unavailable(detail) = Smtp::from_url(&url, FROM)
        .unwrap()
        .send(&mail("alice@example.com", sign_in_text()))
        .await
        .unwrap_err();
    assert!(detail.contains("invalid peer certificate"), "{detail}");
    assert!(!detail.contains(PASSWORD), "{detail}");
    assert!(!offering.dir.path().join("1.eml").exists());

    // ?tls=required insists even on loopback: on the certificate where STARTTLS is offered,
    // and where it is not, nothing goes out in plain
    let required = format!("smtp://127.0.0.1:{}?tls=required", offering.port);
    let MailError::Unavailable(detail) = Smtp::from_url(&required, FROM)
        .unwrap()
        .send(&mail("alice@example.com", sign_in_text()))
        .await
        .unwrap_err();
    assert!(detail.contains("invalid peer certificate"), "{detail}");
    let required = format!("smtp://127.0.0.1:{}?tls=required", plain.port);
    let MailError::Unavailable(detail) = Smtp::from_url(&required, FROM)
        .unwrap()
        .send(&mail("bob@example.com", sign_in_text()))
        .await
        .unwrap_err();
    assert!(detail.contains("STARTTLS"), "{detail}");
    assert!(!plain.dir.path().join("2.eml").exists());
    // a bare smtp:// to loopback stays plain
    Smtp::from_url(&format!("smtp://127.0.0.1:{}", offering.port), FROM)
        .unwrap()
        .send(&mail("bob@example.com", sign_in_text()))
        .await
        .unwrap();
    assert_sign_in_mail(
        &parse(&offering.message(1)),
        "bob@example.com",
        &sign_in_text(),
    );
}

fn toolgate_mail_timeout() -> Duration {
    toolgate_mail::SEND_TIMEOUT
}

/// Collects what the fmt subscriber writes, to read the log back.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_outbox_writes_private_parseable_files_and_logs_the_link() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("data/outbox");
    let outbox = Outbox::new(&dir, FROM).unwrap();
    assert_eq!(outbox.dir(), dir);
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{mode:o}");

    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    outbox
        .send(&mail("alice@example.com", sign_in_text()))
        .await
        .unwrap();
    outbox
        .send(&mail("bob@example.com", sign_in_text()))
        .await
        .unwrap();
    drop(guard);

    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(
        files.len(),
        2,
        "only the two messages, no temporary: {files:?}"
    );
    let mut recipients = Vec::new();
    for file in &files {
        let name = file.file_name().unwrap().to_str().unwrap();
        assert!(name.ends_with(".eml") && !name.starts_with('.'), "{name}");
        let mode = std::fs::metadata(file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{name}: {mode:o}");
        let parsed = parse(file);
        assert_sign_in_mail(&parsed, &parsed.to.clone(), &sign_in_text());
        recipients.push(parsed.to);
    }
    recipients.sort();
    assert_eq!(recipients, ["alice@example.com", "bob@example.com"]);

    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(log.contains("alice@example.com"), "{log}");
    assert!(log.contains(&link()), "{log}");
    assert_eq!(log.lines().count(), 2, "{log}");
}

#[tokio::test]
async fn the_outbox_tightens_an_existing_folder_and_refuses_a_bad_from() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("outbox");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    Outbox::new(&dir, "login@toolgate.example").unwrap();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{mode:o}");

    let err = Outbox::new(&dir, "Toolgate login@")
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("mail_from \"Toolgate login@\""), "{err}");

    let file = root.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let err = Outbox::new(file.join("outbox"), FROM)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("cannot prepare the mail outbox"), "{err}");
}

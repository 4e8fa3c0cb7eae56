//! The local default: each message becomes an `.eml` file in a private folder, and its sign-in
//! link is logged so an operator without a mail server can still sign in.

use std::fs::{DirBuilder, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use lettre::message::Mailbox;
use toolgate_ports::mail::{Mail, MailError, Mailer};

use crate::{SetupError, build_message, parse_from};

/// Writes messages as `.eml` files under one folder (mode 0700, files 0600: they carry sign-in
/// links).
pub struct Outbox {
    dir: PathBuf,
    from: Mailbox,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Outbox {
    /// An outbox in `dir` (created 0700 if missing, tightened to 0700 if not), sending as
    /// `mail_from`.
    pub fn new(dir: impl Into<PathBuf>, mail_from: &str) -> Result<Self, SetupError> {
        let dir = dir.into();
        let from = parse_from(mail_from)?;
        let fail = |source| SetupError::Outbox {
            path: dir.display().to_string(),
            source,
        };
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(fail)?;
        // An existing folder keeps its old mode otherwise; the links inside sign anyone in.
        std::fs::set_permissions(&dir, Permissions::from_mode(0o700)).map_err(fail)?;
        Ok(Self { dir, from })
    }

    /// The folder messages are written to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[async_trait]
impl Mailer for Outbox {
    async fn send(&self, mail: &Mail) -> Result<(), MailError> {
        let bytes = build_message(&self.from, mail)?.formatted();
        let dir = self.dir.clone();
        let path = tokio::task::spawn_blocking(move || write_file(&dir, &bytes))
            .await
            .map_err(|e| MailError::Unavailable(format!("the outbox writer stopped: {e}")))??;
        match &mail.link {
            // The documented local default: the operator reads the link from the log. Only the
            // outbox does this; the SMTP mailer never logs a link.
            Some(link) => tracing::info!(
                to = %mail.to,
                link = %link,
                file = %path.display(),
                "mail written to the outbox (sign in with its link)"
            ),
            None => {
                tracing::info!(to = %mail.to, file = %path.display(), "mail written to the outbox")
            }
        }
        Ok(())
    }
}

/// Writes `bytes` under a fresh unique name: first to a hidden temporary file (0600, never
/// replacing anything), then renamed, so a reader of `*.eml` never sees half a message.
fn write_file(dir: &Path, bytes: &[u8]) -> Result<PathBuf, MailError> {
    let name = unique_name()?;
    let temporary = dir.join(format!(".{name}.tmp"));
    let path = dir.join(&name);
    let io = |what: &str, e: std::io::Error| {
        MailError::Unavailable(format!(
            "cannot {what} in the outbox {}: {e}",
            dir.display()
        ))
    };
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)
        .and_then(|mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(io("write a message", e));
    }
    if let Err(e) = std::fs::rename(&temporary, &path) {
        let _ = std::fs::remove_file(&temporary);
        return Err(io("name a message", e));
    }
    Ok(path)
}

/// `<seconds>.<nanoseconds>-<random>.eml`: sorts by time, and the random part keeps two
/// messages in the same nanosecond (or two processes) apart.
fn unique_name() -> Result<String, MailError> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let mut random = [0u8; 8];
    getrandom::fill(&mut random)
        .map_err(|e| MailError::Unavailable(format!("no randomness for a file name: {e}")))?;
    let random: String = random.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!(
        "{}.{:09}-{random}.eml",
        now.as_secs(),
        now.subsec_nanos()
    ))
}

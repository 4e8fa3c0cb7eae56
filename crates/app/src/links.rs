//! Signed links to one file of a session's workspace: a download link (`GET`, read-only) for what
//! is too large to show inline, and an upload link (one `PUT`) that brings a person's file into a
//! session without passing it through a model's context.
//!
//! A link is `<public_url>/files/<payload>.<signature>/<name>`: the payload (base64url) names the
//! kind, the account, the session, the path, the expiry and a random nonce; the signature is its
//! HMAC-SHA256 under a key derived from the vault's newest master key, so every front end of one
//! database makes and checks the same links, after a restart too, and no link carries an API key.
//! Whatever is wrong with a link (its signature, its expiry, its kind, the file) is answered the
//! same way, [`LinkRefused`], so a holder learns nothing by probing. There is no listing.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use toolgate_sandbox::{
    LimitSettings, RunRequest, SandboxSessions, SandboxSessionsError, Work, WorkspaceFile,
    workspace_path_parts,
};
use toolgate_store::SingleUseLinks;
use toolgate_vault::Vault;

use crate::turns::{Turn, Turns};

/// What the key that signs links is derived for.
const KEY_PURPOSE: &[u8] = b"workspace file links v1";

/// The payload's format version.
const VERSION: u8 = 1;

/// Random bytes per link: they make every link distinct (an upload link's one use is recorded
/// under their hash).
const NONCE_BYTES: usize = 16;

/// The operator's settings of links.
#[derive(Debug, Clone)]
pub struct LinkSettings {
    /// The externally visible base URL the links start with.
    pub public_url: String,
    /// How long a download link works.
    pub download_ttl: Duration,
    /// How long an upload link works (until its one use).
    pub upload_ttl: Duration,
}

/// Which way a link goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    /// `GET` the file.
    Download,
    /// `PUT` the file, once.
    Upload,
}

impl LinkKind {
    fn byte(self) -> u8 {
        match self {
            Self::Download => b'D',
            Self::Upload => b'U',
        }
    }
}

/// A link as its signature vouches for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkTarget {
    /// Download or upload.
    pub kind: LinkKind,
    /// The account the session belongs to (the session manager's key).
    pub account: String,
    /// The caller's session id.
    pub session: String,
    /// The file, relative to the workspace.
    pub path: String,
    /// Unix seconds after which the link is refused.
    pub expires_at: u64,
    nonce: [u8; NONCE_BYTES],
}

impl LinkTarget {
    /// The file's name (the path's last component), for a download's `Content-Disposition`.
    pub fn file_name(&self) -> &str {
        self.path
            .rsplit('/')
            .find(|part| !part.is_empty())
            .unwrap_or("file")
    }
}

/// Why a download gives no file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DownloadError {
    /// The link leads nowhere (see [`LinkRefused`]).
    #[error("no such file")]
    NoSuchFile,
    /// Too many files are being read back now (the workspace reads' turns); try again.
    #[error("too many workspace files are being read right now; try again in a few seconds")]
    Busy,
}

/// A link that does not lead anywhere: a bad signature, an expired link, a link of the other
/// kind, a missing file or session. One answer for all, so that a holder cannot probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no such file")]
pub struct LinkRefused;

/// Why a link could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The path is not one a workspace can hold.
    #[error("`path` {path:?}: {problem}")]
    BadPath {
        /// the path as given
        path: String,
        /// what is wrong with it
        problem: toolgate_sandbox::PathProblem,
    },
    /// The signing key or the randomness is not available (the vault has no key).
    #[error("links cannot be made right now")]
    Unavailable,
}

/// Why an upload by link did not land.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The link is not valid (see [`LinkRefused`]).
    #[error("no such upload link")]
    Refused,
    /// The link's one `PUT` was made already.
    #[error("this upload link was used already; ask for a new one")]
    Used,
    /// More bytes than a workspace holds.
    #[error("the file is larger than the workspace limit of {limit} bytes")]
    TooLarge {
        /// the workspace limit
        limit: u64,
    },
    /// The session refused the file (its workspace is full, a directory is in the way, …) or
    /// could not be reached; the message says why. The link's one use is spent.
    #[error(
        "the file could not be written into the session: {0}; this link is used up, ask for a new one"
    )]
    NotWritten(String),
    /// Too many files are being read or written now (the workspace reads' turns); nothing was
    /// written, the link is not used.
    #[error(
        "too many workspace files are being read or written right now; nothing was written, and the link still works: try again in a few seconds"
    )]
    Busy,
    /// The service could not record the link's use; nothing was written, the link still works.
    #[error(
        "the upload could not be taken right now; nothing was written and the link still works. Please retry."
    )]
    Unavailable,
}

/// A file read back by a download link.
#[derive(Debug)]
pub struct Download {
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Its name (the path's last component).
    pub name: String,
}

/// Makes and honours signed links to workspace files.
pub struct Links {
    vault: Arc<Vault>,
    uses: Arc<dyn SingleUseLinks>,
    sessions: Arc<dyn SandboxSessions>,
    limits: LimitSettings,
    settings: LinkSettings,
    /// Downloads and uploads hold a file whole: they take turns with reads back (`path`).
    turns: Arc<Turns>,
}

impl std::fmt::Debug for Links {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Links")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Links {
    /// Links signed under `vault`'s derived key, to files of `sessions`, whose workspaces hold
    /// at most `limits.workspace_bytes`; an upload link's use is recorded in `uses`; each
    /// download and upload takes a turn of `turns`.
    pub fn new(
        vault: Arc<Vault>,
        uses: Arc<dyn SingleUseLinks>,
        sessions: Arc<dyn SandboxSessions>,
        limits: LimitSettings,
        settings: LinkSettings,
        turns: Arc<Turns>,
    ) -> Self {
        Self {
            vault,
            uses,
            sessions,
            limits,
            settings,
            turns,
        }
    }

    /// The most bytes an upload may carry: the workspace limit.
    pub fn upload_limit(&self) -> u64 {
        self.limits.workspace_bytes
    }

    /// How long an upload link works.
    pub fn upload_ttl(&self) -> Duration {
        self.settings.upload_ttl
    }

    /// A download link to `path` of the account's session `session`.
    pub fn download_url(
        &self,
        account: &str,
        session: &str,
        path: &str,
    ) -> Result<String, LinkError> {
        self.url(LinkKind::Download, account, session, path, now())
    }

    /// An upload link to `path` of the account's session `session`.
    pub fn upload_url(
        &self,
        account: &str,
        session: &str,
        path: &str,
    ) -> Result<String, LinkError> {
        self.url(LinkKind::Upload, account, session, path, now())
    }

    /// A signed link of `kind`, made at `now` (Unix seconds).
    pub(crate) fn url(
        &self,
        kind: LinkKind,
        account: &str,
        session: &str,
        path: &str,
        now: u64,
    ) -> Result<String, LinkError> {
        workspace_path_parts(path).map_err(|problem| LinkError::BadPath {
            path: path.to_owned(),
            problem,
        })?;
        let ttl = match kind {
            LinkKind::Download => self.settings.download_ttl,
            LinkKind::Upload => self.settings.upload_ttl,
        };
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut nonce).map_err(|_| LinkError::Unavailable)?;
        let target = LinkTarget {
            kind,
            account: account.to_owned(),
            session: session.to_owned(),
            path: path.to_owned(),
            expires_at: now.saturating_add(ttl.as_secs()),
            nonce,
        };
        let token = self.sign(&target)?;
        Ok(format!(
            "{}/files/{token}/{}",
            self.settings.public_url.trim_end_matches('/'),
            shown_name(target.file_name())
        ))
    }

    /// `<payload>.<signature>` of `target`.
    fn sign(&self, target: &LinkTarget) -> Result<String, LinkError> {
        let payload = encode(target);
        let tag = self.mac(&payload)?.finalize().into_bytes();
        Ok(format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(&payload),
            URL_SAFE_NO_PAD.encode(tag)
        ))
    }

    fn mac(&self, payload: &[u8]) -> Result<Hmac<Sha256>, LinkError> {
        let key = self
            .vault
            .derive_key(KEY_PURPOSE)
            .map_err(|_| LinkError::Unavailable)?;
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key.as_ref())
            .map_err(|_| LinkError::Unavailable)?;
        mac.update(payload);
        Ok(mac)
    }

    /// What `token` (`<payload>.<signature>`) links to, if its signature holds (compared in
    /// constant time), it is of `kind` and it has not expired at `now` (Unix seconds).
    pub(crate) fn verify(
        &self,
        token: &str,
        kind: LinkKind,
        now: u64,
    ) -> Result<LinkTarget, LinkRefused> {
        let (payload, tag) = token.split_once('.').ok_or(LinkRefused)?;
        let payload = URL_SAFE_NO_PAD.decode(payload).map_err(|_| LinkRefused)?;
        let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| LinkRefused)?;
        self.mac(&payload)
            .map_err(|_| LinkRefused)?
            .verify_slice(&tag)
            .map_err(|_| LinkRefused)?;
        let target = decode(&payload).ok_or(LinkRefused)?;
        if target.kind != kind || now >= target.expires_at {
            return Err(LinkRefused);
        }
        Ok(target)
    }

    /// The file a download link names, read whole from its session (never starting one), in a
    /// turn of the account's.
    pub async fn download(&self, token: &str) -> Result<Download, DownloadError> {
        let target = self
            .verify(token, LinkKind::Download, now())
            .map_err(|_| DownloadError::NoSuchFile)?;
        let _turn = self
            .turns
            .turn(&target.account)
            .await
            .map_err(|_| DownloadError::Busy)?;
        let read = self
            .sessions
            .read_file(
                &target.account,
                &target.session,
                &target.path,
                self.limits.workspace_bytes,
            )
            .await
            .map_err(|error| {
                if let SandboxSessionsError::Unavailable(source) = &error {
                    tracing::warn!(error = %source, "a download link's file could not be read");
                }
                DownloadError::NoSuchFile
            })?;
        if read.size > read.bytes.len() as u64 {
            // grew past the limit since: never a part as the whole
            return Err(DownloadError::NoSuchFile);
        }
        Ok(Download {
            name: target.file_name().to_owned(),
            bytes: read.bytes,
        })
    }

    /// Checks an upload link before its body is read.
    pub fn check_upload(&self, token: &str) -> Result<LinkTarget, UploadError> {
        self.verify(token, LinkKind::Upload, now())
            .map_err(|_| UploadError::Refused)
    }

    /// A turn for the upload to `target`, taken before its body is read and held until it is
    /// written: an upload holds the file whole meanwhile.
    pub async fn upload_turn(&self, target: &LinkTarget) -> Result<Turn, UploadError> {
        self.turns
            .turn(&target.account)
            .await
            .map_err(|_| UploadError::Busy)
    }

    /// Writes `content` to the link's file in its session (starting the session if needed),
    /// after recording the link's one use: a second upload is refused on every front end.
    /// Returns the bytes written.
    pub async fn upload(&self, target: &LinkTarget, content: Vec<u8>) -> Result<u64, UploadError> {
        let limit = self.upload_limit();
        if content.len() as u64 > limit {
            return Err(UploadError::TooLarge { limit });
        }
        let expires_ms = i64::try_from(target.expires_at.saturating_mul(1000)).unwrap_or(i64::MAX);
        let first = self
            .uses
            .use_link_once(&use_key(target), expires_ms)
            .await
            .map_err(|error| {
                tracing::warn!(%error, "an upload link's use could not be recorded");
                UploadError::Unavailable
            })?;
        if !first {
            return Err(UploadError::Used);
        }
        let size = content.len() as u64;
        let limits = self
            .limits
            .for_call(None)
            .map_err(|_| UploadError::Unavailable)?;
        let request = RunRequest {
            files: vec![WorkspaceFile {
                path: target.path.clone(),
                content,
            }],
            ..RunRequest::new(
                target.account.clone(),
                Some(target.session.clone()),
                Work::Python {
                    code: String::new(),
                },
                limits,
            )
        };
        match self.sessions.run(request).await {
            Ok(_) => Ok(size),
            Err(SandboxSessionsError::Unavailable(source)) => {
                tracing::error!(error = %source, "an upload by link could not reach the sandbox");
                Err(UploadError::NotWritten(
                    "the sandbox could not take it right now".to_owned(),
                ))
            }
            Err(error) => Err(UploadError::NotWritten(error.to_string())),
        }
    }
}

/// What an upload link's use is recorded under: the hash of its nonce, which no two links share.
fn use_key(target: &LinkTarget) -> [u8; 32] {
    Sha256::digest(target.nonce).into()
}

/// A name safe in a URL's last segment: the file's name with anything but `[A-Za-z0-9._-]` as
/// `_` (the name only shows what the link is; the signed payload says which file).
fn shown_name(name: &str) -> String {
    let shown: String = name
        .chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if shown.trim_matches('.').is_empty() {
        "file".to_owned()
    } else {
        shown
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// `version, kind, expires_at (u64 BE), nonce, then account, session and path, each after its
/// length (u16 BE)`.
fn encode(target: &LinkTarget) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + target.session.len() + target.path.len());
    out.push(VERSION);
    out.push(target.kind.byte());
    out.extend_from_slice(&target.expires_at.to_be_bytes());
    out.extend_from_slice(&target.nonce);
    for text in [&target.account, &target.session, &target.path] {
        // session ids (256 bytes) and paths (4096) are checked before a link is made
        let len = u16::try_from(text.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&text.as_bytes()[..usize::from(len)]);
    }
    out
}

fn decode(payload: &[u8]) -> Option<LinkTarget> {
    let mut rest = payload;
    let mut take = |n: usize| -> Option<&[u8]> {
        let (head, tail) = (rest.get(..n)?, rest.get(n..)?);
        rest = tail;
        Some(head)
    };
    if take(1)? != [VERSION] {
        return None;
    }
    let kind = match take(1)? {
        [b'D'] => LinkKind::Download,
        [b'U'] => LinkKind::Upload,
        _ => return None,
    };
    let expires_at = u64::from_be_bytes(take(8)?.try_into().ok()?);
    let nonce: [u8; NONCE_BYTES] = take(NONCE_BYTES)?.try_into().ok()?;
    let mut text = || -> Option<String> {
        let len = u16::from_be_bytes(take(2)?.try_into().ok()?);
        String::from_utf8(take(usize::from(len))?.to_vec()).ok()
    };
    let (account, session, path) = (text()?, text()?, text()?);
    rest.is_empty().then_some(LinkTarget {
        kind,
        account,
        session,
        path,
        expires_at,
        nonce,
    })
}

#[cfg(test)]
#[path = "links_tests.rs"]
mod tests;

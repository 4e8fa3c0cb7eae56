//! Legacy MCP sessions (the 2025-11-25 handshake), held by us rather than by rmcp's session
//! manager: an entry is an owner, a last-use time and the calls in flight (for
//! `notifications/cancelled`), a few hundred bytes instead of rmcp's worker task and channels
//! (~70 KiB). The owner lives in the entry, so the owner check ends exactly when the session
//! does. Sessions are capped per account (the account's longest-idle session makes room) and in
//! total (a clear refusal).
//!
//! The table is a cache in front of the store's records (`toolgate_app::McpSessionRecords`), so
//! that any front end on one database serves any session: an entry is re-validated against the
//! store at most every [`REVALIDATE_AFTER`] (a session closed elsewhere stops being served here
//! within that), and its last use is written back at most every [`WRITE_BACK_AFTER`], off the
//! request path. A warm request thus costs no database round trip.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use toolgate_domain::{AccountId, KeyId};

/// Who makes a request's calls and in which session, for their history records; a request's
/// extension.
#[derive(Debug, Clone, Default)]
pub struct CallOrigin {
    /// The client, `name version`.
    pub client: Option<Arc<str>>,
    /// The MCP session.
    pub session: Option<Arc<str>>,
}

impl CallOrigin {
    /// The client named by a `clientInfo` object (`{name, version}`), at most 200 characters.
    pub fn client_of(info: Option<&serde_json::Value>) -> Option<Arc<str>> {
        let info = info?;
        let name = info.get("name")?.as_str()?;
        let text = match info.get("version").and_then(serde_json::Value::as_str) {
            Some(version) => format!("{name} {version}"),
            None => name.to_owned(),
        };
        Some(text.chars().take(200).collect::<String>().into())
    }
}

/// How many legacy sessions may be open, and for how long idle.
#[derive(Debug, Clone, Copy)]
pub struct McpSessionLimits {
    /// Open sessions of one account; its longest-idle session is closed for a new one.
    pub per_account: usize,
    /// Open sessions on this server; beyond it `initialize` is refused until some close.
    pub total: usize,
    /// A session without a request for this long is closed.
    pub idle: Duration,
}

impl Default for McpSessionLimits {
    fn default() -> Self {
        Self {
            per_account: 64,
            total: 100_000,
            idle: Duration::from_secs(300),
        }
    }
}

/// How long a cached session is served without asking the store whether it is still open.
pub const REVALIDATE_AFTER: Duration = Duration::from_secs(5);

/// How often, at most, a session's last use is written back to the store; the store's idle
/// check allows for this lag.
pub const WRITE_BACK_AFTER: Duration = Duration::from_secs(30);

/// How often, at most, this process purges the store of closed and long-idle records.
const PURGE_EVERY: Duration = Duration::from_secs(60);

/// What a request's session id found in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touch {
    /// Open and the caller's: serve it; `write_back` asks for its last use to be stored.
    Served {
        /// The last use is due to be written back to the store.
        write_back: bool,
    },
    /// Not known here, or idle here: the store decides, by the idle limit.
    Check,
    /// Held and used here, not checked lately: the store says whether it was closed, and
    /// records it used now.
    Recheck,
    /// Known here as another account's: refused without asking (owners never change).
    Refused,
}

impl Touch {
    /// Whether the session is served without asking the store.
    #[cfg(test)]
    pub fn is_served(self) -> bool {
        matches!(self, Self::Served { .. })
    }
}

/// Calls in flight per session whose cancellation is tracked; more still run, uncancellable
/// by notification (a client sending hundreds at once in one session is not a real client).
const TRACKED_CALLS: usize = 256;

/// Why a session could not be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// Every session of the account is busy with a call.
    #[error(
        "this key already has {0} open MCP sessions, each with a call in flight; close one (DELETE) or wait for one to finish"
    )]
    AccountFull(usize),
    /// The server holds its limit of sessions.
    #[error("the server holds as many MCP sessions as it may ({0}); try again shortly")]
    ServerFull(usize),
}

struct McpSession {
    owner: AccountId,
    /// The named key it was opened with (`None`: the first key or an OAuth token); revoking
    /// that key closes it.
    key: Option<KeyId>,
    /// The client's `name version` from its `initialize`, for the history of its calls.
    client: Option<Arc<str>>,
    last_used: Instant,
    /// When the store last confirmed it open (or it was opened here).
    checked: Instant,
    /// When its last use was last written to the store.
    written: Instant,
    /// JSON text of a request id → the token its call obeys.
    in_flight: HashMap<String, CancellationToken>,
}

#[derive(Default)]
struct Table {
    sessions: HashMap<String, McpSession>,
    per_account: HashMap<AccountId, usize>,
}

/// The open legacy sessions.
pub struct McpSessions {
    table: Mutex<Table>,
    limits: McpSessionLimits,
    last_purge: Mutex<Option<Instant>>,
}

impl McpSessions {
    /// An empty table with these limits.
    pub fn new(limits: McpSessionLimits) -> Arc<Self> {
        Arc::new(Self {
            table: Mutex::new(Table::default()),
            limits,
            last_purge: Mutex::new(None),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens a session for `owner`, returning its id.
    #[cfg(test)]
    pub fn open(&self, owner: &AccountId) -> Result<String, OpenError> {
        self.open_evicting(owner).map(|(id, _)| id)
    }

    /// Opens a session for `owner`, returning its id and the id of the account's session that
    /// was closed to make room, if one was (the store must close it too).
    pub fn open_evicting(&self, owner: &AccountId) -> Result<(String, Option<String>), OpenError> {
        let mut table = self.lock();
        let mut evicted = None;
        let now = Instant::now();
        let count = table.per_account.get(owner).copied().unwrap_or(0);
        if count >= self.limits.per_account {
            let oldest = table
                .sessions
                .iter()
                .filter(|(_, s)| &s.owner == owner && s.in_flight.is_empty())
                .min_by_key(|(_, s)| s.last_used)
                .map(|(id, _)| id.clone());
            match oldest {
                Some(id) => {
                    table.remove(&id);
                    evicted = Some(id);
                }
                None => return Err(OpenError::AccountFull(self.limits.per_account)),
            }
        }
        if table.sessions.len() >= self.limits.total {
            table.remove_expired(now, self.limits.idle);
            if table.sessions.len() >= self.limits.total {
                return Err(OpenError::ServerFull(self.limits.total));
            }
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        table
            .sessions
            .insert(id.clone(), McpSession::new(owner, now));
        *table.per_account.entry(owner.clone()).or_insert(0) += 1;
        Ok((id, evicted))
    }

    /// Caches session `id` of `owner`, which the store just found open; refused only when this
    /// server holds its limit of sessions.
    pub fn adopt(&self, id: &str, owner: &AccountId) -> Result<(), OpenError> {
        let mut table = self.lock();
        let now = Instant::now();
        if let Some(session) = table.sessions.get_mut(id) {
            session.checked = now;
            session.last_used = now;
            session.written = now;
            return Ok(());
        }
        if table.sessions.len() >= self.limits.total {
            table.remove_expired(now, self.limits.idle);
            if table.sessions.len() >= self.limits.total {
                return Err(OpenError::ServerFull(self.limits.total));
            }
        }
        table
            .sessions
            .insert(id.to_owned(), McpSession::new(owner, now));
        *table.per_account.entry(owner.clone()).or_insert(0) += 1;
        Ok(())
    }

    /// Drops session `id` from the cache (the store says it is closed), cancelling its calls.
    pub fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    /// `true` at most once every [`PURGE_EVERY`]: time to purge the store's dead records.
    pub fn purge_due(&self) -> bool {
        let mut last = self
            .last_purge
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if last.is_some_and(|at| now.duration_since(at) < PURGE_EVERY) {
            return false;
        }
        *last = Some(now);
        true
    }

    /// The idle limit.
    pub fn idle(&self) -> Duration {
        self.limits.idle
    }

    /// The per-account limit.
    pub fn per_account(&self) -> usize {
        self.limits.per_account
    }

    /// Whether `id` is served for `owner` from the cache, and if so marks it used. Another
    /// account's session, an expired one and an unknown one end alike at the edge (404), so ids
    /// cannot be probed.
    pub fn touch(&self, id: &str, owner: &AccountId) -> Touch {
        let mut table = self.lock();
        let now = Instant::now();
        let Some(session) = table.sessions.get_mut(id) else {
            return Touch::Check;
        };
        if &session.owner != owner {
            return Touch::Refused;
        }
        if session.in_flight.is_empty() && now.duration_since(session.last_used) >= self.limits.idle
        {
            // it may have been used through another front end meanwhile: the store decides
            table.remove(id);
            return Touch::Check;
        }
        if now.duration_since(session.checked) >= REVALIDATE_AFTER {
            return Touch::Recheck;
        }
        session.last_used = now;
        let write_back = now.duration_since(session.written) >= WRITE_BACK_AFTER;
        if write_back {
            session.written = now;
        }
        Touch::Served { write_back }
    }

    /// Closes `owner`'s session `id`; `false` if there was none.
    pub fn close(&self, id: &str, owner: &AccountId) -> bool {
        let mut table = self.lock();
        if table.sessions.get(id).is_some_and(|s| &s.owner == owner) {
            table.remove(id);
            true
        } else {
            false
        }
    }

    /// Closes every session of `owner` (its key was rotated), cancelling their calls in
    /// flight; returns how many there were.
    pub fn close_all(&self, owner: &AccountId) -> usize {
        let mut table = self.lock();
        let ids: Vec<String> = table
            .sessions
            .iter()
            .filter(|(_, s)| &s.owner == owner)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &ids {
            table.remove(id);
        }
        ids.len()
    }

    /// Records that session `id` was opened (or adopted here) with the named key `key`.
    pub fn opened_with(&self, id: &str, key: &KeyId) {
        if let Some(session) = self.lock().sessions.get_mut(id)
            && session.key.is_none()
        {
            session.key = Some(key.clone());
        }
    }

    /// Closes every session of `owner` opened with the named key `key` (it was revoked),
    /// cancelling their calls in flight; returns their ids.
    pub fn close_key(&self, owner: &AccountId, key: &KeyId) -> Vec<String> {
        let mut table = self.lock();
        let ids: Vec<String> = table
            .sessions
            .iter()
            .filter(|(_, s)| &s.owner == owner && s.key.as_ref() == Some(key))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &ids {
            table.remove(id);
        }
        ids
    }

    /// Registers a call with `request_id` (its JSON text) in session `id`: the returned token is
    /// cancelled by the client's `notifications/cancelled`; the guard unregisters it.
    pub fn begin_call(self: &Arc<Self>, id: &str, request_id: String) -> Option<CallGuard> {
        let mut table = self.lock();
        let session = table.sessions.get_mut(id)?;
        if session.in_flight.len() >= TRACKED_CALLS || session.in_flight.contains_key(&request_id) {
            return None;
        }
        let token = CancellationToken::new();
        session.in_flight.insert(request_id.clone(), token.clone());
        Some(CallGuard {
            sessions: self.clone(),
            session: id.to_owned(),
            request_id,
            token,
        })
    }

    /// Keeps the client that opened session `id` (from its `initialize`).
    pub fn set_client(&self, id: &str, client: Option<Arc<str>>) {
        if let Some(session) = self.lock().sessions.get_mut(id) {
            session.client = client;
        }
    }

    /// The client that opened session `id`, when this process saw its `initialize`.
    pub fn client(&self, id: &str) -> Option<Arc<str>> {
        self.lock().sessions.get(id)?.client.clone()
    }

    /// Cancels the call `request_id` of `owner`'s session `id`, if it is in flight.
    pub fn cancel(&self, id: &str, owner: &AccountId, request_id: &str) {
        let table = self.lock();
        if let Some(session) = table.sessions.get(id).filter(|s| &s.owner == owner)
            && let Some(token) = session.in_flight.get(request_id)
        {
            token.cancel();
        }
    }

    /// Open sessions.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().sessions.len()
    }
}

impl McpSession {
    fn new(owner: &AccountId, now: Instant) -> Self {
        Self {
            owner: owner.clone(),
            key: None,
            client: None,
            last_used: now,
            checked: now,
            written: now,
            in_flight: HashMap::new(),
        }
    }
}

impl Table {
    fn remove(&mut self, id: &str) {
        let Some(session) = self.sessions.remove(id) else {
            return;
        };
        for token in session.in_flight.values() {
            token.cancel();
        }
        if let Some(count) = self.per_account.get_mut(&session.owner) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_account.remove(&session.owner);
            }
        }
    }

    fn remove_expired(&mut self, now: Instant, idle: Duration) {
        let expired: Vec<String> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.in_flight.is_empty() && now.duration_since(s.last_used) >= idle)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            self.remove(&id);
        }
    }
}

/// A call's cancellation by the client's `notifications/cancelled`, for the handler.
#[derive(Clone, Debug)]
pub struct CallCancel(pub tokio_util::sync::CancellationToken);

/// A call registered in its session; dropping it (the answer sent or abandoned) unregisters it.
pub struct CallGuard {
    sessions: Arc<McpSessions>,
    session: String,
    request_id: String,
    token: CancellationToken,
}

impl CallGuard {
    /// The token the call obeys.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }
}

impl Drop for CallGuard {
    /// Also cancels the call: the guard outlives the call's answer, so a call still running
    /// here lost its request (the client went away) and has nobody left to answer.
    fn drop(&mut self) {
        self.token.cancel();
        let mut table = self.sessions.lock();
        let now = Instant::now();
        if let Some(session) = table.sessions.get_mut(&self.session) {
            session.in_flight.remove(&self.request_id);
            session.last_used = now;
        }
    }
}

#[cfg(test)]
#[path = "mcp_sessions_tests.rs"]
mod tests;

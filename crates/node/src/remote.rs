//! [`RemoteSessions`]: the sandbox seam of a front end whose sessions live on execution nodes.
//!
//! A session with an id lives on one node at a time: its owner is a row of the placement
//! store, valid while its node's incarnation holds its lease. A run goes to the owner; a
//! session without a valid owner (new, or its node lost) is claimed for the least loaded live
//! node, which restores it from its checkpoint if it has one. Owners are cached here; a node
//! that is no longer the incarnation a run was placed on refuses it unrun, and the run is
//! placed again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use http_body_util::BodyExt;
use toolgate_domain::{AccountId, Claim, Incarnation, NodeName, Previous, SandboxSessionId};
use toolgate_sandbox::{
    RunOutcome, RunRequest, SandboxSessionInfo, SandboxSessions, SandboxSessionsError,
    SessionState, WorkspaceRead,
};

use crate::fleet::{Fleet, LiveNode};
use crate::link::{NodeLink, whole};
use crate::remote_run::RunError;
use crate::wire::{AccountRef, ReadFile, SIZE_HEADER, SessionRef, WireError};

/// The largest answer to a `list` or `close` (a list of at most a few hundred sessions).
const MAX_SMALL_ANSWER: usize = 4 * 1024 * 1024;
/// Times a run is placed again after a node refused it as stale.
const PLACEMENTS: usize = 3;
/// Owners kept in the cache at most (it is emptied when full: a miss costs one read).
const CACHED_OWNERS: usize = 100_000;

/// Sessions on execution nodes.
pub struct RemoteSessions {
    fleet: Arc<Fleet>,
    owners: Mutex<HashMap<(String, String), (NodeName, Incarnation)>>,
    idle_ttl: Duration,
}

/// Where a session's run goes, and whether its node was lost on the way.
struct Target {
    node: Arc<LiveNode>,
    node_lost: bool,
}

impl RemoteSessions {
    /// Sessions on the nodes of `fleet`, which expire after `idle_ttl` idle (the nodes' own
    /// setting).
    pub fn new(fleet: Arc<Fleet>, idle_ttl: Duration) -> Self {
        Self {
            fleet,
            owners: Mutex::new(HashMap::new()),
            idle_ttl,
        }
    }

    fn cached(&self, account: &str, session: &str) -> Option<Arc<LiveNode>> {
        let owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        let (name, incarnation) = owners.get(&(account.to_owned(), session.to_owned()))?;
        self.fleet.live(name, *incarnation)
    }

    fn remember(&self, account: &str, session: &str, node: &LiveNode) {
        let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        if owners.len() >= CACHED_OWNERS {
            owners.clear();
        }
        owners.insert(
            (account.to_owned(), session.to_owned()),
            (node.name.clone(), node.incarnation),
        );
    }

    fn forget(&self, account: &str, session: &str) {
        self.owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(account.to_owned(), session.to_owned()));
    }

    /// The node that owns the session, claiming it for the least loaded live node when no
    /// valid owner has it.
    async fn target(&self, account: &str, session: &str) -> Result<Target, SandboxSessionsError> {
        if let Some(node) = self.cached(account, session) {
            return Ok(Target {
                node,
                node_lost: false,
            });
        }
        let id = AccountId::from_stored(account.to_owned());
        let sid = SandboxSessionId::parse(session)
            .map_err(|e| SandboxSessionsError::Refused(format!("invalid session_id: {e}")))?;
        let placement = self.fleet.placement();
        for _ in 0..PLACEMENTS {
            let owner = placement
                .session_owner(&id, &sid)
                .await
                .map_err(unavailable)?;
            if let Some(owner) = owner {
                match self.fleet.live(&owner.node, owner.incarnation) {
                    Some(node) => {
                        self.remember(account, session, &node);
                        return Ok(Target {
                            node,
                            node_lost: false,
                        });
                    }
                    // valid in the database, not yet among what this front end read: read again
                    None => {
                        self.fleet.read_live().await;
                        continue;
                    }
                }
            }
            let node = self.live_node().await?;
            match placement
                .claim_session(&id, &sid, &node.name, node.incarnation)
                .await
                .map_err(unavailable)?
            {
                Claim::Owned { previous, .. } => {
                    self.remember(account, session, &node);
                    return Ok(Target {
                        node,
                        node_lost: matches!(previous, Previous::Lost { .. }),
                    });
                }
                // another front end placed it meanwhile, or this node lapsed: look again
                Claim::HeldBy(_) | Claim::Fenced => {}
            }
        }
        Err(SandboxSessionsError::Unavailable(
            "the session could not be placed on a node".into(),
        ))
    }

    /// Waits, at most a lease and a little, until the session's owner is no longer `gone` (a
    /// node that cannot be reached): its lease lapses in the database, and the session may be
    /// claimed elsewhere.
    async fn wait_for_lapse(&self, account: &str, session: &str, gone: &LiveNode) {
        let (Ok(sid), id) = (
            SandboxSessionId::parse(session),
            AccountId::from_stored(account.to_owned()),
        ) else {
            return;
        };
        let deadline =
            tokio::time::Instant::now() + self.fleet.lease_time() + Duration::from_secs(2);
        while tokio::time::Instant::now() < deadline {
            match self.fleet.placement().session_owner(&id, &sid).await {
                Ok(Some(owner))
                    if owner.node == gone.name && owner.incarnation == gone.incarnation => {}
                _ => break,
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        self.fleet.read_live().await;
    }

    /// The least loaded live node; when none is known (the front end just started, or every
    /// node was lost) the nodes are asked once more first.
    async fn live_node(&self) -> Result<Arc<LiveNode>, SandboxSessionsError> {
        if let Some(node) = self.fleet.least_loaded() {
            return Ok(node);
        }
        self.fleet.renew_all().await;
        self.fleet.least_loaded().ok_or_else(no_node)
    }
}

fn no_node() -> SandboxSessionsError {
    SandboxSessionsError::Unavailable("no execution node is live".into())
}

fn unavailable(error: impl std::error::Error + Send + Sync + 'static) -> SandboxSessionsError {
    SandboxSessionsError::Unavailable(Box::new(error))
}

async fn small_answer(
    answer: http::Response<hyper::body::Incoming>,
) -> Result<(http::StatusCode, bytes::Bytes), SandboxSessionsError> {
    let status = answer.status();
    let body = http_body_util::Limited::new(answer.into_body(), MAX_SMALL_ANSWER)
        .collect()
        .await
        .map_err(|e| SandboxSessionsError::Unavailable(e.to_string().into()))?
        .to_bytes();
    Ok((status, body))
}

fn refusal(status: http::StatusCode, body: &[u8]) -> SandboxSessionsError {
    match serde_json::from_slice::<WireError>(body) {
        Ok(error) if status == http::StatusCode::CONFLICT => error.into(),
        _ => SandboxSessionsError::Unavailable(format!("a node answered {status}").into()),
    }
}

async fn read_from(
    node: &NodeLink,
    read: &ReadFile,
) -> Result<WorkspaceRead, SandboxSessionsError> {
    let body = serde_json::to_vec(read).unwrap_or_default();
    let answer = node
        .request("read", whole(body))
        .await
        .map_err(unavailable)?;
    let size = answer
        .headers()
        .get(SIZE_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let status = answer.status();
    if status != http::StatusCode::OK {
        let (status, body) = small_answer(answer).await?;
        return Err(refusal(status, &body));
    }
    // the node read at most `max_bytes`
    let limit = usize::try_from(read.max_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(1);
    let bytes = http_body_util::Limited::new(answer.into_body(), limit)
        .collect()
        .await
        .map_err(|e| SandboxSessionsError::Unavailable(e.to_string().into()))?
        .to_bytes()
        .to_vec();
    let size = size.unwrap_or(bytes.len() as u64);
    Ok(WorkspaceRead { bytes, size })
}

#[async_trait]
impl SandboxSessions for RemoteSessions {
    async fn run(&self, request: RunRequest) -> Result<RunOutcome, SandboxSessionsError> {
        for _ in 0..PLACEMENTS {
            let (node, node_lost) = match &request.session_id {
                Some(session) => {
                    let target = self.target(&request.account, session).await?;
                    (target.node, target.node_lost)
                }
                None => (self.live_node().await?, false),
            };
            match crate::remote_run::run(&node.link, &request, node.incarnation.0).await {
                Ok(mut outcome) => {
                    outcome.node_lost |= node_lost;
                    return Ok(outcome);
                }
                Err(RunError::Unreachable(error)) => {
                    tracing::warn!(%error, "a run's node cannot be reached; placing it again");
                    self.fleet.forget(&node.name);
                    if let Some(session) = &request.session_id {
                        self.forget(&request.account, session);
                        self.wait_for_lapse(&request.account, session, &node).await;
                    }
                }
                Err(RunError::Stale) => {
                    if let Some(session) = &request.session_id {
                        self.forget(&request.account, session);
                    }
                    self.fleet.forget(&node.name);
                    self.fleet.renew_one(&node.name).await;
                }
                Err(RunError::Seam(error)) => {
                    if let (SandboxSessionsError::Failed(_), Some(session)) =
                        (&error, &request.session_id)
                    {
                        self.forget(&request.account, session);
                    }
                    return Err(error);
                }
            }
        }
        Err(SandboxSessionsError::Unavailable(
            "the nodes kept changing while the run was placed".into(),
        ))
    }

    async fn read_file(
        &self,
        account: &str,
        session_id: &str,
        path: &str,
        max_bytes: u64,
    ) -> Result<WorkspaceRead, SandboxSessionsError> {
        let target = self.target(account, session_id).await?;
        let read = ReadFile {
            account: account.to_owned(),
            session_id: session_id.to_owned(),
            path: path.to_owned(),
            max_bytes,
        };
        read_from(&target.node.link, &read).await
    }

    async fn close(&self, account: &str, session_id: &str) -> bool {
        let Ok(target) = self.target(account, session_id).await else {
            return false;
        };
        self.forget(account, session_id);
        let session = SessionRef {
            account: account.to_owned(),
            session_id: session_id.to_owned(),
        };
        let body = serde_json::to_vec(&session).unwrap_or_default();
        let closed = match target.node.link.request("close", whole(body)).await {
            Ok(answer) => match small_answer(answer).await {
                Ok((http::StatusCode::OK, body)) => serde_json::from_slice(&body).unwrap_or(false),
                _ => false,
            },
            Err(_) => false,
        };
        if let Ok(sid) = SandboxSessionId::parse(session_id) {
            let id = AccountId::from_stored(account.to_owned());
            if let Err(error) = self.fleet.placement().forget_session(&id, &sid).await {
                tracing::warn!(%error, "a closed session's owner could not be forgotten");
            }
        }
        closed
    }

    fn idle_ttl(&self) -> Duration {
        self.idle_ttl
    }

    async fn list(&self, account: &str) -> Vec<SandboxSessionInfo> {
        let body = serde_json::to_vec(&AccountRef {
            account: account.to_owned(),
        })
        .unwrap_or_default();
        // every node at once: one that does not answer delays the listing by its time-out once
        let nodes = self.fleet.all_live();
        let asked = nodes.iter().map(|node| {
            let body = whole(body.clone());
            async move {
                match node.link.request("list", body).await {
                    Ok(answer) => small_answer(answer).await.ok().and_then(|(status, body)| {
                        (status == http::StatusCode::OK)
                            .then(|| serde_json::from_slice::<Vec<SandboxSessionInfo>>(&body).ok())
                            .flatten()
                    }),
                    Err(_) => None,
                }
            }
        });
        let answers = futures::future::join_all(asked).await;
        let mut by_id: HashMap<String, SandboxSessionInfo> = HashMap::new();
        for (node, listed) in nodes.iter().zip(answers) {
            let Some(sessions) = listed else {
                tracing::warn!(
                    node = node.link.address(),
                    "a node's sessions could not be listed"
                );
                continue;
            };
            // nodes share the checkpoints: a hibernated session may be listed by each of them,
            // and a live one wins over its checkpoint
            for session in sessions {
                let keep = by_id
                    .get(&session.id)
                    .is_none_or(|kept| kept.state != SessionState::Live);
                if keep {
                    by_id.insert(session.id.clone(), session);
                }
            }
        }
        let mut all: Vec<SandboxSessionInfo> = by_id.into_values().collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }
}

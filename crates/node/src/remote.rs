//! [`RemoteSessions`]: the sandbox seam of a front end whose sessions live on execution nodes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use http_body_util::BodyExt;
use toolgate_sandbox::{
    RunOutcome, RunRequest, SandboxSessionInfo, SandboxSessions, SandboxSessionsError,
    WorkspaceRead,
};

use crate::link::{NodeLink, whole};
use crate::wire::{AccountRef, ReadFile, SIZE_HEADER, SessionRef, WireError};

/// The largest answer to a `list` or `close` (a list of at most a few hundred sessions).
const MAX_SMALL_ANSWER: usize = 4 * 1024 * 1024;

/// Sessions on execution nodes. A session with an id always goes to the same node (rendezvous
/// hashing over the nodes given, so all front ends agree without asking each other); a run
/// without one goes to the next node in turn.
pub struct RemoteSessions {
    nodes: Vec<Arc<NodeLink>>,
    idle_ttl: Duration,
    turn: AtomicUsize,
}

/// A front end given no node.
#[derive(Debug, thiserror::Error)]
#[error("at least one execution node must be given")]
pub struct NoNodes;

impl RemoteSessions {
    /// Sessions on `nodes`, which expire after `idle_ttl` idle (the nodes' own setting).
    pub fn new(nodes: Vec<NodeLink>, idle_ttl: Duration) -> Result<Self, NoNodes> {
        if nodes.is_empty() {
            return Err(NoNodes);
        }
        Ok(Self {
            nodes: nodes.into_iter().map(Arc::new).collect(),
            idle_ttl,
            turn: AtomicUsize::new(0),
        })
    }

    fn node_of(&self, account: &str, session_id: Option<&str>) -> &NodeLink {
        let index = match session_id {
            Some(id) => rendezvous(&self.nodes, account, id),
            None => self.turn.fetch_add(1, Ordering::Relaxed) % self.nodes.len(),
        };
        &self.nodes[index]
    }
}

/// The node whose hash with (account, session) is highest: stable while the nodes are, and a
/// node leaving moves only its own sessions.
fn rendezvous(nodes: &[Arc<NodeLink>], account: &str, session_id: &str) -> usize {
    use std::hash::{Hash, Hasher};
    let score = |node: &NodeLink| {
        // fixed keys: every front end of one build computes the same scores
        let mut hasher = std::hash::DefaultHasher::new();
        (node.address(), account, session_id).hash(&mut hasher);
        hasher.finish()
    };
    (0..nodes.len())
        .max_by_key(|i| score(&nodes[*i]))
        .unwrap_or(0)
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

#[async_trait]
impl SandboxSessions for RemoteSessions {
    async fn run(&self, request: RunRequest) -> Result<RunOutcome, SandboxSessionsError> {
        let node = self.node_of(&request.account, request.session_id.as_deref());
        crate::remote_run::run(node, request).await
    }

    async fn read_file(
        &self,
        account: &str,
        session_id: &str,
        path: &str,
        max_bytes: u64,
    ) -> Result<WorkspaceRead, SandboxSessionsError> {
        let node = self.node_of(account, Some(session_id));
        let read = ReadFile {
            account: account.to_owned(),
            session_id: session_id.to_owned(),
            path: path.to_owned(),
            max_bytes,
        };
        let body = serde_json::to_vec(&read).unwrap_or_default();
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
        // the node read at most `max_bytes`; a little room for nothing more
        let limit = usize::try_from(max_bytes)
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

    async fn close(&self, account: &str, session_id: &str) -> bool {
        let node = self.node_of(account, Some(session_id));
        let session = SessionRef {
            account: account.to_owned(),
            session_id: session_id.to_owned(),
        };
        let body = serde_json::to_vec(&session).unwrap_or_default();
        let Ok(answer) = node.request("close", whole(body)).await else {
            return false;
        };
        match small_answer(answer).await {
            Ok((http::StatusCode::OK, body)) => serde_json::from_slice(&body).unwrap_or(false),
            _ => false,
        }
    }

    fn idle_ttl(&self) -> Duration {
        self.idle_ttl
    }

    async fn list(&self, account: &str) -> Vec<SandboxSessionInfo> {
        let body = serde_json::to_vec(&AccountRef {
            account: account.to_owned(),
        })
        .unwrap_or_default();
        let mut all = Vec::new();
        for node in &self.nodes {
            let listed = match node.request("list", whole(body.clone())).await {
                Ok(answer) => small_answer(answer).await.ok().and_then(|(status, body)| {
                    (status == http::StatusCode::OK)
                        .then(|| serde_json::from_slice::<Vec<SandboxSessionInfo>>(&body).ok())
                        .flatten()
                }),
                Err(_) => None,
            };
            match listed {
                Some(sessions) => all.extend(sessions),
                None => tracing::warn!(
                    node = node.address(),
                    "a node's sessions could not be listed"
                ),
            }
        }
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }
}

//! Placement: which execution node owns each sandbox session, when several share one database.
//!
//! A node row (name, incarnation, URL, lease, load) is renewed by the node's heartbeats; a
//! session owner row ((account, session id) → node, incarnation, epoch) is valid only while its
//! node's row holds that same incarnation with a lease that has not expired. One heartbeat thus
//! keeps all of a node's sessions, and a node that lapsed, was replaced or was removed loses
//! them all at once. Lease times are the database's clock on PostgreSQL (front ends and nodes on
//! several hosts agree on one clock) and the process's on SQLite (one host).
//!
//! Who gets a session is `toolgate_domain::claim_step`, applied once for every backend by
//! [`Placement::claim_session`] over two primitives: read the session's [`OwnerState`] with
//! the claimer's liveness ([`Placement::claim_view`]), write the rule's answer by
//! compare-and-set ([`Placement::take_session`]).

use std::time::Duration;

use async_trait::async_trait;
use toolgate_domain::{
    AccountId, Claim, ClaimStep, Epoch, Incarnation, Lease, NodeName, OwnerState, SandboxSessionId,
    SessionOwner, claim_step,
};

use crate::StoreError;

/// More rounds than a session changes hands under one claim in any sane deployment: each lost
/// compare-and-set means another claimer, a release or a forget won meanwhile.
const MAX_ROUNDS: usize = 8;

/// What a node reports of itself with each heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeLoad {
    /// Sandbox sessions it holds.
    pub sessions: u32,
    /// Memory its sessions use, in bytes.
    pub memory_bytes: u64,
    /// Whether it is draining: it takes no new sessions.
    pub draining: bool,
}

/// One heartbeat of a node's incarnation.
#[derive(Debug, Clone)]
pub struct NodeBeat {
    /// The node.
    pub name: NodeName,
    /// The incarnation its registration returned.
    pub incarnation: Incarnation,
    /// How long from now the lease runs.
    pub lease: Lease,
    /// Its load now.
    pub load: NodeLoad,
}

/// A live node, as placement chooses among them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRecord {
    /// The node.
    pub name: NodeName,
    /// Its current incarnation.
    pub incarnation: Incarnation,
    /// Where front ends reach it.
    pub url: String,
    /// Its load at its last heartbeat (all zero until the first).
    pub load: NodeLoad,
    /// When this incarnation registered (Unix ms, the placement clock).
    pub started_at: i64,
    /// How much longer its lease runs.
    pub lease_left: Duration,
}

/// What a claim reads, in one statement: the session's owner row and the claimer's liveness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimView {
    /// The session's owner row and whether that owner is valid.
    pub state: OwnerState,
    /// Whether the claiming (name, incarnation) holds an unexpired lease.
    pub claimer_live: bool,
}

/// Execution nodes, their leases, and which of them owns each sandbox session.
#[async_trait]
pub trait Placement: Send + Sync {
    /// Registers `name` with a new incarnation, never used before by any node, leased for
    /// `lease` and not draining; a row of that name is replaced, so the old incarnation's
    /// sessions are unowned at once.
    async fn register_node(
        &self,
        name: &NodeName,
        url: &str,
        lease: Lease,
    ) -> Result<Incarnation, StoreError>;

    /// Renews the lease of (name, incarnation) for `beat.lease` from now and records its load,
    /// only if that incarnation still holds an unexpired lease; `false` when it lapsed or was
    /// replaced or removed: the node is fenced, drops its sessions and registers again.
    async fn heartbeat_node(&self, beat: &NodeBeat) -> Result<bool, StoreError>;

    /// Nodes whose lease has not expired, ordered by name.
    async fn live_nodes(&self) -> Result<Vec<NodeRecord>, StoreError>;

    /// Deletes (name, incarnation)'s row, so every session it owned is unowned at once (a
    /// drained or stopping node); `false` when that incarnation had no row.
    async fn remove_node(
        &self,
        name: &NodeName,
        incarnation: Incarnation,
    ) -> Result<bool, StoreError>;

    /// The valid owner of (account, session), if any.
    async fn session_owner(
        &self,
        account: &AccountId,
        session: &SandboxSessionId,
    ) -> Result<Option<SessionOwner>, StoreError>;

    /// Makes (name, incarnation) the owner of (account, session) unless another valid owner
    /// holds it; of concurrent claimers exactly one gets it. `Err(NotFound)`: no such account.
    /// Provided: the rule is `toolgate_domain::claim_step`, written by compare-and-set through
    /// [`Placement::claim_view`] and [`Placement::take_session`]; a backend does not override it.
    async fn claim_session(
        &self,
        account: &AccountId,
        session: &SandboxSessionId,
        name: &NodeName,
        incarnation: Incarnation,
    ) -> Result<Claim, StoreError> {
        for _ in 0..MAX_ROUNDS {
            let view = self.claim_view(account, session, name, incarnation).await?;
            match claim_step(&view.state, name, incarnation, view.claimer_live) {
                ClaimStep::Answer(claim) => return Ok(claim),
                ClaimStep::Take { epoch, previous } => {
                    let next = SessionOwner {
                        node: name.clone(),
                        incarnation,
                        epoch,
                    };
                    if self
                        .take_session(account, session, &view.state, &next)
                        .await?
                    {
                        return Ok(Claim::Owned { epoch, previous });
                    }
                }
            }
        }
        Err(StoreError::Unavailable(
            "a sandbox session kept changing hands while it was claimed".to_owned(),
        ))
    }

    /// The session's owner row, whether that owner is valid, and whether (name, incarnation)
    /// is live, read together.
    async fn claim_view(
        &self,
        account: &AccountId,
        session: &SandboxSessionId,
        name: &NodeName,
        incarnation: Incarnation,
    ) -> Result<ClaimView, StoreError>;

    /// Compare-and-set of a session's owner row, in one atomic step: if it still holds what
    /// `seen` read (no row; released at that epoch; that node, incarnation and epoch), writes
    /// `next`; `false`, writing nothing, when it moved meanwhile. `Err(NotFound)`: no such account.
    async fn take_session(
        &self,
        account: &AccountId,
        session: &SandboxSessionId,
        seen: &OwnerState,
        next: &SessionOwner,
    ) -> Result<bool, StoreError>;

    /// Gives up (account, session) if (name, incarnation) is its owner in storage, whether or
    /// not its lease still runs; the row is kept at its epoch, so the next claim learns it was
    /// released. `false` when that incarnation did not own it.
    async fn release_session(
        &self,
        account: &AccountId,
        session: &SandboxSessionId,
        name: &NodeName,
        incarnation: Incarnation,
    ) -> Result<bool, StoreError>;

    /// Forgets (account, session) entirely (its owner closed it): the next claim starts it
    /// afresh at the first epoch.
    async fn forget_session(
        &self,
        account: &AccountId,
        session: &SandboxSessionId,
    ) -> Result<(), StoreError>;
}

/// A load as the BIGINT columns hold it; memory beyond `i64::MAX` bytes is recorded as that.
pub fn load_to_columns(load: NodeLoad) -> (i64, i64) {
    let memory = i64::try_from(load.memory_bytes).unwrap_or(i64::MAX);
    (i64::from(load.sessions), memory)
}

/// Rebuilds a live node from its stored columns; a malformed column means corrupt storage.
/// `lease_left_ms` is its `lease_until` less now, positive for a live node.
pub fn node_from_columns(
    name: &str,
    incarnation: i64,
    url: String,
    (sessions, memory_bytes, draining): (i64, i64, bool),
    started_at: i64,
    lease_left_ms: i64,
) -> Result<NodeRecord, StoreError> {
    let corrupt = |column: &str| StoreError::Unavailable(format!("corrupt nodes row: {column}"));
    Ok(NodeRecord {
        name: node_name_from_column(name)?,
        incarnation: Incarnation(incarnation),
        url,
        load: NodeLoad {
            sessions: u32::try_from(sessions).map_err(|_| corrupt("sessions"))?,
            memory_bytes: u64::try_from(memory_bytes).map_err(|_| corrupt("memory_bytes"))?,
            draining,
        },
        started_at,
        lease_left: Duration::from_millis(u64::try_from(lease_left_ms.max(0)).unwrap_or(0)),
    })
}

/// Rebuilds a node name from its stored column.
pub fn node_name_from_column(raw: &str) -> Result<NodeName, StoreError> {
    NodeName::parse(raw)
        .map_err(|_| StoreError::Unavailable("corrupt placement row: node name".to_owned()))
}

/// Rebuilds a session's owner from its stored columns.
pub fn owner_from_columns(
    node: &str,
    incarnation: i64,
    epoch: i64,
) -> Result<SessionOwner, StoreError> {
    Ok(SessionOwner {
        node: node_name_from_column(node)?,
        incarnation: Incarnation(incarnation),
        epoch: Epoch(epoch),
    })
}

/// Rebuilds what a claim read from the columns of one row: the owner row's node, incarnation
/// and epoch (all absent without a row; node and incarnation absent when released), whether
/// its owner is valid, and whether the claimer is live.
pub fn claim_view_from_columns(
    node: Option<String>,
    incarnation: Option<i64>,
    epoch: Option<i64>,
    owner_valid: bool,
    claimer_live: bool,
) -> Result<ClaimView, StoreError> {
    let state = match (node, incarnation, epoch) {
        (_, _, None) => OwnerState::Unowned,
        (Some(node), Some(incarnation), Some(epoch)) => OwnerState::Owned {
            owner: owner_from_columns(&node, incarnation, epoch)?,
            valid: owner_valid,
        },
        (None, None, Some(epoch)) => OwnerState::Released {
            epoch: Epoch(epoch),
        },
        _ => {
            return Err(StoreError::Unavailable(
                "corrupt session_owners row: node without incarnation".to_owned(),
            ));
        }
    };
    Ok(ClaimView {
        state,
        claimer_live,
    })
}

/// What `seen` says the owner row's node, incarnation and epoch are, for a compare-and-set
/// (`None`: no row).
pub fn seen_columns(seen: &OwnerState) -> Option<(Option<&str>, Option<i64>, i64)> {
    match seen {
        OwnerState::Unowned => None,
        OwnerState::Released { epoch } => Some((None, None, epoch.0)),
        OwnerState::Owned { owner, .. } => Some((
            Some(owner.node.as_str()),
            Some(owner.incarnation.0),
            owner.epoch.0,
        )),
    }
}

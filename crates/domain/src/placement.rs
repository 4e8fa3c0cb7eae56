//! Where a sandbox session lives when several execution nodes share one database: the names
//! and bounds of what placement stores, and the one rule of who may claim a session.
//!
//! A node registers under its name and gets a new [`Incarnation`] each time; its lease covers
//! all the sessions it owns. A session's owner is valid only while its node's row holds that
//! same incarnation with a lease that has not expired, and an incarnation that lost its lease
//! never gets it back, so a node that was cut off cannot resurrect what others took over.
//! Storage reads an [`OwnerState`] and writes what [`claim_step`] decides by compare-and-set,
//! so no backend carries a rule of its own.

use std::fmt;
use std::time::Duration;

/// The longest node name, in bytes.
pub const MAX_NODE_NAME_BYTES: usize = 64;

/// The longest sandbox session id, in bytes: the sandbox seam's own bound, restated because
/// storage does not depend on the sandbox.
pub const MAX_SANDBOX_SESSION_ID_BYTES: usize = 256;

/// The longest lease a node may ask for: a dead node's sessions wait at most this long.
pub const MAX_LEASE: Duration = Duration::from_secs(60 * 60);

/// An execution node's name: 1 to 64 bytes of `[a-z0-9._-]`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeName(String);

/// Why a node name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeNameError {
    /// the name is empty
    #[error("a node name cannot be empty")]
    Empty,
    /// the name is longer than 64 bytes
    #[error("a node name has at most 64 bytes")]
    TooLong,
    /// the name holds a character outside `[a-z0-9._-]`
    #[error("a node name holds only lower-case letters, digits, `.`, `_` and `-` (like node-1)")]
    Malformed,
}

impl NodeName {
    /// Checks `raw` against the rule above.
    pub fn parse(raw: &str) -> Result<Self, NodeNameError> {
        if raw.is_empty() {
            return Err(NodeNameError::Empty);
        }
        if raw.len() > MAX_NODE_NAME_BYTES {
            return Err(NodeNameError::TooLong);
        }
        let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b);
        if !raw.bytes().all(allowed) {
            return Err(NodeNameError::Malformed);
        }
        Ok(Self(raw.to_owned()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeName({})", self.0)
    }
}

/// The id of a sandbox session within its account, as placement keys it: 1 to 256 bytes.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SandboxSessionId(String);

/// Why a sandbox session id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxSessionIdError {
    /// the id is empty
    #[error("a session id cannot be empty")]
    Empty,
    /// the id is longer than 256 bytes
    #[error("a session id has at most 256 bytes")]
    TooLong,
}

impl SandboxSessionId {
    /// Checks `raw`'s length; any other byte is the caller's choice.
    pub fn parse(raw: &str) -> Result<Self, SandboxSessionIdError> {
        if raw.is_empty() {
            return Err(SandboxSessionIdError::Empty);
        }
        if raw.len() > MAX_SANDBOX_SESSION_ID_BYTES {
            return Err(SandboxSessionIdError::TooLong);
        }
        Ok(Self(raw.to_owned()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SandboxSessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SandboxSessionId({})", self.0)
    }
}

/// How long a node's registration or heartbeat keeps it live: more than zero whole
/// milliseconds, at most [`MAX_LEASE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Lease(Duration);

/// Why a lease was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// shorter than a millisecond
    #[error("a node's lease must be at least 1 ms")]
    TooShort,
    /// longer than an hour
    #[error("a node's lease is at most one hour, so that a dead node's sessions come back")]
    TooLong,
}

impl Lease {
    /// Checks `length` against the bounds above.
    pub fn new(length: Duration) -> Result<Self, LeaseError> {
        if length < Duration::from_millis(1) {
            return Err(LeaseError::TooShort);
        }
        if length > MAX_LEASE {
            return Err(LeaseError::TooLong);
        }
        Ok(Self(length))
    }

    /// The length in whole milliseconds, as lease columns count time.
    pub fn millis(self) -> i64 {
        // at most an hour's worth: always fits
        i64::try_from(self.0.as_millis()).unwrap_or(i64::MAX)
    }

    /// The length.
    pub fn duration(self) -> Duration {
        self.0
    }
}

/// One registration of a node: unique across every node and every registration, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Incarnation(pub i64);

/// How many times a session has changed hands: grows by one each time, so a node can tell a
/// session it owns now from one it owned before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Epoch(pub i64);

/// The first epoch of a session.
pub const FIRST_EPOCH: Epoch = Epoch(1);

/// Who owns a session, since which change of hands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionOwner {
    /// The owning node.
    pub node: NodeName,
    /// The registration of that node that owns it.
    pub incarnation: Incarnation,
    /// The session's epoch.
    pub epoch: Epoch,
}

/// What storage holds of a session's owner, as a claim reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerState {
    /// No row: never claimed, or forgotten.
    Unowned,
    /// Given up by its last owner, kept for the next claim.
    Released {
        /// The epoch it was released at.
        epoch: Epoch,
    },
    /// Owned by `owner`; `valid` when its node's row holds that incarnation with an unexpired
    /// lease.
    Owned {
        /// The owner in the row.
        owner: SessionOwner,
        /// Whether that owner is valid now.
        valid: bool,
    },
}

/// Who owned a session before a claim that got it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Previous {
    /// Nobody: a new session (never claimed, or forgotten).
    None,
    /// The claimer itself, in this same incarnation: nothing changed hands.
    Same,
    /// `node`, whose lease lapsed, or whose incarnation was replaced or removed, without giving
    /// the session up: what it changed since its last checkpoint is lost.
    Lost {
        /// The node that had it.
        node: NodeName,
    },
    /// A node that gave it up (after keeping it).
    Released,
}

/// The answer to a claim of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The claimer owns it now, at `epoch`.
    Owned {
        /// The session's epoch.
        epoch: Epoch,
        /// Who had it before.
        previous: Previous,
    },
    /// Another valid owner holds it.
    HeldBy(SessionOwner),
    /// The claimer's own incarnation is not live (lease lapsed, replaced or removed): it must
    /// drop its sessions and register again.
    Fenced,
}

/// What a claim does, given what it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimStep {
    /// Answer this without writing.
    Answer(Claim),
    /// Make the claimer the owner at `epoch`, by compare-and-set against the state read, and
    /// answer `Claim::Owned { epoch, previous }`.
    Take {
        /// The new epoch.
        epoch: Epoch,
        /// Who had it before.
        previous: Previous,
    },
}

/// The claim rule: a node that is not live is fenced; a valid owner keeps its session (the
/// claimer itself included, at the same epoch); otherwise the claimer takes it at the next
/// epoch, learning whether it was new, released or lost.
pub fn claim_step(
    state: &OwnerState,
    claimer: &NodeName,
    incarnation: Incarnation,
    claimer_live: bool,
) -> ClaimStep {
    if !claimer_live {
        return ClaimStep::Answer(Claim::Fenced);
    }
    match state {
        OwnerState::Unowned => ClaimStep::Take {
            epoch: FIRST_EPOCH,
            previous: Previous::None,
        },
        OwnerState::Released { epoch } => ClaimStep::Take {
            epoch: next(*epoch),
            previous: Previous::Released,
        },
        OwnerState::Owned { owner, valid: true } => {
            if owner.node == *claimer && owner.incarnation == incarnation {
                ClaimStep::Answer(Claim::Owned {
                    epoch: owner.epoch,
                    previous: Previous::Same,
                })
            } else {
                ClaimStep::Answer(Claim::HeldBy(owner.clone()))
            }
        }
        OwnerState::Owned {
            owner,
            valid: false,
        } => ClaimStep::Take {
            epoch: next(owner.epoch),
            previous: Previous::Lost {
                node: owner.node.clone(),
            },
        },
    }
}

/// The epoch after `epoch`; it cannot overflow in practice, and saturating keeps it from
/// wrapping back to an old value if it ever did.
fn next(epoch: Epoch) -> Epoch {
    Epoch(epoch.0.saturating_add(1))
}

#[cfg(test)]
#[path = "placement_tests.rs"]
mod tests;

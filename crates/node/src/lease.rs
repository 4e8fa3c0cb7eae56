//! A node's lease, as the node keeps it. Front ends register the node in the database (a fresh
//! incarnation), tell the node which incarnation it now is, and renew its lease there while it
//! answers; each renewal says how long the node may count on it. A node that no front end
//! renewed in time fences itself before the database's lease ends: it ends every session
//! without writing anything out, forgets its incarnation, and takes runs again only once a
//! front end registers it anew. So a node cut off from the network holds none of its sessions
//! when it is joined again, and sessions claimed elsewhere meanwhile never meet a stale copy.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// What a node holds now, for placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NodeLoad {
    /// Live sessions.
    pub sessions: u64,
    /// Memory their processes use.
    pub memory_bytes: u64,
}

/// What the node's process offers its channel: its load, and the way to drop every session.
#[async_trait]
pub trait NodeControl: Send + Sync {
    /// What the node holds now.
    fn load(&self) -> NodeLoad;
    /// Ends every session at once, writing nothing out (the lease lapsed: they may live
    /// elsewhere already), and leaves the node ready for new ones.
    async fn fence(&self);
    /// Hibernates every live session (checkpointed, then ended), for a node being drained; how
    /// many were.
    async fn drain(&self) -> u64;
}

/// The node's incarnation and until when its sessions are its own.
#[derive(Debug, Default)]
pub struct NodeLease {
    held: Mutex<Option<Held>>,
    draining: AtomicBool,
    drained: AtomicBool,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    incarnation: i64,
    until: Instant,
}

/// What a renewal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// The node is that incarnation and holds its lease until the time given.
    Held,
    /// The node is another incarnation (the one given), or none (`None`): a front end's view
    /// is stale.
    Other(Option<i64>),
}

impl NodeLease {
    /// The incarnation the node is now, if its lease still runs.
    pub fn incarnation(&self) -> Option<i64> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .filter(|held| held.until > Instant::now())
            .map(|held| held.incarnation)
    }

    /// Whether the node is `incarnation` with a lease that still runs.
    pub fn holds(&self, incarnation: i64) -> bool {
        self.incarnation() == Some(incarnation)
    }

    /// Renews `incarnation` for `valid_for` from now. A node without one takes the one given
    /// (a front end registered it); a node that is another keeps its own.
    pub fn renew(&self, incarnation: i64, valid_for: Duration) -> Renewal {
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        match *held {
            Some(current) if current.incarnation != incarnation && current.until > now => {
                Renewal::Other(Some(current.incarnation))
            }
            // a lapsed incarnation is fenced by the watchdog, never renewed
            Some(current) if current.incarnation == incarnation && current.until <= now => {
                Renewal::Other(None)
            }
            _ => {
                *held = Some(Held {
                    incarnation,
                    until: now + valid_for,
                });
                Renewal::Held
            }
        }
    }

    /// Ends `incarnation` now (a front end found its lease lapsed in the database).
    pub fn revoke(&self, incarnation: i64) {
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(current) = held.as_mut().filter(|h| h.incarnation == incarnation) {
            current.until = Instant::now();
        }
    }

    /// The incarnation whose lease ran out, taken away (the node must fence), if any.
    pub fn take_lapsed(&self) -> Option<i64> {
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let lapsed = held.filter(|h| h.until <= Instant::now())?;
        *held = None;
        Some(lapsed.incarnation)
    }

    /// Whether the node takes no new sessions.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Takes no new sessions from now on.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Whether a drain ended: the node holds nothing a front end must keep it for.
    pub fn drained(&self) -> bool {
        self.drained.load(Ordering::Acquire)
    }

    /// The drain ended.
    pub fn set_drained(&self) {
        self.drained.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_taken_renewed_and_lapses() {
        let lease = NodeLease::default();
        assert_eq!(lease.incarnation(), None);
        assert_eq!(lease.renew(7, Duration::from_secs(5)), Renewal::Held);
        assert!(lease.holds(7) && !lease.holds(8));
        // another front end's stale registration does not take it over
        assert_eq!(
            lease.renew(8, Duration::from_secs(5)),
            Renewal::Other(Some(7))
        );
        assert_eq!(lease.take_lapsed(), None);
        lease.revoke(8);
        assert!(
            lease.holds(7),
            "revoking another incarnation changes nothing"
        );
        lease.revoke(7);
        assert!(!lease.holds(7));
        assert_eq!(
            lease.renew(7, Duration::from_secs(5)),
            Renewal::Other(None),
            "never renewed once lapsed"
        );
        assert_eq!(lease.take_lapsed(), Some(7));
        assert_eq!(lease.take_lapsed(), None);
        assert_eq!(lease.renew(9, Duration::from_millis(1)), Renewal::Held);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(lease.incarnation(), None);
        assert_eq!(lease.take_lapsed(), Some(9));
    }
}

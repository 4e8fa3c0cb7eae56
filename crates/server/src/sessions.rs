//! Which account opened which legacy MCP session. rmcp knows sessions but not accounts; without
//! this, a second account that learned a session id could post into the first one's session.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use toolgate_domain::AccountId;

/// Session id → (owner, last use). Entries idle longer than rmcp's own session keep-alive are
/// dropped, so the map cannot outgrow the sessions rmcp still holds.
#[derive(Debug)]
pub struct SessionOwners {
    owners: Mutex<HashMap<String, (AccountId, Instant)>>,
    idle_limit: Duration,
}

/// Prune only when the map grows past this many entries, to keep the common path cheap.
const PRUNE_ABOVE: usize = 4096;

impl SessionOwners {
    /// A map forgetting sessions idle for `idle_limit`.
    pub fn new(idle_limit: Duration) -> Self {
        Self {
            owners: Mutex::new(HashMap::new()),
            idle_limit,
        }
    }

    /// Records that `account` opened `session`.
    pub fn record(&self, session: &str, account: &AccountId) {
        let Ok(mut owners) = self.owners.lock() else {
            return;
        };
        let now = Instant::now();
        if owners.len() > PRUNE_ABOVE {
            let limit = self.idle_limit;
            owners.retain(|_, (_, used)| now.duration_since(*used) < limit);
        }
        owners.insert(session.to_owned(), (account.clone(), now));
    }

    /// `false` when `session` belongs to another account. Unknown sessions pass: rmcp answers
    /// those with 404 itself.
    pub fn permits(&self, session: &str, account: &AccountId) -> bool {
        let Ok(mut owners) = self.owners.lock() else {
            return false;
        };
        match owners.get_mut(session) {
            Some((owner, used)) if owner == account => {
                *used = Instant::now();
                true
            }
            Some(_) => false,
            None => true,
        }
    }

    /// Forgets a session that was closed.
    pub fn forget(&self, session: &str) {
        if let Ok(mut owners) = self.owners.lock() {
            owners.remove(session);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_belong_to_their_opener() {
        let owners = SessionOwners::new(Duration::from_secs(60));
        let (alice, bob) = (AccountId::generate(), AccountId::generate());
        owners.record("s1", &alice);
        assert!(owners.permits("s1", &alice));
        assert!(!owners.permits("s1", &bob));
        assert!(owners.permits("unknown", &bob));
        owners.forget("s1");
        assert!(owners.permits("s1", &bob));
    }
}

//! Each account's secrets bound to hosts, kept in memory for a while, so that a run (which
//! gives the proxy the account's bound secrets) costs no database read each time, and an
//! account without any (most) no vault open either. Only sealed values are kept, as in
//! [`crate::sealed_cache`]; this process forgets an account when it stores or deletes one of
//! its secrets, and the time limit bounds how long a change made by another host goes unseen.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use toolgate_domain::AccountId;
use toolgate_store::BoundSecret;

/// How long a cached list is used.
const FRESH_FOR: Duration = Duration::from_secs(60);
/// Accounts kept at most; past it the cache starts again empty.
const MAX_ACCOUNTS: usize = 10_000;

#[derive(Default)]
struct Entries {
    by_account: HashMap<AccountId, (Instant, Arc<Vec<BoundSecret>>)>,
    /// Counts changes, so that a read that began before one is not kept after it.
    changes: u64,
}

/// The cache.
#[derive(Default)]
pub(crate) struct BoundCache {
    entries: Mutex<Entries>,
}

impl BoundCache {
    /// The account's fresh list, or the change count to hand to [`Self::keep`] with a read.
    pub fn get(&self, account: &AccountId) -> Result<Arc<Vec<BoundSecret>>, u64> {
        let entries = self.lock();
        match entries.by_account.get(account) {
            Some((at, list)) if at.elapsed() < FRESH_FOR => Ok(Arc::clone(list)),
            _ => Err(entries.changes),
        }
    }

    /// Keeps what was just read, unless a secret changed since [`Self::get`].
    pub fn keep(&self, account: &AccountId, list: &Arc<Vec<BoundSecret>>, changes: u64) {
        let mut entries = self.lock();
        if entries.changes != changes {
            return;
        }
        if entries.by_account.len() >= MAX_ACCOUNTS {
            entries.by_account.clear();
        }
        entries
            .by_account
            .insert(account.clone(), (Instant::now(), Arc::clone(list)));
    }

    /// Forgets the account (one of its secrets was stored or deleted).
    pub fn forget(&self, account: &AccountId) {
        let mut entries = self.lock();
        entries.changes += 1;
        entries.by_account.remove(account);
    }

    /// Forgets everything (a rotation rewrote the sealed forms).
    pub fn clear(&self) {
        let mut entries = self.lock();
        entries.changes += 1;
        entries.by_account.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_list_is_kept_per_account_until_a_change() {
        let cache = BoundCache::default();
        let (a, b) = (AccountId::generate(), AccountId::generate());
        let changes = cache.get(&a).unwrap_err();
        cache.keep(&a, &Arc::new(Vec::new()), changes);
        assert!(cache.get(&a).unwrap().is_empty(), "kept, empty");
        assert!(cache.get(&b).is_err(), "accounts apart");
        cache.forget(&a);
        assert!(cache.get(&a).is_err(), "forgotten on change");
        // a read begun before a change is not kept
        let before = cache.get(&a).unwrap_err();
        cache.forget(&b);
        cache.keep(&a, &Arc::new(Vec::new()), before);
        assert!(cache.get(&a).is_err());
    }
}

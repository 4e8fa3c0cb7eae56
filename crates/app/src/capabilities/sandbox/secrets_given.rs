//! Which vault secrets each session has been given, so that a file read back from its
//! workspace (`path`) is redacted like the output of the runs that had them: code may write a
//! value into a file as easily as print it.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};

use toolgate_domain::SecretName;

/// Sessions of one account remembered before the dead ones are pruned.
const PRUNE_ABOVE: usize = 64;

/// (account, session id) → the names of the secrets its runs were given.
#[derive(Default)]
pub(super) struct SecretsGiven {
    by_session: Mutex<HashMap<String, HashMap<String, BTreeSet<SecretName>>>>,
}

impl SecretsGiven {
    /// Remembers that `session` of `account` was given `names`; returns whether the account now
    /// remembers so many sessions that the dead ones should be pruned.
    pub fn record(&self, account: &str, session: &str, names: &[SecretName]) -> bool {
        if names.is_empty() {
            return false;
        }
        let mut all = self.lock();
        let sessions = all.entry(account.to_owned()).or_default();
        sessions
            .entry(session.to_owned())
            .or_default()
            .extend(names.iter().cloned());
        sessions.len() > PRUNE_ABOVE
    }

    /// The names `session` of `account` was given.
    pub fn of(&self, account: &str, session: &str) -> Vec<SecretName> {
        self.lock()
            .get(account)
            .and_then(|sessions| sessions.get(session))
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Forgets every session of `account` but the `live` ones.
    pub fn keep_only(&self, account: &str, live: &[String]) {
        let mut all = self.lock();
        if let Some(sessions) = all.get_mut(account) {
            sessions.retain(|id, _| live.contains(id));
            if sessions.is_empty() {
                all.remove(account);
            }
        }
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, BTreeSet<SecretName>>>> {
        self.by_session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_are_remembered_per_session_and_pruned_to_live_ones() {
        let given = SecretsGiven::default();
        let name = |n: &str| SecretName::parse(n).unwrap();
        assert!(!given.record("a", "s", &[name("X")]));
        given.record("a", "s", &[name("Y"), name("X")]);
        assert_eq!(given.of("a", "s"), [name("X"), name("Y")]);
        assert!(given.of("b", "s").is_empty(), "accounts apart");
        let mut crowded = false;
        for n in 0..=PRUNE_ABOVE {
            crowded = given.record("a", &format!("t{n}"), &[name("Z")]);
        }
        assert!(crowded);
        given.keep_only("a", &["s".to_owned()]);
        assert_eq!(given.of("a", "s").len(), 2);
        assert!(given.of("a", "t0").is_empty());
    }
}

//! Sealed secrets kept in memory for a while, so that a run naming secrets does not wait for a
//! database read each time. Only ciphertext is kept (what the database holds anyway); values are
//! still decrypted per call and wiped after it. This process is the only writer of secrets, and
//! forgets a name when it stores or deletes it; the time limit bounds how long a change made
//! elsewhere (another host, later) can go unseen. A name found absent is remembered too: model
//! calls and searches look for conventional key names (`OPENAI_API_KEY`, …) an account may
//! never store, and that look-up must not cost a database read each call.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use toolgate_domain::{AccountId, SealedSecret, SecretName};

/// How long a cached entry is used.
const FRESH_FOR: Duration = Duration::from_secs(60);
/// Sealed bytes kept at most; past it the cache starts again empty.
const MAX_BYTES: usize = 16 * 1024 * 1024;

type Key = (AccountId, SecretName);

/// The cache.
#[derive(Default)]
pub(crate) struct SealedCache {
    entries: Mutex<Entries>,
}

/// What an absent name counts for against [`MAX_BYTES`].
const ABSENT_BYTES: usize = 64;

#[derive(Default)]
struct Entries {
    /// `None`: the name was looked for and is not stored.
    by_name: HashMap<Key, (Instant, Option<SealedSecret>)>,
    bytes: usize,
    /// Counts stores and deletes, so that a read that began before one is not kept after it.
    changes: u64,
}

fn size(sealed: &Option<SealedSecret>) -> usize {
    sealed
        .as_ref()
        .map_or(ABSENT_BYTES, |s| s.wrapped_key.len() + s.ciphertext.len())
}

impl SealedCache {
    /// The fresh entries among `names`, the names that must be read (neither is a name known
    /// to be absent), and the change count to hand back to [`Self::keep`] with what was read.
    pub fn split(
        &self,
        account: &AccountId,
        names: &[SecretName],
    ) -> (Vec<(SecretName, SealedSecret)>, Vec<SecretName>, u64) {
        let entries = self.lock();
        let mut found = Vec::new();
        let mut missing = Vec::new();
        for name in names {
            match entries.by_name.get(&(account.clone(), name.clone())) {
                Some((at, known)) if at.elapsed() < FRESH_FOR => {
                    if let Some(sealed) = known {
                        found.push((name.clone(), sealed.clone()));
                    }
                }
                _ => missing.push(name.clone()),
            }
        }
        (found, missing, entries.changes)
    }

    /// Keeps what was just read for the names `asked` (those not read are absent), unless a
    /// secret was stored or deleted since `split` (the read may then be out of date).
    pub fn keep(
        &self,
        account: &AccountId,
        asked: &[SecretName],
        read: &[(SecretName, SealedSecret)],
        changes: u64,
    ) {
        let mut entries = self.lock();
        if entries.changes != changes {
            return;
        }
        let now = Instant::now();
        for name in asked {
            let sealed = read
                .iter()
                .find(|(found, _)| found == name)
                .map(|(_, sealed)| sealed.clone());
            let added = size(&sealed);
            if entries.bytes + added > MAX_BYTES {
                entries.by_name.clear();
                entries.bytes = 0;
            }
            if let Some((_, old)) = entries
                .by_name
                .insert((account.clone(), name.clone()), (now, sealed))
            {
                entries.bytes -= size(&old);
            }
            entries.bytes += added;
        }
    }

    /// Forgets one name (it was stored or deleted); reads begun before are not kept.
    pub fn forget(&self, account: &AccountId, name: &SecretName) {
        let mut entries = self.lock();
        entries.changes += 1;
        if let Some((_, old)) = entries.by_name.remove(&(account.clone(), name.clone())) {
            entries.bytes -= size(&old);
        }
    }

    /// Forgets everything (the sealed forms were rewritten by a rotation).
    pub fn clear(&self) {
        let mut entries = self.lock();
        entries.by_name.clear();
        entries.bytes = 0;
        entries.changes += 1;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::cloned_ref_to_slice_refs)]
    use super::*;

    fn sealed(byte: u8) -> SealedSecret {
        SealedSecret {
            key_version: 1,
            wrapped_key: vec![byte; 72],
            ciphertext: vec![byte; 40],
        }
    }

    #[test]
    fn entries_are_per_account_and_forgotten_on_change() {
        let cache = SealedCache::default();
        let (a, b) = (AccountId::generate(), AccountId::generate());
        let name = SecretName::parse("K").unwrap();
        let other = SecretName::parse("L").unwrap();
        let (_, _, changes) = cache.split(&a, &[name.clone()]);
        cache.keep(&a, &[name.clone()], &[(name.clone(), sealed(1))], changes);
        let (found, missing, _) = cache.split(&a, &[name.clone(), other.clone()]);
        assert_eq!(found, [(name.clone(), sealed(1))]);
        assert_eq!(missing, [other.clone()]);
        assert_eq!(
            cache.split(&b, &[name.clone()]).1,
            [name.clone()],
            "accounts apart"
        );
        cache.forget(&a, &name);
        assert_eq!(cache.split(&a, &[name.clone()]).1, [name.clone()]);
        assert_eq!(cache.lock().bytes, 0);
        // a read that began before a change is not kept after it
        let (_, _, before) = cache.split(&a, &[name.clone()]);
        cache.forget(&a, &other);
        cache.keep(&a, &[name.clone()], &[(name.clone(), sealed(2))], before);
        assert_eq!(cache.split(&a, &[name.clone()]).1, [name]);
    }

    #[test]
    fn a_name_found_absent_is_not_read_again_until_it_is_stored() {
        let cache = SealedCache::default();
        let a = AccountId::generate();
        let name = SecretName::parse("OPENAI_API_KEY").unwrap();
        let (_, missing, changes) = cache.split(&a, &[name.clone()]);
        assert_eq!(missing, [name.clone()]);
        cache.keep(&a, &missing, &[], changes);
        let (found, missing, _) = cache.split(&a, &[name.clone()]);
        assert!(
            found.is_empty() && missing.is_empty(),
            "known absent: no read"
        );
        cache.forget(&a, &name);
        assert_eq!(
            cache.split(&a, &[name.clone()]).1,
            [name],
            "stored since: read again"
        );
        assert_eq!(cache.lock().bytes, 0);
    }
}

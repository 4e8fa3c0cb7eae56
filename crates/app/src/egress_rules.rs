//! Each account's host lists: which hosts its sessions' code may reach through the egress proxy
//! (`allow`; empty: every public host) and may not (`deny`, applied after `allow`). Set with the
//! write tool's `network` field or the dashboard, read into every run's grant.
//!
//! A run with network asks for its account's lists, so they are kept in memory: a write through
//! this process forgets the account's entry (a read that began before the write is not kept),
//! and an entry is used for [`FRESH_FOR`] at most, which bounds how long a write made through
//! another front end on the same database goes unseen.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use toolgate_domain::AccountId;
use toolgate_egress::HostPattern;
use toolgate_store::{HostLists, HostListsChange, Store, StoreError};

/// Patterns a list holds at most.
pub const MAX_PATTERNS: usize = 100;

/// How long a cached account's lists are used before they are read again.
pub const FRESH_FOR: Duration = Duration::from_secs(5);

/// Accounts kept at most; past it the cache starts again empty.
const MAX_ACCOUNTS: usize = 100_000;

/// Why the lists were not changed or read.
#[derive(Debug, thiserror::Error)]
pub enum EgressRulesError {
    /// The lists given are not lists of host patterns; the message says which entry and why.
    #[error("{0}")]
    Refused(String),
    /// The account does not exist.
    #[error("no such account")]
    NoAccount,
    /// Storage failed; the source is for logs only.
    #[error("the host lists are temporarily unavailable; please retry")]
    Unavailable(#[source] StoreError),
}

/// The accounts' host lists, cached for runs.
pub struct EgressRules {
    store: Arc<dyn Store>,
    fresh_for: Duration,
    cache: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    by_account: HashMap<AccountId, (Instant, Arc<HostLists>)>,
    /// Counts this process's writes, so that a read that began before one is not kept after it.
    changes: u64,
}

impl EgressRules {
    /// Lists kept in `store`, cached for [`FRESH_FOR`].
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            fresh_for: FRESH_FOR,
            cache: Mutex::default(),
        }
    }

    /// The same, with cached lists used for `fresh_for` (tests).
    #[must_use]
    pub fn fresh_for(mut self, fresh_for: Duration) -> Self {
        self.fresh_for = fresh_for;
        self
    }

    /// The account's lists now in force (from memory when read less than [`FRESH_FOR`] ago).
    pub async fn lists(&self, account: &AccountId) -> Result<Arc<HostLists>, EgressRulesError> {
        let changes = {
            let cache = self.lock();
            if let Some((at, lists)) = cache.by_account.get(account)
                && at.elapsed() < self.fresh_for
            {
                return Ok(Arc::clone(lists));
            }
            cache.changes
        };
        let read = Arc::new(
            self.store
                .host_lists(account)
                .await
                .map_err(EgressRulesError::Unavailable)?,
        );
        let mut cache = self.lock();
        if cache.changes == changes {
            if cache.by_account.len() >= MAX_ACCOUNTS {
                cache.by_account.clear();
            }
            cache
                .by_account
                .insert(account.clone(), (Instant::now(), Arc::clone(&read)));
        }
        Ok(read)
    }

    /// Replaces the lists given (`None` keeps that one), each pattern parsed and kept in its
    /// canonical form, and answers the lists now in force.
    pub async fn change(
        &self,
        account: &AccountId,
        allow: Option<&[&str]>,
        deny: Option<&[&str]>,
    ) -> Result<HostLists, EgressRulesError> {
        let allow = allow
            .map(|patterns| canonical_list("allow", patterns))
            .transpose()
            .map_err(EgressRulesError::Refused)?;
        let deny = deny
            .map(|patterns| canonical_list("deny", patterns))
            .transpose()
            .map_err(EgressRulesError::Refused)?;
        let change = HostListsChange {
            allow: allow.as_deref(),
            deny: deny.as_deref(),
        };
        let written = self.store.change_host_lists(account, change).await;
        {
            let mut cache = self.lock();
            cache.changes = cache.changes.wrapping_add(1);
            cache.by_account.remove(account);
        }
        written.map_err(|err| match err {
            StoreError::NotFound => EgressRulesError::NoAccount,
            other => EgressRulesError::Unavailable(other),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `patterns` parsed as the list `which` (as an error names it): each a host pattern, at most
/// [`MAX_PATTERNS`], in canonical form, a repeated one kept once. Blank entries are refused (a
/// textarea's blank lines are dropped before).
pub fn canonical_list(which: &str, patterns: &[&str]) -> Result<Vec<String>, String> {
    if patterns.len() > MAX_PATTERNS {
        return Err(format!(
            "`{which}` has {} patterns; a list holds at most {MAX_PATTERNS} (a wildcard such \
             as *.example.org names every host beneath a domain)",
            patterns.len()
        ));
    }
    let mut list: Vec<String> = Vec::with_capacity(patterns.len());
    for (index, text) in patterns.iter().enumerate() {
        let pattern = HostPattern::parse(text)
            .map_err(|err| format!("`{which}[{index}]`: {err}"))?
            .to_string();
        if !list.contains(&pattern) {
            list.push(pattern);
        }
    }
    Ok(list)
}

/// The lists in a sentence: what sessions' code may reach.
pub fn describe(lists: &HostLists) -> String {
    let allowed = if lists.allow.is_empty() {
        "every public host".to_owned()
    } else {
        format!("only {}", lists.allow.join(", "))
    };
    if lists.deny.is_empty() {
        format!("Sessions' code may reach {allowed}.")
    } else {
        format!(
            "Sessions' code may reach {allowed}, except {}.",
            lists.deny.join(", ")
        )
    }
}

#[cfg(test)]
#[path = "egress_rules_tests.rs"]
mod tests;

//! An account's host lists: the host patterns its sessions' code may reach through the egress
//! proxy (`allow`; empty: every public host) and may not (`deny`, applied after `allow`). One
//! row per account holds both, so a write of one list replaces it whole, atomically, whatever
//! else writes at the same time. Patterns arrive parsed and written in their canonical form by
//! the app; storage keeps them as they come, one per line.

use async_trait::async_trait;
use toolgate_domain::AccountId;

use crate::StoreError;

/// An account's two lists of host patterns, in the order the owner wrote them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostLists {
    /// Patterns code may reach; empty: every public host.
    pub allow: Vec<String>,
    /// Patterns code may not reach, applied after `allow`.
    pub deny: Vec<String>,
}

/// A change of an account's lists: a list given replaces that list whole; `None` keeps it.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostListsChange<'a> {
    /// The new allow-list, if it changes.
    pub allow: Option<&'a [String]>,
    /// The new deny-list, if it changes.
    pub deny: Option<&'a [String]>,
}

/// The accounts' host lists.
#[async_trait]
pub trait HostListStore: Send + Sync {
    /// The account's lists; both empty when it never wrote any (or does not exist).
    async fn host_lists(&self, account: &AccountId) -> Result<HostLists, StoreError>;

    /// Applies `change` in one statement and returns the lists now in force (durable when this
    /// returns). Each pattern is non-empty and holds no line break (the app's parser makes sure
    /// of it). `Err(NotFound)` when the account does not exist.
    async fn change_host_lists(
        &self,
        account: &AccountId,
        change: HostListsChange<'_>,
    ) -> Result<HostLists, StoreError>;
}

/// A list as its column holds it: one pattern a line.
pub fn host_list_to_column(patterns: &[String]) -> String {
    patterns.join("\n")
}

/// A list from its column.
pub fn host_list_from_column(column: &str) -> Vec<String> {
    column
        .split('\n')
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect()
}

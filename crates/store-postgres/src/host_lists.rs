//! The accounts' host lists: one row each, changed by one upsert (a list not given keeps its
//! column). The upsert's row lock orders concurrent writers, so each sees the other's list.

use async_trait::async_trait;
use toolgate_domain::AccountId;
use toolgate_store::{
    HostListStore, HostLists, HostListsChange, StoreError, host_list_from_column,
    host_list_to_column, now_millis,
};

use crate::PgStore;
use crate::rows::{map_error, map_write_error};

#[async_trait]
impl HostListStore for PgStore {
    async fn host_lists(&self, account: &AccountId) -> Result<HostLists, StoreError> {
        let row: Option<(String, String)> = sqlx::query_as(
            "SELECT allow_hosts, deny_hosts FROM egress_rules WHERE account_id = $1",
        )
        .bind(account.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(
            row.map_or_else(HostLists::default, |(allow, deny)| HostLists {
                allow: host_list_from_column(&allow),
                deny: host_list_from_column(&deny),
            }),
        )
    }

    async fn change_host_lists(
        &self,
        account: &AccountId,
        change: HostListsChange<'_>,
    ) -> Result<HostLists, StoreError> {
        // the insert checks the account (its foreign key); the update reads the row's own
        // columns, so a list not given stays as it is
        let (allow, deny): (String, String) = sqlx::query_as(
            "INSERT INTO egress_rules (account_id, allow_hosts, deny_hosts, updated_at)
             VALUES ($1, COALESCE($2, ''), COALESCE($3, ''), $4)
             ON CONFLICT (account_id) DO UPDATE
             SET allow_hosts = COALESCE($2, egress_rules.allow_hosts),
                 deny_hosts = COALESCE($3, egress_rules.deny_hosts),
                 updated_at = $4
             RETURNING allow_hosts, deny_hosts",
        )
        .bind(account.as_str())
        .bind(change.allow.map(host_list_to_column))
        .bind(change.deny.map(host_list_to_column))
        .bind(now_millis())
        .fetch_one(&self.pool)
        .await
        .map_err(map_write_error)?;
        Ok(HostLists {
            allow: host_list_from_column(&allow),
            deny: host_list_from_column(&deny),
        })
    }
}

//! Placement's nodes and session owners. Lease times are the server's clock
//! (`placement_now_ms()`, see the migration), read inside each statement, so front ends and
//! nodes on several hosts judge leases alike. Each compare-and-set is one statement, whose row
//! lock makes concurrent claimers of one session wait and then find it moved.

use async_trait::async_trait;
use toolgate_domain::{
    AccountId, Incarnation, Lease, NodeName, OwnerState, SandboxSessionId, SessionOwner,
};
use toolgate_store::{
    ClaimView, NodeBeat, NodeRecord, Placement, StoreError, claim_view_from_columns,
    load_to_columns, node_from_columns, owner_from_columns, seen_columns,
};

use crate::PgStore;
use crate::rows::{map_error, map_write_error};

/// A node row's columns, as `live_nodes` reads them.
type NodeRow = (String, i64, String, i64, i64, bool, i64, i64);

#[async_trait]
impl Placement for PgStore {
    async fn register_node(
        &self,
        name: &NodeName,
        url: &str,
        lease: Lease,
    ) -> Result<Incarnation, StoreError> {
        let incarnation: i64 = sqlx::query_scalar(
            "INSERT INTO nodes (name, incarnation, url, lease_until, started_at)
             SELECT $1, nextval('node_incarnations'), $2, t.now + $3, t.now
             FROM (SELECT placement_now_ms() AS now) t
             ON CONFLICT (name) DO UPDATE SET incarnation = excluded.incarnation,
                 url = excluded.url, lease_until = excluded.lease_until, sessions = 0,
                 memory_bytes = 0, draining = FALSE, started_at = excluded.started_at
             RETURNING incarnation",
        )
        .bind(name.as_str())
        .bind(url)
        .bind(lease.millis())
        .fetch_one(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(Incarnation(incarnation))
    }

    async fn heartbeat_node(&self, beat: &NodeBeat) -> Result<bool, StoreError> {
        let (sessions, memory) = load_to_columns(beat.load);
        let done = sqlx::query(
            "UPDATE nodes SET lease_until = t.now + $1, sessions = $2, memory_bytes = $3,
                 draining = $4
             FROM (SELECT placement_now_ms() AS now) t
             WHERE name = $5 AND incarnation = $6 AND lease_until > t.now",
        )
        .bind(beat.lease.millis())
        .bind(sessions)
        .bind(memory)
        .bind(beat.load.draining)
        .bind(beat.name.as_str())
        .bind(beat.incarnation.0)
        .execute(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn live_nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        let rows: Vec<NodeRow> = sqlx::query_as(
            "SELECT name, incarnation, url, sessions, memory_bytes, draining, started_at,
                 lease_until - t.now
             FROM nodes, (SELECT placement_now_ms() AS now) t
             WHERE lease_until > t.now ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(map_error)?;
        rows.into_iter()
            .map(
                |(name, inc, url, sessions, memory, draining, started, left)| {
                    node_from_columns(&name, inc, url, (sessions, memory, draining), started, left)
                },
            )
            .collect()
    }

    async fn remove_node(
        &self,
        name: &NodeName,
        incarnation: Incarnation,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM nodes WHERE name = $1 AND incarnation = $2")
            .bind(name.as_str())
            .bind(incarnation.0)
            .execute(&self.pool)
            .await
            .map_err(map_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn session_owner(
        &self,
        account: &AccountId,
        session: &SandboxSessionId,
    ) -> Result<Option<SessionOwner>, StoreError> {
        let row: Option<(String, i64, i64)> = sqlx::query_as(
            "SELECT o.node, o.incarnation, o.epoch FROM session_owners o
             JOIN nodes n ON n.name = o.node AND n.incarnation = o.incarnation
             WHERE o.account_id = $1 AND o.session_id = $2 AND n.lease_until > placement_now_ms()",
        )
        .bind(account.as_str())
        .bind(session.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(map_error)?;
        row.map(|(node, incarnation, epoch)| owner_from_columns(&node, incarnation, epoch))
            .transpose()
    }

    async fn claim_view(
        &self,
        account: &AccountId,
        session: &SandboxSessionId,
        name: &NodeName,
        incarnation: Incarnation,
    ) -> Result<ClaimView, StoreError> {
        let (node, owner_incarnation, epoch, owner_valid, claimer_live): (
            Option<String>,
            Option<i64>,
            Option<i64>,
            bool,
            bool,
        ) = sqlx::query_as(
            "SELECT o.node, o.incarnation, o.epoch, n.name IS NOT NULL,
                 EXISTS (SELECT 1 FROM nodes c WHERE c.name = $3 AND c.incarnation = $4
                         AND c.lease_until > t.now)
             FROM (SELECT placement_now_ms() AS now) t
             LEFT JOIN session_owners o ON o.account_id = $1 AND o.session_id = $2
             LEFT JOIN nodes n ON n.name = o.node AND n.incarnation = o.incarnation
                 AND n.lease_until > t.now",
        )
        .bind(account.as_str())
        .bind(session.as_str())
        .bind(name.as_str())
        .bind(incarnation.0)
        .fetch_one(&self.pool)
        .await
        .map_err(map_error)?;
        claim_view_from_columns(node, owner_incarnation, epoch, owner_valid, claimer_live)
    }

    async fn take_session(
        &self,
        account: &AccountId,
        session: &SandboxSessionId,
        seen: &OwnerState,
        next: &SessionOwner,
    ) -> Result<bool, StoreError> {
        let done = match seen_columns(seen) {
            None => sqlx::query(
                "INSERT INTO session_owners (account_id, session_id, node, incarnation, epoch)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
            )
            .bind(account.as_str())
            .bind(session.as_str())
            .bind(next.node.as_str())
            .bind(next.incarnation.0)
            .bind(next.epoch.0)
            .execute(&self.pool)
            .await
            .map_err(map_write_error)?,
            Some((node, incarnation, epoch)) => sqlx::query(
                "UPDATE session_owners SET node = $3, incarnation = $4, epoch = $5
                 WHERE account_id = $1 AND session_id = $2
                     AND node IS NOT DISTINCT FROM $6 AND incarnation IS NOT DISTINCT FROM $7
                     AND epoch = $8",
            )
            .bind(account.as_str())
            .bind(session.as_str())
            .bind(next.node.as_str())
            .bind(next.incarnation.0)
            .bind(next.epoch.0)
            .bind(node)
            .bind(incarnation)
            .bind(epoch)
            .execute(&self.pool)
            .await
            .map_err(map_write_error)?,
        };
        Ok(done.rows_affected() == 1)
    }

    async fn release_session(
        &self,
        account: &AccountId,
        session: &SandboxSessionId,
        name: &NodeName,
        incarnation: Incarnation,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE session_owners SET node = NULL, incarnation = NULL
             WHERE account_id = $1 AND session_id = $2 AND node = $3 AND incarnation = $4",
        )
        .bind(account.as_str())
        .bind(session.as_str())
        .bind(name.as_str())
        .bind(incarnation.0)
        .execute(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn forget_session(
        &self,
        account: &AccountId,
        session: &SandboxSessionId,
    ) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM session_owners WHERE account_id = $1 AND session_id = $2")
            .bind(account.as_str())
            .bind(session.as_str())
            .execute(&self.pool)
            .await
            .map_err(map_error)?;
        Ok(())
    }
}

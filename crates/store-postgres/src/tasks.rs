//! MCP tasks' rows. Times are the server's clock (`placement_now_ms()`), read inside each
//! statement, so front ends on several hosts judge expiry and silence alike. `create_task` first
//! takes a transaction-scoped advisory lock on the owner, so concurrent creates of one account
//! through several front ends count its unended tasks one after another (an advisory lock
//! rather than the account's row lock, which call admissions hold). Every change of state is an
//! UPDATE guarded by the task being unended, so the first end wins.

use std::time::Duration;

use async_trait::async_trait;
use toolgate_domain::AccountId;
use toolgate_store::{
    NewTask, StoreError, TaskCancel, TaskColumns, TaskRecord, TaskState, TaskStore,
    duration_millis, ended_task_state, running_task_state, task_from_columns, task_ttl_millis,
};

use crate::PgStore;
use crate::rows::{map_error, map_write_error};

/// The first key of the advisory locks taken here, so that they share no key with others.
const LOCK_SPACE: i32 = 0x7461_736b;

/// The columns [`task_from_columns`] reads, in its order.
macro_rules! columns {
    () => {
        "id, account_id, tool, state, status_message, input_requests, outcome, created_ms, \
         updated_ms, ttl_ms, runner"
    };
}

/// A task that has not ended; the same text as the partial indexes' condition, so they serve it.
macro_rules! unended {
    () => {
        "state IN ('working', 'input_required')"
    };
}

#[async_trait]
impl TaskStore for PgStore {
    async fn create_task(&self, task: &NewTask<'_>) -> Result<TaskRecord, StoreError> {
        let mut tx = self.pool.begin().await.map_err(map_error)?;
        // A hash collision of two accounts only makes their creates wait for each other.
        sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
            .bind(LOCK_SPACE)
            .bind(task.owner.as_str())
            .execute(&mut *tx)
            .await
            .map_err(map_error)?;
        let unended: i64 = sqlx::query_scalar(concat!(
            "SELECT count(*) FROM tasks WHERE account_id = $1 AND ",
            unended!()
        ))
        .bind(task.owner.as_str())
        .fetch_one(&mut *tx)
        .await
        .map_err(map_error)?;
        if unended >= i64::from(task.max_unended) {
            return Err(StoreError::Conflict("too many tasks"));
        }
        let created: Option<TaskColumns> = sqlx::query_as(concat!(
            "INSERT INTO tasks (id, account_id, tool, state, created_ms, updated_ms, ttl_ms,
                 runner, beat_ms)
             SELECT $1, $2, $3, 'working', t.now, t.now, $4, $5, t.now
             FROM (SELECT placement_now_ms() AS now) t
             ON CONFLICT (id) DO NOTHING
             RETURNING ",
            columns!()
        ))
        .bind(task.id)
        .bind(task.owner.as_str())
        .bind(task.tool)
        .bind(task_ttl_millis(task.ttl))
        .bind(task.runner)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_write_error)?;
        let created = created.ok_or(StoreError::Conflict("task id"))?;
        tx.commit().await.map_err(map_error)?;
        task_from_columns(created)
    }

    async fn task(&self, id: &str, owner: &AccountId) -> Result<Option<TaskRecord>, StoreError> {
        let row: Option<TaskColumns> = sqlx::query_as(concat!(
            "SELECT ",
            columns!(),
            " FROM tasks WHERE id = $1 AND account_id = $2 AND expires_ms > placement_now_ms()"
        ))
        .bind(id)
        .bind(owner.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(map_error)?;
        row.map(task_from_columns).transpose()
    }

    async fn tasks_of(
        &self,
        owner: &AccountId,
        after: Option<(i64, &str)>,
        limit: u32,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        // Without `after`, a bound past every row: one statement serves every page.
        let (after_ms, after_id) = after.unwrap_or((i64::MAX, ""));
        let rows: Vec<TaskColumns> = sqlx::query_as(concat!(
            "SELECT ",
            columns!(),
            " FROM tasks
             WHERE account_id = $1 AND expires_ms > placement_now_ms()
                 AND (created_ms, id) < ($2, $3)
             ORDER BY created_ms DESC, id DESC LIMIT $4"
        ))
        .bind(owner.as_str())
        .bind(after_ms)
        .bind(after_id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(map_error)?;
        rows.into_iter().map(task_from_columns).collect()
    }

    async fn update_task(
        &self,
        id: &str,
        state: TaskState,
        message: Option<&str>,
        input_requests: Option<&str>,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(concat!(
            "UPDATE tasks SET state = $2, status_message = $3, input_requests = $4,
                 updated_ms = placement_now_ms()
             WHERE id = $1 AND ",
            unended!()
        ))
        .bind(id)
        .bind(running_task_state(state)?.as_str())
        .bind(message)
        .bind(input_requests)
        .execute(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn end_task(
        &self,
        id: &str,
        state: TaskState,
        message: Option<&str>,
        outcome: &str,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(concat!(
            "UPDATE tasks SET state = $2, status_message = $3, outcome = $4,
                 input_requests = NULL, updated_ms = placement_now_ms()
             WHERE id = $1 AND ",
            unended!()
        ))
        .bind(id)
        .bind(ended_task_state(state)?.as_str())
        .bind(message)
        .bind(outcome)
        .execute(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn cancel_task(
        &self,
        id: &str,
        owner: &AccountId,
        message: &str,
    ) -> Result<TaskCancel, StoreError> {
        let cancelled: Option<TaskColumns> = sqlx::query_as(concat!(
            "UPDATE tasks SET state = 'cancelled', status_message = $3, outcome = NULL,
                 input_requests = NULL, updated_ms = placement_now_ms()
             WHERE id = $1 AND account_id = $2 AND expires_ms > placement_now_ms() AND ",
            unended!(),
            " RETURNING ",
            columns!()
        ))
        .bind(id)
        .bind(owner.as_str())
        .bind(message)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_error)?;
        if let Some(cancelled) = cancelled {
            return Ok(TaskCancel::Cancelled(task_from_columns(cancelled)?));
        }
        // Not cancelled: it is someone else's, expired, missing, or ended (which never undoes).
        match self.task(id, owner).await? {
            Some(ended) => Ok(TaskCancel::AlreadyEnded(ended)),
            None => Ok(TaskCancel::NotFound),
        }
    }

    async fn beat_tasks(&self, runner: &str) -> Result<u64, StoreError> {
        let done = sqlx::query(concat!(
            "UPDATE tasks SET beat_ms = greatest(beat_ms, placement_now_ms())
             WHERE runner = $1 AND ",
            unended!()
        ))
        .bind(runner)
        .execute(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(done.rows_affected())
    }

    async fn fail_lost_tasks(
        &self,
        silent: Duration,
        spare_runner: &str,
        message: &str,
        outcome: &str,
    ) -> Result<u64, StoreError> {
        // ZERO fails every other runner's task, even one whose beat the clock has not reached.
        let done = sqlx::query(concat!(
            "UPDATE tasks SET state = 'failed', status_message = $3, outcome = $4,
                 input_requests = NULL, updated_ms = placement_now_ms()
             WHERE ",
            unended!(),
            " AND ($1 = 0 OR beat_ms <= placement_now_ms() - $1) AND runner <> $2"
        ))
        .bind(duration_millis(silent))
        .bind(spare_runner)
        .bind(message)
        .bind(outcome)
        .execute(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(done.rows_affected())
    }

    async fn purge_tasks(&self) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM tasks WHERE expires_ms <= placement_now_ms()")
            .execute(&self.pool)
            .await
            .map_err(map_error)?;
        Ok(done.rows_affected())
    }
}

//! Call history's rows: a batch is one IMMEDIATE transaction on the writer (its rows and its
//! model tokens' upserts together); pages and records are read through the reader pool, always
//! by account, newest first; the purge deletes a bounded batch by time.

use async_trait::async_trait;
use sqlx::sqlite::SqliteRow;
use sqlx::{QueryBuilder, Row, Sqlite};
use toolgate_domain::{AccountId, Micros, MonthKey};
use toolgate_store::{
    CallHistory, CallOutcome, CallRecord, HistoryCursor, HistoryFilter, MAX_PAGE_ROWS,
    ProviderTokens, StoreError, destinations_from_column, destinations_to_column, like_pattern,
    model_from_columns, tokens_per_month,
};

use crate::SqliteStore;
use crate::rows::{map_error, map_write_error};

/// The columns a record is read from, in a macro so that queries stay literal.
macro_rules! columns {
    () => {
        "id, account_id, at_ms, key_label, key_id, client, tool, fields, outcome,
     detail, duration_ms, charge_micros, session_id, destinations, provider, model,
     input_tokens, output_tokens"
    };
}

/// Rows in one INSERT of a batch: 18 parameters each, well within SQLite's 32,766.
const ROWS_PER_INSERT: usize = 256;

#[async_trait]
impl CallHistory for SqliteStore {
    async fn append_calls(&self, records: &[CallRecord]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let mut tx = self
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(map_error)?;
        // many rows per statement: each statement is a round trip to sqlx's worker thread,
        // two thread wake-ups, which a row at a time paid for every call
        for chunk in records.chunks(ROWS_PER_INSERT) {
            let mut insert = QueryBuilder::<Sqlite>::new(concat!(
                "INSERT INTO call_history (",
                columns!(),
                ") "
            ));
            insert.push_values(chunk, |mut row, record| {
                let model = record.model.as_ref();
                row.push_bind(&record.id)
                    .push_bind(record.account.as_str())
                    .push_bind(record.at_ms)
                    .push_bind(&record.key_label)
                    .push_bind(record.key_id.as_deref())
                    .push_bind(record.client.as_deref())
                    .push_bind(&record.tool)
                    .push_bind(&record.fields)
                    .push_bind(record.outcome.kind())
                    .push_bind(record.outcome.detail())
                    .push_bind(record.duration_ms)
                    .push_bind(record.charge.map(|m| m.0))
                    .push_bind(record.session.as_deref())
                    .push_bind(destinations_to_column(&record.destinations))
                    .push_bind(model.map(|m| m.provider.as_str()))
                    .push_bind(model.map(|m| m.model.as_str()))
                    .push_bind(model.map(|m| m.input_tokens))
                    .push_bind(model.map(|m| m.output_tokens));
            });
            // not kept in the connection's statement cache: a batch's last chunk has any size,
            // and each size is another statement that would push the writer's own ones out
            insert
                .build()
                .persistent(false)
                .execute(&mut *tx)
                .await
                .map_err(map_write_error)?;
        }
        for (account, month, tokens) in tokens_per_month(records) {
            sqlx::query(
                "INSERT INTO model_tokens (account_id, month, provider, calls, input_tokens,
                     output_tokens)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (account_id, month, provider) DO UPDATE
                 SET calls = calls + ?4, input_tokens = input_tokens + ?5,
                     output_tokens = output_tokens + ?6",
            )
            .bind(account)
            .bind(month)
            .bind(&tokens.provider)
            .bind(tokens.calls)
            .bind(tokens.input_tokens)
            .bind(tokens.output_tokens)
            .execute(&mut *tx)
            .await
            .map_err(map_write_error)?;
        }
        tx.commit().await.map_err(map_error)
    }

    async fn call_page(
        &self,
        account: &AccountId,
        filter: &HistoryFilter,
        cursor: Option<&HistoryCursor>,
        limit: u32,
    ) -> Result<Vec<CallRecord>, StoreError> {
        let sql = concat!(
            "SELECT ",
            columns!(),
            " FROM call_history
             WHERE account_id = ?1
               AND (?2 IS NULL OR key_label = ?2 OR key_id = ?2)
               AND (?3 IS NULL OR tool = ?3)
               AND (?4 IS NULL OR outcome = ?4)
               AND (?5 IS NULL OR session_id = ?5)
               AND (?6 IS NULL OR at_ms >= ?6)
               AND (?7 IS NULL OR at_ms < ?7)
               AND (?8 IS NULL OR fields LIKE ?8 ESCAPE '\\')
               AND (?9 IS NULL OR at_ms < ?9 OR (at_ms = ?9 AND id < ?10))
             ORDER BY at_ms DESC, id DESC
             LIMIT ?11"
        );
        let rows = sqlx::query(sql)
            .bind(account.as_str())
            .bind(filter.key.as_deref())
            .bind(filter.tool.as_deref())
            .bind(filter.outcome.as_deref())
            .bind(filter.session.as_deref())
            .bind(filter.from_ms)
            .bind(filter.to_ms)
            .bind(filter.search.as_deref().map(like_pattern))
            .bind(cursor.map(|c| c.at_ms))
            .bind(cursor.map(|c| c.id.as_str()))
            .bind(i64::from(limit.min(MAX_PAGE_ROWS)))
            .fetch_all(&self.reader)
            .await
            .map_err(map_error)?;
        rows.iter().map(record_from_row).collect()
    }

    async fn call_record(
        &self,
        account: &AccountId,
        id: &str,
    ) -> Result<Option<CallRecord>, StoreError> {
        let sql = concat!(
            "SELECT ",
            columns!(),
            " FROM call_history WHERE account_id = ?1 AND id = ?2"
        );
        let row = sqlx::query(sql)
            .bind(account.as_str())
            .bind(id)
            .fetch_optional(&self.reader)
            .await
            .map_err(map_error)?;
        row.as_ref().map(record_from_row).transpose()
    }

    async fn purge_calls(&self, before_ms: i64, limit: u32) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM call_history WHERE rowid IN (
                 SELECT rowid FROM call_history WHERE at_ms < ?1 LIMIT ?2)",
        )
        .bind(before_ms)
        .bind(i64::from(limit))
        .execute(&self.writer)
        .await
        .map_err(map_error)?;
        Ok(done.rows_affected())
    }

    async fn model_tokens(
        &self,
        account: &AccountId,
        month: &MonthKey,
    ) -> Result<Vec<ProviderTokens>, StoreError> {
        let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
            "SELECT provider, calls, input_tokens, output_tokens FROM model_tokens
             WHERE account_id = ?1 AND month = ?2 ORDER BY provider",
        )
        .bind(account.as_str())
        .bind(month.as_str())
        .fetch_all(&self.reader)
        .await
        .map_err(map_error)?;
        Ok(rows
            .into_iter()
            .map(
                |(provider, calls, input_tokens, output_tokens)| ProviderTokens {
                    provider,
                    calls,
                    input_tokens,
                    output_tokens,
                },
            )
            .collect())
    }
}

fn record_from_row(row: &SqliteRow) -> Result<CallRecord, StoreError> {
    let outcome: String = row.try_get("outcome").map_err(map_error)?;
    let destinations: String = row.try_get("destinations").map_err(map_error)?;
    Ok(CallRecord {
        id: row.try_get("id").map_err(map_error)?,
        account: AccountId::from_stored(row.try_get("account_id").map_err(map_error)?),
        at_ms: row.try_get("at_ms").map_err(map_error)?,
        key_label: row.try_get("key_label").map_err(map_error)?,
        key_id: row.try_get("key_id").map_err(map_error)?,
        client: row.try_get("client").map_err(map_error)?,
        tool: row.try_get("tool").map_err(map_error)?,
        fields: row.try_get("fields").map_err(map_error)?,
        outcome: CallOutcome::from_columns(&outcome, row.try_get("detail").map_err(map_error)?)?,
        duration_ms: row.try_get("duration_ms").map_err(map_error)?,
        charge: row
            .try_get::<Option<i64>, _>("charge_micros")
            .map_err(map_error)?
            .map(Micros),
        session: row.try_get("session_id").map_err(map_error)?,
        destinations: destinations_from_column(&destinations),
        model: model_from_columns(
            row.try_get("provider").map_err(map_error)?,
            row.try_get("model").map_err(map_error)?,
            row.try_get("input_tokens").map_err(map_error)?,
            row.try_get("output_tokens").map_err(map_error)?,
        ),
    })
}

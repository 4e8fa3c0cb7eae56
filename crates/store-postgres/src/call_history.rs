//! Call history's rows: a batch is one transaction of two statements (its rows as arrays, then
//! its model tokens' upserts); pages and records are always one account's, newest first; the
//! purge deletes a bounded batch by time, so the table stays the retention's size.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::postgres::PgRow;
use toolgate_domain::{AccountId, Micros, MonthKey};
use toolgate_store::{
    CallHistory, CallOutcome, CallRecord, HistoryCursor, HistoryFilter, MAX_PAGE_ROWS, ModelUse,
    ProviderTokens, StoreError, destinations_from_column, destinations_to_column, like_pattern,
    model_from_columns, tokens_per_month,
};

use crate::PgStore;
use crate::rows::{map_error, map_write_error};

/// The columns a record is read from, in a macro so that queries stay literal.
macro_rules! columns {
    () => {
        "id, account_id, at_ms, key_label, key_id, client, tool, fields, outcome,
     detail, duration_ms, charge_micros, session_id, destinations, provider, model,
     input_tokens, output_tokens"
    };
}

#[async_trait]
impl CallHistory for PgStore {
    async fn append_calls(&self, records: &[CallRecord]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let columns = Columns::of(records);
        let mut tx = self.pool.begin().await.map_err(map_error)?;
        // the whole batch is one statement, its columns sent as arrays
        sqlx::query(
            "INSERT INTO call_history (id, account_id, at_ms, key_label, key_id, client, tool,
                 fields, outcome, detail, duration_ms, charge_micros, session_id, destinations,
                 provider, model, input_tokens, output_tokens)
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[],
                 $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::bigint[],
                 $12::bigint[], $13::text[], $14::text[], $15::text[], $16::text[],
                 $17::bigint[], $18::bigint[])",
        )
        .bind(columns.id)
        .bind(columns.account)
        .bind(columns.at_ms)
        .bind(columns.key_label)
        .bind(columns.key_id)
        .bind(columns.client)
        .bind(columns.tool)
        .bind(columns.fields)
        .bind(columns.outcome)
        .bind(columns.detail)
        .bind(columns.duration_ms)
        .bind(columns.charge)
        .bind(columns.session)
        .bind(columns.destinations)
        .bind(columns.provider)
        .bind(columns.model)
        .bind(columns.input_tokens)
        .bind(columns.output_tokens)
        .execute(&mut *tx)
        .await
        .map_err(map_write_error)?;
        let sums = tokens_per_month(records);
        if !sums.is_empty() {
            let mut account = Vec::with_capacity(sums.len());
            let mut month = Vec::with_capacity(sums.len());
            let mut provider = Vec::with_capacity(sums.len());
            let mut calls = Vec::with_capacity(sums.len());
            let mut input = Vec::with_capacity(sums.len());
            let mut output = Vec::with_capacity(sums.len());
            for (a, m, tokens) in sums {
                account.push(a);
                month.push(m);
                provider.push(tokens.provider);
                calls.push(tokens.calls);
                input.push(tokens.input_tokens);
                output.push(tokens.output_tokens);
            }
            sqlx::query(
                "INSERT INTO model_tokens AS t (account_id, month, provider, calls, input_tokens,
                     output_tokens)
                 SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bigint[],
                     $5::bigint[], $6::bigint[])
                 ON CONFLICT (account_id, month, provider) DO UPDATE
                 SET calls = t.calls + EXCLUDED.calls,
                     input_tokens = t.input_tokens + EXCLUDED.input_tokens,
                     output_tokens = t.output_tokens + EXCLUDED.output_tokens",
            )
            .bind(account)
            .bind(month)
            .bind(provider)
            .bind(calls)
            .bind(input)
            .bind(output)
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
             WHERE account_id = $1
               AND ($2::text IS NULL OR key_label = $2 OR key_id = $2)
               AND ($3::text IS NULL OR tool = $3)
               AND ($4::text IS NULL OR outcome = $4)
               AND ($5::text IS NULL OR session_id = $5)
               AND ($6::bigint IS NULL OR at_ms >= $6)
               AND ($7::bigint IS NULL OR at_ms < $7)
               AND ($8::text IS NULL OR fields LIKE $8 ESCAPE '\\')
               AND ($9::bigint IS NULL OR (at_ms, id) < ($9, $10::text))
             ORDER BY at_ms DESC, id DESC
             LIMIT $11"
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
            .fetch_all(&self.pool)
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
            " FROM call_history WHERE account_id = $1 AND id = $2"
        );
        let row = sqlx::query(sql)
            .bind(account.as_str())
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_error)?;
        row.as_ref().map(record_from_row).transpose()
    }

    async fn purge_calls(&self, before_ms: i64, limit: u32) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM call_history WHERE id IN (
                 SELECT id FROM call_history WHERE at_ms < $1 LIMIT $2)",
        )
        .bind(before_ms)
        .bind(i64::from(limit))
        .execute(&self.pool)
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
             WHERE account_id = $1 AND month = $2 ORDER BY provider",
        )
        .bind(account.as_str())
        .bind(month.as_str())
        .fetch_all(&self.pool)
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

fn record_from_row(row: &PgRow) -> Result<CallRecord, StoreError> {
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

/// A batch's columns as arrays, for one `UNNEST` insert.
struct Columns {
    id: Vec<String>,
    account: Vec<String>,
    at_ms: Vec<i64>,
    key_label: Vec<String>,
    key_id: Vec<Option<String>>,
    client: Vec<Option<String>>,
    tool: Vec<String>,
    fields: Vec<String>,
    outcome: Vec<&'static str>,
    detail: Vec<String>,
    duration_ms: Vec<i64>,
    charge: Vec<Option<i64>>,
    session: Vec<Option<String>>,
    destinations: Vec<String>,
    provider: Vec<Option<String>>,
    model: Vec<Option<String>>,
    input_tokens: Vec<Option<i64>>,
    output_tokens: Vec<Option<i64>>,
}

impl Columns {
    fn of(records: &[CallRecord]) -> Self {
        let model = |f: fn(&ModelUse) -> String| -> Vec<Option<String>> {
            records.iter().map(|r| r.model.as_ref().map(f)).collect()
        };
        let tokens = |f: fn(&ModelUse) -> i64| -> Vec<Option<i64>> {
            records.iter().map(|r| r.model.as_ref().map(f)).collect()
        };
        Self {
            id: records.iter().map(|r| r.id.clone()).collect(),
            account: records
                .iter()
                .map(|r| r.account.as_str().to_owned())
                .collect(),
            at_ms: records.iter().map(|r| r.at_ms).collect(),
            key_label: records.iter().map(|r| r.key_label.clone()).collect(),
            key_id: records.iter().map(|r| r.key_id.clone()).collect(),
            client: records.iter().map(|r| r.client.clone()).collect(),
            tool: records.iter().map(|r| r.tool.clone()).collect(),
            fields: records.iter().map(|r| r.fields.clone()).collect(),
            outcome: records.iter().map(|r| r.outcome.kind()).collect(),
            detail: records.iter().map(|r| r.outcome.detail()).collect(),
            duration_ms: records.iter().map(|r| r.duration_ms).collect(),
            charge: records.iter().map(|r| r.charge.map(|m| m.0)).collect(),
            session: records.iter().map(|r| r.session.clone()).collect(),
            destinations: records
                .iter()
                .map(|r| destinations_to_column(&r.destinations))
                .collect(),
            provider: model(|m| m.provider.clone()),
            model: model(|m| m.model.clone()),
            input_tokens: tokens(|m| m.input_tokens),
            output_tokens: tokens(|m| m.output_tokens),
        }
    }
}

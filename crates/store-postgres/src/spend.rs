//! The owner's spend controls: caps and the wallet alert amount written on the writer
//! statement that notifies the key epoch's channel (as a key's rotation does), spend summed from
//! the ledger, and sent alerts recorded once by their primary key.

use async_trait::async_trait;
use toolgate_domain::{AccountId, DayKey, Micros, MonthKey, SpendCaps};
use toolgate_store::{
    KeySpendColumns, SpendControls, SpendLimits, SpendLine, SpendOverview, StoreError,
    key_spend_from_columns, now_millis, owner_email_from_column, spend_line_from_columns,
};

use crate::rows::{map_error, map_write_error};
use crate::{PgStore, key_epoch};

/// The account's row as the overview reads it.
type OverviewColumns = (String, Option<i64>, Option<i64>, Option<i64>, i64, i64, i64);

#[async_trait]
impl SpendControls for PgStore {
    async fn set_spend_limits(
        &self,
        account: &AccountId,
        limits: &SpendLimits,
    ) -> Result<(), StoreError> {
        // Authentication caches the account with its caps under the key epoch: the statement
        // notifies every store when it commits, and this one moves on at once, as
        // `replace_key` does.
        let written = sqlx::query(
            "WITH written AS (
                 UPDATE accounts SET cap_month_micros = $1, cap_day_micros = $2,
                     alert_below_micros = $3
                 WHERE id = $4 RETURNING 1)
             SELECT pg_notify($5, '') FROM written",
        )
        .bind(limits.caps.month.map(|cap| cap.0))
        .bind(limits.caps.day.map(|cap| cap.0))
        .bind(limits.alert_below.map(|amount| amount.0))
        .bind(account.as_str())
        .bind(key_epoch::CHANNEL)
        .execute(&self.pool)
        .await;
        self.key_epoch.rotated();
        if written.map_err(map_error)?.rows_affected() == 1 {
            Ok(())
        } else {
            Err(StoreError::NotFound)
        }
    }

    async fn spend_overview(
        &self,
        account: &AccountId,
        month: &MonthKey,
        day: &DayKey,
    ) -> Result<SpendOverview, StoreError> {
        let row: Option<OverviewColumns> = sqlx::query_as(
            "SELECT a.email, a.cap_month_micros, a.cap_day_micros, a.alert_below_micros,
                    a.wallet_micros - a.owed_micros,
                    COALESCE((SELECT spent_micros FROM spend
                              WHERE account_id = a.id AND key_id = '' AND period = $2), 0),
                    COALESCE((SELECT spent_micros FROM spend
                              WHERE account_id = a.id AND key_id = '' AND period = $3), 0)
             FROM accounts a WHERE a.id = $1",
        )
        .bind(account.as_str())
        .bind(month.as_str())
        .bind(day.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(map_error)?;
        let (email, cap_month, cap_day, alert_below, balance, spent_month, spent_day) =
            row.ok_or(StoreError::NotFound)?;
        let keys: Vec<KeySpendColumns> = sqlx::query_as(
            "SELECT k.id, k.name, k.cap_month_micros, k.cap_day_micros,
                    COALESCE((SELECT spent_micros FROM spend
                              WHERE account_id = k.account_id AND key_id = k.id
                                AND period = $2), 0),
                    COALESCE((SELECT spent_micros FROM spend
                              WHERE account_id = k.account_id AND key_id = k.id
                                AND period = $3), 0)
             FROM api_keys k WHERE k.account_id = $1 AND k.revoked_at IS NULL
             ORDER BY k.name COLLATE \"C\"",
        )
        .bind(account.as_str())
        .bind(month.as_str())
        .bind(day.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(SpendOverview {
            email: owner_email_from_column(&email)?,
            limits: SpendLimits {
                caps: SpendCaps::from_columns(cap_month, cap_day),
                alert_below: alert_below.map(Micros),
            },
            balance: Micros(balance),
            month: Micros(spent_month),
            day: Micros(spent_day),
            keys: keys.into_iter().map(key_spend_from_columns).collect(),
        })
    }

    async fn spend_by_key(
        &self,
        account: &AccountId,
        month: &MonthKey,
    ) -> Result<Vec<SpendLine>, StoreError> {
        // a key since revoked keeps its name here: its calls were made
        let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
            "SELECT CASE WHEN l.key_id IS NULL THEN 'default' ELSE COALESCE(k.name, l.key_id) END
                        COLLATE \"C\" AS label,
                    COUNT(*) FILTER (WHERE l.paid_from = 'free'),
                    COUNT(*) FILTER (WHERE l.paid_from = 'wallet'),
                    CAST(COALESCE(SUM(l.cost_micros) FILTER (WHERE l.paid_from = 'wallet'), 0)
                         AS BIGINT)
             FROM call_ledger l LEFT JOIN api_keys k ON k.id = l.key_id
             WHERE l.account_id = $1 AND l.month = $2
             GROUP BY l.key_id, k.name ORDER BY label",
        )
        .bind(account.as_str())
        .bind(month.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(rows.into_iter().map(spend_line_from_columns).collect())
    }

    async fn spend_by_tool(
        &self,
        account: &AccountId,
        month: &MonthKey,
    ) -> Result<Vec<SpendLine>, StoreError> {
        let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
            "SELECT tool,
                    COUNT(*) FILTER (WHERE paid_from = 'free'),
                    COUNT(*) FILTER (WHERE paid_from = 'wallet'),
                    CAST(COALESCE(SUM(cost_micros) FILTER (WHERE paid_from = 'wallet'), 0)
                         AS BIGINT)
             FROM call_ledger WHERE account_id = $1 AND month = $2
             GROUP BY tool ORDER BY tool COLLATE \"C\"",
        )
        .bind(account.as_str())
        .bind(month.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(rows.into_iter().map(spend_line_from_columns).collect())
    }

    async fn record_alert(
        &self,
        account: &AccountId,
        kind: &str,
        period: &str,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "INSERT INTO alerts_sent (account_id, kind, period, sent_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (account_id, kind, period) DO NOTHING",
        )
        .bind(account.as_str())
        .bind(kind)
        .bind(period)
        .bind(now_millis())
        .execute(&self.pool)
        .await
        .map_err(map_write_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn purge_spend_days(&self, before: &DayKey) -> Result<u64, StoreError> {
        // a day's period is `YYYY-MM-DD`, a month's `YYYY-MM`: only days go, oldest by text
        let done = sqlx::query("DELETE FROM spend WHERE length(period) = 10 AND period < $1")
            .bind(before.as_str())
            .execute(&self.pool)
            .await
            .map_err(map_error)?;
        Ok(done.rows_affected())
    }

    async fn forget_alerts(
        &self,
        account: &AccountId,
        kind: &str,
        period: Option<&str>,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM alerts_sent
             WHERE account_id = $1 AND kind = $2 AND ($3::TEXT IS NULL OR period = $3)",
        )
        .bind(account.as_str())
        .bind(kind)
        .bind(period)
        .execute(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(done.rows_affected())
    }
}

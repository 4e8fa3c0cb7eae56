//! `GET /dashboard/history` (the account's calls, newest first, filtered by GET parameters and
//! paged by cursor), `GET /dashboard/history.csv` (the filtered rows as CSV) and
//! `GET /dashboard/history/{id}` (one call's record). Every query is the signed-in account's
//! and bounded: a page of at most 200 rows, an export of at most 10,000, filters and the search
//! cut to 200 characters.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use toolgate_app::history::{CallRecord, HistoryCursor, HistoryFilter, MAX_SEARCH_CHARS};
use toolgate_domain::time_reexport::{Date, Month, OffsetDateTime};

use crate::Dash;
use crate::guard::{self, Signed};
use crate::pages::chrome;
use crate::views::history::{EXPORT_ROWS, FilterQuery, FilterView, RecordView};
use crate::views::{self, Tab, iso_time};

/// Rows a page shows.
const PAGE_ROWS: u32 = 50;

impl FilterQuery {
    /// The store's filter; a date that does not parse is an error to show.
    fn filter(&self) -> Result<HistoryFilter, &'static str> {
        let text = |raw: &str| {
            let raw = raw.trim();
            (!raw.is_empty()).then(|| raw.chars().take(MAX_SEARCH_CHARS).collect::<String>())
        };
        let day = |raw: &str, next: bool| -> Result<Option<i64>, &'static str> {
            let raw = raw.trim();
            if raw.is_empty() {
                return Ok(None);
            }
            day_start_ms(raw, next)
                .map(Some)
                .ok_or("Dates are written YYYY-MM-DD.")
        };
        let outcome = text(&self.outcome);
        if outcome
            .as_deref()
            .is_some_and(|o| !["ok", "tool_error", "refused"].contains(&o))
        {
            return Err("The outcome is ok, tool_error or refused.");
        }
        Ok(HistoryFilter {
            key: text(&self.key),
            tool: text(&self.tool),
            outcome,
            session: text(&self.session),
            from_ms: day(&self.from, false)?,
            to_ms: day(&self.to, true)?,
            // a search keeps its spaces: they may be what is looked for
            search: (!self.q.is_empty()).then(|| self.q.chars().take(MAX_SEARCH_CHARS).collect()),
        })
    }
}

/// Midnight UTC of day `raw` (`YYYY-MM-DD`), or of the day after when `next`, in Unix ms.
fn day_start_ms(raw: &str, next: bool) -> Option<i64> {
    let mut parts = raw.splitn(3, '-');
    let year: i32 = parts.next()?.parse().ok()?;
    let month: u8 = parts.next()?.parse().ok()?;
    let day: u8 = parts.next()?.parse().ok()?;
    let mut date = Date::from_calendar_date(year, Month::try_from(month).ok()?, day).ok()?;
    if next {
        date = date.next_day()?;
    }
    let at: OffsetDateTime = date.midnight().assume_utc();
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).ok()
}

/// `GET /dashboard/history`.
pub async fn page(
    State(state): State<Dash>,
    signed: Signed,
    Query(query): Query<FilterQuery>,
) -> Response {
    let mut chrome = chrome(&signed, Tab::History, None);
    let filter = match query.filter() {
        Ok(filter) => filter,
        Err(message) => {
            chrome.error = Some(message);
            let view = FilterView {
                query: &query,
                rows: &[],
                next: None,
            };
            return guard::page(
                StatusCode::BAD_REQUEST,
                views::history::page(&chrome, &view),
            );
        }
    };
    let cursor = HistoryCursor::decode(&query.after);
    let rows = match state
        .app
        .call_history()
        .page(&signed.account.id, &filter, cursor.as_ref(), PAGE_ROWS + 1)
        .await
    {
        Ok(rows) => rows,
        Err(err) => return guard::failed("cannot read the call history", &err),
    };
    let shown = &rows[..rows.len().min(PAGE_ROWS as usize)];
    let next = (rows.len() > PAGE_ROWS as usize)
        .then(|| shown.last().map(|last| HistoryCursor::after(last).encode()))
        .flatten();
    let view = FilterView {
        query: &query,
        rows: shown,
        next,
    };
    guard::page(StatusCode::OK, views::history::page(&chrome, &view))
}

/// `GET /dashboard/history/{id}`: one call's record; another account's (or none) is 404.
pub async fn record(State(state): State<Dash>, signed: Signed, Path(id): Path<String>) -> Response {
    let found = match state
        .app
        .call_history()
        .record(&signed.account.id, &id)
        .await
    {
        Ok(found) => found,
        Err(err) => return guard::failed("cannot read a call's record", &err),
    };
    let Some(record) = found else {
        return guard::page(
            StatusCode::NOT_FOUND,
            views::message_page("Not found", "There is no such call in your history.", true),
        );
    };
    let chrome = chrome(&signed, Tab::History, None);
    let fields = serde_json::from_str::<serde_json::Value>(&record.fields)
        .and_then(|value| serde_json::to_string_pretty(&value))
        .unwrap_or_else(|_| record.fields.clone());
    let view = RecordView {
        record: &record,
        fields: &fields,
    };
    guard::page(StatusCode::OK, views::history::record(&chrome, &view))
}

/// `GET /dashboard/history.csv`: the filtered rows, newest first, at most [`EXPORT_ROWS`].
pub async fn export(
    State(state): State<Dash>,
    signed: Signed,
    Query(query): Query<FilterQuery>,
) -> Response {
    let Ok(filter) = query.filter() else {
        return guard::page(
            StatusCode::BAD_REQUEST,
            views::message_page("Bad filter", "Dates are written YYYY-MM-DD.", true),
        );
    };
    let rows = match state
        .app
        .call_history()
        .page(&signed.account.id, &filter, None, EXPORT_ROWS)
        .await
    {
        Ok(rows) => rows,
        Err(err) => return guard::failed("cannot export the call history", &err),
    };
    let mut response = csv(&rows).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/csv; charset=utf-8"),
    );
    headers.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_static("attachment; filename=\"call-history.csv\""),
    );
    guard::secure_headers(headers);
    response
}

/// The CSV's columns.
const CSV_HEADER: [&str; 17] = [
    "id",
    "time_utc",
    "key",
    "key_id",
    "client",
    "tool",
    "outcome",
    "detail",
    "duration_ms",
    "charge_usd",
    "session",
    "destinations",
    "provider",
    "model",
    "input_tokens",
    "output_tokens",
    "fields",
];

/// `rows` as CSV (RFC 4180: every cell quoted, quotes doubled, CRLF line ends).
pub fn csv(rows: &[CallRecord]) -> String {
    let mut out = String::new();
    push_line(&mut out, CSV_HEADER.iter().map(|h| (*h).to_owned()));
    for row in rows {
        let model = row.model.as_ref();
        push_line(
            &mut out,
            [
                row.id.clone(),
                iso_time(row.at_ms),
                row.key_label.clone(),
                row.key_id.clone().unwrap_or_default(),
                row.client.clone().unwrap_or_default(),
                row.tool.clone(),
                row.outcome.kind().to_owned(),
                row.outcome.detail(),
                row.duration_ms.to_string(),
                row.charge
                    .map_or_else(|| "0".to_owned(), |c| c.to_usd_price_string()),
                row.session.clone().unwrap_or_default(),
                row.destinations.join(" "),
                model.map(|m| m.provider.clone()).unwrap_or_default(),
                model.map(|m| m.model.clone()).unwrap_or_default(),
                model
                    .map(|m| m.input_tokens.to_string())
                    .unwrap_or_default(),
                model
                    .map(|m| m.output_tokens.to_string())
                    .unwrap_or_default(),
                row.fields.clone(),
            ]
            .into_iter(),
        );
    }
    out
}

fn push_line(out: &mut String, cells: impl Iterator<Item = String>) {
    for (i, cell) in cells.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        // a spreadsheet runs a cell starting with one of these as a formula
        if cell.starts_with(['=', '+', '-', '@', '\t', '\r']) {
            out.push('\'');
        }
        out.push_str(&cell.replace('"', "\"\""));
        out.push('"');
    }
    out.push_str("\r\n");
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;

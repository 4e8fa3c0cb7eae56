//! History: the account's calls as a filterable table, newest first, each opening its record;
//! and the record itself. Everything a caller wrote (fields, errors, client names) is escaped.

use maud::{Markup, html};
use serde::Deserialize;
use toolgate_app::history::CallRecord;

use super::{Chrome, date_time, iso_time, layout};

/// The most rows an export holds.
pub const EXPORT_ROWS: u32 = 10_000;

/// The filters as the form sends them; empty fields filter nothing.
#[derive(Deserialize, Default, Clone)]
pub struct FilterQuery {
    #[serde(default)]
    pub(crate) key: String,
    #[serde(default)]
    pub(crate) tool: String,
    #[serde(default)]
    pub(crate) outcome: String,
    #[serde(default)]
    pub(crate) session: String,
    /// First day, `YYYY-MM-DD` (UTC).
    #[serde(default)]
    pub(crate) from: String,
    /// Last day, `YYYY-MM-DD` (UTC), included.
    #[serde(default)]
    pub(crate) to: String,
    /// Text the fields contain.
    #[serde(default)]
    pub(crate) q: String,
    /// Where the page starts (the last row of the page before).
    #[serde(default)]
    pub(crate) after: String,
}

impl FilterQuery {
    /// The query string of these filters, without the cursor (for links and the export).
    pub(crate) fn encoded(&self) -> String {
        let pairs = [
            ("key", &self.key),
            ("tool", &self.tool),
            ("outcome", &self.outcome),
            ("session", &self.session),
            ("from", &self.from),
            ("to", &self.to),
            ("q", &self.q),
        ];
        let given: Vec<(&str, &String)> =
            pairs.into_iter().filter(|(_, v)| !v.is_empty()).collect();
        serde_urlencoded::to_string(given).unwrap_or_default()
    }
}

/// The list page's content.
pub struct FilterView<'a> {
    /// The filters as sent, shown back in the form.
    pub query: &'a FilterQuery,
    /// The rows of this page.
    pub rows: &'a [CallRecord],
    /// The cursor of the next page, when there is one.
    pub next: Option<String>,
}

/// One call's record page.
pub struct RecordView<'a> {
    /// The call.
    pub record: &'a CallRecord,
    /// Its fields, pretty-printed.
    pub fields: &'a str,
}

/// The list page.
pub fn page(chrome: &Chrome<'_>, view: &FilterView<'_>) -> Markup {
    let query = view.query;
    let filters = query.encoded();
    let export = format!("/dashboard/history.csv?{filters}");
    layout(
        "History",
        chrome,
        html! {
            section.card aria-labelledby="filter-title" {
                h2 #filter-title { "Filter" }
                form #history-filter method="get" action="/dashboard/history" {
                    div.filters {
                        label { "Key " input name="key" value=(query.key) maxlength="200" placeholder="default"; }
                        label { "Tool " input name="tool" value=(query.tool) maxlength="200" placeholder="svc_read"; }
                        label { "Outcome "
                            select name="outcome" {
                                @for (value, label) in [("", "any"), ("ok", "ok"), ("tool_error", "tool error"), ("refused", "refused")] {
                                    @if query.outcome == value {
                                        option value=(value) selected { (label) }
                                    } @else {
                                        option value=(value) { (label) }
                                    }
                                }
                            }
                        }
                        label { "Session " input name="session" value=(query.session) maxlength="200"; }
                        label { "From " input type="date" name="from" value=(query.from); }
                        label { "To " input type="date" name="to" value=(query.to); }
                        label { "Search fields " input type="search" name="q" value=(query.q) maxlength="200"; }
                    }
                    button type="submit" { "Filter" }
                    " "
                    a href="/dashboard/history" { "Clear" }
                    " · "
                    a #export-csv href=(export) { "Export CSV" }
                    span.muted { " (up to " (EXPORT_ROWS) " rows)" }
                }
            }
            section.card aria-labelledby="calls-title" {
                h2 #calls-title { "Calls, newest first" }
                @if view.rows.is_empty() {
                    p #no-calls .muted { "No calls match." }
                } @else {
                    div.table-scroll { table #history {
                        thead { tr {
                            th scope="col" { "Time" } th scope="col" { "Key" } th scope="col" { "Client" }
                            th scope="col" { "Tool" } th scope="col" { "Outcome" } th.num scope="col" { "ms" }
                            th.num scope="col" { "Charge (USD)" } th scope="col" { "Session" }
                        } }
                        tbody { @for row in view.rows {
                            tr data-id=(row.id) data-outcome=(row.outcome.kind()) {
                                td { a.open href=(format!("/dashboard/history/{}", row.id)) title=(iso_time(row.at_ms)) { (date_time(row.at_ms)) } }
                                td { (row.key_label) }
                                td { (row.client.as_deref().unwrap_or("—")) }
                                td { (row.tool) }
                                td { (outcome_text(row)) }
                                td.num { (row.duration_ms) }
                                td.num { (charge_text(row)) }
                                td { code { (row.session.as_deref().unwrap_or("—")) } }
                            }
                        } }
                    } }
                }
                @if let Some(next) = &view.next {
                    p { a #next-page href=(next_link(&filters, next)) { "Older calls →" } }
                }
            }
        },
    )
}

fn next_link(filters: &str, cursor: &str) -> String {
    let after = serde_urlencoded::to_string([("after", cursor)]).unwrap_or_default();
    if filters.is_empty() {
        format!("/dashboard/history?{after}")
    } else {
        format!("/dashboard/history?{filters}&{after}")
    }
}

fn outcome_text(row: &CallRecord) -> String {
    let detail = row.outcome.detail();
    if detail.is_empty() {
        row.outcome.kind().to_owned()
    } else {
        format!("{}: {detail}", row.outcome.kind())
    }
}

fn charge_text(row: &CallRecord) -> String {
    row.charge
        .map_or_else(|| "free".to_owned(), |c| c.to_usd_price_string())
}

/// One call's record.
pub fn record(chrome: &Chrome<'_>, view: &RecordView<'_>) -> Markup {
    let row = view.record;
    layout(
        "Call",
        chrome,
        html! {
            p { a href="/dashboard/history" { "← History" } }
            section.card aria-labelledby="record-title" {
                h2 #record-title { code { (row.id) } }
                dl #record {
                    dt { "Time" } dd { (iso_time(row.at_ms)) }
                    dt { "Key" } dd #record-key { (row.key_label) @if let Some(id) = &row.key_id { " (" code { (id) } ")" } }
                    dt { "Client" } dd #record-client { (row.client.as_deref().unwrap_or("—")) }
                    dt { "Tool" } dd { (row.tool) }
                    dt { "Outcome" } dd #record-outcome { (outcome_text(row)) }
                    dt { "Duration" } dd { (row.duration_ms) " ms" }
                    dt { "Charge" } dd { (charge_text(row)) }
                    dt { "Session" } dd { code { (row.session.as_deref().unwrap_or("—")) } }
                    dt { "Destinations" } dd #record-destinations {
                        @if row.destinations.is_empty() { "—" }
                        @for host in &row.destinations { code { (host) } " " }
                    }
                    @if let Some(model) = &row.model {
                        dt { "Model" } dd #record-model { (model.provider) " · " (model.model) " · "
                            (model.input_tokens) " in, " (model.output_tokens) " out" }
                    }
                }
                h3 { "Fields" }
                p.muted { "Secret values are redacted; long strings are cut at 4 KiB." }
                pre #record-fields { (view.fields) }
            }
        },
    )
}

//! Usage: this month's calls per day as a server-drawn SVG chart, the totals, and the billing
//! status record.

use maud::{Markup, PreEscaped, html};
use toolgate_app::history::ProviderTokens;
use toolgate_app::owner::{SpendLine, SpendSplit, UsageReport};

use super::{Chrome, layout};

const CHART_W: u32 = 640;
const CHART_H: u32 = 220;
const LEFT: u32 = 36;
const BOTTOM: u32 = 20;
const TOP: u32 = 10;

/// The page.
pub fn page(
    chrome: &Chrome<'_>,
    report: &UsageReport,
    split: &SpendSplit,
    tokens: &[ProviderTokens],
) -> Markup {
    let status = serde_json::to_string_pretty(&report.status).unwrap_or_default();
    layout(
        "Usage",
        chrome,
        html! {
            div.stats {
                div.stat { div.muted { "Free calls this month" } div.value #calls-free { (report.free_calls) } }
                div.stat { div.muted { "Paid calls this month" } div.value #calls-paid { (report.paid_calls) } }
                div.stat { div.muted { "Free calls left" } div.value #free-left { (report.status.free_remaining_this_month) } }
                div.stat { div.muted { "Wallet" } div.value { (report.status.wallet_balance_usd) " USD" } }
            }
            section.card aria-labelledby="chart-title" {
                h2 #chart-title { "Calls per day, " (report.month) " (UTC)" }
                (chart(report))
                p.legend.muted {
                    span.swatch-free {} "free" " "
                    span.swatch-paid {} "paid from the wallet"
                }
                details {
                    summary { "As a table" }
                    div.table-scroll { table #usage-days {
                        thead { tr { th scope="col" { "Day" } th.num scope="col" { "Free" } th.num scope="col" { "Paid" } th.num scope="col" { "Charged (USD)" } } }
                        tbody { @for day in &report.days {
                            tr { td { (day.day) } td.num { (day.free) } td.num { (day.paid) } td.num { (day.paid_cost.to_usd_price_string()) } }
                        } }
                    } }
                }
            }
            (spend_split(&report.month, split))
            (model_tokens(tokens))
            section.card aria-labelledby="status-title" {
                h2 #status-title { "Billing status" }
                p.muted { "The same record " code { "GET /billing/status" } " and the read tool's "
                          code { "billing" } " field return." }
                pre #billing-status { (status) }
            }
        },
    )
}

/// The month's calls and spend per key and per tool.
fn spend_split(month: &str, split: &SpendSplit) -> Markup {
    html! {
        section.card aria-labelledby="split-title" {
            h2 #split-title { "Spend per key and per tool, " (month) " (UTC)" }
            p.muted { "Calls with the personal URL's first key and calls of connected apps (OAuth) are under "
                code { "default" } "; paid calls are charged from the wallet." }
            (split_table("spend-by-key", "Key", &split.by_key))
            (split_table("spend-by-tool", "Tool", &split.by_tool))
        }
    }
}

/// The month's model calls and tokens per provider, kept apart from the call history (which
/// may be purged sooner).
fn model_tokens(tokens: &[ProviderTokens]) -> Markup {
    html! {
        section.card aria-labelledby="tokens-title" {
            h2 #tokens-title { "Model tokens this month" }
            @if tokens.is_empty() {
                p #no-model-tokens .muted { "No model calls this month." }
            } @else {
                div.table-scroll { table #model-tokens {
                    thead { tr { th scope="col" { "Provider" } th.num scope="col" { "Calls" } th.num scope="col" { "Input tokens" } th.num scope="col" { "Output tokens" } } }
                    tbody { @for row in tokens {
                        tr data-provider=(row.provider) { td { (row.provider) } td.num { (row.calls) } td.num { (row.input_tokens) } td.num { (row.output_tokens) } }
                    } }
                } }
            }
        }
    }
}

fn split_table(id: &str, heading: &str, lines: &[SpendLine]) -> Markup {
    html! {
        div.table-scroll { table id=(id) {
            thead { tr { th scope="col" { (heading) } th.num scope="col" { "Free calls" } th.num scope="col" { "Paid calls" } th.num scope="col" { "Charged (USD)" } } }
            tbody { @for line in lines {
                tr data-label=(line.label) { td { (line.label) } td.num { (line.free) } td.num { (line.paid) } td.num { (line.cost.to_usd_price_string()) } }
            } }
        } }
        @if lines.is_empty() { p.muted { "No calls this month." } }
    }
}

/// Stacked bars, one per day of the month; the scale's top is the busiest day.
fn chart(report: &UsageReport) -> Markup {
    let days = u32::from(report.days_in_month.max(1));
    let busiest = report
        .days
        .iter()
        .map(|d| d.free + d.paid)
        .max()
        .unwrap_or(0)
        .max(1);
    let plot_h = f64::from(CHART_H - BOTTOM - TOP);
    let slot = f64::from(CHART_W - LEFT) / f64::from(days);
    let bar = (slot * 0.7).max(1.0);
    let height = |calls: i64| calls as f64 / busiest as f64 * plot_h;
    let label = format!(
        "Bar chart: {} free and {} paid calls in {}; the busiest day had {busiest}.",
        report.free_calls, report.paid_calls, report.month
    );
    let mut bars = String::new();
    for day in &report.days {
        let x = f64::from(LEFT) + (f64::from(day.day) - 1.0) * slot + (slot - bar) / 2.0;
        let (free_h, paid_h) = (height(day.free), height(day.paid));
        let base = f64::from(CHART_H - BOTTOM);
        bars.push_str(&format!(
            r#"<g><title>Day {}: {} free, {} paid</title><rect class="free" x="{x:.1}" y="{:.1}" width="{bar:.1}" height="{free_h:.1}"/><rect class="paid" x="{x:.1}" y="{:.1}" width="{bar:.1}" height="{paid_h:.1}"/></g>"#,
            day.day,
            day.free,
            day.paid,
            base - free_h,
            base - free_h - paid_h
        ));
    }
    let mut axis = String::new();
    for day in (1..=days).filter(|d| *d == 1 || d % 5 == 0) {
        let x = f64::from(LEFT) + (f64::from(day) - 0.5) * slot;
        axis.push_str(&format!(
            r#"<text x="{x:.1}" y="{}" text-anchor="middle">{day}</text>"#,
            CHART_H - 5
        ));
    }
    html! {
        svg #usage-chart .chart role="img" aria-label=(label) viewBox=(format!("0 0 {CHART_W} {CHART_H}")) xmlns="http://www.w3.org/2000/svg" {
            line x1=(LEFT) y1=(CHART_H - BOTTOM) x2=(CHART_W) y2=(CHART_H - BOTTOM) stroke="#d0d7de" {}
            text x="2" y=(TOP + 8) { (busiest) }
            text x="2" y=(CHART_H - BOTTOM) { "0" }
            // numbers and fixed markup only: nothing a caller wrote reaches this string
            (PreEscaped(bars))
            (PreEscaped(axis))
        }
    }
}

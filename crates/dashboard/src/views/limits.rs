//! Spend caps & alerts: the account's monthly and daily caps and the wallet alert amount, with
//! this month's and today's spend against each cap, and the named keys' own caps.

use maud::{Markup, html};
use toolgate_app::owner::LimitsReport;
use toolgate_domain::Micros;

use super::{Chrome, layout};

/// The form's fields as shown: the stored amounts, or after a refused form the text sent.
pub struct LimitsFields<'a> {
    /// The monthly cap in USD; empty: none.
    pub month: &'a str,
    /// The daily cap in USD; empty: none.
    pub day: &'a str,
    /// The wallet alert amount in USD; empty: none.
    pub alert_below: &'a str,
}

/// `4.00 USD of 5.00 USD (80 %)`, or the spend and "no cap".
fn against(spent: Micros, cap: Option<Micros>) -> String {
    let spent_text = spent.to_usd_price_string();
    match cap {
        None => format!("{spent_text} USD (no cap)"),
        Some(cap) if cap.0 > 0 => format!(
            "{spent_text} USD of {} USD ({} %)",
            cap.to_usd_price_string(),
            i128::from(spent.0) * 100 / i128::from(cap.0)
        ),
        Some(cap) => format!("{spent_text} USD of {} USD", cap.to_usd_price_string()),
    }
}

/// The page.
pub fn page(chrome: &Chrome<'_>, report: &LimitsReport, fields: &LimitsFields<'_>) -> Markup {
    let overview = &report.overview;
    let caps = overview.limits.caps;
    layout(
        "Spend caps & alerts",
        chrome,
        html! {
            div.stats {
                div.stat { div.muted { "Paid this month (" (report.month) ")" } div.value #spent-month { (against(overview.month, caps.month)) } }
                div.stat { div.muted { "Paid today (" (report.day) ", UTC)" } div.value #spent-day { (against(overview.day, caps.day)) } }
                div.stat { div.muted { "Wallet" } div.value #limits-balance { (overview.balance.to_usd_cents_string()) " USD" } }
            }
            p.muted { "A paid call that would pass a cap is refused before it runs (error -32002 naming the cap); "
                "free calls are not counted. The monthly cap renews on the 1st (UTC), the daily cap at 00:00 UTC. "
                "You get one e-mail when a cap is 80 % used and one when it is used up, once per month or day, "
                "and one when the wallet falls below the alert amount (again only after it was topped up to that amount or more)." }
            section.card aria-labelledby="limits-title" {
                h2 #limits-title { "Account caps and wallet alert" }
                form #limits-set method="post" action="/dashboard/limits/set" autocomplete="off" {
                    (chrome.csrf_field())
                    label for="cap-month" { "Monthly cap in US dollars (empty: none)" }
                    input #cap-month type="text" name="month" inputmode="decimal" value=(fields.month) placeholder="e.g. 50.00";
                    label for="cap-day" { "Daily cap in US dollars (empty: none)" }
                    input #cap-day type="text" name="day" inputmode="decimal" value=(fields.day) placeholder="e.g. 5.00";
                    label for="alert-below" { "E-mail me when the wallet falls below, in US dollars (empty: no alert)" }
                    input #alert-below type="text" name="alert_below" inputmode="decimal" value=(fields.alert_below) placeholder="e.g. 2.00";
                    p.muted { "Two decimals at most, above 0 and at most 1000000.00." }
                    button type="submit" { "Save limits" }
                }
            }
            section.card aria-labelledby="key-caps-title" {
                h2 #key-caps-title { "Named keys' caps" }
                @if overview.keys.is_empty() {
                    p.muted #no-key-caps { "No named keys. The account's caps above apply to every key and connected app." }
                } @else {
                    div.table-scroll { table #key-caps {
                        thead { tr { th scope="col" { "Key" } th scope="col" { "This month" } th scope="col" { "Today" } } }
                        tbody { @for key in &overview.keys {
                            tr data-key=(key.id.as_str()) {
                                td { (key.name) }
                                td { (against(key.month, key.caps.month)) }
                                td { (against(key.day, key.caps.day)) }
                            }
                        } }
                    } }
                }
            }
        },
    )
}

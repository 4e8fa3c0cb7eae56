//! Wallet: balance, paid calls available, a top-up through the payment provider, and the
//! history of top-ups and charges.

use maud::{Markup, html};
use toolgate_app::owner::WalletEntry;
use toolgate_app::owner::WalletReport;
use toolgate_domain::Micros;

use super::{Chrome, date_time, layout};

/// The page; `payments` says whether top-ups are set up on this service.
pub fn page(chrome: &Chrome<'_>, report: &WalletReport, payments: bool) -> Markup {
    let status = &report.status;
    layout(
        "Wallet",
        chrome,
        html! {
            div.stats {
                div.stat { div.muted { "Balance" } div.value #balance { (status.wallet_balance_usd) " USD" } }
                div.stat { div.muted { "Paid calls available" } div.value #paid-calls-available { (status.paid_calls_available) } }
                div.stat { div.muted { "Price per call after the free allowance" } div.value { (status.paid_call_cost_usd) " USD" } }
            }
            @if status.wallet_balance_usd.starts_with('-') {
                p #owed { "A refund or dispute took back more than the wallet held: paid calls wait until a top-up covers what is owed." }
            }
            section.card aria-labelledby="top-up-title" {
                h2 #top-up-title { "Top up" }
                @if payments {
                    form #top-up method="post" action="/dashboard/wallet/top-up" {
                        (chrome.csrf_field())
                        label for="amount" { "Amount in US dollars (" (status.min_topup_usd) " to " (status.max_topup_usd) ")" }
                        input #amount type="number" name="amount" required step="0.01"
                            min=(status.min_topup_usd) max=(status.max_topup_usd) value="10.00" inputmode="decimal";
                        p.muted { "You pay on Stripe's page; the balance grows once Stripe confirms the payment." }
                        button type="submit" { "Top up" }
                    }
                } @else {
                    p #no-payments { "Card payments are not set up on this service; ask its operator to credit your wallet." }
                }
            }
            section.card aria-labelledby="history-title" {
                h2 #history-title { "History" }
                div.table-scroll { table #wallet-history {
                    thead { tr { th scope="col" { "When" } th scope="col" { "What" } th.num scope="col" { "USD" } } }
                    tbody {
                        @for credit in &report.credits {
                            @if credit.amount.0 >= 0 {
                                tr.credit {
                                    td { (date_time(credit.at)) }
                                    td { "Top-up " span.mono.muted { (credit.reference) } }
                                    td.num { "+" (credit.amount.to_usd_cents_string()) }
                                }
                            } @else {
                                tr.take-back {
                                    td { (date_time(credit.at)) }
                                    td { (taken_back(credit.kind)) " " span.mono.muted { (credit.reference) } }
                                    td.num { "−" (Micros(-credit.amount.0).to_usd_cents_string()) }
                                }
                            }
                        }
                        @for day in &report.charges {
                            tr.charge {
                                td { (report.month) "-" (format!("{:02}", day.day)) }
                                td { (day.paid) " paid call(s)" }
                                td.num { "−" (day.paid_cost.to_usd_price_string()) }
                            }
                        }
                    }
                } }
                @if report.credits.is_empty() && report.charges.is_empty() {
                    p.muted { "No top-ups or charges yet." }
                }
            }
        },
    )
}

/// How the history names money taken back.
fn taken_back(kind: WalletEntry) -> &'static str {
    match kind {
        WalletEntry::Dispute => "Dispute taken back",
        WalletEntry::Refund | WalletEntry::Credit => "Refund taken back",
    }
}

//! The pages' HTML (maud: compiled, every interpolation escaped). Layout and shared pieces
//! here; one module per page.

pub mod apps;
pub mod history;
pub mod keys;
pub mod limits;
pub mod network;
pub mod overview;
pub mod secrets;
pub mod sessions;
pub mod sign_in;
pub mod usage;
pub mod wallet;

use maud::{DOCTYPE, Markup, html};
use toolgate_domain::time_reexport::OffsetDateTime;

/// The tabs of a signed-in page.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    /// The personal URL and setup.
    Overview,
    /// Named keys.
    Keys,
    /// The vault.
    Secrets,
    /// Calls per day.
    Usage,
    /// Balance and top-ups.
    Wallet,
    /// Spend caps and alerts.
    Limits,
    /// Sandbox sessions.
    Sessions,
    /// The sessions' host lists.
    Network,
    /// Apps connected through OAuth.
    Apps,
    /// The calls' history.
    History,
}

const TABS: [(Tab, &str, &str); 10] = [
    (Tab::Overview, "/dashboard", "Overview"),
    (Tab::Keys, "/dashboard/keys", "Keys"),
    (Tab::Secrets, "/dashboard/secrets", "Secrets"),
    (Tab::Usage, "/dashboard/usage", "Usage"),
    (Tab::History, "/dashboard/history", "History"),
    (Tab::Wallet, "/dashboard/wallet", "Wallet"),
    (Tab::Limits, "/dashboard/limits", "Limits"),
    (Tab::Sessions, "/dashboard/sessions", "Sessions"),
    (Tab::Network, "/dashboard/network", "Network"),
    (Tab::Apps, "/dashboard/apps", "Connected apps"),
];

/// What every signed-in page shows around its content.
pub struct Chrome<'a> {
    /// The owner's address, in the header.
    pub email: &'a str,
    /// The session's anti-forgery value, for every form.
    pub csrf: String,
    /// The current tab.
    pub tab: Tab,
    /// A notice after a form.
    pub notice: Option<&'a str>,
    /// An error to show.
    pub error: Option<&'a str>,
}

impl Chrome<'_> {
    /// The hidden anti-forgery field of a form.
    pub fn csrf_field(&self) -> Markup {
        html! { input type="hidden" name="csrf" value=(self.csrf); }
    }
}

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            meta name="referrer" content="same-origin";
            title { (title) " · toolgate" }
            link rel="stylesheet" href="/dashboard/assets/app.css";
            script src="/dashboard/assets/app.js" defer {}
        }
    }
}

/// A signed-in page: header with sign-out, tabs, notices, then `body`.
pub fn layout(title: &str, chrome: &Chrome<'_>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                a.skip href="#content" { "Skip to content" }
                header.top {
                    a.brand href="/dashboard" { "toolgate" }
                    div.row {
                        span.who { "Signed in as " (chrome.email) }
                        form method="post" action="/dashboard/sign-out" {
                            (chrome.csrf_field())
                            button.secondary type="submit" { "Sign out" }
                        }
                        form method="post" action="/dashboard/sign-out-everywhere" {
                            (chrome.csrf_field())
                            button.secondary type="submit" { "Sign out everywhere" }
                        }
                    }
                }
                nav.tabs aria-label="Dashboard" {
                    @for (tab, href, label) in TABS {
                        @if tab == chrome.tab {
                            a href=(href) aria-current="page" { (label) }
                        } @else {
                            a href=(href) { (label) }
                        }
                    }
                }
                main #content {
                    h1 { (title) }
                    (alerts(chrome.notice, chrome.error))
                    (body)
                }
            }
        }
    }
}

/// The notice and error boxes.
pub fn alerts(notice: Option<&str>, error: Option<&str>) -> Markup {
    html! {
        @if let Some(notice) = notice { p #notice .notice role="status" { (notice) } }
        @if let Some(error) = error { p #error .error role="alert" { (error) } }
    }
}

/// A page outside a session (sign-in, errors).
pub fn bare(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                main #content .centered {
                    p { a.brand href="/dashboard" { strong { "toolgate" } } }
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// A page with one message (refusals, failures).
pub fn message_page(title: &str, text: &str, is_error: bool) -> Markup {
    bare(
        title,
        html! {
            @if is_error { p #error .error role="alert" { (text) } } @else { p #notice .notice role="status" { (text) } }
            p { a href="/dashboard" { "Back to the dashboard" } }
        },
    )
}

/// A Unix-millisecond time as `2026-11-26 14:03 UTC`.
pub fn date_time(ms: i64) -> String {
    let Ok(at) = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000) else {
        return "—".to_owned();
    };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02} UTC",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute()
    )
}

/// A Unix-millisecond time as `2026-11-28T02:30:05.123Z`.
pub fn iso_time(ms: i64) -> String {
    let Ok(at) = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000) else {
        return String::new();
    };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second(),
        at.millisecond()
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_are_utc() {
        assert_eq!(super::date_time(0), "1970-01-01 00:00 UTC");
        assert_eq!(super::date_time(1_795_000_000_000), "2026-11-18 11:06 UTC");
    }
}

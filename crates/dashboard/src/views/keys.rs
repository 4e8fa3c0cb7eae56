//! Keys: the account's named keys besides its first one (name, created, last use, caps, tools,
//! revoked), a form to create one, a caps form and a revoke form per live key. A new key's
//! personal URL is shown once, on the answer to its create form.

use maud::{Markup, html};
use toolgate_app::KeyView;

use super::{Chrome, layout};

/// A key just created, shown this once.
#[derive(Clone, Copy)]
pub struct Created<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its personal URL (holds the key).
    pub personal_url: &'a str,
}

/// What the page shows.
pub struct KeysView<'a> {
    /// Live and revoked keys, oldest first.
    pub keys: &'a [KeyView],
    /// The key created by the form this page answers, if any.
    pub created: Option<Created<'a>>,
}

/// An RFC 3339 time as the page shows it: `2026-11-28 02:14 UTC`.
fn shown_time(rfc3339: &str) -> String {
    match (rfc3339.get(..10), rfc3339.get(11..16)) {
        (Some(day), Some(minute)) => format!("{day} {minute} UTC"),
        _ => rfc3339.to_owned(),
    }
}

fn caps(key: &KeyView) -> String {
    let part = |label: &str, cap: &Option<String>| cap.as_ref().map(|c| format!("${c} a {label}"));
    let parts: Vec<String> = [
        part("month", &key.month_cap_usd),
        part("day", &key.day_cap_usd),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join(", ")
    }
}

fn tools(key: &KeyView) -> String {
    if key.tools.is_empty() && key.fields.is_empty() {
        return "all".to_owned();
    }
    let mut shown = if key.tools.is_empty() {
        "all tools".to_owned()
    } else {
        key.tools.join(", ")
    };
    if !key.fields.is_empty() {
        shown.push_str(&format!("; fields {}", key.fields.join(", ")));
    }
    shown
}

/// The page.
pub fn page(chrome: &Chrome<'_>, view: &KeysView<'_>) -> Markup {
    layout(
        "Keys",
        chrome,
        html! {
            p.muted { "Give each agent its own key: each has its own personal URL, optional spend caps "
                "(calls paid from the wallet only; free calls never count) and an optional restriction to "
                "some tools. Calls are metered on your account as with your first key. "
                "Revoking a key stops it at once and closes its open MCP sessions." }
            @if let Some(created) = view.created {
                section.card #created-key aria-labelledby="created-title" {
                    h2 #created-title { "New key: " (created.name) }
                    p { "Its personal URL, shown only now:" }
                    code #created-url .url { (created.personal_url) }
                }
            }
            section.card aria-labelledby="keys-title" {
                h2 #keys-title { "Named keys" }
                @if view.keys.is_empty() {
                    p.muted { "No named keys yet." }
                }
                div.table-scroll { table #keys {
                    thead { tr {
                        th scope="col" { "Name" } th scope="col" { "Created" } th scope="col" { "Last use" }
                        th scope="col" { "Caps" } th scope="col" { "Tools" } th scope="col" { "State" }
                        th { span.skip { "Actions" } }
                    } }
                    tbody {
                        @for key in view.keys {
                            tr data-key=(key.key_id) data-name=(key.name) {
                                td { (key.name) br; span.muted.mono { (key.key_id) } }
                                td { (shown_time(&key.created_at)) }
                                td.last-use { @match &key.last_used_at {
                                    Some(at) => (shown_time(at)),
                                    None => span.muted { "never" },
                                } }
                                td.caps { (caps(key)) }
                                td.tools { (tools(key)) }
                                td.state { @match &key.revoked_at {
                                    Some(at) => { "revoked " (shown_time(at)) },
                                    None => "live",
                                } }
                                td { @if key.revoked_at.is_none() {
                                    (caps_form(chrome, key))
                                    (revoke_form(chrome, key))
                                } }
                            }
                        }
                    }
                } }
            }
            section.card aria-labelledby="create-title" {
                h2 #create-title { "Create a key" }
                form #key-create method="post" action="/dashboard/keys/create" autocomplete="off" {
                    (chrome.csrf_field())
                    label for="key-name" { "Name" }
                    input #key-name type="text" name="name" required maxlength="200"
                        placeholder="ci agent" spellcheck="false";
                    label for="key-month" { "Monthly cap in USD (optional)" }
                    input #key-month type="text" name="month_cap_usd" inputmode="decimal" placeholder="none";
                    label for="key-day" { "Daily cap in USD (optional)" }
                    input #key-day type="text" name="day_cap_usd" inputmode="decimal" placeholder="none";
                    fieldset {
                        legend { "Tools it may call (none ticked: all)" }
                        label.check for="key-tool-read" { input #key-tool-read type="checkbox" name="tool_read"; " read (read-only)" }
                        label.check for="key-tool-write" { input #key-tool-write type="checkbox" name="tool_write"; " write" }
                        label.check for="key-tool-ai" { input #key-tool-ai type="checkbox" name="tool_ai"; " ai" }
                    }
                    button type="submit" { "Create key" }
                }
            }
        },
    )
}

fn caps_form(chrome: &Chrome<'_>, key: &KeyView) -> Markup {
    html! {
        form.key-caps method="post" action="/dashboard/keys/caps" autocomplete="off" {
            (chrome.csrf_field())
            input type="hidden" name="key" value=(key.key_id);
            label { "Month $" input type="text" name="month_cap_usd" inputmode="decimal" size="6"
                value=(key.month_cap_usd.as_deref().unwrap_or_default())
                aria-label=(format!("Monthly cap of {}", key.name)); }
            label { "Day $" input type="text" name="day_cap_usd" inputmode="decimal" size="6"
                value=(key.day_cap_usd.as_deref().unwrap_or_default())
                aria-label=(format!("Daily cap of {}", key.name)); }
            button.secondary type="submit" { "Save caps" }
        }
    }
}

fn revoke_form(chrome: &Chrome<'_>, key: &KeyView) -> Markup {
    html! {
        form.key-revoke method="post" action="/dashboard/keys/revoke" {
            (chrome.csrf_field())
            input type="hidden" name="key" value=(key.key_id);
            label.check { input type="checkbox" name="confirm" aria-label=(format!("Confirm revoking {}", key.name)); " confirm" }
            button.link type="submit" aria-label=(format!("Revoke {}", key.name)) { "Revoke" }
        }
    }
}

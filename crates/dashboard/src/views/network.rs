//! Network: the host lists the session proxy applies to the account's code, one pattern a line,
//! and whether sessions reach the network on this service at all.

use maud::{Markup, html};

use super::{Chrome, layout};

/// What the page shows: the lists as the textareas hold them (after a refused form, the text
/// the owner sent, so nothing typed is lost).
pub struct NetworkView<'a> {
    /// Patterns code may reach, one a line.
    pub allow: &'a str,
    /// Patterns code may not reach, one a line.
    pub deny: &'a str,
    /// What sessions' code may reach, in a sentence (the lists in force).
    pub in_force: &'a str,
    /// Sessions reach the network (the operator's `sandbox_network`).
    pub has_network: bool,
}

/// The page; `view` is `None` when the service runs no sessions.
pub fn page(chrome: &Chrome<'_>, view: Option<&NetworkView<'_>>) -> Markup {
    layout(
        "Network",
        chrome,
        html! {
            @match view {
                None => p #no-sessions { "This service runs no code sessions, so nothing of yours reaches the network from one." },
                Some(view) => {
                    @if view.has_network {
                        p #network-state { "Code in your sessions reaches the web through this service's proxy, "
                            "which applies the lists below." }
                    } @else {
                        p #network-state { "Sessions on this service have no network (its operator's "
                            code { "sandbox_network" } " is off): the lists below apply once it is on." }
                    }
                    p #in-force { (view.in_force) }
                    p.muted { "One pattern a line: " code { "api.example.org" } " is that host, "
                        code { "*.example.org" } " every host beneath it, " code { "*" } " every host. "
                        "Allow is applied first (empty: every public host), then deny. "
                        "Private and loopback addresses stay refused whatever the lists say. "
                        "At most 100 patterns a list." }
                    section.card aria-labelledby="lists-title" {
                        h2 #lists-title { "Host lists" }
                        form #network-set method="post" action="/dashboard/network/set" autocomplete="off" {
                            (chrome.csrf_field())
                            label for="allow" { "Allow (hosts code may reach)" }
                            textarea #allow name="allow" rows="8" spellcheck="false"
                                placeholder="empty: every public host" { (view.allow) }
                            label for="deny" { "Deny (hosts code may not reach)" }
                            textarea #deny name="deny" rows="5" spellcheck="false" { (view.deny) }
                            button type="submit" { "Save lists" }
                        }
                    }
                }
            }
        },
    )
}

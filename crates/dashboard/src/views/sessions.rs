//! Sessions: the account's live sandbox sessions, each with a button to end it.

use maud::{Markup, html};
use toolgate_app::owner::{SandboxSessionInfo, SessionState};

use super::{Chrome, layout};

/// The page.
pub fn page(chrome: &Chrome<'_>, list: &[SandboxSessionInfo]) -> Markup {
    layout(
        "Sessions",
        chrome,
        html! {
            p.muted { "Python sessions keep their variables, imports and files between calls with \
                       the same " code { "session_id" } ". An idle one is hibernated: written \
                       out, sealed, and restored by its next call. Ending one deletes it at once." }
            @if list.is_empty() {
                p #no-sessions { "No sessions." }
            }
            div.table-scroll { table #sessions {
                thead { tr {
                    th scope="col" { "Session" } th.num scope="col" { "Open" }
                    th.num scope="col" { "Idle" } th.num scope="col" { "Memory" }
                    th scope="col" { "State" } th.num scope="col" { "Checkpoint" }
                    th { span.skip { "Actions" } }
                } }
                tbody {
                    @for session in list {
                        tr data-id=(session.id) {
                            td.mono { (session.id) }
                            td.num { (span(session.age.as_secs())) }
                            td.num { (span(session.idle.as_secs())) }
                            td.num { @match session.memory_bytes {
                                Some(bytes) => (format!("{:.1} MiB", bytes as f64 / 1_048_576.0)),
                                None => "—",
                            } }
                            td { @match session.state {
                                SessionState::Hibernated => "hibernated",
                                SessionState::Dropped => "dropped (over the checkpoint quota)",
                                SessionState::Live if session.busy => "running a call",
                                SessionState::Live => "idle",
                            } }
                            td.num { @match &session.checkpoint {
                                Some(kept) => (format!("{:.1} MiB, {} ago",
                                    kept.stored_bytes as f64 / 1_048_576.0,
                                    span(std::time::SystemTime::now()
                                        .duration_since(kept.saved_at)
                                        .map_or(0, |d| d.as_secs())))),
                                None => "—",
                            } }
                            td {
                                form.session-end method="post" action="/dashboard/sessions/end" {
                                    (chrome.csrf_field())
                                    input type="hidden" name="id" value=(session.id);
                                    button.link type="submit" aria-label=(format!("End session {}", session.id)) { "End" }
                                }
                            }
                        }
                    }
                }
            } }
        },
    )
}

/// `42 s`, `3 min`, `2 h 5 min`.
fn span(seconds: u64) -> String {
    match seconds {
        0..60 => format!("{seconds} s"),
        60..3600 => format!("{} min", seconds / 60),
        _ => format!("{} h {} min", seconds / 3600, seconds % 3600 / 60),
    }
}

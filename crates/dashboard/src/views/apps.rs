//! Connected apps (clients holding access through OAuth) and the consent page.

use maud::{Markup, html};
use toolgate_app::oauth::ConnectedApp;
use toolgate_oauth::AuthorizeRequest;

use super::{Chrome, date_time, layout};

/// The consent page: which app, where it returns, what it may do.
pub fn consent(chrome: &Chrome<'_>, request: &AuthorizeRequest) -> Markup {
    let params = request.params();
    let returns_to = host_of(request.redirect_uri());
    layout(
        "Connect an app",
        chrome,
        html! {
            section.card #consent aria-labelledby="consent-title" {
                h2 #consent-title { "Allow " strong #client-name { (request.client_name()) } " to use your tools?" }
                p { "It will call your three tools as you, charged to your account, until you revoke it under Connected apps." }
                dl {
                    dt { "App id" } dd.mono #client-id { (request.client_id()) }
                    dt { "Returns to" } dd.mono #redirect-host { (returns_to) }
                    dt { "Access" } dd #scopes {
                        @for scope in request.scope().split(' ') {
                            @match scope {
                                "mcp" => { "Use the tools (code, web, AI) · " }
                                "offline_access" => { "Stay connected (refresh) · " }
                                other => { (other) " · " }
                            }
                        }
                    }
                }
                form #authorize method="post" action="/dashboard/oauth/authorize" {
                    (chrome.csrf_field())
                    @for (name, value) in params.to_pairs() {
                        input type="hidden" name=(name) value=(value);
                    }
                    div.row {
                        button type="submit" name="decision" value="allow" { "Allow" }
                        button.secondary type="submit" name="decision" value="deny" { "Deny" }
                    }
                }
            }
        },
    )
}

/// The apps with access, each with "Revoke".
pub fn list(chrome: &Chrome<'_>, apps: &[ConnectedApp]) -> Markup {
    layout(
        "Connected apps",
        chrome,
        html! {
            p.muted { "Chat clients you connected with OAuth (\"Connect\" in a connector directory). \
                       Revoking ends their access at once; they can ask again." }
            @if apps.is_empty() { p #no-apps { "No connected apps." } }
            div.table-scroll { table #apps {
                thead { tr { th scope="col" { "App" } th scope="col" { "Access" } th scope="col" { "Since" } th { span.skip { "Actions" } } } }
                tbody { @for app in apps {
                    tr data-client=(app.client_id) {
                        td { (app.name) br; span.mono.muted { (app.client_id) } }
                        td { (app.scope) }
                        td { (date_time(app.since)) }
                        td { form.app-revoke method="post" action="/dashboard/apps/revoke" {
                            (chrome.csrf_field())
                            input type="hidden" name="client_id" value=(app.client_id);
                            button.link type="submit" aria-label=(format!("Revoke {}", app.name)) { "Revoke" }
                        } }
                    }
                } }
            } }
        },
    )
}

/// The host (or scheme, for an app's own scheme) a redirect URI returns to.
fn host_of(uri: &str) -> String {
    match uri.split_once("://") {
        Some((_, rest)) => rest
            .split(['/', '?', '#'])
            .next()
            .unwrap_or(rest)
            .to_owned(),
        None => uri.split(':').next().unwrap_or(uri).to_owned(),
    }
}

//! Secrets: names and dates, add or replace, delete. Values are never shown or echoed.

use maud::{Markup, html};
use toolgate_domain::SecretInfo;

use super::{Chrome, date_time, layout};

/// The page; `list` is `None` when the service has no vault.
pub fn page(chrome: &Chrome<'_>, list: Option<&[SecretInfo]>) -> Markup {
    layout(
        "Secrets",
        chrome,
        html! {
            p.muted { "Code you run can use these as environment variables (the "
                code { "secrets" } " field) and requests can name them as "
                code { "{{secret:NAME}}" } ". A secret bound to hosts never enters a session: code writes "
                code { "{{secret:NAME}}" } " in a request header and the network proxy puts the value in on the way to those hosts only. Nobody can read a value back: not here, not over MCP." }
            @if let Some(list) = list {
                section.card aria-labelledby="list-title" {
                    h2 #list-title { "Stored secrets" }
                    @if list.is_empty() {
                        p.muted { "No secrets yet." }
                    }
                    div.table-scroll { table #secrets {
                        thead { tr { th scope="col" { "Name" } th scope="col" { "Hosts" } th scope="col" { "Created" } th scope="col" { "Updated" } th { span.skip { "Actions" } } } }
                        tbody {
                            @for secret in list {
                                tr data-name=(secret.name.as_str()) {
                                    td.mono { (secret.name.as_str()) }
                                    td.mono.hosts {
                                        @if secret.hosts.is_empty() { span.muted { "—" } }
                                        @else { (secret.hosts.join(", ")) }
                                    }
                                    td { (date_time(secret.created_ms)) }
                                    td { (date_time(secret.updated_ms)) }
                                    td {
                                        form.secret-delete method="post" action="/dashboard/secrets/delete" {
                                            (chrome.csrf_field())
                                            input type="hidden" name="name" value=(secret.name.as_str());
                                            button.link type="submit" aria-label=(format!("Delete {}", secret.name.as_str())) { "Delete" }
                                        }
                                    }
                                }
                            }
                        }
                    } }
                }
                section.card aria-labelledby="set-title" {
                    h2 #set-title { "Add or replace a secret" }
                    form #secret-set method="post" action="/dashboard/secrets/set" autocomplete="off" {
                        (chrome.csrf_field())
                        label for="secret-name" { "Name" }
                        input #secret-name type="text" name="name" required maxlength="128"
                            pattern="[A-Za-z_][A-Za-z0-9_]*" placeholder="OPENAI_API_KEY" spellcheck="false";
                        label for="secret-value" { "Value" }
                        textarea #secret-value name="value" rows="3" required spellcheck="false" {}
                        label for="secret-hosts" { "Hosts (optional)" }
                        input #secret-hosts type="text" name="hosts" maxlength="4096"
                            placeholder="api.github.com, *.openai.com" spellcheck="false";
                        label.check for="secret-unbind" {
                            input #secret-unbind type="checkbox" name="unbind";
                            " Bind to no host"
                        }
                        p.muted { "Saving under an existing name replaces its value; with the hosts left empty it keeps the hosts it had." }
                        button type="submit" { "Save secret" }
                    }
                }
            }
        },
    )
}

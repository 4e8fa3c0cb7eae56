//! `GET /dashboard/network` and `POST /dashboard/network/set`: the account's host lists, edited
//! as text (one pattern a line). A refused form shows the error with the text as it was sent.

use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use toolgate_app::EgressRulesError;
use toolgate_app::egress_rules::describe;

use crate::Dash;
use crate::guard::{self, Signed};
use crate::pages::{NoticeQuery, chrome, notice_text};
use crate::views::network::NetworkView;
use crate::views::{self, Tab};

/// `GET /dashboard/network`.
pub async fn page(
    State(state): State<Dash>,
    signed: Signed,
    Query(query): Query<NoticeQuery>,
) -> Response {
    let chrome = chrome(&signed, Tab::Network, notice_text(&query));
    let Some(rules) = state.app.egress_rules() else {
        return guard::page(StatusCode::OK, views::network::page(&chrome, None));
    };
    let lists = match rules.lists(&signed.account.id).await {
        Ok(lists) => lists,
        Err(err) => return guard::failed("cannot read the host lists", &err),
    };
    let (allow, deny) = (lists.allow.join("\n"), lists.deny.join("\n"));
    let in_force = describe(&lists);
    let view = NetworkView {
        allow: &allow,
        deny: &deny,
        in_force: &in_force,
        has_network: state.app.sessions_have_network(),
    };
    guard::page(StatusCode::OK, views::network::page(&chrome, Some(&view)))
}

#[derive(Deserialize)]
pub struct NetworkForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    allow: String,
    #[serde(default)]
    deny: String,
}

/// The non-blank lines of a textarea.
fn patterns(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect()
}

/// `POST /dashboard/network/set`: replaces both lists.
pub async fn set(
    State(state): State<Dash>,
    signed: Signed,
    headers: HeaderMap,
    Form(form): Form<NetworkForm>,
) -> Response {
    if !guard::form_ok(&state, &headers, &signed, &form.csrf) {
        return guard::forbidden();
    }
    let Some(rules) = state.app.egress_rules() else {
        return guard::unavailable();
    };
    let (allow, deny) = (patterns(&form.allow), patterns(&form.deny));
    match rules
        .change(&signed.account.id, Some(&allow), Some(&deny))
        .await
    {
        Ok(_) => guard::see_other("/dashboard/network?notice=network-saved"),
        Err(EgressRulesError::Refused(message)) => {
            let current = rules.lists(&signed.account.id).await.ok();
            let in_force = current.as_deref().map_or_else(String::new, describe);
            let mut chrome = chrome(&signed, Tab::Network, None);
            let message = format!("Not saved: {message}");
            chrome.error = Some(&message);
            let view = NetworkView {
                allow: &form.allow,
                deny: &form.deny,
                in_force: &in_force,
                has_network: state.app.sessions_have_network(),
            };
            guard::page(
                StatusCode::BAD_REQUEST,
                views::network::page(&chrome, Some(&view)),
            )
        }
        Err(err) => guard::failed("cannot store the host lists", &err),
    }
}

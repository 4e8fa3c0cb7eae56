//! `GET /dashboard/limits` and `POST /dashboard/limits/set`: the account's spend caps and
//! wallet alert, in US dollars. A refused form shows the error with the values as they were
//! sent, and changes nothing.

use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use toolgate_app::owner::{LimitsError, LimitsInput};
use toolgate_domain::Micros;

use crate::Dash;
use crate::guard::{self, Signed};
use crate::pages::{NoticeQuery, chrome, notice_text};
use crate::views::limits::LimitsFields;
use crate::views::{self, Tab};

/// `GET /dashboard/limits`.
pub async fn page(
    State(state): State<Dash>,
    signed: Signed,
    Query(query): Query<NoticeQuery>,
) -> Response {
    let chrome = chrome(&signed, Tab::Limits, notice_text(&query));
    match state.app.owner().spend_limits(&signed.account).await {
        Ok(report) => {
            let shown = |amount: Option<Micros>| {
                amount.map_or_else(String::new, Micros::to_usd_cents_string)
            };
            let limits = &report.overview.limits;
            let fields = LimitsFields {
                month: &shown(limits.caps.month),
                day: &shown(limits.caps.day),
                alert_below: &shown(limits.alert_below),
            };
            guard::page(
                StatusCode::OK,
                views::limits::page(&chrome, &report, &fields),
            )
        }
        Err(err) => guard::failed("cannot read the spend limits", &err),
    }
}

#[derive(Deserialize)]
pub struct LimitsForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    month: String,
    #[serde(default)]
    day: String,
    #[serde(default)]
    alert_below: String,
}

/// `POST /dashboard/limits/set`: replaces both caps and the alert amount.
pub async fn set(
    State(state): State<Dash>,
    signed: Signed,
    headers: HeaderMap,
    Form(form): Form<LimitsForm>,
) -> Response {
    if !guard::form_ok(&state, &headers, &signed, &form.csrf) {
        return guard::forbidden();
    }
    let owner = state.app.owner();
    let input = LimitsInput {
        month: &form.month,
        day: &form.day,
        alert_below: &form.alert_below,
    };
    match owner.set_spend_limits(&signed.account, input).await {
        Ok(_) => guard::see_other("/dashboard/limits?notice=limits-saved"),
        Err(LimitsError::Refused(message)) => {
            let report = match owner.spend_limits(&signed.account).await {
                Ok(report) => report,
                Err(err) => return guard::failed("cannot read the spend limits", &err),
            };
            let mut chrome = chrome(&signed, Tab::Limits, None);
            let message = format!("Not saved: {message}");
            chrome.error = Some(&message);
            let fields = LimitsFields {
                month: &form.month,
                day: &form.day,
                alert_below: &form.alert_below,
            };
            guard::page(
                StatusCode::BAD_REQUEST,
                views::limits::page(&chrome, &report, &fields),
            )
        }
        Err(LimitsError::Failed(err)) => guard::failed("cannot store the spend limits", &err),
    }
}

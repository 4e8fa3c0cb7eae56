//! The dashboard's outside services, built from the settings: the mail transport of sign-in
//! links and the payment provider of wallet top-ups.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use toolgate_app::App;
use toolgate_payments::StripeSettings;
use toolgate_ports::mail::Mailer;
use toolgate_ports::payments::Payments;

use crate::config::MailConfig;

/// How often expired sign-in links and dashboard sessions, and unused OAuth clients, are deleted.
const PURGE_EVERY: Duration = Duration::from_secs(10 * 60);

/// SMTP when `smtp_url` is set, else `.eml` files in `<data-dir>/outbox` with the link logged.
pub fn mailer(mail: MailConfig, public_url: &str) -> Result<Arc<dyn Mailer>> {
    let from = mail.from.unwrap_or_else(|| default_from(public_url));
    Ok(match &mail.smtp_url {
        Some(url) => Arc::new(toolgate_mail::Smtp::from_url(url.expose(), &from)?),
        None => {
            Arc::new(toolgate_mail::Outbox::new(mail.outbox, &from).context("the mail outbox")?)
        }
    })
}

/// `toolgate@<host>` for a public URL with a domain name, `toolgate@localhost` otherwise.
fn default_from(public_url: &str) -> String {
    let host = public_url
        .parse::<http::Uri>()
        .ok()
        .and_then(|uri| uri.host().map(str::to_owned))
        .filter(|host| host.contains('.') && host.parse::<std::net::IpAddr>().is_err())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("toolgate@{host}")
}

/// Stripe when configured; `None` (top-ups off) otherwise.
pub fn payments(stripe: Option<StripeSettings>) -> Result<Option<Arc<dyn Payments>>> {
    let Some(stripe) = stripe else {
        return Ok(None);
    };
    let stripe = toolgate_payments::Stripe::new(stripe).map_err(anyhow::Error::msg)?;
    Ok(Some(Arc::new(stripe)))
}

/// Deletes expired sign-in links and dashboard sessions, OAuth clients unused for a day (no
/// live token, no pending code), calls older than `history_days` (all of them at 0), and the
/// spend kept per day before yesterday, at start and now and then, for as long as the process
/// runs.
pub fn purge_expired(app: &App, history_days: u32) {
    let app = app.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(PURGE_EVERY);
        loop {
            tick.tick().await;
            if let Some(sign_in) = app.sign_in()
                && let Err(err) = sign_in.purge().await
            {
                tracing::warn!(error = %err, "expired sign-in links were not purged");
            }
            match app.oauth().purge_unused_clients().await {
                Ok(0) => {}
                Ok(purged) => tracing::info!(purged, "unused OAuth clients purged"),
                Err(err) => tracing::warn!(error = %err, "unused OAuth clients were not purged"),
            }
            let kept_ms = i64::from(history_days) * 24 * 60 * 60 * 1000;
            let before = toolgate_store::now_millis().saturating_sub(kept_ms);
            match app.call_history().purge_before(before).await {
                Ok(0) => {}
                Ok(purged) => tracing::info!(purged, "calls past history_days purged"),
                Err(err) => tracing::warn!(error = %err, "old calls were not purged"),
            }
            if let Err(err) = app.owner().purge_old_spend_days().await {
                tracing::warn!(error = %err, "old days' spend was not purged");
            }
        }
    });
}

/// How often named keys' last uses are written: `key list` and the dashboard show a use
/// within this long, and a busy key costs one write per interval, not one per call.
pub const KEY_USE_FLUSH: Duration = Duration::from_secs(2);

/// Writes named keys' last uses every [`KEY_USE_FLUSH`] in the background, and once more when
/// `shutdown` is cancelled.
pub fn flush_key_uses(app: &App, shutdown: tokio_util::sync::CancellationToken) {
    let app = app.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(KEY_USE_FLUSH);
        loop {
            let stopping = tokio::select! {
                _ = tick.tick() => false,
                () = shutdown.cancelled() => true,
            };
            if let Err(err) = app.auth().flush_key_uses().await {
                tracing::warn!(error = %err, "named keys' last uses were not written; retried next time");
            }
            if stopping {
                break;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_sender_names_the_public_host() {
        assert_eq!(
            super::default_from("https://tools.example.com"),
            "toolgate@tools.example.com"
        );
        assert_eq!(
            super::default_from("http://127.0.0.1:8080"),
            "toolgate@localhost"
        );
    }
}

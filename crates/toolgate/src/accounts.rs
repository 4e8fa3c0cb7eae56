//! The dashboard's outside services, built from the settings: the mail transport of sign-in
//! links and the payment provider of wallet top-ups.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use toolgate_app::App;
use toolgate_app::owner::SignInLimits;
use toolgate_ports::mail::Mailer;
use toolgate_ports::payments::Payments;

use crate::config::Settings;

/// How often expired sign-in links and dashboard sessions, and unused OAuth clients, are deleted.
const PURGE_EVERY: Duration = Duration::from_secs(10 * 60);

/// SMTP when `smtp_url` is set, else `.eml` files in `<data-dir>/outbox` with the link logged.
pub fn mailer(settings: &Settings, public_url: &str) -> Result<Arc<dyn Mailer>> {
    let from = settings
        .mail_from
        .clone()
        .unwrap_or_else(|| default_from(public_url));
    Ok(match &settings.smtp_url {
        Some(url) => Arc::new(toolgate_mail::Smtp::from_url(url.expose(), &from)?),
        None => {
            let dir = settings.data_dir().join("outbox");
            Arc::new(toolgate_mail::Outbox::new(dir, &from).context("the mail outbox")?)
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

/// Stripe when a secret key or webhook secret is set; `None` (top-ups off) otherwise.
pub fn payments(settings: &Settings) -> Result<Option<Arc<dyn Payments>>> {
    let secret_key = settings
        .stripe_secret_key
        .as_ref()
        .map(|s| s.expose().to_owned());
    let webhook_secret = settings
        .stripe_webhook_secret
        .as_ref()
        .map(|s| s.expose().to_owned());
    if secret_key.is_none() && webhook_secret.is_none() {
        return Ok(None);
    }
    let mut stripe = toolgate_payments::StripeSettings {
        secret_key,
        webhook_secret,
        ..toolgate_payments::StripeSettings::default()
    };
    if let Some(base) = &settings.stripe_api_base {
        stripe.api_base = base.clone();
    }
    let stripe = toolgate_payments::Stripe::new(stripe).map_err(anyhow::Error::msg)?;
    Ok(Some(Arc::new(stripe)))
}

/// The sign-in limits, defaults where not set.
pub fn sign_in_limits(settings: &Settings) -> SignInLimits {
    let defaults = SignInLimits::default();
    SignInLimits {
        per_address: settings
            .sign_in_limit_per_address
            .unwrap_or(defaults.per_address),
        per_client: settings
            .sign_in_limit_per_client
            .unwrap_or(defaults.per_client),
    }
}

/// Deletes expired sign-in links and dashboard sessions, and OAuth clients unused for a day
/// (no live token, no pending code), at start and now and then, for as long as the process runs.
pub fn purge_expired(app: &App) {
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

//! Mail through an SMTP server named by `smtp_url`, with lettre over tokio and rustls (ring).

use std::net::IpAddr;
use std::time::Duration;

use async_trait::async_trait;
use lettre::message::Mailbox;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use toolgate_domain::SecretName;
use toolgate_ports::mail::{Mail, MailError, Mailer};
use toolgate_vault::Redactor;
use url::{Host, Url};

use crate::{SetupError, build_message, parse_from};

/// The longest one message may take, from connecting to the server's last answer; also each
/// socket operation's limit inside lettre.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Hands messages to one SMTP server.
///
/// `smtp://user:pass@host:port` speaks plain SMTP to a loopback host and upgrades with STARTTLS
/// whenever another host offers it; `smtp://…?tls=required` insists on STARTTLS (use it when
/// the password must never travel in the clear); `smtps://…` is TLS from the first byte.
pub struct Smtp {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    /// `host:port`, for error details.
    server: String,
    /// Redacts the password, as written in the URL and decoded, from every error detail.
    password: Redactor,
}

impl std::fmt::Debug for Smtp {
    // lettre's own Debug shows the credentials: only the server is named here.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Smtp")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl Smtp {
    /// A mailer for `url` (the operator's `smtp_url`) sending as `mail_from`; a bad address or
    /// URL is refused here, with a reason that never repeats the password.
    pub fn from_url(url: &str, mail_from: &str) -> Result<Self, SetupError> {
        let from = parse_from(mail_from)?;
        let parsed = Url::parse(url).map_err(|e| SetupError::BadUrl(e.to_string()))?;
        let password = password_redactor(parsed.password());
        let scrub = |detail: String| password.redact(&detail);
        let host = match parsed.host() {
            Some(host) => host,
            None => return Err(SetupError::BadUrl("it names no host".to_owned())),
        };
        let tls_parameter = parsed.query_pairs().any(|(key, _)| key == "tls");
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
            .map_err(|e| SetupError::BadUrl(scrub(e.to_string())))?;
        // lettre reads a bare smtp:// as "never encrypt". Toward anything but this machine that
        // would send the password and the sign-in links in the clear even when the server
        // offers STARTTLS, so take it when offered.
        if parsed.scheme() == "smtp" && !tls_parameter && !is_loopback(&host) {
            let domain = match &host {
                Host::Domain(name) => (*name).to_owned(),
                Host::Ipv4(ip) => ip.to_string(),
                Host::Ipv6(ip) => ip.to_string(),
            };
            let parameters = TlsParameters::new(domain)
                .map_err(|e| SetupError::BadUrl(scrub(format!("TLS set-up: {e}"))))?;
            builder = builder.tls(Tls::Opportunistic(parameters));
        }
        let port = parsed.port().map(|p| format!(":{p}")).unwrap_or_default();
        let server = format!("{host}{port}");
        Ok(Self {
            transport: builder.timeout(Some(SEND_TIMEOUT)).build(),
            from,
            server,
            password,
        })
    }
}

#[async_trait]
impl Mailer for Smtp {
    async fn send(&self, mail: &Mail) -> Result<(), MailError> {
        let message = build_message(&self.from, mail)?;
        match tokio::time::timeout(SEND_TIMEOUT, self.transport.send(message)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(MailError::Unavailable(
                self.password
                    .redact(&format!("SMTP server {}: {e}", self.server)),
            )),
            Err(_) => Err(MailError::Unavailable(format!(
                "SMTP server {}: no answer within {} s",
                self.server,
                SEND_TIMEOUT.as_secs()
            ))),
        }
    }
}

/// Whether `host` is this machine, where plain SMTP exposes nothing on the wire.
fn is_loopback(host: &Host<&str>) -> bool {
    match host {
        // smtp:// is not a special scheme to the URL parser, so an IPv4 address arrives as an
        // opaque host name.
        Host::Domain(name) => {
            name.eq_ignore_ascii_case("localhost")
                || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
        }
        Host::Ipv4(ip) => IpAddr::V4(*ip).is_loopback(),
        Host::Ipv6(ip) => IpAddr::V6(*ip).is_loopback(),
    }
}

/// The vault's redactor for the password as written in the URL and as lettre decodes it:
/// lettre's errors carry the server's words, and a server may echo what it was sent.
fn password_redactor(password: Option<&str>) -> Redactor {
    let (Some(raw), Ok(name)) = (
        password.filter(|p| !p.is_empty()),
        SecretName::parse("SMTP_PASSWORD"),
    ) else {
        return Redactor::new(std::iter::empty());
    };
    let decoded = percent_decoded(raw);
    Redactor::new([(&name, raw.as_bytes()), (&name, decoded.as_bytes())])
}

/// `%XX` sequences decoded (as lettre decodes the password before using it); invalid UTF-8 is
/// replaced, which only makes the scrubbing broader.
fn percent_decoded(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
        });
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn loopback_is_this_machine_however_written() {
        let loopback = |url: &str| is_loopback(&Url::parse(url).unwrap().host().unwrap());
        for url in [
            "smtp://127.0.0.1:25",
            "smtp://127.1.2.3",
            "smtp://LOCALHOST",
            "smtp://[::1]:25",
        ] {
            assert!(loopback(url), "{url}");
        }
        for url in [
            "smtp://192.0.2.2",
            "smtp://mail.example.com",
            "smtp://[2001:db8::1]",
        ] {
            assert!(!loopback(url), "{url}");
        }
    }

    #[test]
    fn passwords_are_scrubbed_in_both_forms() {
        assert_eq!(percent_decoded("p%40ss"), "p@ss");
        assert_eq!(
            password_redactor(Some("p%40ss")).redact("535 bad p@ss and p%40ss"),
            "535 bad [REDACTED:SMTP_PASSWORD] and [REDACTED:SMTP_PASSWORD]"
        );
        assert_eq!(percent_decoded("a%2"), "a%2");
        assert_eq!(percent_decoded("%zz%41"), "%zzA");
    }

    #[tokio::test]
    async fn bad_urls_are_refused_without_the_password() {
        for url in [
            "not a url",
            "http://user:hunter2@mail.example.com",
            "smtp://user:hunter2@mail.example.com?tls=sometimes",
            "smtp:///no-host",
        ] {
            let err = Smtp::from_url(url, "login@example.com")
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("smtp_url"), "{url}: {err}");
            assert!(!err.contains("hunter2"), "{url}: {err}");
        }
        let err = Smtp::from_url("smtp://127.0.0.1:2525", "nobody")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("mail_from \"nobody\""), "{err}");
    }

    #[tokio::test]
    async fn every_scheme_builds_and_debug_hides_the_credentials() {
        for url in [
            "smtp://127.0.0.1:2525",
            "smtp://user:hunter2@localhost:2525",
            "smtp://user:hunter2@mail.example.com",
            "smtp://user:hunter2@mail.example.com:587?tls=required",
            "smtps://user:hunter2@mail.example.com",
            "smtp://[::1]:25",
        ] {
            let smtp = Smtp::from_url(url, "Toolgate <login@example.com>").unwrap();
            let debug = format!("{smtp:?}");
            assert!(!debug.contains("hunter2"), "{debug}");
        }
    }
}

//! Outgoing mail behind app's mail seam. [`Smtp`] hands each message to an SMTP server (lettre,
//! rustls with ring); [`Outbox`] writes it as an `.eml` file in a local folder and logs its link,
//! the documented default when no `smtp_url` is set. Both build the same RFC 5322 message.

mod outbox;
mod smtp;

pub use outbox::Outbox;
pub use smtp::{SEND_TIMEOUT, Smtp};

use lettre::Message;
use lettre::message::header::{ContentTransferEncoding, ContentType};
use lettre::message::{Body, Mailbox};
use toolgate_ports::mail::{Mail, MailError};

/// Why a mailer could not be built from the operator's settings (never holds a password).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// `mail_from` is not one mailbox
    #[error(
        "mail_from {value:?} is not a mail address (expected `login@example.com` or \
         `Toolgate <login@example.com>`): {reason}"
    )]
    BadFrom {
        /// The value as configured (an address, not a secret).
        value: String,
        /// What the parser found wrong.
        reason: String,
    },
    /// `smtp_url` cannot be used
    #[error("smtp_url is not usable (expected smtp://user:pass@host:port or smtps://…): {0}")]
    BadUrl(String),
    /// the outbox folder cannot be created or protected
    #[error("cannot prepare the mail outbox {path}: {source}")]
    Outbox {
        /// The folder.
        path: String,
        /// The file system's answer.
        source: std::io::Error,
    },
}

/// Parses `mail_from` once, at construction, so a typo is refused at start-up rather than at
/// the first sign-in.
/// Checks `mail_from` without building a transport or creating the outbox, so that the
/// binary refuses a bad sender before it opens anything.
pub fn check_from(mail_from: &str) -> Result<(), SetupError> {
    parse_from(mail_from).map(drop)
}

fn parse_from(value: &str) -> Result<Mailbox, SetupError> {
    value
        .trim()
        .parse::<Mailbox>()
        .map_err(|e| SetupError::BadFrom {
            value: value.to_owned(),
            reason: e.to_string(),
        })
}

/// The RFC 5322 message for `mail`, from `from`.
fn build_message(from: &Mailbox, mail: &Mail) -> Result<Message, MailError> {
    let to = mail
        .to
        .as_str()
        .parse::<Mailbox>()
        .map_err(|e| MailError::Unavailable(format!("the recipient is not a mailbox: {e}")))?;
    Message::builder()
        .from(from.clone())
        .to(to)
        .subject(mail.subject.clone())
        .header(ContentType::TEXT_PLAIN)
        .body(body(&mail.text))
        .map_err(|e| MailError::Unavailable(format!("cannot build the message: {e}")))
}

/// The longest line SMTP carries, in octets without its CRLF (RFC 5321 4.5.3.1.6).
const MAX_LINE: usize = 998;

/// The body as written, with CRLF line ends: 7bit when ASCII, else 8bit. Either keeps every
/// line whole, so a long sign-in link stays one clickable line, also for someone reading the raw
/// `.eml`. lettre's own choice would fold any line over 76 characters with quoted-printable
/// soft breaks; it is used only for what 7bit and 8bit cannot carry (a NUL, or a line longer
/// than SMTP allows).
fn body(text: &str) -> Body {
    let crlf = text
        .replace("\r\n", "\n")
        .replace('\r', "\n")
        .replace('\n', "\r\n");
    let fits = !crlf.contains('\0') && crlf.split("\r\n").all(|line| line.len() <= MAX_LINE);
    if !fits {
        return Body::new(text.to_owned());
    }
    let encoding = if crlf.is_ascii() {
        ContentTransferEncoding::SevenBit
    } else {
        ContentTransferEncoding::EightBit
    };
    // Pre-encoded: the text is already what 7bit/8bit put on the wire (SMTP's dot-stuffing is
    // the transport's business).
    Body::dangerous_pre_encoded(crlf.into_bytes(), encoding)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn mail_from_is_parsed_or_refused_with_the_reason() {
        assert_eq!(
            parse_from("Toolgate <login@example.com>")
                .unwrap()
                .email
                .to_string(),
            "login@example.com"
        );
        assert!(parse_from(" login@example.com ").is_ok());
        for bad in ["", "not an address", "a@b@c", "<login@example.com", "x <>"] {
            let err = parse_from(bad).unwrap_err().to_string();
            assert!(err.starts_with("mail_from"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn a_long_link_stays_on_one_line() {
        let link = format!("https://example.com/magic?token={}", "a".repeat(200));
        let text = format!("Sign in:\n\n{link}\r\n\nIgnore this mail if you did not ask.\n");
        let ascii = body(&text);
        assert_eq!(ascii.encoding(), ContentTransferEncoding::SevenBit);
        let utf8 = body(&format!("Grüße\r{link}\n"));
        assert_eq!(utf8.encoding(), ContentTransferEncoding::EightBit);
        for b in [ascii, utf8] {
            let raw = String::from_utf8(b.into_vec()).unwrap();
            assert!(raw.split("\r\n").any(|line| line == link), "{raw}");
            assert_eq!(
                raw.matches('\r').count(),
                raw.matches('\n').count(),
                "{raw:?}"
            );
        }
    }

    #[test]
    fn a_line_longer_than_smtp_allows_falls_back_to_lettres_choice() {
        let long = "x".repeat(MAX_LINE + 1);
        assert_ne!(body(&long).encoding(), ContentTransferEncoding::SevenBit);
        assert_eq!(
            body(&"x".repeat(MAX_LINE)).encoding(),
            ContentTransferEncoding::SevenBit
        );
    }
}

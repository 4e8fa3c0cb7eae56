//! The mail seam: what sign-in needs from a mail transport, as values. The binary wires in the
//! real one (crate `mail`: SMTP through lettre, or `.eml` files in an outbox folder); `app` never
//! speaks SMTP itself.

use async_trait::async_trait;
use toolgate_domain::Email;

/// One message to one address, plain text.
#[derive(Clone)]
pub struct Mail {
    /// The recipient.
    pub to: Email,
    /// The subject line.
    pub subject: String,
    /// The body, plain text (UTF-8).
    pub text: String,
    /// The sign-in link the body carries; an outbox logs it so a local operator can sign in.
    pub link: Option<String>,
}

impl std::fmt::Debug for Mail {
    // The body and link carry a sign-in token: never in a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mail")
            .field("to", &self.to)
            .field("subject", &self.subject)
            .finish_non_exhaustive()
    }
}

/// Why a message was not handed over; the detail is for logs (it never holds the body).
#[derive(Debug, thiserror::Error)]
pub enum MailError {
    /// the transport refused or could not be reached
    #[error("mail could not be sent: {0}")]
    Unavailable(String),
}

/// Hands messages to a transport.
#[async_trait]
pub trait Mailer: Send + Sync {
    /// Sends `mail`; `Ok` once the transport (SMTP server or outbox file) has accepted it.
    async fn send(&self, mail: &Mail) -> Result<(), MailError>;
}

//! Passwordless sign-in: a link by e-mail, a confirmation page, a dashboard session.
//!
//! A link is 256 random bits, stored only as its SHA-256, valid 15 minutes and once (used by
//! one atomic update). Opening it only shows a button (mail scanners fetch links); pressing it
//! starts a session, whose cookie is stored the same way. The first sign-in of an address
//! creates its account: the click proves the address.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use toolgate_domain::{Account, AccountId, ApiKey, Brand, Email, SecretToken};
use toolgate_store::{NewAccount, NewSignInSession, Store, StoreError, now_millis};
use toolgate_vault::Vault;

use crate::limiter::{Limiter, client_key};
use toolgate_ports::mail::{Mail, Mailer};

/// How long a link may be used.
pub const LINK_TTL: Duration = Duration::from_secs(15 * 60);
/// How long a dashboard session lasts (then the owner signs in again).
pub const SESSION_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// The window the per-address and per-client limits count in.
const LIMIT_WINDOW: Duration = LINK_TTL;

/// How many links an address and a client may ask for per 15 minutes.
#[derive(Debug, Clone, Copy)]
pub struct SignInLimits {
    /// Links per e-mail address (counted in storage, so across hosts).
    pub per_address: u32,
    /// Requests per client address (IPv6: per /64), counted by this process.
    pub per_client: u32,
}

impl Default for SignInLimits {
    fn default() -> Self {
        Self {
            per_address: 5,
            per_client: 30,
        }
    }
}

/// Why a sign-in step failed; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    /// the address is not an e-mail address
    #[error("invalid e-mail address: {0}")]
    InvalidEmail(String),
    /// too many requests from this address or client
    #[error(
        "too many sign-in links requested; try again in {} minute(s)",
        .0.as_secs().div_ceil(60).max(1)
    )]
    TooMany(Duration),
    /// the link is unknown, used or expired
    #[error(
        "this sign-in link is invalid, expired (links last 15 minutes) or was used already; ask for a new one"
    )]
    BadLink,
    /// the service cannot do it now; the detail is for logs
    #[error("sign-in is temporarily unavailable, please retry")]
    Unavailable(String),
}

impl From<StoreError> for SignInError {
    fn from(err: StoreError) -> Self {
        Self::Unavailable(err.to_string())
    }
}

/// A started dashboard session: the cookie's token and whose it is.
#[derive(Debug)]
pub struct Started {
    /// The token the cookie carries.
    pub token: SecretToken,
    /// The signed-in account.
    pub account: Account,
    /// Whether this sign-in created the account.
    pub created: bool,
}

/// The sign-in use cases.
pub struct SignIn {
    store: Arc<dyn Store>,
    mailer: Arc<dyn Mailer>,
    vault: Option<Arc<Vault>>,
    brand: Brand,
    public_url: String,
    limits: SignInLimits,
    per_client: Limiter,
    /// The per-address limit within this process, counted before storage is asked: concurrent
    /// requests cannot all pass the stored count at once (storage counts across hosts).
    per_address: Limiter,
}

impl SignIn {
    /// Sign-in over `store`, mailing through `mailer`; links point at `public_url`.
    pub fn new(
        store: Arc<dyn Store>,
        mailer: Arc<dyn Mailer>,
        vault: Option<Arc<Vault>>,
        brand: Brand,
        public_url: &str,
        limits: SignInLimits,
    ) -> Self {
        Self {
            store,
            mailer,
            vault,
            brand,
            public_url: public_url.trim_end_matches('/').to_owned(),
            per_client: Limiter::new(limits.per_client, LIMIT_WINDOW),
            per_address: Limiter::new(limits.per_address, LIMIT_WINDOW),
            limits,
        }
    }

    /// Sends a link to `email`. The answer is the same whether or not the address has an
    /// account; the mail goes out after this returns, so its timing does not tell either.
    pub async fn request_link(&self, email: &str, client: IpAddr) -> Result<(), SignInError> {
        self.request_link_to(email, client, None).await
    }

    /// Sends a link that, once used, leads on to `next`: a query string of this service's own
    /// (the authorization request that sent the owner to sign in), appended to the link as is.
    pub async fn request_link_to(
        &self,
        email: &str,
        client: IpAddr,
        next: Option<&str>,
    ) -> Result<(), SignInError> {
        let email =
            Email::parse(email).map_err(|err| SignInError::InvalidEmail(err.to_string()))?;
        self.per_client
            .count(&client_key(client))
            .map_err(SignInError::TooMany)?;
        self.per_address
            .count(email.as_str())
            .map_err(SignInError::TooMany)?;
        let now = now_millis();
        let since = now - millis(LIMIT_WINDOW);
        if self.store.count_sign_in_links(&email, since).await?
            >= i64::from(self.limits.per_address)
        {
            return Err(SignInError::TooMany(LIMIT_WINDOW));
        }
        let token = SecretToken::generate().map_err(|e| SignInError::Unavailable(e.to_string()))?;
        self.store
            .put_sign_in_link(&token.hash(), &email, now, now + millis(LINK_TTL))
            .await?;
        let mail = self.mail(email, &token, next);
        let mailer = self.mailer.clone();
        tokio::spawn(async move {
            if let Err(err) = mailer.send(&mail).await {
                tracing::error!(error = %err, "a sign-in mail was not sent");
            }
        });
        Ok(())
    }

    fn mail(&self, to: Email, token: &SecretToken, next: Option<&str>) -> Mail {
        let link = format!(
            "{}/dashboard/sign-in/confirm?token={}{}",
            self.public_url,
            token.expose(),
            next.map(|next| format!("&{next}")).unwrap_or_default()
        );
        let text = format!(
            "Hello,\n\nopen this link to sign in to your toolgate dashboard:\n\n{link}\n\n\
             It works once, within 15 minutes. If you did not ask for it, ignore this \
             message: nothing happens unless you press the button on the page it opens.\n"
        );
        Mail {
            to,
            subject: "Your toolgate sign-in link".to_owned(),
            text,
            link: Some(link),
        }
    }

    /// The address a link was sent to, if it can still be used; uses nothing.
    pub async fn peek(&self, token: &str) -> Result<Email, SignInError> {
        let token = SecretToken::parse(token).ok_or(SignInError::BadLink)?;
        self.store
            .peek_sign_in_link(&token.hash(), now_millis())
            .await?
            .ok_or(SignInError::BadLink)
    }

    /// Uses the link and starts a session, creating the account on its first sign-in.
    pub async fn confirm(&self, token: &str) -> Result<Started, SignInError> {
        let token = SecretToken::parse(token).ok_or(SignInError::BadLink)?;
        let now = now_millis();
        let email = self
            .store
            .use_sign_in_link(&token.hash(), now)
            .await?
            .ok_or(SignInError::BadLink)?;
        let (account, created) = self.account_for(&email).await?;
        let session =
            SecretToken::generate().map_err(|e| SignInError::Unavailable(e.to_string()))?;
        self.store
            .create_sign_in_session(&NewSignInSession {
                token_hash: session.hash(),
                account: account.id.clone(),
                expires_at: now + millis(SESSION_TTL),
            })
            .await?;
        Ok(Started {
            token: session,
            account,
            created,
        })
    }

    async fn account_for(&self, email: &Email) -> Result<(Account, bool), SignInError> {
        if let Some(account) = self.store.find_by_email(email).await? {
            return Ok((account, false));
        }
        let key =
            ApiKey::generate(&self.brand).map_err(|e| SignInError::Unavailable(e.to_string()))?;
        let new = NewAccount {
            id: AccountId::generate(),
            email: email.clone(),
            key_hash: key.hash(),
        };
        match self.store.create_account(&new).await {
            Ok(account) => {
                super::keep_key(&*self.store, self.vault.as_deref(), &account.id, &key).await;
                Ok((account, true))
            }
            // two links of one new address used at once: the other created it
            Err(StoreError::Conflict(_)) => self
                .store
                .find_by_email(email)
                .await?
                .map(|account| (account, false))
                .ok_or_else(|| SignInError::Unavailable("account vanished".to_owned())),
            Err(err) => Err(err.into()),
        }
    }

    /// The account of a session cookie, if the session is live.
    pub async fn session(&self, token: &SecretToken) -> Result<Option<Account>, SignInError> {
        Ok(self
            .store
            .find_sign_in_session(&token.hash(), now_millis())
            .await?)
    }

    /// Ends this session.
    pub async fn sign_out(&self, token: &SecretToken) -> Result<(), SignInError> {
        self.store.end_sign_in_session(&token.hash()).await?;
        Ok(())
    }

    /// Ends every session of the account.
    pub async fn sign_out_everywhere(&self, account: &AccountId) -> Result<u64, SignInError> {
        Ok(self.store.end_all_sign_in_sessions(account).await?)
    }

    /// Deletes expired links and sessions.
    pub async fn purge(&self) -> Result<u64, SignInError> {
        Ok(self.store.purge_expired(now_millis()).await?)
    }
}

fn millis(span: Duration) -> i64 {
    i64::try_from(span.as_millis()).unwrap_or(i64::MAX)
}

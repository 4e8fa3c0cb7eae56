//! Turns for work the server does on a tenant's behalf that holds a lot of memory while it runs:
//! reading workspace files back (a read of 8 MiB costs the server several times that while it is
//! encoded and answered, so six at once grew it by ~357 MiB) and fetching pages (up to 8 MiB
//! each, then rendered). Each kind waits its turn: a few per account, a few on the whole server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Workspace reads of one account at once.
pub const READS_PER_ACCOUNT: usize = 1;
/// Workspace reads on the whole server at once.
pub const READS_GLOBAL: usize = 2;
/// Web requests (`url`, `http`) of one account at once.
pub const FETCHES_PER_ACCOUNT: usize = 4;
/// Web requests on the whole server at once: 32 × 8 MiB bodies bound what they hold.
pub const FETCHES_GLOBAL: usize = 32;
/// Model calls and searches (`svc_ai`, and from code) of one account at once: each may hold an
/// 8 MiB answer.
pub const PROVIDER_CALLS_PER_ACCOUNT: usize = 4;
/// Model calls and searches on the whole server at once.
pub const PROVIDER_CALLS_GLOBAL: usize = 32;
/// Accounts remembered before idle ones are forgotten.
const REMEMBERED: usize = 1024;

/// The turns of one kind of work.
pub struct Turns {
    global: Arc<Semaphore>,
    per_account: Mutex<HashMap<String, Arc<Semaphore>>>,
    account_limit: usize,
}

/// One piece of work's turn; the next may start when it is dropped.
pub struct Turn {
    _account: OwnedSemaphorePermit,
    _global: OwnedSemaphorePermit,
}

impl Turns {
    /// `global` at once on the server, `per_account` for one account.
    pub fn new(global: usize, per_account: usize) -> Self {
        Self {
            global: Arc::new(Semaphore::new(global)),
            per_account: Mutex::new(HashMap::new()),
            account_limit: per_account,
        }
    }

    /// Waits for `account`'s turn, then for the server's; `None` only if closed (never).
    pub async fn turn(&self, account: &str) -> Option<Turn> {
        let own = {
            let mut accounts = self
                .per_account
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if accounts.len() > REMEMBERED {
                let limit = self.account_limit;
                accounts.retain(|_, s| Arc::strong_count(s) > 1 || s.available_permits() < limit);
            }
            Arc::clone(
                accounts
                    .entry(account.to_owned())
                    .or_insert_with(|| Arc::new(Semaphore::new(self.account_limit))),
            )
        };
        let account = own.acquire_owned().await.ok()?;
        let global = Arc::clone(&self.global).acquire_owned().await.ok()?;
        Some(Turn {
            _account: account,
            _global: global,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn an_account_waits_for_its_own_turn_and_all_for_the_servers() {
        let permits = Turns::new(2, 1);
        let a = permits.turn("a").await.unwrap();
        let second_a = tokio::time::timeout(Duration::from_millis(50), permits.turn("a")).await;
        assert!(second_a.is_err(), "one read per account at once");
        let b = permits.turn("b").await.unwrap();
        let c = tokio::time::timeout(Duration::from_millis(50), permits.turn("c")).await;
        assert!(c.is_err(), "two on the server at once");
        drop(a);
        permits.turn("c").await.unwrap();
        drop(b);
    }
}

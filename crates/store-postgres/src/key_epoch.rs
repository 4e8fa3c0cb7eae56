//! The key epoch across hosts: a count every front end keeps, moved on whenever any of them
//! rotates a key. A rotation notifies the channel `toolgate_keys` in its own statement, so the
//! notice goes out when it commits (and never for one rolled back); each store listens on a
//! connection of its own and moves its count on for each notice, and for its own rotations at
//! once. While that connection is down, notices may be missed: the store then offers no epoch
//! (keys are not cached), and moves its count on when it listens again.
//!
//! What is left: a look-up by another front end between a rotation's commit and the notice's
//! arrival (a round trip on the network) may still be answered from its cache, as may one on a
//! connection that died silently; the cache's own time to live bounds both.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use sqlx::postgres::PgListener;

/// The channel rotations notify.
pub(crate) const CHANNEL: &str = "toolgate_keys";
/// The wait before listening again after the connection was lost or could not be made.
const RELISTEN_AFTER: Duration = Duration::from_secs(1);

/// A store's key epoch and the task that listens for it.
pub(crate) struct KeyEpoch {
    shared: Arc<Shared>,
    listener: tokio::task::AbortHandle,
}

#[derive(Default)]
struct Shared {
    listening: AtomicBool,
    count: AtomicU64,
}

impl Shared {
    fn move_on(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
    }
}

impl KeyEpoch {
    /// Starts listening on the database at `url` (on a connection outside the store's pool).
    pub(crate) fn listen(url: &str) -> Self {
        let shared = Arc::new(Shared::default());
        let task = tokio::spawn(keep_listening(url.to_owned(), shared.clone()));
        Self {
            shared,
            listener: task.abort_handle(),
        }
    }

    /// The current epoch, while notices are being heard.
    pub(crate) fn current(&self) -> Option<u64> {
        self.shared
            .listening
            .load(Ordering::SeqCst)
            .then(|| self.shared.count.load(Ordering::SeqCst))
    }

    /// Moves the epoch on for a rotation this store committed, before its notice comes back.
    pub(crate) fn rotated(&self) {
        self.shared.move_on();
    }

    /// Stops listening; the store offers no epoch from now on.
    pub(crate) fn stop(&self) {
        self.listener.abort();
        self.shared.listening.store(false, Ordering::SeqCst);
        self.shared.move_on();
    }
}

impl Drop for KeyEpoch {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

async fn keep_listening(url: String, shared: Arc<Shared>) {
    loop {
        if let Ok(mut listener) = PgListener::connect(&url).await
            && listener.listen(CHANNEL).await.is_ok()
        {
            // Notices missed while not listening are made up for by moving on once now.
            shared.move_on();
            shared.listening.store(true, Ordering::SeqCst);
            // `None`: the connection was lost (the listener would reconnect on the next call,
            // but what came meanwhile is gone, so this loop starts over the same way).
            while let Ok(Some(_)) = listener.try_recv().await {
                shared.move_on();
            }
            shared.listening.store(false, Ordering::SeqCst);
            shared.move_on();
        }
        tokio::time::sleep(RELISTEN_AFTER).await;
    }
}

#[cfg(test)]
#[path = "key_epoch_tests.rs"]
mod tests;

//! The WAL's checkpoints, mostly taken off the admissions' path. SQLite checkpoints from the
//! connection whose commit passes `wal_autocheckpoint` (1,000 pages by default), inside that
//! commit: on the admissions thread, about one call in a hundred waited for a thousand pages to
//! be copied and the database file synced (the warm call's slowest 1 % spent 1.5–3 ms in its
//! `finish` stage, README, goal 2). Now a thread of its own copies the pages, on a connection of
//! its own, every [`NUDGE_EVERY`] admissions and every [`PERIOD`]: a PASSIVE checkpoint waits for
//! no reader and no writer, and commits go on appending to the WAL while it runs.
//!
//! It cannot restart the WAL from its beginning, though: only a writer that begins on a WAL
//! copied whole does, and under steady calls the admissions always find a few pages not yet
//! copied. So the admissions connection still checkpoints by itself, at
//! [`WRITER_CHECKPOINT_PAGES`]: four times as rarely, and with all but the last few pages
//! already copied, only those and the sync are left to it. The WAL file stays under about
//! 17 MB.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::time::Duration;

use rusqlite::Connection;
use toolgate_store::StoreError;

/// Admissions between two nudges: about as many pages of WAL as SQLite's own 1,000-page default.
const NUDGE_EVERY: u64 = 128;
/// The admissions connection's `wal_autocheckpoint`: the WAL restarts from its beginning after
/// about this many pages (4 KiB each).
pub(crate) const WRITER_CHECKPOINT_PAGES: i64 = 4000;
/// A checkpoint at least this often while admissions come (none while none do).
const PERIOD: Duration = Duration::from_millis(500);

/// The handle of the checkpoint thread; the thread ends when it is dropped.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    nudge: SyncSender<()>,
    /// Admissions since the last nudge.
    admissions: u64,
    /// Admissions committed in all, read by the thread to skip the checks of an idle store.
    committed: Arc<AtomicU64>,
}

impl Checkpointer {
    /// Starts the thread on `conn`, a connection of its own.
    pub(crate) fn spawn(conn: Connection) -> Result<Self, StoreError> {
        let (nudge, nudges) = mpsc::sync_channel(1);
        let committed = Arc::new(AtomicU64::new(0));
        let seen = Arc::clone(&committed);
        std::thread::Builder::new()
            .name("toolgate-wal-checkpoints".to_owned())
            .spawn(move || run(&conn, &nudges, &seen))
            .map_err(|e| {
                StoreError::Unavailable(format!("cannot start the WAL checkpoint thread: {e}"))
            })?;
        Ok(Self {
            nudge,
            admissions: 0,
            committed,
        })
    }

    /// Counts `admissions` just committed; every [`NUDGE_EVERY`] of them asks for a checkpoint
    /// (without waiting: one asked for and not yet begun covers the next).
    pub(crate) fn committed(&mut self, admissions: usize) {
        self.committed
            .fetch_add(admissions as u64, Ordering::Relaxed);
        self.admissions += admissions as u64;
        if self.admissions >= NUDGE_EVERY {
            self.admissions = 0;
            // full: a checkpoint is asked for already; gone: the store is closing
            let _ = self.nudge.try_send(());
        }
    }
}

fn run(conn: &Connection, nudges: &mpsc::Receiver<()>, committed: &AtomicU64) {
    let mut checked = 0;
    loop {
        match nudges.recv_timeout(PERIOD) {
            Ok(()) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        let now = committed.load(Ordering::Relaxed);
        if now != checked {
            checked = now;
            checkpoint(conn);
        }
    }
}

/// One PASSIVE checkpoint; with nothing new in the WAL it copies and syncs nothing.
fn checkpoint(conn: &Connection) {
    let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
        row.get::<_, i64>(0)
    });
    if let Err(error) = done {
        tracing::warn!(%error, "WAL checkpoint failed; the next one retries");
    }
}

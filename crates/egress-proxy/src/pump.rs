//! Moving a connection's bytes, counted against the run's limits: bytes in all and bytes per
//! second, shared by every connection of the run.

use std::io;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Bytes moved per read.
const CHUNK: usize = 128 * 1024;

/// The run's traffic budget.
#[derive(Debug)]
pub(crate) struct Budget {
    max_bytes: u64,
    used: AtomicU64,
    rate: Option<Mutex<Bucket>>,
}

/// A token bucket: `per_second` bytes a second, bursts up to one second's worth.
#[derive(Debug)]
struct Bucket {
    per_second: f64,
    tokens: f64,
    at: Instant,
}

/// The run passed its byte limit.
#[derive(Debug, thiserror::Error)]
#[error("this run's network traffic passed its limit of {0} bytes")]
pub(crate) struct OverLimit(pub(crate) u64);

impl Budget {
    /// `max_bytes` in all (0: none) at `per_second` (0: no rate).
    pub(crate) fn new(max_bytes: u64, per_second: u64) -> Self {
        Self {
            max_bytes,
            used: AtomicU64::new(0),
            rate: (per_second > 0).then(|| {
                Mutex::new(Bucket {
                    per_second: per_second as f64,
                    tokens: per_second as f64,
                    at: Instant::now(),
                })
            }),
        }
    }

    /// Charges `bytes`, waiting as the rate asks; refused past the byte limit.
    pub(crate) async fn charge(&self, bytes: usize) -> Result<(), OverLimit> {
        let bytes = bytes as u64;
        let used = self.used.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if self.max_bytes > 0 && used > self.max_bytes {
            return Err(OverLimit(self.max_bytes));
        }
        if let Some(wait) = self.wait_for(bytes) {
            tokio::time::sleep(wait).await;
        }
        Ok(())
    }

    fn wait_for(&self, bytes: u64) -> Option<Duration> {
        let rate = self.rate.as_ref()?;
        let mut bucket = rate
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        let refill = now.duration_since(bucket.at).as_secs_f64() * bucket.per_second;
        bucket.tokens = (bucket.tokens + refill).min(bucket.per_second);
        bucket.at = now;
        bucket.tokens -= bytes as f64;
        (bucket.tokens < 0.0).then(|| Duration::from_secs_f64(-bucket.tokens / bucket.per_second))
    }
}

/// Copies `from` to `to` until `from` ends (then shuts `to` for writing), charging `budget`;
/// adds what it moved to `moved` as it goes.
pub(crate) async fn pump(
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
    budget: &Budget,
    moved: &AtomicU64,
) -> io::Result<()> {
    let mut buffer = vec![0u8; CHUNK];
    loop {
        let n = from.read(&mut buffer).await?;
        if n == 0 {
            let _ = to.shutdown().await;
            return Ok(());
        }
        budget.charge(n).await.map_err(io::Error::other)?;
        to.write_all(&buffer[..n]).await?;
        moved.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Moves bytes both ways between `client` and `upstream` until both directions end (or one
/// fails, or the budget runs out); `sent` counts client → upstream, `received` the other way.
pub(crate) async fn both_ways<C, U>(
    client: C,
    upstream: U,
    budget: &Budget,
    sent: &AtomicU64,
    received: &AtomicU64,
) -> io::Result<()>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut upstream_read, mut upstream_write) = tokio::io::split(upstream);
    let up = pump(&mut client_read, &mut upstream_write, budget, sent);
    let down = pump(&mut upstream_read, &mut client_write, budget, received);
    // either direction failing ends both: the other's future is dropped
    tokio::try_join!(up, down).map(|_| ())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn the_byte_limit_stops_a_copy() {
        let budget = Budget::new(100_000, 0);
        let data = vec![7u8; 300_000];
        let mut out = Vec::new();
        let moved = AtomicU64::new(0);
        let err = pump(&mut &data[..], &mut out, &budget, &moved)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("limit of 100000 bytes"), "{err}");
        assert!(out.len() <= 100_000);
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_spreads_bytes_over_time() {
        let budget = Budget::new(0, 100_000);
        let started = tokio::time::Instant::now();
        let data = vec![7u8; 300_000];
        let mut out = Vec::new();
        let moved = AtomicU64::new(0);
        pump(&mut &data[..], &mut out, &budget, &moved)
            .await
            .unwrap();
        assert_eq!(out.len(), 300_000);
        assert_eq!(moved.load(Ordering::Relaxed), 300_000);
        // one second's burst, then 200,000 more bytes at 100,000 a second
        assert!(
            started.elapsed() >= Duration::from_millis(1900),
            "{:?}",
            started.elapsed()
        );
    }
}

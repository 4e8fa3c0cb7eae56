//! When to try again: a 429 or a 5xx, at most [`MAX_ATTEMPTS`] times, after the provider's
//! `retry-after` (in seconds) or else an exponential backoff, and never past the call's
//! deadline.

use std::time::Duration;

/// Requests sent at most for one call.
pub const MAX_ATTEMPTS: u32 = 3;
/// The first backoff; each next one doubles.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest wait honoured.
const MAX_WAIT: Duration = Duration::from_secs(20);

/// Whether a status is worth another attempt.
pub fn retryable(status: u16) -> bool {
    status == 429 || (500..=599).contains(&status)
}

/// How long to wait before attempt `attempt + 1` (attempts count from 1).
pub fn wait(attempt: u32, retry_after: Option<&str>) -> Duration {
    retry_after
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
        .unwrap_or_else(|| FIRST_BACKOFF * 2u32.saturating_pow(attempt.saturating_sub(1)))
        .min(MAX_WAIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_providers_wait_is_honoured_within_bounds() {
        assert!(retryable(429) && retryable(503) && !retryable(401) && !retryable(400));
        assert_eq!(wait(1, Some("2")), Duration::from_secs(2));
        assert_eq!(wait(1, Some("0.5")), Duration::from_millis(500));
        assert_eq!(wait(1, Some("86400")), MAX_WAIT);
        assert_eq!(wait(1, None), Duration::from_millis(250));
        assert_eq!(
            wait(2, Some("Wed, 21 Oct 2015 07:28:00 GMT")),
            Duration::from_millis(500)
        );
        assert_eq!(wait(3, Some("-1")), Duration::from_secs(1));
    }
}

//! Counting requests per key in a sliding window, in memory and bounded: what the sign-in form
//! uses per client address (the per e-mail-address limit is counted in storage, across hosts),
//! and OAuth per client address (registrations) and per signed-in account (document fetches).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Keys remembered at most; past it, keys whose window is over are dropped, and if all are
/// live the oldest half goes (a flood of addresses then forgets, it never grows the heap).
const MAX_KEYS: usize = 100_000;

/// Allows `max` events per key within `window`.
pub(crate) struct Limiter {
    max: usize,
    window: Duration,
    seen: Mutex<HashMap<String, VecDeque<Instant>>>,
}

impl Limiter {
    /// A limiter of `max` events per `window`.
    pub(crate) fn new(max: u32, window: Duration) -> Self {
        Self {
            max: max as usize,
            window,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Counts one event for `key`, or refuses it with the wait until one would be allowed.
    pub(crate) fn count(&self, key: &str) -> Result<(), Duration> {
        self.count_at(key, Instant::now())
    }

    fn count_at(&self, key: &str, now: Instant) -> Result<(), Duration> {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.len() >= MAX_KEYS && !seen.contains_key(key) {
            self.prune(&mut seen, now);
        }
        let times = seen.entry(key.to_owned()).or_default();
        while times
            .front()
            .is_some_and(|t| now.duration_since(*t) >= self.window)
        {
            times.pop_front();
        }
        if times.len() >= self.max {
            let oldest = times.front().copied().unwrap_or(now);
            return Err(self.window.saturating_sub(now.duration_since(oldest)));
        }
        times.push_back(now);
        Ok(())
    }

    fn prune(&self, seen: &mut HashMap<String, VecDeque<Instant>>, now: Instant) {
        seen.retain(|_, times| {
            times
                .back()
                .is_some_and(|t| now.duration_since(*t) < self.window)
        });
        if seen.len() >= MAX_KEYS {
            let mut newest: Vec<(Instant, String)> = seen
                .iter()
                .filter_map(|(k, times)| times.back().map(|t| (*t, k.clone())))
                .collect();
            newest.sort_unstable();
            for (_, key) in newest.iter().take(newest.len() / 2) {
                seen.remove(key);
            }
        }
    }
}

/// The key a client address is counted under: IPv6 clients by their /64, which one
/// subscriber usually holds whole, so rotating through it gains nothing.
pub(crate) fn client_key(address: IpAddr) -> String {
    match address {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_key_gets_max_events_per_window() {
        let limiter = Limiter::new(3, Duration::from_secs(60));
        let start = Instant::now();
        for _ in 0..3 {
            limiter.count_at("a", start).unwrap();
        }
        let wait = limiter
            .count_at("a", start + Duration::from_secs(10))
            .unwrap_err();
        assert_eq!(wait, Duration::from_secs(50));
        limiter.count_at("b", start).unwrap();
        limiter
            .count_at("a", start + Duration::from_secs(60))
            .unwrap();
    }

    #[test]
    fn client_keys_group_an_ipv6_subscriber() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_eq!(client_key("::ffff:10.0.0.1".parse().unwrap()), "10.0.0.1");
        assert_ne!(
            client_key("10.0.0.1".parse().unwrap()),
            client_key("10.0.0.2".parse().unwrap())
        );
    }
}

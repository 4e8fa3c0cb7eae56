//! The run a session is in, as the proxy sees it: the grant's lists parsed, the run's budget,
//! its connections open and their records, and its end.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio_util::sync::CancellationToken;
use toolgate_egress::{HostPattern, any_matches};
use toolgate_sandbox::EgressGrant;

use crate::ca::SessionCa;
use crate::intercept::Edge;
use crate::placeholder::BoundSecret;
use crate::pump::Budget;
use crate::traffic::Traffic;

/// Most destinations one run records; later ones are counted in the last record's place only
/// by their traffic in the run's totals.
pub(crate) const MAX_RECORDS: usize = 256;

/// The run a session is in, as the proxy sees it.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) grant: EgressGrant,
    allow: Vec<HostPattern>,
    deny: Vec<HostPattern>,
    pub(crate) budget: Budget,
    /// Bound secrets and the CA to see them with; `None`: tunnels stay raw.
    pub(crate) edge: Option<Edge>,
    pub(crate) open: AtomicU32,
    /// Connections as they go (refusals too): a record is read whole when the run finishes,
    /// also for a connection still open then.
    records: Mutex<Vec<Arc<Traffic>>>,
    pub(crate) ended: CancellationToken,
}

impl Run {
    pub(crate) fn new(mut grant: EgressGrant, ca: Option<Arc<SessionCa>>) -> Self {
        let parse = |patterns: &[String]| {
            patterns
                .iter()
                .filter_map(|p| HostPattern::parse(p).ok())
                .collect::<Vec<_>>()
        };
        let secrets = std::mem::take(&mut grant.secrets);
        let edge = (!secrets.is_empty()).then(|| Edge {
            ca,
            secrets: BoundSecret::from_grant(secrets),
        });
        Self {
            edge,
            allow: parse(&grant.allow),
            deny: parse(&grant.deny),
            budget: Budget::new(grant.limits.max_bytes, grant.limits.bytes_per_second),
            open: AtomicU32::new(0),
            records: Mutex::new(Vec::new()),
            ended: CancellationToken::new(),
            grant,
        }
    }

    pub(crate) fn lock_records(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Traffic>>> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Refuses a host the run's lists keep out.
    pub(crate) fn check_host(&self, host: &str) -> Result<(), String> {
        if !self.allow.is_empty() && !any_matches(&self.allow, host) {
            return Err(format!(
                "{host} is not on this account's list of hosts code may reach"
            ));
        }
        if any_matches(&self.deny, host) {
            return Err(format!(
                "{host} is on this account's list of hosts code may not reach"
            ));
        }
        Ok(())
    }

    /// A new connection's record, kept with the run's (past [`MAX_RECORDS`] it is counted
    /// against the limits but not kept).
    pub(crate) fn traffic(&self, host: &str, port: u16, kind: &'static str) -> Arc<Traffic> {
        let traffic = Arc::new(Traffic::new(host, port, kind));
        let mut records = self.lock_records();
        if records.len() < MAX_RECORDS {
            records.push(Arc::clone(&traffic));
        }
        traffic
    }
}

/// A connection slot of the run, given back on drop.
pub(crate) struct Slot<'a>(pub(crate) &'a Run);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

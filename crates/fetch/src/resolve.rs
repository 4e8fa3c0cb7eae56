//! Name resolution behind the egress guard: a name resolves only to addresses the policy
//! allows, and a name with none left is refused, so the connection is never attempted.

use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use toolgate_egress::EgressPolicy;

/// Resolves with the system resolver, then keeps only allowed addresses.
pub struct GuardedResolver {
    policy: Arc<EgressPolicy>,
}

impl GuardedResolver {
    pub fn new(policy: Arc<EgressPolicy>) -> Self {
        Self { policy }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if policy.is_endpoint_name(&host) {
                // an endpoint the operator configured by name: wherever it resolves
                let addrs: Addrs = Box::new(found.into_iter());
                return Ok(addrs);
            }
            let allowed = policy.allowed(found).map_err(|refusal| {
                let err: Box<dyn std::error::Error + Send + Sync> = match refusal {
                    Some(refusal) => Box::new(refusal),
                    None => format!("{host} has no address").into(),
                };
                err
            })?;
            let addrs: Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

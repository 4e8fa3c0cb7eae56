//! What a run's code may reach through the session's network proxy: the grant the sandbox's
//! proxy applies (see `toolgate-egress-proxy`). Built per run from the operator's settings,
//! the account's host lists and its secrets bound to hosts.

use toolgate_sandbox::{EgressGrant, EgressLimits};

use crate::capability::{CallContext, Failure};

use super::Sandbox;

impl Sandbox {
    /// Gives sessions network through the proxy under `limits` (the operator's
    /// `sandbox_network = proxy`); without it, sessions have none.
    pub fn with_network(mut self, limits: EgressLimits) -> Self {
        self.network = Some(limits);
        self
    }

    /// Whether sessions have network (through the proxy).
    pub fn has_network(&self) -> bool {
        self.network.is_some()
    }

    /// The grant of a run of `ctx`'s account; `None` when sessions have no network.
    pub(super) async fn egress_grant(
        &self,
        _ctx: &CallContext<'_>,
    ) -> Result<Option<EgressGrant>, Failure> {
        let Some(limits) = self.network else {
            return Ok(None);
        };
        Ok(Some(EgressGrant {
            limits,
            ..EgressGrant::default()
        }))
    }
}

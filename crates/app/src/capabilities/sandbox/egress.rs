//! What a run's code may reach through the session's network proxy: the grant the sandbox's
//! proxy applies (see `toolgate-egress-proxy`). Built per run from the operator's settings,
//! the account's host lists and its secrets bound to hosts.

use std::sync::Arc;

use toolgate_domain::SecretName;
use toolgate_sandbox::{EgressGrant, EgressLimits};

use crate::capability::{CallContext, Failure};
use crate::egress_rules::EgressRules;

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

    /// Applies the accounts' host lists (`rules`) to runs and offers the `network` fields.
    pub(crate) fn with_host_lists(mut self, rules: Arc<EgressRules>) -> Self {
        self.host_lists = Some(rules);
        self
    }

    /// The grant of a run of `ctx`'s account; `None` when sessions have no network. The
    /// account's lists come from memory on a warm path (see [`EgressRules`]). It holds the
    /// account's secrets bound to hosts, whose values are registered with the call so that an
    /// answer echoing one (a site that reflects its headers) is redacted like any other.
    pub(super) async fn egress_grant(
        &self,
        ctx: &CallContext<'_>,
    ) -> Result<Option<EgressGrant>, Failure> {
        let Some(limits) = self.network else {
            return Ok(None);
        };
        let secrets = match &self.secrets {
            Some(vault) => vault
                .open_bound(&ctx.account.id)
                .await
                .map_err(|e| Failure::new(e.to_string()))?,
            None => Vec::new(),
        };
        let named: Vec<(SecretName, &[u8])> = secrets
            .iter()
            .filter_map(|s| Some((SecretName::parse(&s.name).ok()?, s.value.as_bytes())))
            .collect();
        ctx.secrets.add(named.iter().map(|(n, v)| (n, *v)));
        let mut grant = EgressGrant {
            limits,
            secrets,
            ..EgressGrant::default()
        };
        if let Some(rules) = &self.host_lists {
            let lists = rules.lists(&ctx.account.id).await.map_err(|err| {
                tracing::error!(error = ?err, "a run's host lists could not be read");
                Failure::new(err.to_string())
            })?;
            grant.allow.clone_from(&lists.allow);
            grant.deny.clone_from(&lists.deny);
        }
        Ok(Some(grant))
    }
}

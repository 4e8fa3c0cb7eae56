//! The built-in capabilities. A new capability is one module here plus one line in [`builtin`].

mod ai;
mod billing;
mod fetch;
mod network;
pub mod sandbox;
mod secrets;
mod sql;

use std::sync::Arc;

use toolgate_store::OperatorTokens;

use crate::Services;
use crate::capability::Capability;
use crate::metering::Meter;
use crate::secrets::Secrets;

pub use ai::OperatorKeyLimits;
pub use billing::Billing;
pub use sandbox::Sandbox;
pub(crate) use secrets::rfc3339;

/// Every capability this build offers, in the order tool descriptions list them and a call
/// runs them; the vault's only with `secrets`, `url` and `http` only with `web`, the sandbox's
/// only when the server runs one, `sql` when there are database servers or sessions to run it.
/// Model calls on the operator's keys are counted in `tokens`.
pub fn builtin(
    meter: Arc<Meter>,
    secrets: Option<Arc<Secrets>>,
    tokens: Arc<dyn OperatorTokens>,
    services: Services,
) -> Vec<Arc<dyn Capability>> {
    let mut capabilities: Vec<Arc<dyn Capability>> = vec![Arc::new(Billing::new(meter))];
    // a call that stores a secret and uses it runs the store first
    if let Some(secrets) = &secrets {
        capabilities.extend(secrets::capabilities(secrets));
    }
    let Services {
        fetcher,
        sandbox,
        databases,
        models,
        searches,
        operator_keys,
        ..
    } = services;
    if let Some(fetcher) = fetcher {
        capabilities.push(Arc::new(fetch::FetchUrl::new(
            fetcher.clone(),
            secrets.clone(),
        )));
        capabilities.push(Arc::new(fetch::SendHttp::new(fetcher, secrets.clone())));
    }
    let sandbox = sandbox.map(|sandbox| sandbox.shared(secrets.clone()));
    if let Some(sandbox) = &sandbox {
        capabilities.extend(Sandbox::capabilities(sandbox));
    }
    // after the sandbox's, so that one call can write a SQLite file with code and query it
    if databases.is_some() || sandbox.is_some() {
        capabilities.extend(sql::capabilities(databases, secrets.clone(), sandbox));
    }
    let llm = models.map(|models| {
        let lent = ai::OperatorKeys::new(tokens, operator_keys);
        Arc::new(ai::ModelCall::new(models, secrets.clone()).lending(lent))
    });
    if let Some(llm) = &llm {
        capabilities.push(llm.clone());
    }
    if let Some(searches) = searches {
        capabilities.push(Arc::new(ai::SearchCall::new(searches, secrets, llm)));
    }
    capabilities
}

//! The built-in capabilities. A new capability is one module here plus one line in [`builtin`].

mod billing;
pub mod sandbox;

use std::sync::Arc;

use crate::capability::Capability;
use crate::metering::Meter;

pub use billing::Billing;
pub use sandbox::Sandbox;

/// Every capability this build offers, in the order tool descriptions list them; the sandbox's
/// only when the server runs one.
pub fn builtin(meter: Arc<Meter>, sandbox: Option<Sandbox>) -> Vec<Arc<dyn Capability>> {
    let mut capabilities: Vec<Arc<dyn Capability>> = vec![Arc::new(Billing::new(meter))];
    if let Some(sandbox) = sandbox {
        capabilities.extend(sandbox.capabilities());
    }
    capabilities
}

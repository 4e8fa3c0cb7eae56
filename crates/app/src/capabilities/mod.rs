//! The built-in capabilities. A new capability is one module here plus one line in [`builtin`].

mod billing;

use std::sync::Arc;

use crate::capability::Capability;
use crate::metering::Meter;

pub use billing::Billing;

/// Every capability this build offers, in the order tool descriptions list them.
pub fn builtin(meter: Arc<Meter>) -> Vec<Arc<dyn Capability>> {
    vec![Arc::new(Billing::new(meter))]
}

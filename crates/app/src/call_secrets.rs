//! The secret values one call's capabilities opened (a key for a model or an engine, a
//! connection string, the secrets a run or its session was given). A capability registers what
//! it opens here instead of redacting its own output; the call redacts everything it shows of
//! them in one place (see [`crate::redaction`]), whichever capability opened them.

use std::sync::{Arc, Mutex, PoisonError};

use toolgate_domain::SecretName;
use toolgate_vault::{Redactor, Zeroizing};

/// The values a call opened, and the redactor for them; wiped when the call ends.
#[derive(Default)]
pub struct CallSecrets {
    inner: Mutex<Opened>,
}

#[derive(Default)]
struct Opened {
    values: Vec<(SecretName, Zeroizing<Vec<u8>>)>,
    /// Built on first use after the last value was added.
    redactor: Option<Arc<Redactor>>,
}

impl std::fmt::Debug for CallSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let opened = self.lock();
        let names: Vec<&str> = opened.values.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("CallSecrets")
            .field("names", &names)
            .finish()
    }
}

impl CallSecrets {
    /// Registers values the call's work opened: nothing the call shows will hold them.
    pub fn add<'a>(&self, opened: impl IntoIterator<Item = (&'a SecretName, &'a [u8])>) {
        let mut held = self.lock();
        for (name, value) in opened {
            let known = held
                .values
                .iter()
                .any(|(n, v)| n == name && v.as_slice() == value);
            if !known {
                held.values
                    .push((name.clone(), Zeroizing::new(value.to_vec())));
                held.redactor = None;
            }
        }
    }

    /// Whether a value of `name` is registered already.
    pub fn holds(&self, name: &SecretName) -> bool {
        self.lock().values.iter().any(|(n, _)| n == name)
    }

    /// A redactor for every value registered so far; `None` while there is none (most calls),
    /// so a call without secrets pays nothing for redaction.
    pub fn redactor(&self) -> Option<Arc<Redactor>> {
        let mut held = self.lock();
        if held.values.is_empty() {
            return None;
        }
        let Opened { values, redactor } = &mut *held;
        let redactor = redactor.get_or_insert_with(|| {
            Arc::new(Redactor::new(
                values.iter().map(|(name, value)| (name, value.as_slice())),
            ))
        });
        Some(Arc::clone(redactor))
    }

    /// The redactor for a stream the capability shows while the call runs (its pieces are
    /// redacted there, as a value may be split between two of them); empty without secrets.
    pub fn stream_redactor(&self) -> Arc<Redactor> {
        self.redactor()
            .unwrap_or_else(|| Arc::new(Redactor::new(std::iter::empty())))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Opened> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

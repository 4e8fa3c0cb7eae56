//! The life of a single-use credential (an authorization code or a refresh token) within its
//! family, one authorization: presented once it is spent; presented again it is a replay, and
//! whoever replays it may have stolen it, so the whole family is revoked (RFC 6749 §4.1.2 for
//! codes, OAuth 2.1 §4.3.1 for rotated refresh tokens); revoked, its family is revoked.
//!
//! [`step`] is the whole rule, pure: a credential's state and an event give the next stage and
//! whether its family goes. The store reads a state, asks [`step`], and writes the answer by
//! compare-and-set against the stage it read, so that of concurrent presenters exactly one
//! spends a credential. A stage only moves forward (used and revoked are set once and never
//! cleared), so the stage read is also the version a compare-and-set checks: no stage comes
//! back once left.

/// Which single-use credential a state is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Credential {
    /// An authorization code: its replay is known even once it has expired or been revoked.
    Code,
    /// A refresh token: once expired or revoked it is refused, used before or not.
    Refresh,
}

/// How far a credential has gone; both flags are set once and never cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Stage {
    /// It was presented and spent (a code exchanged, a refresh token rotated).
    pub used: bool,
    /// Its family was revoked.
    pub revoked: bool,
}

/// A credential as the store holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CredentialState {
    /// A code or a refresh token.
    pub credential: Credential,
    /// How far it has gone.
    pub stage: Stage,
    /// Unix ms from which it is refused.
    pub expires_at: i64,
}

/// What happens to a credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A client presents it (at Unix ms `now`).
    Present {
        /// When.
        now: i64,
    },
    /// It, or its client for the account, is revoked.
    Revoke,
}

/// What the event comes to for whoever caused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Presented live and unused: spent now, and the presenter gets what it gives.
    Spent,
    /// Presented after it was spent: a replay; its family is revoked.
    Replayed,
    /// Presented expired or revoked: refused, and nothing changes.
    Refused,
    /// Revoked, with its family.
    Revoked,
}

/// The rule's answer: the stage to write, whether the family goes, and the outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// The stage after the event.
    pub next: Stage,
    /// Whether every code and token of the credential's family is revoked with it.
    pub revoke_family: bool,
    /// What the event comes to.
    pub outcome: Outcome,
}

impl Transition {
    /// Whether anything is to be written: a refusal writes nothing.
    pub fn writes(&self) -> bool {
        self.outcome != Outcome::Refused
    }
}

/// The next state of `state` under `event`: the whole replay and rotation rule.
pub fn step(state: CredentialState, event: Event) -> Transition {
    let stage = state.stage;
    let revoked = Stage {
        revoked: true,
        ..stage
    };
    let now = match event {
        Event::Revoke => return transition(revoked, true, Outcome::Revoked),
        Event::Present { now } => now,
    };
    let live = !stage.revoked && now < state.expires_at;
    // A code's replay is a theft signal whenever it comes; a refresh token past its life is
    // simply refused, whether or not it was rotated.
    let replay_counts = match state.credential {
        Credential::Code => true,
        Credential::Refresh => live,
    };
    if stage.used && replay_counts {
        transition(revoked, true, Outcome::Replayed)
    } else if live {
        let spent = Stage {
            used: true,
            ..stage
        };
        transition(spent, false, Outcome::Spent)
    } else {
        transition(stage, false, Outcome::Refused)
    }
}

/// A transition, written short.
fn transition(next: Stage, revoke_family: bool, outcome: Outcome) -> Transition {
    Transition {
        next,
        revoke_family,
        outcome,
    }
}

#[cfg(test)]
#[path = "credential_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "credential_proptests.rs"]
mod proptests;

//! toolgate's domain types: accounts, API keys, money, billing records, the admission rule,
//! vault secrets' names, web origins, the records the AI tool answers with, and where sandbox
//! sessions are placed among execution nodes (placement).
//!
//! Nothing here performs I/O; every other crate speaks in these types.

pub mod account;
pub mod admission;
pub mod answers;
pub mod billing;
pub mod controls;
pub mod key;
pub mod money;
pub mod origin;
pub mod placement;
pub mod secret;
pub mod token;

pub use account::{Account, AccountId, Email, EmailError};
pub use admission::{Admission, Decision, Standing, Terms, decide, decide_capped};
pub use answers::{LlmAnswer, OperatorLoan, SearchResult, Usage};
pub use billing::{BillingStatus, DayKey, MonthKey, Pricing, UsageSnapshot};
pub use controls::{
    CapPeriod, CapRoom, CapScope, KeyId, KeyScope, NamedKey, SpendCaps, Via, first_cap_passed,
};
pub use key::{ApiKey, Brand, BrandError, KeyHash, KeyShapeError};
pub use money::{Micros, MoneyError};
pub use origin::Origin;
pub use placement::{
    Claim, ClaimStep, Epoch, FIRST_EPOCH, Incarnation, Lease, LeaseError, MAX_LEASE,
    MAX_NODE_NAME_BYTES, MAX_SANDBOX_SESSION_ID_BYTES, NodeName, NodeNameError, OwnerState,
    Previous, SandboxSessionId, SandboxSessionIdError, SessionOwner, claim_step,
};
pub use secret::{MAX_SECRET_BYTES, SealedSecret, SecretInfo, SecretName, SecretNameError};
pub use token::SecretToken;

/// The `time` crate, re-exported so callers name dates in the same version.
pub use time as time_reexport;

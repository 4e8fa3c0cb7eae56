//! The sandbox's vocabulary, with no confinement code: the limits a session runs under
//! ([`policy`]) and the frames every party of the sandbox speaks ([`frame`]). With the `client`
//! feature, the server's side of it: the zygote, sessions and the session manager (`client`). The confinement
//! itself (namespaces, Landlock, seccomp, cgroups) lives in the supervisor, outside the server
//! process.

#[cfg(feature = "client")]
pub mod client;
pub mod frame;
pub mod mountinfo;
pub mod policy;

pub use frame::{FrameError, MAX_FRAME_BYTES};
pub use policy::{LimitSettings, Limits, LimitsError};

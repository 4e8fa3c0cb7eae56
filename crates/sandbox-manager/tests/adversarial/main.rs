//! The adversarial suite: `resources` (processes, memory, threads, descriptors, disk, output),
//! `control` (time, signals, daemons, crashes, the session's channel to the server), `frames`
//! (frames the session's code forges), `escape` (the host's files, other processes'
//! environments, other sessions, the per-account cap), `names` (what of the host a session can
//! even see), `kernel` (the network and risky syscalls). Helpers: `harness`.
//!
//! Every case runs real hardened sessions through `SandboxManager` (the confinement library of
//! crates/sandbox-harden, cgroups required) and asserts:
//! (a) containment: the attack did not reach outside its session (its cgroup held it, the host
//!     and the other sessions are untouched);
//! (b) a clear error or result the caller can act on;
//! (c) a healthy service: the same manager, with the same zygote, runs `1+1` in another
//!     session, and the attacked session either still works or its next call says it is fresh;
//! (d) no leftover process: once the session is closed, its cgroups are gone and so is every
//!     process the host saw in them or in its pid namespace (checked within a few seconds).
//!
//! Needs root, cgroups (v1 or v2) with memory and pids, the runtime (`.deps/python-runtime`) and
//! the library (`cargo build -p toolgate-sandbox-harden`). Limits are small (256 MiB memory, 64
//! pids, 64 MiB workspace) so that each attack ends in seconds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
mod harness;

mod control;
mod escape;
mod frames;
mod kernel;
mod names;
mod neighbours;
mod resources;

//! The session manager against the real zygote (`runtime/toolgate_zygote.py`) in the runtime made
//! by `scripts/python-runtime.sh`: `TOOLGATE_PYTHON_RUNTIME`, default `<workspace>/.deps/python-runtime`.
//! A missing runtime fails these tests (it is part of the product, not an optional extra).
//! One binary (each test binary is linked on its own, which costs the 2-core build most): the
//! zygote and sessions, sessions by the manager, warm sessions, workspace files, isolation
//! (cgroups, uids, OOM), hardened sessions, the budget above the sessions, upcalls, calls taking
//! turns on one session.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod budget;
mod hardened;
mod hibernation;
mod isolation;
mod lifecycle;
mod sessions;
mod turns;
mod upcalls;
mod warm;
mod workspace_files;
mod zygote;

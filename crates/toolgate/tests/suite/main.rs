//! toolgate's integration tests, one binary: each module was a test binary of its own, and on a
//! 2-core machine every binary is linked separately. Modules share `common` (the server, its
//! storage, clients) and nothing else.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod ai;
mod ai_operator;
mod architecture;
mod cancellation;
mod carriers;
mod cli;
mod cli_serve;
mod dashboard;
mod dashboard_keys;
mod dashboard_limits;
mod dashboard_owner;
mod dashboard_refunds;
mod dashboard_secret_hosts;
mod dashboard_sign_in;
mod dashboard_wallet;
mod egress;
mod egress_secrets;
mod front_door;
mod history;
mod history_stores;
mod host_lists;
mod hostile_bodies;
mod links;
mod mcp_sessions_shared;
mod metering;
mod module_circles;
mod named_keys;
mod nodes;
mod nodes_failure;
mod oauth;
mod oauth_edges;
mod oauth_more;
mod operations;
mod pip;
mod protocol;
mod reads;
mod sandbox;
mod sandbox_faults;
mod server_timing;
mod sessions_durable;
mod spend_caps;
mod sql;
mod sql_hostile;
mod stateless;
mod tasks;
mod tasks_shared;
mod tenant_fetches;
mod turns;
mod upcalls_web;
mod vault;
mod web;

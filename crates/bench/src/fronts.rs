//! Metered calls through front ends on one PostgreSQL (`--front-ends N`): N `serve`
//! processes on the same database, the clients spread over them in turn. Measured twice: all
//! calls charged to one account, so the front ends' admission batches contend for its row as a
//! load balancer's traffic for one busy account would; and each client an account of its own,
//! as many users' agents are.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::load::Endpoint;
use crate::paths::{Ask, ClientPath};
use crate::report::{METERED_TARGET, Report};
use crate::server::{Server, Toolgate};
use crate::{Args, Bench, EMAIL, personal_path, personal_path_of_account, progress, wait_healthy};

/// Runs the metered figure (bare POST) with 1 client and with `--clients` through the front ends.
pub fn run(args: &Args, binary: &Path, front_ends: usize) -> Result<()> {
    let Some(database_url) = args.database_url.clone() else {
        bail!("--front-ends needs --database-url: the front ends share one PostgreSQL");
    };
    let dir = tempfile::Builder::new()
        .prefix("toolgate-bench-fronts-")
        .tempdir()
        .context("cannot make a temporary directory")?;
    let toolgate = Toolgate {
        binary: binary.to_owned(),
        data_dir: dir.path().join("data"),
        database_url: Some(database_url),
        settings: vec![
            (
                "--paid-call-cost-usd".to_owned(),
                args.paid_call_cost_usd.clone(),
            ),
            ("--sandbox".to_owned(), "off".to_owned()),
        ],
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut servers: Vec<Server> = Vec::new();
    let mut endpoints = Vec::new();
    for n in 0..front_ends {
        let log = dir.path().join(format!("serve-{n}.log"));
        let mut server = toolgate.serve(Some("warn"), &log)?;
        let endpoint = Endpoint::new(server.addr)?;
        wait_healthy(&runtime, &mut server, &endpoint)?;
        progress(&format!(
            "front end {n}: pid {} on {}",
            server.pid(),
            server.addr
        ));
        servers.push(server);
        endpoints.push(endpoint);
    }
    let path = personal_path(&toolgate)?;
    toolgate.cli(&["wallet", "credit", "--email", EMAIL, "--usd", "500"])?;
    let workload =
        runtime.block_on(ClientPath::Bare.workload(&endpoints[0], &path, Ask::Billing))?;
    let workload = Arc::new(workload);
    let bench = Bench {
        runtime: &runtime,
        warmup: Duration::from_millis(args.warmup_ms),
        measure: Duration::from_secs(args.seconds),
        quiet_wait: Duration::from_secs(args.quiet_wait_secs),
    };
    let mut report = Report {
        backend: "postgres",
        binary: binary.display().to_string(),
        seconds: args.seconds,
        warmup_ms: args.warmup_ms,
        client_threads: 1,
        paid_call_cost_usd: args.paid_call_cost_usd.clone(),
        sqlite_synchronous: None,
        phases: Vec::new(),
        memory: None,
        default_log_bytes_per_request: None,
    };
    let name = "svc_read billing [bare POST], clients spread over the front ends";
    for clients in [1, args.clients] {
        let target = (clients > 1).then_some(METERED_TARGET);
        let label = (name, "warn");
        let phase = bench.phase(&mut servers, &endpoints, &workload, clients, label, target)?;
        report.phases.push(phase);
    }
    let mut own = Vec::new();
    for n in 0..args.clients {
        let email = format!("bench-front-{n}@example.org");
        let path = personal_path_of_account(&toolgate, &email)?;
        toolgate.cli(&["wallet", "credit", "--email", &email, "--usd", "500"])?;
        let endpoint = &endpoints[n % endpoints.len()];
        let workload = ClientPath::Bare.workload(endpoint, &path, Ask::Billing);
        own.push(Arc::new(runtime.block_on(workload)?));
    }
    let name = "svc_read billing [bare POST], each client its own account";
    let label = (name, "warn");
    let target = Some(METERED_TARGET);
    let phase = bench.phase_of(&mut servers, &endpoints, &own, args.clients, label, target)?;
    report.phases.push(phase);
    for server in servers {
        server.stop()?;
    }
    println!("front ends: {front_ends}");
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        print!("{}", report.table());
    }
    Ok(())
}

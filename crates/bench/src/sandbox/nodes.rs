//! Many hosts on this machine (`--sandbox-nodes`): the release binary as two execution nodes and
//! a front end (`serve --nodes`) beside a single process with the sandbox in it, all on loopback.
//! Figures: warm `1+1` through HTTP (bare POST) on both, alternated call by call so that whatever
//! else runs touches both alike; the CPU each process spent per call; and how long a session
//! takes to come back on the other node after its node is killed (the lease, 3 s here, is most
//! of it).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::http::write_call;
use super::{Files, Timings};
use crate::load::{self, Endpoint, Workload};
use crate::proc::cpu_seconds;
use crate::server::{Server, Toolgate};
use crate::{personal_path, progress, wait_healthy};

/// Untimed calls before the timed ones.
const WARMUP: usize = 200;
/// The front end's node lease: short, so the restore-elsewhere figure does not wait 10 s.
const LEASE_S: &str = "3";

/// What was measured.
#[derive(Debug)]
pub struct NodeFigures {
    /// Warm `1+1` through the front end and a node.
    pub through_node: Timings,
    /// The same on the single process, alternated with it.
    pub single: Timings,
    /// CPU seconds per call: the front end, the nodes together, the single process.
    pub cpu_per_call: (f64, f64, f64),
    /// From the node's kill to the answer of the session's next call on the other node.
    pub restore_elsewhere: Duration,
    /// A call of another session of that node, once the lease had lapsed: the restore alone.
    pub restore_call: Duration,
}

/// Starts everything in `dir`, measures, stops everything.
pub fn measure(
    runtime: &tokio::runtime::Runtime,
    binary: &Path,
    files: &Files,
    dir: &Path,
    calls: usize,
) -> Result<NodeFigures> {
    let path = |p: &Path| p.display().to_string();
    let token = dir.join("node.token");
    std::fs::write(&token, "bench-node-token-".repeat(4))?;
    let key = dir.join("vault.key");
    std::fs::write(&key, "v1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n")?;
    for file in [&token, &key] {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600))?;
    }
    let sandbox = |name: &str| -> Vec<(String, String)> {
        [
            ("--sandbox", "on".to_owned()),
            ("--sandbox-runtime", path(&files.runtime)),
            ("--sandbox-zygote", path(&files.zygote)),
            ("--sandbox-harden-lib", path(&files.harden_lib)),
            ("--sandbox-root", path(&dir.join(name).join("sessions"))),
            ("--sandbox-account-memory-mib", "0".to_owned()),
            ("--vault-key-file", path(&key)),
        ]
        .into_iter()
        .map(|(flag, value)| (flag.to_owned(), value))
        .collect()
    };
    let checkpoints = format!("file://{}", path(&dir.join("checkpoints")));
    let node = |name: &str, first_uid: &str| {
        let mut settings = sandbox(name);
        settings.extend(
            [
                ("--node-token-file", path(&token)),
                ("--checkpoint-url", checkpoints.clone()),
                ("--sandbox-checkpoint-every-s", "1".to_owned()),
                ("--sandbox-first-uid", first_uid.to_owned()),
            ]
            .map(|(flag, value)| (flag.to_owned(), value)),
        );
        Toolgate {
            binary: binary.to_owned(),
            data_dir: dir.join(name),
            database_url: None,
            settings,
        }
    };
    progress("starting two nodes, a front end on them, and a single process");
    let mut nodes = vec![
        node("node-a", "1100000000").start("node", Some("warn"), &dir.join("node-a.log"))?,
        node("node-b", "1100100000").start("node", Some("warn"), &dir.join("node-b.log"))?,
    ];
    for node in &mut nodes {
        wait_listening(node)?;
    }
    let urls: Vec<String> = nodes.iter().map(|n| format!("http://{}", n.addr)).collect();
    let plenty = ("--free-monthly-calls".to_owned(), "1000000000".to_owned());
    let front = Toolgate {
        binary: binary.to_owned(),
        data_dir: dir.join("front"),
        database_url: None,
        settings: [
            ("--sandbox", "on".to_owned()),
            ("--nodes", urls.join(",")),
            ("--node-token-file", path(&token)),
            ("--vault-key-file", path(&key)),
            ("--node-lease-s", LEASE_S.to_owned()),
        ]
        .map(|(flag, value)| (flag.to_owned(), value))
        .into_iter()
        .chain([plenty.clone()])
        .collect(),
    };
    let mut single_settings = sandbox("single");
    single_settings.push(plenty);
    let single = Toolgate {
        binary: binary.to_owned(),
        data_dir: dir.join("single"),
        database_url: None,
        settings: single_settings,
    };
    let mut front_server = front.serve(Some("warn"), &dir.join("front.log"))?;
    let mut single_server = single.serve(Some("warn"), &dir.join("single.log"))?;
    let outcome = (|| {
        let front_end = Endpoint::new(front_server.addr)?;
        let alone = Endpoint::new(single_server.addr)?;
        wait_healthy(runtime, &mut front_server, &front_end)?;
        wait_healthy(runtime, &mut single_server, &alone)?;
        let front_path = personal_path(&front)?;
        let single_path = personal_path(&single)?;
        let pids = (
            front_server.pid(),
            nodes.iter().map(Server::pid).collect::<Vec<_>>(),
            single_server.pid(),
        );
        let (through_node, single_timings, cpu) = runtime.block_on(warm(
            (&front_end, &front_path),
            (&alone, &single_path),
            &pids,
            calls,
        ))?;
        progress("killing the node of a session, timing its return on the other node");
        let (restore_elsewhere, restore_call) =
            runtime.block_on(restore_elsewhere(&front_end, &front_path, &mut nodes))?;
        Ok(NodeFigures {
            through_node,
            single: single_timings,
            cpu_per_call: cpu,
            restore_elsewhere,
            restore_call,
        })
    })();
    if outcome.is_err() {
        progress(&format!(
            "front end log ends:\n{}",
            front_server.log_tail(20)
        ));
    }
    let _ = front_server.stop();
    let _ = single_server.stop();
    for node in nodes {
        let _ = node.stop();
    }
    outcome
}

/// Waits until a node accepts connections (it binds once its sandbox is up).
fn wait_listening(node: &mut Server) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        node.check_running()?;
        if std::net::TcpStream::connect(node.addr).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!(
        "a node did not listen within 30 s; its log ends:\n{}",
        node.log_tail(20)
    )
}

/// Warm `1+1` on both, alternated; and the CPU each process spent over the timed calls.
async fn warm(
    (front_end, front_path): (&Endpoint, &str),
    (alone, single_path): (&Endpoint, &str),
    (front_pid, node_pids, single_pid): &(u32, Vec<u32>, u32),
    calls: usize,
) -> Result<(Timings, Timings, (f64, f64, f64))> {
    let through = Workload::post(
        front_path,
        write_call("1+1", "warm"),
        vec![b"\"isError\":false"],
    )?;
    let direct = Workload::post(
        single_path,
        write_call("1+1", "warm"),
        vec![b"\"isError\":false"],
    )?;
    let mut to_front = load::connect(front_end).await?;
    let mut to_single = load::connect(alone).await?;
    for _ in 0..WARMUP {
        load::call(&mut to_front, front_end, &through)
            .await
            .context("a warm-up call")?;
        load::call(&mut to_single, alone, &direct)
            .await
            .context("a warm-up call")?;
    }
    let cpu = |pid: u32| cpu_seconds(&pid.to_string());
    let nodes_cpu = || -> Result<f64> { node_pids.iter().map(|pid| cpu(*pid)).sum() };
    let before = (cpu(*front_pid)?, nodes_cpu()?, cpu(*single_pid)?);
    let (mut a, mut b) = (Timings::default(), Timings::default());
    for i in 0..calls {
        let started = Instant::now();
        load::call(&mut to_front, front_end, &through)
            .await
            .with_context(|| format!("call {i} through the node"))?;
        a.push(started.elapsed());
        let started = Instant::now();
        load::call(&mut to_single, alone, &direct)
            .await
            .with_context(|| format!("call {i} on the single process"))?;
        b.push(started.elapsed());
    }
    let after = (cpu(*front_pid)?, nodes_cpu()?, cpu(*single_pid)?);
    let per = |x: f64, y: f64| (y - x) / calls as f64;
    Ok((
        a.sorted(),
        b.sorted(),
        (
            per(before.0, after.0),
            per(before.1, after.1),
            per(before.2, after.2),
        ),
    ))
}

/// Four sessions (placed two on each node), their state checkpointed; the first node killed;
/// each session's next call made at once. The first that comes back from the killed node waited
/// for its lease to lapse (timed from the kill); the second was only restored (its call timed).
async fn restore_elsewhere(
    front_end: &Endpoint,
    front_path: &str,
    nodes: &mut [Server],
) -> Result<(Duration, Duration)> {
    const IDS: [&str; 4] = ["moving-0", "moving-1", "moving-2", "moving-3"];
    let mut sender = load::connect(front_end).await?;
    for id in IDS {
        let set = Workload::post(
            front_path,
            write_call("x = 41", id),
            vec![b"\"isError\":false"],
        )?;
        load::call(&mut sender, front_end, &set).await?;
    }
    // a call once a second has passed since the last checkpoint is followed by one
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for id in IDS {
        let touch = Workload::post(front_path, write_call("0", id), vec![b"\"isError\":false"])?;
        load::call(&mut sender, front_end, &touch).await?;
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let killed = Instant::now();
    nodes[0].kill();
    let mut sender = load::connect(front_end).await?;
    let mut came_back = Vec::new();
    for id in IDS {
        let back = Workload::post(front_path, write_call("x", id), vec![b"\"text\":\"41\""])?;
        let started = Instant::now();
        let answer = load::call(&mut sender, front_end, &back).await?;
        let took = started.elapsed();
        if answer.windows(16).any(|w| w == b"\"node_lost\":true") {
            came_back.push((killed.elapsed(), took));
        }
    }
    match came_back.as_slice() {
        [(from_kill, _), (_, restore), ..] => Ok((*from_kill, *restore)),
        _ => bail!(
            "fewer than two sessions were on the node killed: {}",
            came_back.len()
        ),
    }
}

/// The figures as the report prints them.
pub fn table(figures: &NodeFigures) -> String {
    let row = |name: &str, t: &Timings| {
        format!(
            "{name:<44} p50 {:>7.3} ms  p99 {:>7.3} ms\n",
            t.percentile_ms(50.0).unwrap_or(0.0),
            t.percentile_ms(99.0).unwrap_or(0.0)
        )
    };
    let mut out =
        String::from("\nMany hosts on this machine (bare POST, warm `1+1`, alternated)\n");
    out += &row("through a front end and a node", &figures.through_node);
    out += &row("one process (sandbox in the server)", &figures.single);
    let added = figures.through_node.percentile_ms(50.0).unwrap_or(0.0)
        - figures.single.percentile_ms(50.0).unwrap_or(0.0);
    out += &format!(
        "{:<44} {added:>7.3} ms at p50\n",
        "added by the node channel"
    );
    let (front, nodes, single) = figures.cpu_per_call;
    out += &format!(
        "CPU per call: front end {:.3} ms, nodes {:.3} ms, single process {:.3} ms\n",
        front * 1e3,
        nodes * 1e3,
        single * 1e3
    );
    out += &format!(
        "restore elsewhere after kill -9 (lease {LEASE_S} s): first answer {:.2} s after the kill; \
         a call restoring another of its sessions {:.1} ms\n",
        figures.restore_elsewhere.as_secs_f64(),
        figures.restore_call.as_secs_f64() * 1e3
    );
    out
}

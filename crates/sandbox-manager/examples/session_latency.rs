//! New session → first result, as the server sees it: `SandboxManager::exec(account, Some(new
//! id), "1+1", ..)` on a hardened manager with cgroups and size-capped tmpfs workspaces, the
//! production preload (numpy, pandas, matplotlib.pyplot). Prints p50/p99 and where the time goes
//! (the manager's steps and the child's checklist, from the `toolgate_sandbox::timing` debug
//! events); asserts nothing about time.
//!
//! ```text
//! cargo build --release -p toolgate-sandbox-harden
//! cargo run --release -p toolgate-sandbox --example session_latency [-- SAMPLES]
//! ```
//!
//! Needs root (cgroups, mounts). The runtime is `TOOLGATE_PYTHON_RUNTIME` (default
//! `.deps/python-runtime`), the library `TOOLGATE_HARDEN_LIB` (default
//! `target/release/libtoolgate_sandbox_harden.so`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use toolgate_sandbox::LimitSettings;
use toolgate_sandbox_manager::{CgroupMode, ManagerConfig, SandboxManager, ZygoteConfig};
use tracing::field::{Field, Visit};
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

/// The fields of one timing event.
type Fields = HashMap<String, String>;

/// Keeps every `toolgate_sandbox::timing` event's fields.
#[derive(Clone, Default)]
struct Timings(Arc<Mutex<Vec<Fields>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Timings {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != "toolgate_sandbox::timing" {
            return;
        }
        struct Collect(Fields);
        impl Visit for Collect {
            fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
                self.0.insert(
                    field.name().to_owned(),
                    format!("{value:?}").replace('"', ""),
                );
            }
        }
        let mut fields = Collect(Fields::new());
        event.record(&mut fields);
        self.0.lock().unwrap().push(fields.0);
    }
}

impl Timings {
    fn take(&self) -> Vec<Fields> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn config(root: &Path) -> ManagerConfig {
    let repo = repo_root();
    let runtime = std::env::var_os("TOOLGATE_PYTHON_RUNTIME")
        .map_or_else(|| repo.join(".deps/python-runtime"), PathBuf::from);
    let lib = std::env::var_os("TOOLGATE_HARDEN_LIB").map_or_else(
        || repo.join("target/release/libtoolgate_sandbox_harden.so"),
        PathBuf::from,
    );
    assert!(lib.is_file(), "no hardening library at {}", lib.display());
    let mut zygote = ZygoteConfig::new(runtime, repo.join("runtime/toolgate_zygote.py"));
    zygote.harden_lib = Some(lib);
    let mut config = ManagerConfig::new(zygote, root);
    config.cgroups = CgroupMode::Required;
    config.max_sessions_per_account = 1000;
    config
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank]
}

/// p50 / p99 / max of a list of milliseconds.
fn summary(values: &mut [f64]) -> String {
    values.sort_by(f64::total_cmp);
    format!(
        "p50 {:6.2}  p99 {:6.2}  max {:6.2}",
        percentile(values, 0.5),
        percentile(values, 0.99),
        values.last().copied().unwrap_or(f64::NAN)
    )
}

/// One run: `samples` new sessions, each closed after its first result, `gap` apart. Sessions
/// that took a warm one and sessions that were started are shown apart; the step breakdown is
/// of the started ones (a warm one's steps were taken before it was wanted).
async fn run(
    name: &str,
    manager: &SandboxManager,
    timings: &Timings,
    samples: usize,
    gap: Duration,
) {
    let limits = LimitSettings::default().for_call(Some(60)).unwrap();
    // one session first, so that the zygote's first fork is not in the figures
    let _ = manager
        .exec("warm-up", Some("w"), "1+1", &limits, &[], None)
        .await
        .unwrap();
    manager.close_session("warm-up", "w").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    timings.take();
    let (mut total, mut from_pool, mut started) = (Vec::new(), Vec::new(), Vec::new());
    let (mut pool_exec, mut started_exec) = (Vec::new(), Vec::new());
    let mut pids = Vec::new();
    for i in 0..samples {
        let id = format!("{name}-{i}");
        let warm = manager.warm_pids();
        let start = Instant::now();
        let call = manager
            .exec("bench", Some(&id), "1+1", &limits, &[], None)
            .await
            .unwrap();
        let took = start.elapsed().as_secs_f64() * 1000.0;
        total.push(took);
        assert!(call.fresh);
        assert_eq!(call.outcome.result.as_ref().unwrap().text_plain, "2");
        if warm.contains(&call.pid) {
            from_pool.push(took);
            pool_exec.push(call.outcome.duration_ms);
        } else {
            started.push(took);
            started_exec.push(call.outcome.duration_ms);
            pids.push(call.pid.to_string());
        }
        manager.close_session("bench", &id).await;
        tokio::time::sleep(gap).await;
    }
    let events = timings.take();
    println!(
        "\n== {name}: {samples} new sessions, {} ms apart",
        gap.as_millis()
    );
    println!(
        "  new session -> first result (ms)   {}",
        summary(&mut total)
    );
    println!(
        "    took a warm session (n={:3})     {}",
        from_pool.len(),
        summary(&mut from_pool)
    );
    println!(
        "      child: exec of 1+1 (ms)        {}",
        summary(&mut pool_exec)
    );
    println!(
        "    started one (n={:3})             {}",
        started.len(),
        summary(&mut started)
    );
    if started.is_empty() {
        return;
    }
    // the steps of the sessions started (by pid), in the order they first appear
    let mut steps: Vec<(String, Vec<f64>)> = Vec::new();
    let mut add = |key: String, value: f64| match steps.iter_mut().find(|(k, _)| *k == key) {
        Some((_, values)) => values.push(value),
        None => steps.push((key, vec![value])),
    };
    for fields in events
        .iter()
        .filter(|f| f.get("pid").is_some_and(|p| pids.contains(p)))
    {
        let mut keys: Vec<_> = fields.keys().collect();
        keys.sort();
        for key in keys {
            let value = &fields[key];
            if let Some(step) = key.strip_suffix("_us") {
                add(
                    format!("manager: {step}"),
                    value.parse::<f64>().unwrap_or(f64::NAN) / 1000.0,
                );
            } else if let Some(step) = key.strip_suffix("_ms") {
                add(step.replace('_', ": "), value.parse().unwrap_or(f64::NAN));
            }
        }
        if let Some(line) = fields.get("hardened") {
            for part in line.split(' ') {
                if let Some(list) = part.strip_prefix("steps_us=") {
                    for item in list.split(',') {
                        if let Some((step, us)) = item.split_once(':') {
                            add(
                                format!("child checklist: {step}"),
                                us.parse::<f64>().unwrap_or(f64::NAN) / 1000.0,
                            );
                        }
                    }
                } else if let Some(us) = part.strip_prefix("elapsed_us=") {
                    add(
                        "child checklist: (all)".to_owned(),
                        us.parse::<f64>().unwrap_or(f64::NAN) / 1000.0,
                    );
                }
            }
        }
    }
    add("child: exec of 1+1 (duration_ms)".to_owned(), f64::NAN);
    if let Some((_, values)) = steps.last_mut() {
        *values = started_exec;
    }
    println!("    where the time of a started one goes (ms):");
    for (key, mut values) in steps {
        let n = values.len();
        println!("      {key:<34} {}  (n={n})", summary(&mut values));
    }
}

/// Fields of `/proc/<pid>/smaps_rollup`, in KiB: `Pss`, and `Private_Clean` + `Private_Dirty`
/// (what the process alone holds: its cost beyond the pages it shares with the zygote).
fn memory_kib(pid: i32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (
        field("Pss:"),
        field("Private_Clean:") + field("Private_Dirty:"),
    )
}

/// What the idle warm sessions cost.
fn warm_memory(manager: &SandboxManager, zygote: i32) {
    let warm = manager.warm_pids();
    println!("\n== memory (/proc/<pid>/smaps_rollup): PSS, and private (USS)");
    let (pss, private) = memory_kib(zygote);
    println!(
        "  zygote (preload numpy, pandas, matplotlib.pyplot): PSS {pss} KiB, private {private} KiB"
    );
    for pid in warm {
        let (pss, private) = memory_kib(pid);
        println!("  idle warm session {pid}: PSS {pss} KiB, private {private} KiB");
    }
}

/// The floor of any new session: `1+1` again in a session that is already there.
async fn warm(manager: &SandboxManager, samples: usize) {
    let limits = LimitSettings::default().for_call(Some(60)).unwrap();
    let _ = manager
        .exec("warm", Some("w"), "1+1", &limits, &[], None)
        .await
        .unwrap();
    let mut total = Vec::new();
    for _ in 0..samples {
        let start = Instant::now();
        let _ = manager
            .exec("warm", Some("w"), "1+1", &limits, &[], None)
            .await
            .unwrap();
        total.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    manager.close_session("warm", "w").await;
    println!("\n== `1+1` again in a live session (the floor), n={samples}");
    println!(
        "  round trip (ms)                    {}",
        summary(&mut total)
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let samples: usize = std::env::args().nth(1).map_or(100, |n| n.parse().unwrap());
    let timings = Timings::default();
    tracing_subscriber::registry()
        .with(timings.clone())
        .with(
            tracing_subscriber::fmt::layer()
                .with_filter(tracing_subscriber::filter::LevelFilter::WARN),
        )
        .init();
    let root = repo_root().join(format!("target/tmp/session-latency-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();

    let mut cold = config(&root);
    cold.warm_sessions = 0;
    let manager = SandboxManager::start(cold).await.unwrap();
    println!("isolation: {:?}", manager.isolation());
    warm(&manager, samples * 2).await;
    run(
        "no warm sessions",
        &manager,
        &timings,
        samples,
        Duration::from_millis(50),
    )
    .await;
    manager.shutdown().await;

    let manager = SandboxManager::start(config(&root)).await.unwrap();
    run(
        "2 warm sessions, 50 ms apart",
        &manager,
        &timings,
        samples,
        Duration::from_millis(50),
    )
    .await;
    run(
        "2 warm sessions, back to back",
        &manager,
        &timings,
        samples,
        Duration::ZERO,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let zygote = manager.current_zygote().await.unwrap().pid();
    warm_memory(&manager, zygote);
    manager.shutdown().await;

    let _ = std::fs::remove_dir_all(&root);
}

//! The figures, as a short table for people or as JSON for scripts, with the targets beside them.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::load::Outcome;

/// Targets the project has set; figures are shown against them, not judged.
pub const TOOLS_LIST_TARGET: f64 = 45_000.0;
pub const METERED_TARGET: f64 = 5_000.0;
const IDLE_RSS_TARGET_MIB: f64 = 30.0;
/// Reference points measured elsewhere on the same kind of machine, for context.
const FLOOR_BARE_AXUM: f64 = 90_000.0;
const FLOOR_TS_SDK: f64 = 4_300.0;
/// The name of the floor's figure (a bare axum server with a fixed body, same generator).
pub const FLOOR_PHASE: &str = "bare axum fixed body (floor)";

/// One measured load phase.
#[derive(Debug)]
pub struct Phase {
    pub name: &'static str,
    /// The server's log level during the phase: `warn` or `default`.
    pub log: &'static str,
    pub outcome: Outcome,
    /// The throughput the project aims at for this figure; targets are set for the loaded
    /// figures (16 clients), not the single-client ones.
    pub target: Option<f64>,
}

#[derive(Debug)]
pub struct Memory {
    pub idle_before_mib: f64,
    pub idle_after_mib: f64,
    pub peak_mib: f64,
}

#[derive(Debug)]
pub struct Report {
    pub backend: &'static str,
    pub binary: String,
    pub seconds: u64,
    pub warmup_ms: u64,
    pub client_threads: usize,
    pub paid_call_cost_usd: String,
    pub sqlite_synchronous: Option<String>,
    pub phases: Vec<Phase>,
    pub memory: Option<Memory>,
    pub default_log_bytes_per_request: Option<f64>,
}

/// 12345.6 -> "12,346".
fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}"))
}

impl Report {
    fn sqlite_mode(&self) -> String {
        match (self.backend, &self.sqlite_synchronous) {
            ("sqlite", Some(mode)) => format!(", synchronous={mode}"),
            ("sqlite", None) => ", synchronous=server default".to_owned(),
            _ => String::new(),
        }
    }

    /// The human table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "toolgate-bench: {}{}, {} s measured after {} ms warm-up per figure, load generator on {} thread(s), paid call {} USD",
            self.backend,
            self.sqlite_mode(),
            self.seconds,
            self.warmup_ms,
            self.client_threads,
            self.paid_call_cost_usd
        );
        let _ = writeln!(
            out,
            "\n{:<30} {:<7} {:>7} {:>9} {:>8} {:>8} {:>8} {:>6} {:>7} {:>7} {:>7}  target",
            "figure",
            "log",
            "clients",
            "req/s",
            "p50 ms",
            "p99 ms",
            "max ms",
            "errors",
            "srv CPU",
            "gen CPU",
            "oth CPU"
        );
        for phase in &self.phases {
            let o = &phase.outcome;
            let target = match phase.target {
                Some(t) => format!(
                    "≥ {}/s ({:.0}% of it)",
                    thousands(t),
                    100.0 * o.per_second() / t
                ),
                None => String::new(),
            };
            let _ = writeln!(
                out,
                "{:<30} {:<7} {:>7} {:>9} {:>8} {:>8} {:>8} {:>6} {:>7.2} {:>7.2} {:>7.2}  {}",
                phase.name,
                phase.log,
                o.clients,
                thousands(o.per_second()),
                ms(o.percentile_ms(50.0)),
                ms(o.percentile_ms(99.0)),
                ms(o.percentile_ms(100.0)),
                o.error_count(),
                o.server_cores,
                o.bench_cores,
                o.other_cores,
                target
            );
        }
        if let Some(line) = self.against_floor() {
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(
            out,
            "(CPU: cores busy in the measured window for the server, this generator and everything else; the machine has {} cores)",
            crate::cores()
        );
        let busiest = self
            .phases
            .iter()
            .map(|p| p.outcome.other_cores)
            .fold(0.0, f64::max);
        if busiest > 0.2 {
            let _ = writeln!(
                out,
                "WARNING: other programs used up to {busiest:.2} cores during the run; the figures are lower than on a quiet machine"
            );
        }
        if self.backend != "sqlite" {
            let _ = writeln!(
                out,
                "(the metered-call target of {}/s is set for SQLite; PostgreSQL's own processes count under oth CPU)",
                thousands(METERED_TARGET)
            );
        }
        if let Some(m) = &self.memory {
            let _ = writeln!(
                out,
                "\nserver VmRSS: idle before load {:.1} MiB, idle 1 s after load {:.1} MiB (target ≤ {IDLE_RSS_TARGET_MIB:.0} MiB); peak during load (VmHWM) {:.1} MiB",
                m.idle_before_mib, m.idle_after_mib, m.peak_mib
            );
        }
        if let Some(bytes) = self.default_log_bytes_per_request {
            let _ = writeln!(
                out,
                "access log at the default level: ~{bytes:.0} bytes of stderr per request"
            );
        }
        let _ = writeln!(
            out,
            "floors for context (16 clients): bare axum fixed body ~{}/s; official TypeScript MCP SDK ~{}/s",
            thousands(FLOOR_BARE_AXUM),
            thousands(FLOOR_TS_SDK)
        );
        let failing: Vec<&Phase> = self
            .phases
            .iter()
            .filter(|p| p.outcome.error_count() > 0)
            .collect();
        if !failing.is_empty() {
            let _ = writeln!(out, "\nerrors (whole phase, warm-up included):");
            for phase in failing {
                for (message, count) in &phase.outcome.errors {
                    let _ = writeln!(
                        out,
                        "  {} log={} clients={}: {count} × {message}",
                        phase.name, phase.log, phase.outcome.clients
                    );
                }
            }
        }
        out
    }

    /// Each loaded `tools/list` figure as a multiple of the floor measured in the same run (the
    /// goal for every client path is half of it), when the floor was measured.
    fn against_floor(&self) -> Option<String> {
        let floor = self
            .phases
            .iter()
            .find(|p| p.name == FLOOR_PHASE)?
            .outcome
            .per_second();
        let ratios: Vec<String> = self
            .phases
            .iter()
            .filter(|p| p.name.starts_with("tools/list [") && p.outcome.clients > 1)
            .filter(|p| floor > 0.0 && p.log == "warn")
            .map(|p| {
                let path = p
                    .name
                    .trim_start_matches("tools/list [")
                    .trim_end_matches(']');
                format!("{path} {:.2}×", p.outcome.per_second() / floor)
            })
            .collect();
        (!ratios.is_empty()).then(|| {
            format!(
                "tools/list against the floor of this run ({}/s): {}",
                thousands(floor),
                ratios.join(", ")
            )
        })
    }

    /// The same figures as JSON.
    pub fn to_json(&self) -> Value {
        let phases: Vec<Value> = self
            .phases
            .iter()
            .map(|p| {
                let o = &p.outcome;
                json!({
                    "figure": p.name,
                    "log": p.log,
                    "clients": o.clients,
                    "requests": o.measured,
                    "seconds": o.elapsed.as_secs_f64(),
                    "per_second": o.per_second(),
                    "p50_ms": o.percentile_ms(50.0),
                    "p90_ms": o.percentile_ms(90.0),
                    "p99_ms": o.percentile_ms(99.0),
                    "max_ms": o.percentile_ms(100.0),
                    "errors": o.error_count(),
                    "error_messages": o.errors,
                    "server_cpu_cores": o.server_cores,
                    "generator_cpu_cores": o.bench_cores,
                    "other_cpu_cores": o.other_cores,
                    "target_per_second": p.target,
                })
            })
            .collect();
        json!({
            "backend": self.backend,
            "binary": self.binary,
            "sqlite_synchronous": self.sqlite_synchronous,
            "seconds": self.seconds,
            "warmup_ms": self.warmup_ms,
            "client_threads": self.client_threads,
            "paid_call_cost_usd": self.paid_call_cost_usd,
            "machine_cores": crate::cores(),
            "phases": phases,
            "memory_mib": self.memory.as_ref().map(|m| json!({
                "idle_before_load": m.idle_before_mib,
                "idle_after_load": m.idle_after_mib,
                "peak": m.peak_mib,
            })),
            "default_log_bytes_per_request": self.default_log_bytes_per_request,
            "targets": {
                "tools_list_per_second_16_clients": TOOLS_LIST_TARGET,
                "metered_calls_per_second_sqlite": METERED_TARGET,
                "idle_rss_mib": IDLE_RSS_TARGET_MIB,
            },
            "floors": {
                "bare_axum_fixed_body_16_clients": FLOOR_BARE_AXUM,
                "typescript_sdk": FLOOR_TS_SDK,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(4_300.0), "4,300");
        assert_eq!(thousands(1_234_567.0), "1,234,567");
    }

    fn phase(name: &'static str, log: &'static str, clients: usize, measured: u64) -> Phase {
        Phase {
            name,
            log,
            outcome: Outcome {
                clients,
                measured,
                answered: measured,
                elapsed: std::time::Duration::from_secs(1),
                latencies: Vec::new(),
                errors: Default::default(),
                server_cores: 0.0,
                bench_cores: 0.0,
                other_cores: 0.0,
            },
            target: None,
        }
    }

    fn report(phases: Vec<Phase>) -> Report {
        Report {
            backend: "sqlite",
            binary: String::new(),
            seconds: 1,
            warmup_ms: 0,
            client_threads: 1,
            paid_call_cost_usd: String::new(),
            sqlite_synchronous: None,
            phases,
            memory: None,
            default_log_bytes_per_request: None,
        }
    }

    #[test]
    fn loaded_tools_list_figures_are_set_against_the_floor_of_the_run() {
        let phases = vec![
            phase("tools/list [2026-07-28]", "warn", 1, 10_000),
            phase("tools/list [2026-07-28]", "warn", 16, 30_000),
            phase("tools/list [bare POST]", "warn", 16, 20_000),
            phase("tools/list [bare POST]", "default", 16, 10_000),
            phase("svc_read billing [2026-07-28]", "warn", 16, 9_000),
            phase(FLOOR_PHASE, "-", 16, 40_000),
        ];
        assert_eq!(
            report(phases).against_floor().as_deref(),
            Some(
                "tools/list against the floor of this run (40,000/s): 2026-07-28 0.75×, bare POST 0.50×"
            )
        );
        let without_floor = vec![phase("tools/list [2026-07-28]", "warn", 16, 30_000)];
        assert_eq!(report(without_floor).against_floor(), None);
    }
}

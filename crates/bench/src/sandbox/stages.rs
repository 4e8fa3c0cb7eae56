//! Where a warm call's time goes: the server runs with `--server-timing on` and answers each
//! tool call with the duration of each stage it sees (`Server-Timing`); the calls are timed by
//! the client as usual, and each stage's durations are kept beside the client's total. What the
//! server's own total does not cover is the socket, the kernel and the client.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use http_body_util::BodyExt;
use serde_json::{Value, json};

use super::Timings;
use crate::load::{self, Endpoint, Workload};

/// The stages the server names, in order, and what each covers (its `total` last).
pub(crate) const STAGES: [(&str, &str); 9] = [
    ("auth", "request in → key resolved to an account"),
    ("read", "body read, checked as JSON-RPC, routed"),
    (
        "admit",
        "the call begun, arguments planned, admitted (charge decided)",
    ),
    ("send", "to the session's driver, request frame written"),
    (
        "session",
        "frame written → answer frame read (the session + wake-ups)",
    ),
    (
        "finish",
        "answer to the caller's task, redacted, charge commit waited for",
    ),
    ("history", "the call's history record queued"),
    ("encode", "the call's answer taken, JSON-RPC answer written"),
    ("total", "the server's whole share"),
];

/// One client path's calls: the client's round trips and the server's stages.
#[derive(Debug)]
pub struct Breakdown {
    pub path: &'static str,
    pub client: Timings,
    /// Per stage of [`STAGES`], the durations the server gave (a call without the stage adds
    /// nothing to it).
    pub stages: Vec<Timings>,
    /// The slowest 1 % of the calls (by the client's round trip): the median of each stage of
    /// [`STAGES`] over them, then their median round trip (ms): where the tail's time goes.
    pub slowest: Vec<f64>,
}

/// The median of each stage and of the round trip over the slowest 1 % of `calls` (at least
/// one): what a call near the p99 spends where, not swayed by the few slowest of all.
fn slowest_medians(calls: &mut [(Duration, Vec<f64>)]) -> Vec<f64> {
    calls.sort_by_key(|call| std::cmp::Reverse(call.0));
    let tail = &calls[..calls.len().div_ceil(100).min(calls.len())];
    if tail.is_empty() {
        return Vec::new();
    }
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let mut medians: Vec<f64> = (0..STAGES.len())
        .map(|stage| median(tail.iter().map(|(_, ms)| ms[stage]).collect()))
        .collect();
    medians.push(median(
        tail.iter().map(|(d, _)| d.as_secs_f64() * 1e3).collect(),
    ));
    medians
}

impl Breakdown {
    /// The client's p50 less the server's total p50: the socket, the kernel and the client.
    fn outside_p50(&self) -> Option<f64> {
        let total = self.stages.last()?.percentile_ms(50.0)?;
        Some(self.client.percentile_ms(50.0)? - total)
    }
}

/// The client paths' workloads alternated call by call on one new connection (each path's call,
/// then the next path's), so that the machine's drift over a run touches every path alike:
/// `warmup` untimed rounds, then `count` timed ones. Each answer's `Server-Timing` is read; it
/// must be a 200 with `"isError":false`. One breakdown per path, in the order given.
pub(crate) async fn alternated(
    endpoint: &Endpoint,
    paths: &[(&'static str, &Workload)],
    (warmup, count): (usize, usize),
) -> Result<Vec<Breakdown>> {
    let mut sender = load::connect(endpoint).await?;
    let mut breakdowns: Vec<Breakdown> = paths
        .iter()
        .map(|(path, _)| Breakdown {
            path,
            client: Timings::default(),
            stages: vec![Timings::default(); STAGES.len()],
            slowest: Vec::new(),
        })
        .collect();
    let mut calls: Vec<Vec<(Duration, Vec<f64>)>> = vec![Vec::new(); paths.len()];
    for i in 0..warmup + count {
        for (((path, workload), breakdown), calls) in
            paths.iter().zip(&mut breakdowns).zip(&mut calls)
        {
            let (elapsed, header) = call(&mut sender, endpoint, workload)
                .await
                .with_context(|| format!("call {i} on the {path} path"))?;
            if i < warmup {
                continue;
            }
            breakdown.client.push(elapsed);
            let header =
                header.context("no Server-Timing header: is the server's --server-timing on?")?;
            let mut this_call = vec![0.0; STAGES.len()];
            for (name, millis) in parse(&header) {
                if let Some(n) = STAGES.iter().position(|(stage, _)| *stage == name) {
                    breakdown.stages[n].push(Duration::from_secs_f64(millis / 1e3));
                    this_call[n] = millis;
                }
            }
            calls.push((elapsed, this_call));
        }
    }
    Ok(breakdowns
        .into_iter()
        .zip(&mut calls)
        .map(|(b, calls)| Breakdown {
            path: b.path,
            client: b.client.sorted(),
            stages: b.stages.into_iter().map(Timings::sorted).collect(),
            slowest: slowest_medians(calls),
        })
        .collect())
}

/// One call of `workload`: its round trip as the client saw it, and its `Server-Timing`.
async fn call(
    sender: &mut load::Sender,
    endpoint: &Endpoint,
    workload: &Workload,
) -> Result<(Duration, Option<String>)> {
    let started = Instant::now();
    let request = workload.request(endpoint)?;
    sender.ready().await?;
    let response = tokio::time::timeout(Duration::from_secs(10), async {
        let response = sender.send_request(request).await?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok::<_, hyper::Error>((parts, body))
    })
    .await
    .context("no answer within 10 s")??;
    let elapsed = started.elapsed();
    let (parts, body) = response;
    let ok = b"\"isError\":false";
    if !parts.status.is_success() || !body.windows(ok.len()).any(|w| w == ok) {
        bail!("{} {}", parts.status, String::from_utf8_lossy(&body));
    }
    let header = parts
        .headers
        .get("server-timing")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Ok((elapsed, header))
}

/// `name;dur=ms` metrics of a `Server-Timing` value.
fn parse(header: &str) -> impl Iterator<Item = (&str, f64)> {
    header.split(',').filter_map(|metric| {
        let (name, dur) = metric.trim().split_once(";dur=")?;
        Some((name, dur.parse().ok()?))
    })
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}"))
}

/// A figure of a path read off its breakdown.
type Figure = dyn Fn(&Breakdown) -> Option<f64>;

/// A table's title and its head: one column per path, then `last`.
fn head(out: &mut String, title: &str, breakdowns: &[Breakdown], last: &str) {
    let _ = write!(out, "\n{title}\n{:<10}", "stage");
    for b in breakdowns {
        let _ = write!(out, " {:>14}", b.path);
    }
    let _ = writeln!(out, "{last}");
}

/// One row: `name`, the figure of each path, then `covers`.
fn row(
    out: &mut String,
    name: &str,
    breakdowns: &[Breakdown],
    value: &dyn Fn(&Breakdown) -> Option<f64>,
    covers: &str,
) {
    let _ = write!(out, "{name:<10}");
    for b in breakdowns {
        let _ = write!(out, " {:>14}", ms(value(b)));
    }
    let _ = writeln!(out, "{covers}");
}

/// The per-stage table: p50 of each stage on each path, the client's p50 and p99, and the rest.
pub(crate) fn table(breakdowns: &[Breakdown], session_p50: Option<f64>) -> String {
    let mut out = String::new();
    if breakdowns.is_empty() {
        return out;
    }
    let title = "where a warm 1+1 goes (p50 per stage, ms; the server's Server-Timing)";
    head(&mut out, title, breakdowns, "  covers");
    for (n, (name, covers)) in STAGES.iter().enumerate() {
        let p50 = |b: &Breakdown| b.stages[n].percentile_ms(50.0);
        row(&mut out, name, breakdowns, &p50, &format!("  {covers}"));
    }
    let rows: [(&str, &Figure, &str); 3] = [
        (
            "outside",
            &Breakdown::outside_p50,
            "client p50 − total p50: socket, kernel, client",
        ),
        (
            "client",
            &|b| b.client.percentile_ms(50.0),
            "the client's round trip, p50",
        ),
        (
            "client99",
            &|b| b.client.percentile_ms(99.0),
            "the client's round trip, p99",
        ),
    ];
    for (name, value, covers) in rows {
        row(&mut out, name, breakdowns, value, &format!("  {covers}"));
    }
    let _ = writeln!(
        out,
        "(p50s of stages do not add up to the p50 of their sum; the session alone, in process: p50 {} ms)",
        ms(session_p50)
    );
    slowest_table(&mut out, breakdowns);
    out
}

/// The tail's table: the median of each stage over the slowest 1 % of each path's calls.
fn slowest_table(out: &mut String, breakdowns: &[Breakdown]) {
    let title = "the slowest 1 % of the calls (the median of each stage over them, ms)";
    head(out, title, breakdowns, "");
    let names = STAGES.iter().map(|(name, _)| *name).chain(["client"]);
    for (n, name) in names.enumerate() {
        row(out, name, breakdowns, &|b| b.slowest.get(n).copied(), "");
    }
    // the tail's client less its total (the last entry and the stage `total`)
    let outside = |b: &Breakdown| {
        let (client, total) = b.slowest.last().zip(b.slowest.get(STAGES.len() - 1))?;
        Some(client - total)
    };
    row(out, "outside", breakdowns, &outside, "");
}

/// The breakdowns as JSON: per path, per stage, p50 and p99.
pub(crate) fn to_json(breakdowns: &[Breakdown]) -> Value {
    let paths: serde_json::Map<String, Value> = breakdowns
        .iter()
        .map(|b| {
            let stages: serde_json::Map<String, Value> = STAGES
                .iter()
                .zip(&b.stages)
                .map(|((name, _), t)| {
                    (
                        (*name).to_owned(),
                        json!({"p50_ms": t.percentile_ms(50.0), "p99_ms": t.percentile_ms(99.0)}),
                    )
                })
                .collect();
            let path = json!({
                "client_p50_ms": b.client.percentile_ms(50.0),
                "client_p99_ms": b.client.percentile_ms(99.0),
                "outside_p50_ms": b.outside_p50(),
                "stages": stages,
            });
            (b.path.to_owned(), path)
        })
        .collect();
    Value::Object(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_server_timing() {
        let metrics: Vec<(&str, f64)> =
            parse("auth;dur=0.012, read;dur=0.004,session;dur=0.090, bogus, total;dur=0.2")
                .collect();
        assert_eq!(
            metrics,
            [
                ("auth", 0.012),
                ("read", 0.004),
                ("session", 0.090),
                ("total", 0.2)
            ]
        );
    }

    #[test]
    fn the_tail_is_the_slowest_calls_medians() {
        // 300 calls: three slow ones (1 % of 300), their session stage 3, 5 and 90 ms
        let mut calls: Vec<(Duration, Vec<f64>)> = (0..297)
            .map(|_| (Duration::from_micros(400), vec![0.1; STAGES.len()]))
            .collect();
        for (client_ms, session_ms) in [(4u64, 3.0), (6, 5.0), (95, 90.0)] {
            let mut stages = vec![0.1; STAGES.len()];
            stages[4] = session_ms;
            calls.push((Duration::from_millis(client_ms), stages));
        }
        let medians = slowest_medians(&mut calls);
        assert_eq!(medians.len(), STAGES.len() + 1);
        assert!((medians[4] - 5.0).abs() < 1e-9, "{medians:?}");
        assert!((medians[0] - 0.1).abs() < 1e-9, "{medians:?}");
        assert!((medians[STAGES.len()] - 6.0).abs() < 1e-9, "{medians:?}");
        assert!(slowest_medians(&mut Vec::new()).is_empty());
    }

    #[test]
    fn the_tables_have_a_row_per_stage_and_a_column_per_path() {
        let timings = |ms: u64| {
            let mut t = Timings::default();
            t.push(Duration::from_millis(ms));
            t.sorted()
        };
        let breakdown = |path| Breakdown {
            path,
            client: timings(3),
            stages: (0..STAGES.len()).map(|_| timings(1)).collect(),
            slowest: vec![2.0; STAGES.len() + 1],
        };
        let text = table(
            &[breakdown("bare POST"), breakdown("2026-07-28")],
            Some(0.5),
        );
        let lines: Vec<&str> = text.lines().collect();
        for (name, covers) in STAGES {
            let line = lines
                .iter()
                .find(|l| l.starts_with(&format!("{name:<10} ")))
                .unwrap();
            assert!(line.ends_with(&format!("1.000  {covers}")), "{line}");
        }
        let outside = lines.iter().find(|l| l.starts_with("outside ")).unwrap();
        assert!(
            outside.contains("2.000          2.000  client p50"),
            "{outside}"
        );
        // the tail's table: the same rows, no `covers`, and its own `outside` (client − total)
        let tail = text.split("the slowest 1 %").nth(1).unwrap();
        assert!(
            tail.contains(&format!(
                "\n{:<10} {:>14} {:>14}\n",
                "session", "2.000", "2.000"
            )),
            "{tail}"
        );
        assert!(
            tail.trim_end().ends_with(&format!(
                "{:<10} {:>14} {:>14}",
                "outside", "0.000", "0.000"
            )),
            "{tail}"
        );
    }
}

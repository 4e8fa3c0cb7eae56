//! Calls timed on one keep-alive connection: back to back, or two workloads alternated call by
//! call so that whatever else the machine does touches both alike.

use std::time::Instant;

use anyhow::{Context, Result};

use super::Timings;
use crate::load::{self, Endpoint, Workload};

/// `warmup` untimed calls, then `count` timed ones, back to back on one new connection; returns
/// the timings and the last answer.
pub(crate) async fn timed(
    endpoint: &Endpoint,
    workload: &Workload,
    warmup: usize,
    count: usize,
) -> Result<(Timings, bytes::Bytes)> {
    let mut sender = load::connect(endpoint).await?;
    let mut last = bytes::Bytes::new();
    for _ in 0..warmup {
        last = load::call(&mut sender, endpoint, workload)
            .await
            .context("a warm-up call")?;
    }
    let mut timings = Timings::default();
    for i in 0..count {
        let started = Instant::now();
        last = load::call(&mut sender, endpoint, workload)
            .await
            .with_context(|| format!("call {i} of {count}"))?;
        timings.push(started.elapsed());
    }
    Ok((timings.sorted(), last))
}

/// Workloads `a` and `b` alternated call by call on one connection, so that whatever else the
/// machine does touches both alike: the fair way to read what `a` adds to `b`.
pub(crate) async fn timed_pair(
    endpoint: &Endpoint,
    a: &Workload,
    b: &Workload,
    warmup: usize,
    count: usize,
) -> Result<(Timings, Timings)> {
    let mut senders = [load::connect(endpoint).await?];
    alternated(
        &mut senders,
        [(0, endpoint, a), (0, endpoint, b)],
        warmup,
        count,
    )
    .await
}

/// `a` and `b`, each sent to its own server on its own connection, alternated call by call.
pub(super) async fn timed_across(
    a: (&Endpoint, &Workload),
    b: (&Endpoint, &Workload),
    warmup: usize,
    count: usize,
) -> Result<(Timings, Timings)> {
    let mut senders = [load::connect(a.0).await?, load::connect(b.0).await?];
    alternated(&mut senders, [(0, a.0, a.1), (1, b.0, b.1)], warmup, count).await
}

/// Each side's workload sent on its connection (an index into `senders`), the two sides
/// alternated, `warmup` rounds untimed and `count` timed.
async fn alternated(
    senders: &mut [load::Sender],
    sides: [(usize, &Endpoint, &Workload); 2],
    warmup: usize,
    count: usize,
) -> Result<(Timings, Timings)> {
    for _ in 0..warmup {
        for (connection, endpoint, workload) in sides {
            load::call(&mut senders[connection], endpoint, workload)
                .await
                .context("a warm-up call")?;
        }
    }
    let mut timed = [Timings::default(), Timings::default()];
    for i in 0..count {
        for (side, (connection, endpoint, workload)) in sides.into_iter().enumerate() {
            let started = Instant::now();
            load::call(&mut senders[connection], endpoint, workload)
                .await
                .with_context(|| format!("call {i} of {count}"))?;
            timed[side].push(started.elapsed());
        }
    }
    let [a, b] = timed;
    Ok((a.sorted(), b.sorted()))
}

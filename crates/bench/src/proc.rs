//! Readings from Linux's /proc: a process's resident memory and CPU time.

use anyhow::{Context, Result, bail};

/// Kernel clock ticks per second for /proc/*/stat times. 100 on every mainstream Linux build;
/// asking sysconf(_SC_CLK_TCK) would need `unsafe`, which the workspace forbids.
const CLOCK_TICKS_PER_SECOND: f64 = 100.0;

/// A `kB` line of /proc/`pid`/status (e.g. `VmRSS`, `VmHWM`), in MiB.
pub fn status_mib(pid: u32, field: &str) -> Result<f64> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    parse_status_kib(&text, field)
        .map(|kib| kib as f64 / 1024.0)
        .with_context(|| format!("no {field} line in {path}"))
}

fn parse_status_kib(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// User plus system CPU seconds of all threads of `pid` (a number or `self`).
pub fn cpu_seconds(pid: &str) -> Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    match parse_stat_ticks(&text) {
        Some(ticks) => Ok(ticks as f64 / CLOCK_TICKS_PER_SECOND),
        None => bail!("unexpected format of {path}"),
    }
}

fn parse_stat_ticks(text: &str) -> Option<u64> {
    // The command name (field 2) is in parentheses and may itself hold spaces or ')', so the
    // fields are counted from after the last ')': state is field 3, utime 14, stime 15.
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// CPU seconds the whole machine's tasks have run, on all CPUs (user, nice, system, and steal:
/// time the hypervisor gave to someone else). Set against the server's and the generator's, it
/// shows what else was running. Interrupt and softirq time is left out: that is mostly the
/// loopback traffic of the benchmark itself, which no task is charged for.
pub fn machine_busy_seconds() -> Result<f64> {
    let text = std::fs::read_to_string("/proc/stat").context("cannot read /proc/stat")?;
    match text.lines().next().and_then(parse_machine_busy_ticks) {
        Some(ticks) => Ok(ticks as f64 / CLOCK_TICKS_PER_SECOND),
        None => bail!("unexpected format of /proc/stat"),
    }
}

fn parse_machine_busy_ticks(line: &str) -> Option<u64> {
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    // user nice system idle iowait irq softirq steal [guest guest_nice, already inside user/nice]
    let values: Vec<u64> = fields
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let field = |i: usize| values.get(i).copied();
    Some(field(0)? + field(1)? + field(2)? + field(7)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_are_read_in_kib() {
        let text = "Name:\ttoolgate\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(parse_status_kib(text, "VmRSS"), Some(10240));
        assert_eq!(parse_status_kib(text, "VmHWM"), Some(20480));
        assert_eq!(parse_status_kib(text, "VmSwap"), None);
    }

    #[test]
    fn machine_busy_counts_tasks_and_steal() {
        let line = "cpu  100 5 50 1000 20 3 2 1 0 0";
        assert_eq!(parse_machine_busy_ticks(line), Some(156));
        assert_eq!(parse_machine_busy_ticks("cpu0 1 2 3 4 5 6 7 8"), None);
    }

    #[test]
    fn stat_times_skip_odd_command_names() {
        let text = "42 (a) b) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 100 0 0";
        assert_eq!(parse_stat_ticks(text), Some(300));
    }
}

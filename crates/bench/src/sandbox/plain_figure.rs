//! The machine's own matplotlib: the bench's figure drawn by a plain Python process of the
//! sandbox's runtime (no service, no sandbox, no output capture), saved as
//! `savefig(format="png", bbox_inches="tight")` saves it and closed, one figure per line the
//! process reads, each timed by the process itself. Alternated figure by figure with the same
//! figure through HTTP, it is what this machine needs for that figure at all: the floor under
//! goal 3 of issue 30.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::Timings;
use crate::load::{self, Endpoint, Workload};

/// For every line read: the bench's figure (`plt.plot([1,2,3])`) made, saved as savefig saves a
/// tight PNG, and closed; then made again and only drawn on its canvas (no box, no PNG), the
/// least any way of showing it must do. Answers with the nanoseconds each took and the PNG's
/// size.
const SCRIPT: &str = r#"import io, sys, time
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
for _ in sys.stdin:
    t = time.perf_counter_ns()
    plt.plot([1, 2, 3])
    buf = io.BytesIO()
    plt.gcf().savefig(buf, format="png", bbox_inches="tight")
    plt.close("all")
    saved = time.perf_counter_ns() - t
    t = time.perf_counter_ns()
    plt.plot([1, 2, 3])
    plt.gcf().canvas.draw()
    plt.close("all")
    drawn = time.perf_counter_ns() - t
    sys.stdout.write(f"{saved} {drawn} {len(buf.getvalue())}\n")
    sys.stdout.flush()
"#;

/// The most bytes read of one answer (three numbers and a newline fit many times over).
const ANSWER_LIMIT: u64 = 256;

/// A running plain-Python figure maker; killed when dropped.
pub struct PlainFigure {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl PlainFigure {
    /// Starts the runtime's Python (`runtime/bin/python3`) with the environment the zygote gives
    /// its sessions' matplotlib: the Agg backend and the runtime's font cache.
    pub fn start(runtime: &Path) -> Result<Self> {
        let python = runtime.join("bin").join("python3");
        let mut command = Command::new(&python);
        command
            .args(["-I", "-c", SCRIPT])
            .env_clear()
            .env("LANG", "C.UTF-8")
            .env("MPLBACKEND", "Agg")
            .env("OPENBLAS_NUM_THREADS", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mplconfig = runtime.join("mplconfig");
        if mplconfig.is_dir() {
            command.env("MPLCONFIGDIR", mplconfig);
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot start {}", python.display()))?;
        let stdin = child.stdin.take().context("the figure maker's stdin")?;
        let stdout = child.stdout.take().context("the figure maker's stdout")?;
        Ok(Self {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        })
    }

    /// One round: the times the process measured around the saved and the drawn-only figure.
    pub fn draw(&mut self) -> Result<Plain> {
        self.stdin
            .write_all(b"\n")
            .and_then(|()| self.stdin.flush())
            .context("the figure maker went away")?;
        let mut line = String::new();
        // an answer is three numbers: a longer line is cut here and refused by the parser
        let n = (&mut self.stdout)
            .take(ANSWER_LIMIT)
            .read_line(&mut line)
            .context("reading the figure maker's answer")?;
        if n == 0 {
            bail!("the figure maker ended (its error is above)");
        }
        parse_answer(&line)
    }
}

impl Drop for PlainFigure {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The figure through HTTP and drawn by the plain process, alternated figure by figure.
pub struct Alternated {
    pub http: Timings,
    /// The plain process's saved figures.
    pub plain: Timings,
    /// The plain process's drawn-only figures.
    pub plain_drawn: Timings,
    /// The last HTTP answer (it carries the PNG).
    pub answer: bytes::Bytes,
    /// The size of the plain process's last PNG.
    pub plain_png_bytes: usize,
}

/// `workload` (the figure through HTTP, on one keep-alive connection) and `plain`'s figure,
/// alternated: `warmup` rounds untimed, then `count` timed. The HTTP figure is timed by the
/// bench from send to the answer's last byte, the plain one by its process.
pub async fn alternated(
    endpoint: &Endpoint,
    workload: &Workload,
    plain: &mut PlainFigure,
    warmup: usize,
    count: usize,
) -> Result<Alternated> {
    let mut sender = load::connect(endpoint).await?;
    let mut answer = bytes::Bytes::new();
    let mut plain_png_bytes = 0;
    for _ in 0..warmup {
        answer = load::call(&mut sender, endpoint, workload)
            .await
            .context("a warm-up figure through HTTP")?;
        plain_png_bytes = plain.draw()?.png_bytes;
    }
    let (mut http, mut saved, mut drawn) =
        (Timings::default(), Timings::default(), Timings::default());
    for i in 0..count {
        let started = std::time::Instant::now();
        answer = load::call(&mut sender, endpoint, workload)
            .await
            .with_context(|| format!("figure {i} of {count} through HTTP"))?;
        http.push(started.elapsed());
        let round = plain.draw()?;
        saved.push(round.saved);
        drawn.push(round.drawn);
        plain_png_bytes = round.png_bytes;
    }
    Ok(Alternated {
        http: http.sorted(),
        plain: saved.sorted(),
        plain_drawn: drawn.sorted(),
        answer,
        plain_png_bytes,
    })
}

/// What the plain process measured in one round.
#[derive(Debug, PartialEq)]
pub struct Plain {
    /// The figure made, saved as a tight PNG and closed.
    pub saved: Duration,
    /// The figure made, drawn on its canvas only, and closed.
    pub drawn: Duration,
    /// The size of the saved PNG.
    pub png_bytes: usize,
}

/// `"<saved ns> <drawn ns> <png bytes>\n"`.
fn parse_answer(line: &str) -> Result<Plain> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [saved, drawn, bytes] = fields[..] else {
        bail!("the figure maker answered {line:?}");
    };
    let number = |field: &str| -> Result<u64> {
        field
            .parse()
            .with_context(|| format!("bad number in {line:?}"))
    };
    Ok(Plain {
        saved: Duration::from_nanos(number(saved)?),
        drawn: Duration::from_nanos(number(drawn)?),
        png_bytes: usize::try_from(number(bytes)?)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_two_times_and_a_size() {
        let plain = parse_answer("52000000 31000000 21000\n").unwrap();
        assert_eq!(
            plain,
            Plain {
                saved: Duration::from_millis(52),
                drawn: Duration::from_millis(31),
                png_bytes: 21000
            }
        );
    }

    #[test]
    fn anything_else_is_an_error() {
        for bad in [
            "",
            "\n",
            "5 2\n",
            "a b c\n",
            "1 2 3 4\n",
            "-1 2 3\n",
            "1 2 x\n",
        ] {
            assert!(parse_answer(bad).is_err(), "{bad:?} was taken");
        }
    }
}

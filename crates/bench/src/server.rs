//! The real `toolgate` binary as a child process: serving, and its operator commands.

use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How long a starting server may take to answer /healthz with 200.
pub const STARTUP_LIMIT: Duration = Duration::from_secs(20);

/// How long a server may take to exit after SIGTERM before it is killed (its own drain limit is 10 s).
const STOP_LIMIT: Duration = Duration::from_secs(12);

/// What every invocation of the binary shares.
#[derive(Debug, Clone)]
pub struct Toolgate {
    pub binary: PathBuf,
    pub data_dir: PathBuf,
    pub database_url: Option<String>,
    /// Further settings given to every command (pricing, SQLite durability), as flag/value pairs.
    pub settings: Vec<(String, String)>,
}

impl Toolgate {
    /// A command for the binary with the shared settings and a clean environment: a stray
    /// TOOLGATE_* variable in the caller's shell must not change what is measured.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.binary);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("TOOLGATE_") {
                command.env_remove(&name);
            }
        }
        command.args(args).arg("--data-dir").arg(&self.data_dir);
        if let Some(url) = &self.database_url {
            command.arg("--database-url").arg(url);
        }
        for (flag, value) in &self.settings {
            command.arg(flag).arg(value);
        }
        command.stdin(Stdio::null());
        command
    }

    /// Runs an operator command and returns its stdout, or fails with its stderr.
    pub fn cli(&self, args: &[&str]) -> Result<String> {
        let output = self
            .command(args)
            .output()
            .with_context(|| format!("cannot run {}", self.binary.display()))?;
        if !output.status.success() {
            bail!(
                "`toolgate {}` failed ({}): {}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Starts `toolgate serve` on a free loopback port. `log` is the TOOLGATE_LOG filter, or
    /// `None` for the binary's default level. Stderr goes to `stderr_path`.
    pub fn serve(&self, log: Option<&str>, stderr_path: &Path) -> Result<Server> {
        self.start("serve", log, stderr_path)
    }

    /// Starts `toolgate <role>` (`serve`, or `node`: an execution node) on a free loopback port.
    pub fn start(&self, role: &str, log: Option<&str>, stderr_path: &Path) -> Result<Server> {
        let addr = free_port()?;
        let url = format!("http://{addr}");
        let stderr = File::create(stderr_path)
            .with_context(|| format!("cannot create {}", stderr_path.display()))?;
        let listen = addr.to_string();
        let mut args = vec![role, "--listen", &listen];
        if role == "serve" {
            args.extend(["--public-url", &url]);
        }
        let mut command = self.command(&args);
        if let Some(filter) = log {
            command.env("TOOLGATE_LOG", filter);
        }
        command.stdout(Stdio::null()).stderr(stderr);
        let child = command
            .spawn()
            .with_context(|| format!("cannot start {}", self.binary.display()))?;
        Ok(Server {
            child: Some(child),
            addr,
            stderr_path: stderr_path.to_owned(),
        })
    }
}

/// Starts this program's own bare axum server (see `floor.rs`) on a free loopback port, with a
/// Python echo process behind `/echo/…` when `echo` names a Python.
pub fn spawn_floor(stderr_path: &Path, limit: Duration, echo: Option<&Path>) -> Result<Server> {
    let addr = free_port()?;
    let exe = std::env::current_exe().context("cannot find this program's path")?;
    let stderr = File::create(stderr_path)
        .with_context(|| format!("cannot create {}", stderr_path.display()))?;
    let mut command = Command::new(exe);
    command
        .arg("--floor-server")
        .arg(addr.to_string())
        .arg("--floor-limit-secs")
        .arg(limit.as_secs().to_string());
    if let Some(python) = echo {
        command.arg("--floor-echo").arg(python);
    }
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .context("cannot start the floor server")?;
    Ok(Server {
        child: Some(child),
        addr,
        stderr_path: stderr_path.to_owned(),
    })
}

/// A port the kernel has just handed out. It is released before the server binds it, so another
/// program could in principle take it first; startup then fails loudly rather than measuring it.
fn free_port() -> Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").context("cannot bind a loopback port")?;
    Ok(listener.local_addr()?)
}

/// A running server; killed when dropped, so an error anywhere cannot leave it behind.
#[derive(Debug)]
pub struct Server {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub stderr_path: PathBuf,
}

impl Server {
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Fails, with the end of its log, if the server has exited.
    pub fn check_running(&mut self) -> Result<()> {
        let status = match self.child.as_mut() {
            Some(child) => child.try_wait()?,
            None => bail!("the server was already stopped"),
        };
        if let Some(status) = status {
            bail!(
                "the server exited ({status}); its log ends:\n{}",
                self.log_tail(20)
            );
        }
        Ok(())
    }

    /// The last `lines` lines the server wrote to stderr.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Bytes the server has written to stderr so far.
    pub fn log_bytes(&self) -> u64 {
        std::fs::metadata(&self.stderr_path).map_or(0, |meta| meta.len())
    }

    /// Kills the server at once (SIGKILL), as a host that dies.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server the way an operator would (SIGTERM, then drain), killing it if it hangs.
    pub fn stop(mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        // std offers only SIGKILL and the workspace forbids `unsafe` (libc::kill), so the
        // polite signal goes through kill(1).
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + STOP_LIMIT;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait()? {
                if !status.success() {
                    eprintln!("note: the server exited with {status} after SIGTERM");
                }
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.kill()?;
        child.wait()?;
        bail!("the server did not stop within {STOP_LIMIT:?} of SIGTERM and was killed")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

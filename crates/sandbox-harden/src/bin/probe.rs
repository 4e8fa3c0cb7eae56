//! `toolgate-harden-probe [--time] SPEC_JSON PROGRAM [ARGS...]`
//!
//! A one-shot zygote: forks a session child exactly as the Python zygote does (pid namespace,
//! [`fork_session_child`]), releases it ([`release_session`]: id maps, cgroups) while the child
//! hardens itself with the JSON [`HardenSpec`] given as the first argument (the very code path
//! of the zygote's children), then the child `exec`s `PROGRAM ARGS...` as pid 1 of its pid
//! namespace. The probe waits for it and exits with its status. With `--time`, prints to stderr
//! how long the fork took until the child was fully hardened, with the child's report.
//!
//! The hardened child is the probe's only child: `/proc/<probe>/task/<probe>/children` names it.
//!
//! Exit status: 125 when hardening failed, 127 when the program could not be executed (as `env`
//! and `chroot` do), 128 + N when it was killed by signal N, otherwise the program's own.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};
use std::time::Instant;

use toolgate_sandbox_harden::{
    HardenSpec, SessionFork, fork_session_child, harden_session_with_report, release_session,
    wait_for_child,
};

const USAGE: &str = "usage: toolgate-harden-probe [--time] SPEC_JSON PROGRAM [ARGS...]";

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1).peekable();
    let time = args.next_if(|arg| arg == "--time").is_some();
    let (Some(spec_json), Some(program)) = (args.next(), args.next()) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let spec = match parse_spec(&spec_json) {
        Ok(spec) => spec,
        Err(message) => {
            eprintln!("toolgate-harden-probe: {message}");
            return ExitCode::from(2);
        }
    };

    let started = Instant::now();
    let (pid, channel) = match fork_session_child() {
        Ok(SessionFork::Parent { pid, channel }) => (pid, channel),
        Ok(SessionFork::Child(channel)) => {
            if let Err(error) = harden_session_with_report(&spec, channel) {
                eprintln!("toolgate-harden-probe: {error}");
                return ExitCode::from(125);
            }
            // exec only returns on failure.
            let error = Command::new(&program).args(args).exec();
            eprintln!(
                "toolgate-harden-probe: cannot execute {}: {error}",
                program.to_string_lossy()
            );
            return ExitCode::from(127);
        }
        Err(error) => {
            eprintln!("toolgate-harden-probe: fork: {error}");
            return ExitCode::from(125);
        }
    };
    let released = release_session(pid, &spec, channel);
    let ready = started.elapsed();
    let status = wait_for_child(pid);
    match released {
        Ok(report) if time => eprintln!(
            "toolgate-harden-probe: session ready {} us after the fork request ({report})",
            ready.as_micros()
        ),
        Ok(_) => {}
        Err(error) => {
            eprintln!("toolgate-harden-probe: {error}");
            return ExitCode::from(125);
        }
    }
    match status {
        Ok(raw) if libc_exited(raw) => ExitCode::from(exit_code(raw)),
        Ok(raw) => ExitCode::from(128u8.saturating_add(term_signal(raw))),
        Err(error) => {
            eprintln!("toolgate-harden-probe: waitpid: {error}");
            ExitCode::from(125)
        }
    }
}

/// `WIFEXITED`.
fn libc_exited(raw: i32) -> bool {
    raw & 0x7f == 0
}

/// `WEXITSTATUS`.
fn exit_code(raw: i32) -> u8 {
    ((raw >> 8) & 0xff) as u8
}

/// `WTERMSIG`.
fn term_signal(raw: i32) -> u8 {
    (raw & 0x7f) as u8
}

fn parse_spec(json: &OsString) -> Result<HardenSpec, String> {
    let json = json.to_str().ok_or("SPEC_JSON is not UTF-8")?;
    serde_json::from_str(json).map_err(|error| format!("invalid harden spec JSON: {error}"))
}

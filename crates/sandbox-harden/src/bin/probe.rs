//! `toolgate-harden-probe [--time] SPEC_JSON PROGRAM [ARGS...]`
//!
//! Hardens itself with the JSON [`HardenSpec`] given as the first argument (the very code path
//! the zygote's children run), then `exec`s `PROGRAM ARGS...` in the confined process. With
//! `--time`, prints the duration of `harden_session` and its report to stderr.
//!
//! Exit status: 125 when hardening failed, 127 when the program could not be executed (as
//! `env` and `chroot` do), otherwise the program's own.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};
use std::time::Instant;

use toolgate_sandbox_harden::{HardenSpec, harden_session_with_report};

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
    match harden_session_with_report(&spec) {
        Ok(report) => {
            if time {
                eprintln!(
                    "toolgate-harden-probe: harden_session took {} us ({report})",
                    started.elapsed().as_micros()
                );
            }
        }
        Err(error) => {
            eprintln!("toolgate-harden-probe: {error}");
            return ExitCode::from(125);
        }
    }

    // exec only returns on failure.
    let error = Command::new(&program).args(args).exec();
    eprintln!(
        "toolgate-harden-probe: cannot execute {}: {error}",
        program.to_string_lossy()
    );
    ExitCode::from(127)
}

fn parse_spec(json: &OsString) -> Result<HardenSpec, String> {
    let json = json.to_str().ok_or("SPEC_JSON is not UTF-8")?;
    serde_json::from_str(json).map_err(|error| format!("invalid harden spec JSON: {error}"))
}

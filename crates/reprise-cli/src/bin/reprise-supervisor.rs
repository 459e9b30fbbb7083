//! `reprise-supervisor`: the small binary every agent and gate process is
//! started through (`__supervise`; see `reprise_agents::supervise`). It is
//! installed beside `reprise` and holds only the supervision code, so its
//! exec per process costs little next to an exec of the whole CLI.

#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use reprise_agents::supervise::{self, SuperviseError};

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    match args.get(1).and_then(|arg| arg.to_str()) {
        Some(supervise::SUPERVISE_COMMAND) => match supervise::supervise_main(&args[2..]) {
            Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
            Err(err) => hop_failed(&err),
        },
        Some(supervise::PROBE_COMMAND) => ExitCode::from(u8::from(supervise::probe_main() != 0)),
        _ => hop_failed(&SuperviseError::Usage(supervise::SUPERVISE_COMMAND)),
    }
}

/// A supervisor that could not run the program: one
/// line on the attempt's stderr and the shell's exit codes (127: not found,
/// 126: could not run).
fn hop_failed(err: &SuperviseError) -> ExitCode {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "reprise: {err}");
    let not_found = matches!(err, SuperviseError::Exec { source, .. } if source.kind() == std::io::ErrorKind::NotFound);
    ExitCode::from(if not_found { 127 } else { 126 })
}

//! Checks made before a run spends anything: which binary each agent CLI
//! would run (and its version), and whether a program a gate or a
//! `command` agent names exists. The same resolution the adapters use at
//! run time, so a check that passes finds what the run will run.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::process::{CliSpec, VersionCache, find_executable, resolve_cli_binary};
use crate::request::CancelToken;

/// An agent CLI's binary as a run would resolve it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentBinary {
    /// The executable file.
    pub program: PathBuf,
    /// What `program --version` printed first, if it answered.
    pub version: Option<String>,
}

/// The environment variable that overrides `cli`'s binary.
pub fn bin_env_var(cli: &str) -> Option<&'static str> {
    match cli {
        "claude" => Some("REPRISE_CLAUDE_BIN"),
        "codex" => Some("REPRISE_CODEX_BIN"),
        "gemini" => Some("REPRISE_GEMINI_BIN"),
        _ => None,
    }
}

/// Resolves `cli`'s binary (the plan's `bin`, else `env_value` of its
/// `REPRISE_<CLI>_BIN`, else `cli` on `path_var`) and, when `probe`, asks it
/// for its version (`--version`, bounded, in its own process group). The
/// error is one line naming what is missing and how to fix it.
pub fn resolve_agent_binary(
    cli: &'static str,
    bin: Option<&Path>,
    env_value: Option<OsString>,
    cwd: &Path,
    path_var: Option<&OsStr>,
    probe: bool,
) -> Result<AgentBinary, String> {
    let Some(bin_env) = bin_env_var(cli) else {
        return Err(format!("{cli} is not an agent CLI"));
    };
    let spec = CliSpec { name: cli, bin_env };
    let program = resolve_cli_binary(spec, bin, env_value, cwd, path_var)?;
    let version = if probe {
        let env: Vec<(String, String)> = path_var
            .map(|path| ("PATH".to_owned(), path.to_string_lossy().into_owned()))
            .into_iter()
            .collect();
        VersionCache::default().version(&program, &env, cwd, &CancelToken::new(), None)
    } else {
        None
    };
    Ok(AgentBinary { program, version })
}

/// `candidate` as a child would find it: with a slash, relative to `cwd`;
/// a bare name on `path_var`. Only an executable file counts.
pub fn find_program(candidate: &str, cwd: &Path, path_var: Option<&OsStr>) -> Option<PathBuf> {
    find_executable(Path::new(candidate), cwd, path_var)
}

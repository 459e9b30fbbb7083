//! `reprise workspace hash [DIR]`.

use std::path::{Path, PathBuf};

use reprise_store::state::StateDir;
use reprise_store::workspace::{hash_workspace, hash_workspace_cached};
use serde_json::json;

use crate::error::CliError;
use crate::output::Outcome;
use crate::settings::Settings;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum WorkspaceCommand {
    /// Hash every file not ignored by the tree's .gitignore rules.
    #[command(after_help = help!("\
  reprise workspace hash
  reprise workspace hash path/to/tree --no-cache"))]
    Hash(HashArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct HashArgs {
    /// The tree to hash (default: the current directory).
    dir: Option<PathBuf>,
    /// Walker threads (default: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Re-read every file instead of trusting the stat cache.
    #[arg(long)]
    no_cache: bool,
}

impl WorkspaceCommand {
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        match self {
            Self::Hash(args) => hash(settings, args.dir.as_deref(), args.threads, args.no_cache),
        }
    }
}

fn hash(
    settings: &Settings,
    dir: Option<&Path>,
    threads: usize,
    no_cache: bool,
) -> Result<Outcome, CliError> {
    let root = match dir {
        Some(dir) if dir.is_absolute() => dir.to_path_buf(),
        Some(dir) => settings.cwd.join(dir),
        None => settings.cwd.clone(),
    };
    // With a state directory at hand, unchanged files are not re-read: their
    // digests come from a stat cache kept there (never from inside the tree).
    let state = match &settings.state_dir {
        Some(dir) => StateDir::open(dir).ok(),
        None => StateDir::discover(&root).ok(),
    };
    let hashed = match state.filter(|_| !no_cache) {
        Some(state) => hash_workspace_cached(&root, threads, &state.workspace_cache_path(&root))?,
        None => hash_workspace(&root, threads)?,
    };
    let hash = hashed.hash.to_hex();
    Ok(Outcome {
        exit: None,
        text: format!(
            "{hash}  ({}, {})\n",
            crate::output::count(hashed.files, "file"),
            crate::output::count(hashed.bytes, "byte")
        ),
        json: json!({"hash": hash, "files": hashed.files, "bytes": hashed.bytes}),
        ok: true,
    })
}

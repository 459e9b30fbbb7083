//! `reprise workspace hash [DIR]`.

use std::path::Path;

use reprise_store::workspace::hash_workspace;
use serde_json::json;

use crate::error::CliError;
use crate::output::Outcome;
use crate::settings::Settings;

pub(crate) fn hash(
    settings: &Settings,
    dir: Option<&Path>,
    threads: usize,
) -> Result<Outcome, CliError> {
    let root = match dir {
        Some(dir) if dir.is_absolute() => dir.to_path_buf(),
        Some(dir) => settings.cwd.join(dir),
        None => settings.cwd.clone(),
    };
    let hashed = hash_workspace(&root, threads)?;
    let hash = hashed.hash.to_hex();
    Ok(Outcome {
        text: format!("{hash}  ({} files, {} bytes)\n", hashed.files, hashed.bytes),
        json: json!({"hash": hash, "files": hashed.files, "bytes": hashed.bytes}),
        ok: true,
    })
}

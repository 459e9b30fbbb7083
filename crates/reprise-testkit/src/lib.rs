//! Test helpers for reprise: state directories with a private audit key,
//! journals written in bulk, waits with a deadline, and helper binaries for
//! multi-process tests.

#![forbid(unsafe_code)]

/// The scripted model server lives in `reprise-rehearse`; re-exported for tests.
pub use reprise_rehearse::model_server;

pub mod parks;
pub mod pg;
pub mod processes;
pub mod wait;

pub use wait::{holds_for, wait_for, wait_for_the_file_clock_to_tick, wait_until};

use std::fs;
use std::io::{BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::Result;
use reprise_core::TaskId;
use reprise_core::record::{Head, encode_journal_row};
use reprise_store::audit::{AuditLog, init_audit};
use reprise_store::key::{KeyFile, load_or_create_key};
use reprise_store::state::StateDir;
use serde_json::{Value, json};

/// A fixed timestamp, so fixtures are byte-for-byte reproducible.
pub const FIXED_AT: &str = "2026-01-01T00:00:00.000Z";

/// A state directory under `root` with its own audit key beside it.
#[derive(Debug)]
pub struct Fixture {
    pub state: StateDir,
    pub key_path: PathBuf,
    pub key: KeyFile,
}

impl Fixture {
    /// Creates `root/.reprise` and `root/keys/audit.key` (0600 in 0700), and
    /// writes the audit chain's first row as `reprise init` does.
    pub fn create(root: &Path) -> Result<Self> {
        let key_dir = root.join("keys");
        fs::create_dir_all(&key_dir)?;
        fs::set_permissions(&key_dir, fs::Permissions::from_mode(0o700))?;
        let key_path = key_dir.join("audit.key");
        let key = load_or_create_key(&key_path)?;
        let (state, _) = StateDir::create(&root.join(".reprise"))?;
        init_audit(&state, key.clone(), FIXED_AT)?;
        Ok(Self {
            state,
            key_path,
            key,
        })
    }

    pub fn audit(&self) -> Result<AuditLog> {
        Ok(AuditLog::open(&self.state, self.key.clone())?)
    }
}

/// A realistic journal body for row `seq`: what a checkpoint row holds.
/// The plan fixture journals belong to when a test names only a task.
pub const FIXTURE_PLAN: &str = "fixture";

/// `PLAN/TASK`, or a bare task id taken as one of the fixture plan's tasks.
pub fn fixture_key(raw: &str) -> Result<reprise_core::TaskKey> {
    if raw.contains('/') {
        return Ok(reprise_core::TaskKey::parse(raw)?);
    }
    Ok(reprise_core::TaskKey::new(
        reprise_core::PlanId::parse(FIXTURE_PLAN)?,
        TaskId::parse(raw)?,
    ))
}

pub fn sample_body(seq: u64) -> Value {
    json!({
        "attempt": seq % 4 + 1,
        "session_id": format!("0b8c5e7a-3f1d-4c2b-9a6e-{seq:012}"),
        "workspace_hash": "5f2c0a41d7e9b3f86a1c4d2e0b7f9a3c5e8d1f4a6b2c9e0d3f7a1b5c8e2d4f6a",
    })
}

/// Writes `rows` journal rows for `task` straight to `path`, without the
/// per-row fsync of a real append: for building large fixtures quickly.
pub fn write_journal_bulk(path: &Path, task: &TaskId, rows: u64) -> Result<Option<Head>> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let mut out = BufWriter::with_capacity(1 << 20, fs::File::create(path)?);
    let mut head = None;
    for seq in 0..rows {
        let kind = if seq % 4 == 3 {
            "task.checkpoint"
        } else {
            "attempt.step"
        };
        let row = encode_journal_row(head, task, kind, FIXED_AT, &sample_body(seq))?;
        out.write_all(&row.line)?;
        head = Some(row.head);
    }
    out.into_inner()
        .map_err(|err| err.into_error())?
        .sync_all()?;
    Ok(head)
}

/// Writes an executable script at `path` through a child process (`cp`),
/// never through a descriptor of this one. A test binary runs its tests on
/// threads that fork: a child forked while this process held the script
/// open for writing keeps that descriptor until its own exec, and running
/// the script meanwhile fails with "Text file busy" (ETXTBSY). The text is
/// written to a file beside it first, which is never executed.
pub fn write_executable(path: &Path, text: &str) -> Result<()> {
    let draft = path.with_extension("draft");
    fs::write(&draft, text)?;
    fs::set_permissions(&draft, fs::Permissions::from_mode(0o755))?;
    let status = std::process::Command::new("cp")
        .arg("--preserve=mode")
        .arg(&draft)
        .arg(path)
        .status()?;
    fs::remove_file(&draft)?;
    anyhow::ensure!(
        status.success(),
        "cp of {} failed: {status}",
        path.display()
    );
    Ok(())
}

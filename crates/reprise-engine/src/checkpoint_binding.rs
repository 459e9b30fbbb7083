//! Whether a checkpoint in a shadow store is one its task's journal
//! recorded: a `checkpoint.taken` row of the same run naming its id, its
//! tree and its manifest's counts. The store itself is bound to nothing (a
//! ref planted in it, another project's store or an older one copied in
//! would list and restore like the real thing); the journal is chained and
//! sealed. Listing, restoring and the verify commands go through here.

use std::path::Path;

use reprise_core::TaskKey;
use reprise_core::chain::ChainFormat;
use reprise_core::verify::ChainVerifier;
use reprise_store::read_chain_from;
use reprise_store::snapshot::{Checkpoint, SnapshotStore};
use reprise_store::state::StateDir;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use reprise_core::lifecycle::rows::CHECKPOINT_TAKEN as TAKEN_KIND;

/// What a `checkpoint.taken` row says of the checkpoint it records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TakenRow {
    pub seq: u64,
    pub run_id: String,
    pub checkpoint: String,
    pub tree: String,
    pub files: Option<u64>,
    pub bytes: Option<u64>,
}

#[derive(Deserialize)]
struct TakenBody {
    run_id: String,
    checkpoint: String,
    tree: String,
    files: Option<u64>,
    bytes: Option<u64>,
}

/// The checkpoints a task's journal recorded, read through its chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub rows: Vec<TakenRow>,
    /// The row at which the chain does not verify: nothing in it is
    /// trusted then.
    pub broken_at: Option<u64>,
}

/// Reads the `checkpoint.taken` rows of `key`'s journal; a missing journal
/// records none.
pub fn recorded_checkpoints(state: &StateDir, key: &TaskKey) -> Result<Recorded> {
    let path = state.journal_path(key);
    if !path.exists() {
        return Ok(Recorded {
            rows: Vec::new(),
            broken_at: None,
        });
    }
    let mut rows = Vec::new();
    let verifier = ChainVerifier::new(ChainFormat::Journal, None, Some(key.task.as_str()));
    let (report, _) = read_chain_from(&path, 0, verifier, |row, line| {
        if row.kind == TAKEN_KIND
            && let Ok(body) = serde_json::from_slice::<TakenBody>(&line[row.payload.clone()])
        {
            rows.push(TakenRow {
                seq: row.seq,
                run_id: body.run_id,
                checkpoint: body.checkpoint,
                tree: body.tree,
                files: body.files,
                bytes: body.bytes,
            });
        }
    })?;
    let broken_at = report.first_problem().map(|fault| fault.row);
    Ok(Recorded { rows, broken_at })
}

/// Why a checkpoint in the store is not one the journal recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Unbound {
    /// No `checkpoint.taken` row names it (a planted ref, another
    /// project's store, or a row a crash cut).
    NotRecorded,
    /// The journal recorded it in another run (an older store copied in).
    OtherRun { run_id: String },
    /// Its tree, or its manifest's counts, are not what the row recorded.
    Differs { seq: u64, what: &'static str },
    /// The journal does not verify from this row on: nothing is trusted.
    JournalBroken { row: u64 },
    /// The commit object does not hash to its id (the store's object was
    /// replaced).
    ObjectReplaced,
}

impl Unbound {
    /// One line for a person.
    pub fn explain(&self) -> String {
        match self {
            Self::NotRecorded => "no checkpoint.taken row of the task's journal names it".into(),
            Self::OtherRun { run_id } => format!("the journal recorded it in run {run_id}"),
            Self::Differs { seq, what } => {
                format!("its {what} is not what journal row {seq} recorded")
            }
            Self::JournalBroken { row } => {
                format!("the task's journal does not verify from row {row}")
            }
            Self::ObjectReplaced => "its commit object does not hash to its id".into(),
        }
    }
}

/// Whether `checkpoint`, found in `run_id`'s store, is one `recorded` holds.
pub fn bind(run_id: &str, checkpoint: &Checkpoint, recorded: &Recorded) -> Result<(), Unbound> {
    if let Some(row) = recorded.broken_at {
        return Err(Unbound::JournalBroken { row });
    }
    let named: Vec<&TakenRow> = recorded
        .rows
        .iter()
        .filter(|row| row.checkpoint == checkpoint.id)
        .collect();
    let Some(row) = named.iter().find(|row| row.run_id == run_id) else {
        return Err(match named.first() {
            Some(row) => Unbound::OtherRun {
                run_id: row.run_id.clone(),
            },
            None => Unbound::NotRecorded,
        });
    };
    let what = if row.tree != checkpoint.tree {
        Some("tree")
    } else if row
        .files
        .is_some_and(|files| files != checkpoint.manifest.files)
        || row
            .bytes
            .is_some_and(|bytes| bytes != checkpoint.manifest.bytes)
    {
        Some("manifest")
    } else {
        None
    };
    match what {
        Some(what) => Err(Unbound::Differs { seq: row.seq, what }),
        None => Ok(()),
    }
}

/// What one store holds against its journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoreCheck {
    pub run_id: String,
    /// The plan of the run, when this state directory recorded the run.
    pub plan: Option<String>,
    pub task: String,
    pub bound: u64,
    /// Checkpoints in the store the journal did not record, with why.
    pub unbound: Vec<(String, Unbound)>,
    /// Checkpoints the journal recorded in this run that the store lacks.
    pub missing: Vec<String>,
}

impl StoreCheck {
    pub fn ok(&self) -> bool {
        self.unbound.is_empty() && self.missing.is_empty()
    }
}

/// Checks every checkpoint of `run_id`'s store against `recorded`, and
/// every checkpoint recorded in that run against the store.
pub fn check_store(
    run_id: &str,
    task: &TaskKey,
    listed: &[Checkpoint],
    recorded: &Recorded,
) -> StoreCheck {
    let mut check = StoreCheck {
        run_id: run_id.to_owned(),
        plan: Some(task.plan.as_str().to_owned()),
        task: task.task.as_str().to_owned(),
        bound: 0,
        unbound: Vec::new(),
        missing: Vec::new(),
    };
    for checkpoint in listed {
        match bind(run_id, checkpoint, recorded) {
            Ok(()) => check.bound += 1,
            Err(why) => check.unbound.push((checkpoint.id.clone(), why)),
        }
    }
    if recorded.broken_at.is_none() {
        for row in recorded.rows.iter().filter(|row| row.run_id == run_id) {
            if !listed
                .iter()
                .any(|checkpoint| checkpoint.id == row.checkpoint)
                && !check.missing.contains(&row.checkpoint)
            {
                check.missing.push(row.checkpoint.clone());
            }
        }
    }
    check
}

/// Whether the store's commit object for `checkpoint` still hashes to its
/// id and names its tree: a replaced object under the same name is not the
/// checkpoint the journal recorded.
pub fn object_intact(store: &SnapshotStore, checkpoint: &Checkpoint) -> Result<bool> {
    if let Some(intact) = store.commit_intact(checkpoint) {
        return Ok(intact);
    }
    let git = reprise_store::git::Git::new(store.tree());
    let mut read = git.command();
    read.env("GIT_DIR", store.git_dir())
        .args(["cat-file", "commit", &checkpoint.id]);
    let Ok(object) = git.output(read) else {
        return Ok(false);
    };
    let names_tree = object
        .stdout
        .split(|&byte| byte == b'\n')
        .next()
        .is_some_and(|line| line == format!("tree {}", checkpoint.tree).as_bytes());
    let scratch = tempfile_in(store.git_dir(), &object.stdout)?;
    let mut hash = git.command();
    hash.env("GIT_DIR", store.git_dir())
        .args(["hash-object", "-t", "commit", "--literally"])
        .arg(&scratch);
    let hashed = git.output(hash);
    let _ = std::fs::remove_file(&scratch);
    let id = hashed
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned())
        .unwrap_or_default();
    Ok(names_tree && id == checkpoint.id)
}

/// Writes `bytes` to a new file in `dir` (the store's own directory, out
/// of every agent's reach) for `git hash-object` to read.
fn tempfile_in(dir: &Path, bytes: &[u8]) -> Result<std::path::PathBuf> {
    let path = dir.join(format!("object-check-{}", ulid::Ulid::new()));
    std::fs::write(&path, bytes).map_err(|err| crate::error::EngineError::GateFile {
        path: path.clone(),
        detail: err.to_string(),
    })?;
    Ok(path)
}

/// Every shadow store of the state directory (of `only`'s task and plan,
/// when given) checked against its journal. A store of a run this state
/// directory has no record of is checked against the journal of `only`
/// (its checkpoints are then unbound), and skipped without it.
pub fn check_stores(state: &StateDir, only: Option<&TaskKey>) -> Result<Vec<StoreCheck>> {
    let root = state.root().join("snapshots");
    let mut checks = Vec::new();
    let Ok(runs) = std::fs::read_dir(&root) else {
        return Ok(checks);
    };
    let mut runs: Vec<String> = runs
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    runs.sort();
    for run_id in runs {
        let plan = crate::state::load_run(state, &run_id)
            .ok()
            .and_then(|run| run.plan_id());
        let Ok(tasks) = std::fs::read_dir(root.join(&run_id)) else {
            continue;
        };
        let mut tasks: Vec<String> = tasks
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        tasks.sort();
        for task in tasks {
            let dir = root.join(&run_id).join(&task);
            if !dir.join("HEAD").is_file() {
                continue;
            }
            let key = match (only, &plan) {
                (Some(only), Some(plan)) if *plan == only.plan && only.task.as_str() == task => {
                    only.clone()
                }
                (Some(only), None) if only.task.as_str() == task => only.clone(),
                (Some(_), _) => continue,
                (None, Some(plan)) => match reprise_core::TaskId::parse(&task) {
                    Ok(id) => TaskKey::new(plan.clone(), id),
                    Err(_) => continue,
                },
                (None, None) => {
                    // No run of this state directory: nothing recorded it.
                    let listed = SnapshotStore::open(&dir, state.root(), None, u64::MAX)?.list()?;
                    checks.push(StoreCheck {
                        run_id: run_id.clone(),
                        plan: None,
                        task: task.clone(),
                        bound: 0,
                        unbound: listed
                            .iter()
                            .map(|checkpoint| (checkpoint.id.clone(), Unbound::NotRecorded))
                            .collect(),
                        missing: Vec::new(),
                    });
                    continue;
                }
            };
            let listed = SnapshotStore::open(&dir, state.root(), None, u64::MAX)?.list()?;
            let recorded = recorded_checkpoints(state, &key)?;
            checks.push(check_store(&run_id, &key, &listed, &recorded));
        }
    }
    Ok(checks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reprise_store::snapshot::Manifest;

    fn checkpoint(id: &str, tree: &str) -> Checkpoint {
        Checkpoint {
            id: id.into(),
            tree: tree.into(),
            manifest: Manifest {
                v: 1,
                label: "before attempt 1".into(),
                files: 2,
                bytes: 10,
                skipped: Vec::new(),
                modes: Default::default(),
                dirs: Default::default(),
            },
        }
    }

    fn row(seq: u64, run_id: &str, id: &str, tree: &str) -> TakenRow {
        TakenRow {
            seq,
            run_id: run_id.into(),
            checkpoint: id.into(),
            tree: tree.into(),
            files: Some(2),
            bytes: Some(10),
        }
    }

    #[test]
    fn a_checkpoint_is_bound_by_its_run_s_row_with_its_tree_and_counts() {
        let recorded = Recorded {
            rows: vec![row(3, "R-1", "c1", "t1"), row(9, "R-2", "c2", "t2")],
            broken_at: None,
        };
        assert_eq!(bind("R-1", &checkpoint("c1", "t1"), &recorded), Ok(()));
        assert_eq!(
            bind("R-1", &checkpoint("c9", "t1"), &recorded),
            Err(Unbound::NotRecorded)
        );
        assert_eq!(
            bind("R-1", &checkpoint("c2", "t2"), &recorded),
            Err(Unbound::OtherRun {
                run_id: "R-2".into()
            })
        );
        assert_eq!(
            bind("R-1", &checkpoint("c1", "t9"), &recorded),
            Err(Unbound::Differs {
                seq: 3,
                what: "tree"
            })
        );
        let mut grown = checkpoint("c1", "t1");
        grown.manifest.bytes = 11;
        assert_eq!(
            bind("R-1", &grown, &recorded),
            Err(Unbound::Differs {
                seq: 3,
                what: "manifest"
            })
        );
        let broken = Recorded {
            broken_at: Some(4),
            ..recorded.clone()
        };
        assert_eq!(
            bind("R-1", &checkpoint("c1", "t1"), &broken),
            Err(Unbound::JournalBroken { row: 4 })
        );
        let key = TaskKey::new(
            reprise_core::PlanId::parse("p").unwrap(),
            reprise_core::TaskId::parse("t").unwrap(),
        );
        let check = check_store("R-2", &key, &[checkpoint("c1", "t1")], &recorded);
        assert_eq!(check.bound, 0);
        assert_eq!(check.missing, ["c2"]);
        assert!(!check.ok());
    }
}

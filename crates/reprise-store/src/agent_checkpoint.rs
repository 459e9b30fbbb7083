//! The agent checkpoint a park writes (`plans/<plan>/tasks/<task>/checkpoint.json`,
//! DESIGN.md section 9): the role the parked agent had, the grant it held
//! and the grant hash binding them to the task, the run and the park, so a
//! resume can recompute the hash and refuse when the permissions narrowed
//! while it waited (`reprise_core::grant`).

use std::path::{Path, PathBuf};

use reprise_core::canonical::{EncodeError, to_canonical_vec};
use reprise_core::digest::{Digest, tagged_sha256};
use reprise_core::grant::{GrantSet, grant_hash};
use reprise_core::rows::Kind;
use reprise_core::{TaskId, TaskKey};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::StoreError;
use crate::fsutil::{read_no_follow, write_atomic};
use crate::state::StateDir;

/// Version of `checkpoint.json`.
pub const CHECKPOINT_VERSION: u64 = 1;

/// Domain tag of a checkpoint's own hash (over its JCS bytes), the hash the
/// journal binds at the park and again at its resume.
pub const CHECKPOINT_HASH_TAG: &[u8] = b"reprise/agent-checkpoint/v1\n";

/// Journal row kind binding a park's `checkpoint.json`, written right after
/// the file: `{run_id, park, checkpoint, grant_hash}` (`checkpoint` its own hash).
pub const BOUND_KIND: &str = Kind::TaskAgentCheckpoint.as_str();

/// Journal row kind a resume that continues a bound grant writes:
/// `{run_id, park, resume, checkpoint, grant_hash}`, the park's and the
/// resume's rows being the two chain heads it ties together.
pub const CONTINUATION_KIND: &str = Kind::TaskGrantContinuation.as_str();

/// Why an agent checkpoint could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Encode(#[from] EncodeError),
    #[error(
        "{path} has version {found}; this reprise reads version {CHECKPOINT_VERSION}: upgrade reprise"
    )]
    NewerVersion { path: PathBuf, found: u64 },
    #[error("{path} is not an agent checkpoint ({reason}); the park cannot be resumed from it")]
    Malformed { path: PathBuf, reason: String },
    #[error(
        "{path} holds grant hash {stored}, but its grant hashes to {computed}: it was changed after the park"
    )]
    HashMismatch {
        path: PathBuf,
        stored: String,
        computed: String,
    },
}

/// What `checkpoint.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentCheckpoint {
    pub v: u64,
    /// The agent kind the task ran as.
    pub role: String,
    pub grant: GrantSet,
    /// `reprise_core::grant::grant_hash` of the grant, the task, the run
    /// and the park (hex).
    pub grant_hash: String,
    pub task_id: TaskId,
    pub run_id: String,
    /// The `task.suspend` row's event hash.
    pub park: Digest,
}

impl AgentCheckpoint {
    /// The checkpoint of a park of `task_id` in `run_id`, its hash computed.
    pub fn new(
        grant: GrantSet,
        task_id: TaskId,
        run_id: String,
        park: Digest,
    ) -> Result<Self, EncodeError> {
        let hash = grant_hash(&grant, task_id.as_str(), &run_id, park)?;
        Ok(Self {
            v: CHECKPOINT_VERSION,
            role: grant.agent.clone(),
            grant,
            grant_hash: hash.to_hex(),
            task_id,
            run_id,
            park,
        })
    }

    /// The checkpoint's own hash: SHA-256 over its tag and JCS bytes.
    pub fn own_hash(&self) -> Result<Digest, EncodeError> {
        Ok(tagged_sha256(
            CHECKPOINT_HASH_TAG,
            &[&to_canonical_vec(self)?],
        ))
    }

    /// Whether its grant is the one a `task.suspend` row bound: the row's
    /// `grant_hash`, taken over the grant and the row before it (`after`).
    pub fn matches_suspend_row(
        &self,
        suspend_grant_hash: &str,
        after: Option<Digest>,
    ) -> Result<bool, EncodeError> {
        let hash = grant_hash(
            &self.grant,
            self.task_id.as_str(),
            &self.run_id,
            after.unwrap_or_default(),
        )?;
        Ok(hash.to_hex() == suspend_grant_hash)
    }

    /// The grant hash recomputed from what the checkpoint holds.
    pub fn computed_hash(&self) -> Result<Digest, EncodeError> {
        grant_hash(&self.grant, self.task_id.as_str(), &self.run_id, self.park)
    }
}

/// `plans/<plan>/tasks/<task>/checkpoint.json`.
pub fn checkpoint_path(state: &StateDir, task: &TaskKey) -> PathBuf {
    state.task_dir(task).join("checkpoint.json")
}

/// Writes the checkpoint durably (0600), replacing an earlier park's.
pub fn write_checkpoint(
    state: &StateDir,
    task: &TaskKey,
    checkpoint: &AgentCheckpoint,
) -> Result<(), CheckpointError> {
    state.check_task_dir(task)?;
    let path = checkpoint_path(state, task);
    let mut bytes = to_canonical_vec(checkpoint)?;
    bytes.push(b'\n');
    write_atomic(&path, &bytes, 0o600)?;
    Ok(())
}

fn malformed(path: &Path, reason: impl Into<String>) -> CheckpointError {
    CheckpointError::Malformed {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Reads the task's checkpoint: `None` when there is none. One whose stored
/// hash does not match what it holds is an error.
pub fn read_checkpoint(
    state: &StateDir,
    task: &TaskKey,
) -> Result<Option<AgentCheckpoint>, CheckpointError> {
    state.check_task_dir(task)?;
    let path = checkpoint_path(state, task);
    let Some(bytes) = read_no_follow(&path)? else {
        return Ok(None);
    };
    let value: Value =
        serde_json::from_slice(&bytes).map_err(|err| malformed(&path, err.to_string()))?;
    match value.get("v").and_then(Value::as_u64) {
        Some(CHECKPOINT_VERSION) => {}
        Some(found) if found > CHECKPOINT_VERSION => {
            return Err(CheckpointError::NewerVersion { path, found });
        }
        _ => return Err(malformed(&path, "no known version")),
    }
    let checkpoint: AgentCheckpoint =
        serde_json::from_value(value).map_err(|err| malformed(&path, err.to_string()))?;
    if checkpoint.task_id != task.task {
        return Err(malformed(&path, "it names another task"));
    }
    let computed = checkpoint.computed_hash()?.to_hex();
    if computed != checkpoint.grant_hash {
        return Err(CheckpointError::HashMismatch {
            path,
            stored: checkpoint.grant_hash,
            computed,
        });
    }
    Ok(Some(checkpoint))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use reprise_core::PlanId;

    use super::*;

    fn grant() -> GrantSet {
        GrantSet {
            agent: "claude".to_owned(),
            allowed_tools: vec!["Edit".to_owned()],
            allowed_paths: Vec::new(),
            containment: "strict".to_owned(),
            envelope_micro_usd: Some(10),
        }
    }

    fn setup() -> (tempfile::TempDir, StateDir, TaskKey) {
        let temp = tempfile::tempdir().unwrap();
        let (state, _) = StateDir::create(&temp.path().join(".reprise")).unwrap();
        let task = TaskKey::new(PlanId::parse("p").unwrap(), TaskId::parse("t").unwrap());
        std::fs::create_dir_all(state.task_dir(&task)).unwrap();
        (temp, state, task)
    }

    #[test]
    fn a_checkpoint_round_trips_private_and_versioned() {
        let (_temp, state, task) = setup();
        assert!(read_checkpoint(&state, &task).unwrap().is_none());
        let park = reprise_core::digest::tagged_sha256(b"park\n", &[]);
        let checkpoint =
            AgentCheckpoint::new(grant(), task.task.clone(), "R-1".to_owned(), park).unwrap();
        assert_eq!(checkpoint.role, "claude");
        assert_eq!(
            checkpoint.grant_hash,
            grant_hash(&grant(), "t", "R-1", park).unwrap().to_hex()
        );
        write_checkpoint(&state, &task, &checkpoint).unwrap();
        let path = checkpoint_path(&state, &task);
        assert_eq!(path, state.task_dir(&task).join("checkpoint.json"));
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(read_checkpoint(&state, &task).unwrap(), Some(checkpoint));
    }

    #[test]
    fn a_changed_grant_a_newer_version_and_another_task_are_refused() {
        let (_temp, state, task) = setup();
        let checkpoint =
            AgentCheckpoint::new(grant(), task.task.clone(), "R-1".to_owned(), Digest::ZERO)
                .unwrap();
        write_checkpoint(&state, &task, &checkpoint).unwrap();
        let path = checkpoint_path(&state, &task);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("\"Edit\"", "\"Write\"")).unwrap();
        assert!(matches!(
            read_checkpoint(&state, &task),
            Err(CheckpointError::HashMismatch { .. })
        ));
        std::fs::write(&path, text.replace("\"v\":1", "\"v\":2")).unwrap();
        assert!(matches!(
            read_checkpoint(&state, &task),
            Err(CheckpointError::NewerVersion { found: 2, .. })
        ));
        std::fs::write(
            &path,
            text.replace("\"task_id\":\"t\"", "\"task_id\":\"u\""),
        )
        .unwrap();
        assert!(matches!(
            read_checkpoint(&state, &task),
            Err(CheckpointError::Malformed { .. })
        ));
    }
}

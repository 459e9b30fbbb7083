//! The effects around a failed attempt's diagnosis: what it is diagnosed
//! from (anomalies found by comparing the tree with its checkpoint, the
//! evidence that tells one judged failure from another), partial
//! acceptance, and backing off before a transient retry. The diagnosis
//! itself is `reprise_core::recovery::diagnose`.

use std::path::Path;
use std::time::{Duration, Instant};

use reprise_agents::{AttemptOutcome, AttemptReport, CancelToken};
use reprise_core::digest::tagged_sha256;
use reprise_core::outcome::{self as taxonomy, InfraKind};
use reprise_core::plan::Task;
use reprise_core::recovery::{Anomaly, accepts_partially, path_allowed};
use reprise_store::snapshot::{Checkpoint, SnapshotStore};
use serde::Serialize;

use crate::error::Result;
use crate::state::{AttemptSummary, Outcome};

/// What tells one judged failure from another: the reply and every gate's
/// output, hashed. Only hashes are recorded, never the text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Evidence {
    pub(crate) reply_hash: String,
    pub(crate) gates: Vec<(String, bool, String)>,
}

impl Evidence {
    pub(crate) fn of(report: &AttemptReport, summary: &AttemptSummary) -> Self {
        let reply = match &report.outcome {
            AttemptOutcome::Replied { reply, .. } => reply.as_str(),
            AttemptOutcome::Infra { .. } => "",
        };
        Self {
            reply_hash: tagged_sha256(b"reprise/evidence-reply/v1\n", &[reply.as_bytes()]).to_hex(),
            gates: summary
                .gates
                .iter()
                .map(|gate| {
                    (
                        gate.name.clone(),
                        gate.passed,
                        tagged_sha256(b"reprise/evidence-gate/v1\n", &[gate.output.as_bytes()])
                            .to_hex(),
                    )
                })
                .collect(),
        }
    }
}

/// The gates a judged attempt did not pass, when the passing weight still
/// reaches the task's `accept_partial`; else `None`.
pub(crate) fn partial_gaps(task: &Task, summary: &AttemptSummary) -> Option<Vec<String>> {
    if summary.outcome != Outcome::Judged || summary.gates.is_empty() {
        return None;
    }
    let weighed: Vec<(u32, bool)> = summary
        .gates
        .iter()
        .map(|verdict| {
            let weight = task
                .gates
                .iter()
                .find(|gate| gate.name == verdict.name)
                .map_or(1, |gate| gate.weight);
            (weight, verdict.passed)
        })
        .collect();
    accepts_partially(task.accept_partial_basis_points, &weighed).then(|| {
        summary
            .gates
            .iter()
            .filter(|gate| !gate.passed)
            .map(|gate| gate.name.clone())
            .collect()
    })
}

/// What made the attempt's tree suspect: changes outside the task's
/// `allowed_paths` (found by comparing the tree with the checkpoint taken
/// before the attempt), and gates stopped midway.
pub(crate) fn anomalies(
    task: &Task,
    summary: &AttemptSummary,
    checkpoint: Option<(&SnapshotStore, &Checkpoint)>,
    scratch: &Path,
) -> Result<Vec<Anomaly>> {
    let mut found = Vec::new();
    // Absolute entries name places outside the worktree the sandbox lets the
    // task write (issue 12); only the relative globs restrict the tree.
    let globs: Vec<String> = task
        .allowed_paths
        .iter()
        .filter(|path| !Path::new(path.as_str()).is_absolute())
        .cloned()
        .collect();
    if !globs.is_empty()
        && let Some((store, checkpoint)) = checkpoint
    {
        let changes = store.changes(checkpoint, scratch)?;
        let outside: Vec<String> = changes
            .files
            .into_iter()
            .map(|(_, path)| path)
            .filter(|path| match path.strip_suffix('/') {
                // A directory is inside when something under it may be.
                Some(dir) => {
                    !path_allowed(dir, &globs) && !path_allowed(&format!("{dir}/."), &globs)
                }
                None => !path_allowed(path, &globs),
            })
            .map(|path| path.trim_end_matches('/').to_owned())
            .collect();
        if !outside.is_empty() {
            found.push(Anomaly::WriteOutsideAllowedPaths { paths: outside });
        }
    }
    for gate in summary.gates.iter().filter(|gate| gate.crashed) {
        found.push(Anomaly::GateCrashed {
            gate: gate.name.clone(),
        });
    }
    Ok(found)
}

/// Waits before retrying a provider failure (rate limit, overload, network,
/// API error): 1 s, then 2, 4, ... up to 30 s, ended early by a cancel.
pub(crate) fn back_off(outcome: &taxonomy::AttemptOutcome, attempt: u32, cancel: &CancelToken) {
    let taxonomy::AttemptOutcome::Infra(kind) = outcome else {
        return;
    };
    if !matches!(
        kind,
        InfraKind::RateLimited | InfraKind::Overloaded | InfraKind::Network | InfraKind::ApiError
    ) {
        return;
    }
    let wait =
        Duration::from_secs(1u64 << attempt.saturating_sub(1).min(5)).min(Duration::from_secs(30));
    let until = Instant::now() + wait;
    while Instant::now() < until && !cancel.is_cancelled() {
        std::thread::sleep(Duration::from_millis(20));
    }
}

//! The effects around a failed attempt's diagnosis: what it is diagnosed
//! from (anomalies found by comparing the tree with its checkpoint, the
//! evidence that tells one judged failure from another), partial
//! acceptance, and backing off before a transient retry. The diagnosis
//! itself is `reprise_core::recovery::diagnose`.

use std::path::Path;
use std::time::{Duration, Instant};

use reprise_agents::{AttemptOutcome, AttemptReport, CancelToken, ParkSignal};
use reprise_core::digest::tagged_sha256;
use reprise_core::outcome as taxonomy;
use reprise_core::plan::Task;
use reprise_core::recovery::{
    Anomaly, WaitSource, accepts_partially, back_off as recovery_back_off, path_allowed,
    retry_after,
};
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

/// The changes outside the task's `allowed_paths`, found by comparing the
/// tree with the checkpoint taken before the attempt: checked for every
/// attempt, passing or not, before its gates run (what the gates leave is
/// not the agent's).
pub(crate) fn outside_writes(
    task: &Task,
    checkpoint: Option<(&SnapshotStore, &Checkpoint)>,
    scratch: &Path,
) -> Result<Option<Anomaly>> {
    // Absolute entries name places outside the worktree the sandbox lets the
    // task write (issue 12); only the relative globs restrict the tree.
    let globs: Vec<String> = task
        .allowed_paths
        .iter()
        .filter(|path| !Path::new(path.as_str()).is_absolute())
        .cloned()
        .collect();
    let (false, Some((store, checkpoint))) = (globs.is_empty(), checkpoint) else {
        return Ok(None);
    };
    let changes = store.changes(checkpoint, scratch)?;
    let outside: Vec<String> = changes
        .files
        .into_iter()
        .map(|(_, path)| path)
        .filter(|path| match path.strip_suffix('/') {
            // A directory is inside when something under it may be.
            Some(dir) => !path_allowed(dir, &globs) && !path_allowed(&format!("{dir}/."), &globs),
            None => !path_allowed(path, &globs),
        })
        .map(|path| path.trim_end_matches('/').to_owned())
        .collect();
    Ok((!outside.is_empty()).then_some(Anomaly::WriteOutsideAllowedPaths { paths: outside }))
}

/// What was seen while the attempt ran: changes outside the task's
/// `allowed_paths` (`outside`, see `outside_writes`), gates stopped midway,
/// and an agent stopped for its output (too much of it, or none for too
/// long).
pub(crate) fn anomalies(
    task: &Task,
    summary: &AttemptSummary,
    outside: Option<Anomaly>,
) -> Vec<Anomaly> {
    let mut found: Vec<Anomaly> = outside.into_iter().collect();
    for gate in summary.gates.iter().filter(|gate| gate.crashed) {
        found.push(match gate.timed_out_after_ms {
            Some(timeout_ms) => Anomaly::GateTimedOut {
                gate: gate.name.clone(),
                timeout_ms,
            },
            None => Anomaly::GateCrashed {
                gate: gate.name.clone(),
            },
        });
    }
    // What the process driver's watch stopped, with the bound it passed.
    match summary.infra_kind.as_deref() {
        Some("output_limit") => found.push(Anomaly::OutputLimit {
            limit_bytes: task.max_output_bytes.unwrap_or(0),
        }),
        Some("idle_timeout") => found.push(Anomaly::IdleTimeout {
            idle_ms: task.idle_timeout.map_or(0, |idle| {
                u64::try_from(idle.as_millis()).unwrap_or(u64::MAX)
            }),
        }),
        _ => {}
    }
    found
}

/// Waits before retrying a provider failure (rate limit, overload, network,
/// API error) for as long as the core's `back_off` says: the provider's own
/// retry-after when its error text gives one, else 1 s, 2, 4 ... 30 s.
/// Ended early by a cancel. Returns what it waited, for the record.
pub(crate) fn back_off(
    outcome: &taxonomy::AttemptOutcome,
    report: Option<&AttemptReport>,
    attempt: u32,
    cancel: &CancelToken,
) -> Option<(Duration, WaitSource)> {
    let taxonomy::AttemptOutcome::Infra(kind) = outcome else {
        return None;
    };
    let now_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    // A usage limit's reset, as the adapter read it (until the engine parks
    // on it, it is waited for like a provider's retry-after).
    let until = report.and_then(|report| match report.park {
        Some(ParkSignal::Until { unix, .. }) => {
            Some(Duration::from_secs(unix.saturating_sub(now_unix)))
        }
        _ => None,
    });
    let hint = until.or_else(|| {
        report.and_then(|report| match &report.outcome {
            AttemptOutcome::Infra { detail, .. } => retry_after(detail, now_unix),
            AttemptOutcome::Replied { .. } => None,
        })
    });
    let (wait, source) = recovery_back_off(*kind, attempt, hint)?;
    let until = Instant::now() + wait;
    while Instant::now() < until && !cancel.is_cancelled() {
        std::thread::sleep(Duration::from_millis(20));
    }
    Some((wait, source))
}

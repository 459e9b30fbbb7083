use std::collections::BTreeSet;

use serde_json::json;

use super::*;
use crate::canonical::value_to_canonical_vec;

/// Bodies of every shape the fixture state directory's rows have
/// (`crates/reprise-cli/tests/fixtures/rows`), one JSON object a line:
/// `{chain, kind, body}`, taken from the rows as reprise wrote them.
const SAMPLES: &str = include_str!("samples.jsonl");

/// Parses `body` as `T`, serialises it back, and checks it is the same
/// JSON and the same canonical bytes.
fn round_trips<T: RowBody>(body: &Value) {
    let typed = T::from_body(body)
        .unwrap_or_else(|| panic!("{} does not parse as its type: {body}", T::KIND));
    let again = typed.to_body();
    assert_eq!(&again, body, "{} changed on the way back", T::KIND);
    assert_eq!(
        value_to_canonical_vec(&again, "$").unwrap(),
        value_to_canonical_vec(body, "$").unwrap(),
        "{}",
        T::KIND
    );
}

/// Round-trips a row of `kind` in `chain` through its body type; the kind
/// and chain the type declares are the row's.
fn check(chain: &str, kind: Kind, body: &Value) -> (Chain, Kind) {
    fn go<T: RowBody>(body: &Value) -> (Chain, Kind) {
        round_trips::<T>(body);
        (T::CHAIN, T::KIND)
    }
    match (chain, kind) {
        ("journal", Kind::TaskStarted) => go::<TaskStarted>(body),
        ("journal", Kind::CheckpointTaken) => go::<CheckpointTaken>(body),
        ("journal", Kind::AttemptStarted) => go::<AttemptStarted>(body),
        ("journal", Kind::TaskCheckpoint) => go::<TaskCheckpoint>(body),
        ("journal", Kind::AttemptFinished) => go::<AttemptFinished>(body),
        ("journal", Kind::AttemptAnomaly) => go::<AttemptAnomaly>(body),
        ("journal", Kind::RecoveryDiagnosis) => go::<RecoveryDiagnosis>(body),
        ("journal", Kind::RecoveryBackOff) => go::<RecoveryBackOff>(body),
        ("journal", Kind::RetryBudget) => go::<RetryBudgetUsed>(body),
        ("journal", Kind::RetryBudgetRefused) => go::<RetryBudgetRefused>(body),
        ("journal", Kind::RetryDecision) => go::<RetryDecision>(body),
        ("spine", Kind::RetryDecision) => go::<crate::retry::DecisionRecord>(body),
        ("journal", Kind::CheckpointRestored) => go::<CheckpointRestored>(body),
        ("journal", Kind::TaskPartial) => go::<TaskPartial>(body),
        ("journal", Kind::TaskResult) => go::<TaskResult>(body),
        ("journal", Kind::JournalTailRepaired) => go::<JournalTailRepaired>(body),
        ("journal", Kind::TaskFinished) => go::<TaskFinished>(body),
        ("journal", Kind::TaskSuspend) => go::<SuspendBody>(body),
        ("journal", Kind::TaskResume) => go::<ResumeBody>(body),
        ("journal", Kind::TaskContinued) => go::<TaskContinued>(body),
        ("journal", Kind::TaskPause) => go::<TaskPause>(body),
        ("journal", Kind::TaskUnpause) => go::<TaskUnpause>(body),
        ("journal", Kind::TaskAgentCheckpoint) => go::<AgentCheckpointBound>(body),
        ("journal", Kind::TaskGrantContinuation) => go::<GrantContinued>(body),
        ("audit", Kind::StateInit) => go::<StateInit>(body),
        ("audit", Kind::StateAdopt) => go::<StateAdopt>(body),
        ("audit", Kind::StateMigrate) => go::<MigrateBody>(body),
        ("audit", Kind::JournalSeal) => go::<crate::record::SealBody>(body),
        ("audit", Kind::LedgerSeal) => go::<crate::witness::LedgerSealBody>(body),
        ("audit", Kind::RetryCheckpointDecision) => go::<DecisionBinding>(body),
        ("audit", Kind::CheckpointRestored) => go::<RestoredBinding>(body),
        ("audit", Kind::TaskSuspendReceipt) => go::<SuspendReceipt>(body),
        ("audit", Kind::TaskSuspendResourceRelease) => go::<Release>(body),
        ("audit", Kind::TaskResumeReceipt) => go::<ResumeReceipt>(body),
        ("audit", Kind::TaskGrantContinuation) => go::<GrantContinuation>(body),
        ("audit", Kind::TaskApproval) => go::<ApprovalBinding>(body),
        ("ledger", Kind::RunStarted) => go::<RunStarted>(body),
        ("ledger", Kind::TaskTransition) => go::<TaskTransition>(body),
        other => panic!("no body type for {other:?}"),
    }
}

#[test]
fn every_kind_has_one_name_and_reads_back_from_it() {
    let names: BTreeSet<&str> = Kind::ALL.iter().map(|kind| kind.as_str()).collect();
    assert_eq!(names.len(), Kind::ALL.len(), "two kinds share a name");
    for kind in Kind::ALL {
        assert_eq!(Kind::parse(kind.as_str()), Some(*kind));
        let json = serde_json::to_value(kind).unwrap();
        assert_eq!(json, json!(kind.as_str()));
        assert_eq!(serde_json::from_value::<Kind>(json).unwrap(), *kind);
        assert_eq!(kind.to_string(), kind.as_str());
    }
    assert_eq!(Kind::parse("retry.decisions"), None);
    assert!(serde_json::from_value::<Kind>(json!("nope")).is_err());
    assert_eq!(Kind::RetryDecision, "retry.decision");
    assert_eq!("retry.decision".to_owned(), Kind::RetryDecision);
}

#[test]
fn every_row_reprise_wrote_round_trips_through_its_body_type_to_the_same_bytes() {
    let mut seen = BTreeSet::new();
    for line in SAMPLES.lines() {
        let sample: Value = serde_json::from_str(line).unwrap();
        let chain = sample["chain"].as_str().unwrap();
        let kind = Kind::parse(sample["kind"].as_str().unwrap())
            .unwrap_or_else(|| panic!("an unknown kind: {line}"));
        let (declared_chain, declared_kind) = check(chain, kind, &sample["body"]);
        assert_eq!(declared_kind, kind);
        assert_eq!(
            format!("{declared_chain:?}").to_lowercase(),
            chain,
            "{kind}"
        );
        seen.insert((chain.to_owned(), kind));
    }
    // The fixture's runs wrote 31 kinds (per chain); the others are pinned
    // against their writers' bodies below.
    assert_eq!(seen.len(), 31, "{seen:?}");
}

/// Kinds the fixture does not hold, each against the body its writer
/// builds (the `json!` it had), with every optional member both ways.
#[test]
fn kinds_the_fixture_lacks_serialise_as_their_writers_wrote_them() {
    let hash = "ab".repeat(32);
    let policy =
        json!({"budgeted": false, "max_attempts": 3, "rollback": "auto", "snapshots": true});
    let requester = json!({"pid": 7, "uid": 1000, "command": "reprise task pause t"});
    let cases: Vec<(&str, Kind, Value)> = vec![
        (
            "journal",
            Kind::RecoveryBackOff,
            json!({"run_id": "R-1", "attempt": 2, "wait_ms": 1500, "source": "retry_after"}),
        ),
        (
            "journal",
            Kind::RetryBudgetRefused,
            json!({"run_id": "R-1", "attempt": 3, "reason": "the budget could not be read"}),
        ),
        (
            "journal",
            Kind::RetryBudgetRefused,
            json!({"run_id": "R-1", "attempt": 3, "decision": {"should_retry": false,
                "retry_number": 0, "degraded_criterion": null, "degradation_kind": "past_policy",
                "criteria": [], "retries_used": 3, "retries_left": 0, "reason": "spent"}}),
        ),
        (
            "journal",
            Kind::JournalTailRepaired,
            json!({"run_id": "R-1", "attempt": 2, "verification": "torn_tail",
                "removed_bytes": 17, "head_seq": 9, "kept_at": "/s/journal.jsonl.torn"}),
        ),
        (
            "journal",
            Kind::JournalTailRepaired,
            json!({"run_id": "R-1", "attempt": 1, "verification": "torn_tail",
                "removed_bytes": 17, "head_seq": null, "kept_at": "/s/journal.jsonl.torn"}),
        ),
        (
            "journal",
            Kind::TaskContinued,
            json!({"run_id": "R-1", "from": {"running": {"attempt": 2, "resumed": true}},
                "lifecycle": policy, "interrupted_attempt": 2}),
        ),
        (
            "journal",
            Kind::TaskContinued,
            json!({"run_id": "R-1", "from": "queued", "lifecycle": policy,
                "interrupted_attempt": null, "cancelled": true}),
        ),
        (
            "journal",
            Kind::TaskPause,
            json!({"run_id": "R-1", "attempt": 1, "session_id": "s", "workspace_hash": hash,
                "upgrade_after_ms": null}),
        ),
        (
            "journal",
            Kind::TaskPause,
            json!({"run_id": "R-1", "attempt": 1, "session_id": null, "workspace_hash": hash,
                "upgrade_after_ms": 60000, "requested_by": requester}),
        ),
        (
            "journal",
            Kind::TaskUnpause,
            json!({"run_id": "R-1", "attempt": 2, "pause": hash, "mode": "cold",
                "downgrade_reason": "workspace_hash_mismatch", "workspace_hash": hash,
                "lifecycle": policy, "requested_by": requester}),
        ),
        (
            "journal",
            Kind::TaskCheckpoint,
            json!({"run_id": "R-1", "attempt": 1, "session_id": "s", "workspace_hash": hash,
                "session_model": "opus", "session_saved": false}),
        ),
        (
            "journal",
            Kind::TaskCheckpoint,
            json!({"run_id": "R-1", "attempt": 1, "session_id": null, "workspace_hash": hash,
                "interrupted": true}),
        ),
        (
            "journal",
            Kind::TaskResult,
            json!({"run_id": "R-1", "base_commit": "c0", "error": "the result could not be committed: x"}),
        ),
        (
            "journal",
            Kind::TaskResult,
            json!({"run_id": "R-1", "base_commit": "c0", "commit": "c1", "branch": "reprise/R-1/t",
                "files_changed": 1, "commit_us": 5, "replaced": "c9"}),
        ),
        (
            "journal",
            Kind::AttemptStarted,
            json!({"run_id": "R-1", "attempt": 2, "mode": "fork",
                "session": {"fork": "s", "new": "s2"}, "prompt_bytes": 10}),
        ),
        (
            "audit",
            Kind::StateMigrate,
            json!({"from": 1, "to": 2, "tasks": [{"task_id": "t", "plan": "p"}]}),
        ),
    ];
    for (chain, kind, body) in &cases {
        check(chain, *kind, body);
    }
}

#[test]
fn repair_rows_keep_their_nulls_and_name_a_task_only_for_its_chains() {
    for body in [
        json!({"removed_bytes": 3, "head_seq": null, "head_hash": null}),
        json!({"removed_bytes": 3, "head_seq": 4, "head_hash": "ab".repeat(32),
            "plan": "p", "task_id": "t"}),
    ] {
        let typed: RepairBody = serde_json::from_value(body.clone()).unwrap();
        assert_eq!(serde_json::to_value(&typed).unwrap(), body);
    }
}

#[test]
fn modes_states_and_outcomes_keep_the_names_rows_hold() {
    for mode in [
        AttemptMode::New,
        AttemptMode::Warm,
        AttemptMode::Fork,
        AttemptMode::Cold,
    ] {
        assert_eq!(serde_json::to_value(mode).unwrap(), json!(mode.as_str()));
        assert_eq!(AttemptMode::parse(mode.as_str()), Some(mode));
    }
    assert_eq!(
        AttemptMode::from(crate::retry::RetryMode::Fork),
        AttemptMode::Fork
    );
    for state in TaskStatus::ALL {
        assert_eq!(serde_json::to_value(state).unwrap(), json!(state.as_str()));
        assert_eq!(TaskStatus::parse(state.as_str()), Some(state));
    }
    for accepted in [
        Accepted::Passed,
        Accepted::Partial,
        Accepted::Failed,
        Accepted::Parked,
        Accepted::Paused,
    ] {
        assert_eq!(
            serde_json::to_value(accepted).unwrap(),
            json!(accepted.as_str())
        );
    }
}

#[test]
fn a_result_that_changed_nothing_names_no_commit_and_no_branch() {
    let body = json!({"run_id": "R-1", "base_commit": "c0", "commit": null, "branch": null,
        "files_changed": 0, "commit_us": 5});
    round_trips::<TaskResult>(&body);
    assert!(matches!(
        TaskResult::from_body(&body),
        Some(TaskResult::Committed { branch: None, .. })
    ));
}

#[test]
fn the_parts_of_task_rows_keep_their_shape() {
    let containment = json!({"mode": "strict", "sandboxed": true, "denied": ["x: denied"]});
    let typed: Containment = serde_json::from_value(containment.clone()).unwrap();
    assert_eq!(serde_json::to_value(&typed).unwrap(), containment);
    let modification = json!({"needs_context_hash": null, "timeout_ms": 5,
        "prompt_added": true, "model": null});
    let typed: RetryModification = serde_json::from_value(modification.clone()).unwrap();
    assert_eq!(serde_json::to_value(&typed).unwrap(), modification);
    for detail in [
        json!({"stopped": true, "reaped": true, "attempt": 2}),
        json!({"stopped": false, "reaped": true, "attempt": 1, "note": "no live process"}),
    ] {
        let typed: ProcessReleased = serde_json::from_value(detail.clone()).unwrap();
        assert_eq!(serde_json::to_value(&typed).unwrap(), detail);
    }
}

// ---- run, park and delivery rows (engine run code) ----

/// Each release's detail in the fixture parses as its resource's type and
/// serialises back to the same JSON.
#[test]
fn release_details_round_trip_through_their_resource_types() {
    fn same<T: Serialize + serde::de::DeserializeOwned>(detail: &Value) -> T {
        let typed: T = serde_json::from_value(detail.clone())
            .unwrap_or_else(|err| panic!("{detail} does not parse: {err}"));
        assert_eq!(&serde_json::to_value(&typed).unwrap(), detail);
        typed
    }
    let mut seen = BTreeSet::new();
    for line in SAMPLES.lines() {
        let sample: Value = serde_json::from_str(line).unwrap();
        if sample["kind"] != Kind::TaskSuspendResourceRelease.as_str() {
            continue;
        }
        let release: Release = serde_json::from_value(sample["body"].clone()).unwrap();
        match release.resource {
            Resource::Process => {
                same::<ProcessReleased>(&release.detail);
            }
            Resource::Sandbox => {
                let sandbox = same::<SandboxReleased>(&release.detail);
                assert!(sandbox.restorable().is_some());
            }
            Resource::Seat => {
                same::<SeatReleased>(&release.detail);
            }
            Resource::Budget => {
                same::<BudgetReleased>(&release.detail);
            }
        }
        seen.insert(release.resource.as_str());
    }
    assert_eq!(seen.len(), 4, "{seen:?}");
}

/// The details of a park completed with no live run, as their `json!` had
/// them, and a worktree that was not removed restores nothing.
#[test]
fn details_of_a_park_with_no_live_run_keep_their_shape() {
    assert_eq!(
        serde_json::to_value(ProcessReleased::gone(3)).unwrap(),
        json!({"stopped": false, "reaped": true, "attempt": 3,
               "note": "no live process: the run that drove it had ended"})
    );
    assert_eq!(
        serde_json::to_value(SeatReleased::not_held()).unwrap(),
        json!({"held": false, "note": "no live run held a seat for it"})
    );
    let budget = BudgetReleased::not_held();
    assert_eq!(
        serde_json::to_value(&budget).unwrap(),
        json!({"returned_micro_usd": 0, "note": "no live run held a reservation for it"})
    );
    assert_eq!(budget.returned_micro_usd(), 0);
    let kept = SandboxReleased {
        checkpoint: None,
        path: PathBuf::from("/w"),
        removed: false,
        files: None,
    };
    assert_eq!(
        serde_json::to_value(&kept).unwrap(),
        json!({"checkpoint": null, "path": "/w", "removed": false, "files": null})
    );
    assert_eq!(kept.restorable(), None);
}

#[test]
fn task_states_stand_for_scheduling_as_they_did() {
    use crate::schedule::Standing;
    let expected = [
        (TaskStatus::Queued, false, false, Standing::Queued),
        (TaskStatus::Running, false, false, Standing::Running),
        (TaskStatus::Passed, true, true, Standing::Delivered),
        (TaskStatus::Partial, true, true, Standing::Delivered),
        (TaskStatus::Failed, true, false, Standing::Undelivered),
        (TaskStatus::Blocked, true, false, Standing::Blocked),
        (TaskStatus::Cancelled, true, false, Standing::Undelivered),
        (TaskStatus::Suspended, false, false, Standing::Parked),
    ];
    for (state, terminal, delivered, standing) in expected {
        assert_eq!(state.is_terminal(), terminal, "{state:?}");
        assert_eq!(state.delivered(), delivered, "{state:?}");
        assert_eq!(state.standing(), standing, "{state:?}");
    }
}

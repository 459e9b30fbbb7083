//! The retry decision: warm, fork or cold, as a pure function of recorded
//! facts (DESIGN.md section 5).
//!
//! A retry resumes the agent's own session (warm), branches it (fork), or
//! starts fresh (cold). Which one is never a guess: `decide` walks a fixed
//! table of conditions and the first match wins, and every downgrade carries
//! its reason. The inputs come from a journal whose whole chain verified, so a
//! tampered checkpoint can only ever make a retry cold.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::TaskId;
use crate::canonical::EncodeError;
use crate::digest::Digest;
use crate::record::decision_hash;

/// The words a retry is decided in live in their own module, which the
/// cost prediction shares without depending on the decision table; they stay
/// reachable here, where callers have always named them.
pub use crate::retry_mode::{Capability, ResumeStrategy, RetryMode};

/// Why a retry runs in another mode than the one requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DowngradeReason {
    FreshContextPinned,
    AdapterCapabilityNone,
    JournalUnverified,
    NoCheckpoint,
    NoSessionId,
    /// The CLI reported the session but did not save it where its adapter
    /// looks (its session store could not be written): nothing to resume.
    SessionNotSaved,
    WorkspaceHashMismatch,
    /// The session was saved on a fleet worker this attempt does not run
    /// on (the task was taken over after that host was lost): it cannot be
    /// resumed here.
    SessionOnOtherHost,
    ForkUnsupported,
    /// Recorded by the second decision, when the session could not be resumed.
    SessionUnavailable,
    /// The decision path itself failed (a chain could not be read or
    /// written): the retry goes cold, and this says why.
    DecisionFailed,
}

impl DowngradeReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FreshContextPinned => "fresh_context_pinned",
            Self::AdapterCapabilityNone => "adapter_capability_none",
            Self::JournalUnverified => "journal_unverified",
            Self::NoCheckpoint => "no_checkpoint",
            Self::NoSessionId => "no_session_id",
            Self::SessionNotSaved => "session_not_saved",
            Self::WorkspaceHashMismatch => "workspace_hash_mismatch",
            Self::SessionOnOtherHost => "session_on_other_host",
            Self::ForkUnsupported => "fork_unsupported",
            Self::SessionUnavailable => "session_unavailable",
            Self::DecisionFailed => "decision_failed",
        }
    }
}

/// The facts a `task.checkpoint` row records after an attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The agent's native session id, when it reported one.
    pub session_id: Option<String>,
    /// False when the attempt found that the CLI did not save that session
    /// where its adapter looks for it (the row says `session_saved: false`).
    pub session_saved: bool,
    /// The workspace hash after the attempt.
    pub workspace_hash: Digest,
    /// The `event_hash` of the checkpoint row: the checkpoint's identity.
    pub event_hash: Digest,
}

/// Everything `decide` looks at.
#[derive(Debug, Clone, Copy)]
pub struct DecisionInput<'a> {
    /// The task's `retry_policy`.
    pub requested: RetryMode,
    pub capability: Capability,
    /// The latest checkpoint of the journal; `None` when there is none. Only
    /// meaningful when `chain_verified`.
    pub checkpoint: Option<&'a Checkpoint>,
    /// The workspace hash now, before the retry.
    pub live_workspace_hash: Digest,
    /// The task is pinned to fresh context (`agent_restart_between_retries`).
    pub fresh_pinned: bool,
    /// The journal's whole chain verified.
    pub chain_verified: bool,
    /// The checkpoint's session is held by another host than the one the
    /// retry runs on (a fleet task taken over after its host was lost).
    pub session_elsewhere: bool,
}

/// The mode a retry runs in, and why it is not the requested one.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub mode: RetryMode,
    pub requested: RetryMode,
    pub downgrade_reason: Option<DowngradeReason>,
}

impl Decision {
    fn cold(requested: RetryMode, reason: Option<DowngradeReason>) -> Self {
        Self {
            mode: RetryMode::Cold,
            requested,
            downgrade_reason: reason,
        }
    }
}

/// Decides how a retry runs. First match wins:
///
/// | # | condition | mode | reason |
/// |---|---|---|---|
/// | 1 | pinned to fresh context | cold | `fresh_context_pinned` |
/// | 2 | requested cold | cold | none |
/// | 3 | capability none | cold | `adapter_capability_none` |
/// | 4 | journal did not verify | cold | `journal_unverified` |
/// | 5 | no checkpoint | cold | `no_checkpoint` |
/// | 6 | checkpoint has no session id | cold | `no_session_id` |
/// | 7 | the CLI did not save that session | cold | `session_not_saved` |
/// | 8 | workspace differs from the checkpoint | cold | `workspace_hash_mismatch` |
/// | 9 | fork requested, capability resume | warm | `fork_unsupported` |
/// | 10 | otherwise | as requested | none |
pub fn decide(input: DecisionInput<'_>) -> Decision {
    use DowngradeReason::*;
    let requested = input.requested;
    if input.fresh_pinned {
        return Decision::cold(requested, Some(FreshContextPinned));
    }
    if requested == RetryMode::Cold {
        return Decision::cold(requested, None);
    }
    if input.capability == Capability::None {
        return Decision::cold(requested, Some(AdapterCapabilityNone));
    }
    if !input.chain_verified {
        return Decision::cold(requested, Some(JournalUnverified));
    }
    let Some(checkpoint) = input.checkpoint else {
        return Decision::cold(requested, Some(NoCheckpoint));
    };
    if checkpoint.session_id.is_none() {
        return Decision::cold(requested, Some(NoSessionId));
    }
    if !checkpoint.session_saved {
        return Decision::cold(requested, Some(SessionNotSaved));
    }
    if input.session_elsewhere {
        return Decision::cold(requested, Some(SessionOnOtherHost));
    }
    if checkpoint.workspace_hash != input.live_workspace_hash {
        return Decision::cold(requested, Some(WorkspaceHashMismatch));
    }
    if requested == RetryMode::Fork && input.capability == Capability::Resume {
        return Decision {
            mode: RetryMode::Warm,
            requested,
            downgrade_reason: Some(ForkUnsupported),
        };
    }
    Decision {
        mode: requested,
        requested,
        downgrade_reason: None,
    }
}

/// The second decision, when a warm or fork attempt finds its session gone
/// (the CLI says so, or the preserved transcript is missing or dangling).
pub fn session_unavailable(first: Decision) -> Decision {
    Decision::cold(first.requested, Some(DowngradeReason::SessionUnavailable))
}

/// The canonical record of a decision: what `decision_hash` names, what the
/// spine seals, and what the audit row binds. Ids, hashes, modes and reasons
/// only; never prompt text, gate output or session contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionRecord {
    pub task_id: TaskId,
    pub adapter: String,
    pub capability: Capability,
    pub requested_mode: RetryMode,
    pub retry_mode: RetryMode,
    pub checkpoint_session_id: Option<String>,
    pub checkpoint_event_hash: Option<Digest>,
    pub recorded_workspace_hash: Option<Digest>,
    pub live_workspace_hash: Digest,
    /// Whether the live workspace matches the checkpoint; `None` without one.
    pub workspace_match: Option<bool>,
    pub downgrade_reason: Option<DowngradeReason>,
    /// The corrective-instruction template, for warm and fork.
    pub template_id: Option<String>,
    /// SHA-256 of the instruction sent, for warm and fork.
    pub instruction_hash: Option<Digest>,
    /// Under `retry_policy: auto`: the mode it asked for (`requested_mode`),
    /// why, and every mode's predicted cost. Absent under a fixed policy, so
    /// those records hash as they always did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto: Option<crate::retry_cost::AutoChoice>,
    /// Every mode's predicted cost under any policy, when the session's size
    /// and its CLI's caching are known (absent otherwise, as in older records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted: Option<crate::retry_cost::Predicted>,
}

impl DecisionRecord {
    /// Builds the record of `decision` for a task and adapter.
    pub fn new(
        task_id: &TaskId,
        adapter: &str,
        input: &DecisionInput<'_>,
        decision: Decision,
        instruction: Option<(&str, Digest)>,
    ) -> Self {
        let resumes = decision.mode != RetryMode::Cold;
        Self {
            task_id: task_id.clone(),
            adapter: adapter.to_owned(),
            capability: input.capability,
            requested_mode: decision.requested,
            retry_mode: decision.mode,
            checkpoint_session_id: input.checkpoint.and_then(|cp| cp.session_id.clone()),
            checkpoint_event_hash: input.checkpoint.map(|cp| cp.event_hash),
            recorded_workspace_hash: input.checkpoint.map(|cp| cp.workspace_hash),
            live_workspace_hash: input.live_workspace_hash,
            workspace_match: input
                .checkpoint
                .map(|cp| cp.workspace_hash == input.live_workspace_hash),
            downgrade_reason: decision.downgrade_reason,
            template_id: instruction
                .filter(|_| resumes)
                .map(|(template, _)| template.to_owned()),
            instruction_hash: instruction.filter(|_| resumes).map(|(_, hash)| hash),
            auto: None,
            predicted: None,
        }
    }

    /// The second record, when the session this decision would resume turns
    /// out to be gone: cold, for `session_unavailable`, with no instruction.
    pub fn session_unavailable(&self) -> Self {
        Self {
            retry_mode: RetryMode::Cold,
            downgrade_reason: Some(DowngradeReason::SessionUnavailable),
            template_id: None,
            instruction_hash: None,
            ..self.clone()
        }
    }

    /// The cold fallback recorded when the decision path failed: no
    /// checkpoint is trusted and no instruction is sent.
    pub fn decision_failed(
        task_id: &TaskId,
        adapter: &str,
        capability: Capability,
        requested: RetryMode,
        live_workspace_hash: Digest,
    ) -> Self {
        Self {
            task_id: task_id.clone(),
            adapter: adapter.to_owned(),
            capability,
            requested_mode: requested,
            retry_mode: RetryMode::Cold,
            checkpoint_session_id: None,
            checkpoint_event_hash: None,
            recorded_workspace_hash: None,
            live_workspace_hash,
            workspace_match: None,
            downgrade_reason: Some(DowngradeReason::DecisionFailed),
            template_id: None,
            instruction_hash: None,
            auto: None,
            predicted: None,
        }
    }

    /// The record as a JSON value (its canonical bytes are what is hashed).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("decision records serialise")
    }

    /// SHA-256 over the record's canonical bytes, under the decision tag.
    pub fn hash(&self) -> Result<Digest, EncodeError> {
        decision_hash(&self.to_value())
    }

    /// The `retry_*` metadata stamped on the retried task.
    pub fn metadata(
        &self,
        corrective_instruction: Option<&str>,
    ) -> Result<BTreeMap<String, Value>, EncodeError> {
        let mut out = BTreeMap::new();
        out.insert("retry_mode".into(), json!(self.retry_mode));
        out.insert("retry_requested_mode".into(), json!(self.requested_mode));
        out.insert("retry_decision_hash".into(), json!(self.hash()?));
        if let Some(reason) = self.downgrade_reason {
            out.insert("retry_downgrade_reason".into(), json!(reason));
        }
        if let Some(auto) = &self.auto {
            out.insert("retry_auto".into(), json!(auto));
        }
        if let Some(predicted) = &self.predicted {
            out.insert("retry_predicted".into(), json!(predicted.describe()));
        }
        if self.retry_mode != RetryMode::Cold {
            out.insert(
                "retry_checkpoint_session_id".into(),
                json!(self.checkpoint_session_id),
            );
            out.insert(
                "retry_checkpoint_event_hash".into(),
                json!(self.checkpoint_event_hash),
            );
            if let Some(instruction) = corrective_instruction {
                out.insert("retry_corrective_instruction".into(), json!(instruction));
            }
        }
        Ok(out)
    }
}

/// The metadata stamp when the decision path itself failed: the retry goes
/// on, cold.
pub fn failed_decision_metadata() -> BTreeMap<String, Value> {
    BTreeMap::from([
        ("retry_mode".to_owned(), json!(RetryMode::Cold)),
        (
            "retry_downgrade_reason".to_owned(),
            json!(DowngradeReason::DecisionFailed),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::tagged_sha256;

    const MODES: [RetryMode; 3] = [RetryMode::Warm, RetryMode::Fork, RetryMode::Cold];
    const CAPABILITIES: [Capability; 3] = [Capability::Fork, Capability::Resume, Capability::None];

    fn hash(text: &str) -> Digest {
        tagged_sha256(b"test\n", &[text.as_bytes()])
    }

    /// The table of DESIGN.md section 5, written out row by row as data.
    #[expect(clippy::too_many_arguments)] // one argument per condition of the table
    fn expected(
        requested: RetryMode,
        capability: Capability,
        has_checkpoint: bool,
        has_session: bool,
        saved: bool,
        chain_ok: bool,
        workspace_match: bool,
        (pinned, elsewhere): (bool, bool),
    ) -> (RetryMode, Option<DowngradeReason>) {
        use DowngradeReason::*;
        let rows: [(bool, RetryMode, Option<DowngradeReason>); 10] = [
            (pinned, RetryMode::Cold, Some(FreshContextPinned)),
            (requested == RetryMode::Cold, RetryMode::Cold, None),
            (
                capability == Capability::None,
                RetryMode::Cold,
                Some(AdapterCapabilityNone),
            ),
            (!chain_ok, RetryMode::Cold, Some(JournalUnverified)),
            (!has_checkpoint, RetryMode::Cold, Some(NoCheckpoint)),
            (!has_session, RetryMode::Cold, Some(NoSessionId)),
            (!saved, RetryMode::Cold, Some(SessionNotSaved)),
            (elsewhere, RetryMode::Cold, Some(SessionOnOtherHost)),
            (
                !workspace_match,
                RetryMode::Cold,
                Some(WorkspaceHashMismatch),
            ),
            (
                requested == RetryMode::Fork && capability == Capability::Resume,
                RetryMode::Warm,
                Some(ForkUnsupported),
            ),
        ];
        rows.iter()
            .find(|(condition, _, _)| *condition)
            .map(|(_, mode, reason)| (*mode, *reason))
            .unwrap_or((requested, None))
    }

    #[test]
    fn every_combination_follows_the_table() {
        let mut seen = std::collections::BTreeSet::new();
        let mut count = 0;
        for requested in MODES {
            for capability in CAPABILITIES {
                for has_checkpoint in [false, true] {
                    for has_session in [false, true] {
                        for saved in [false, true] {
                            for chain_ok in [false, true] {
                                for workspace_match in [false, true] {
                                    for (pinned, elsewhere) in [false, true]
                                        .into_iter()
                                        .flat_map(|pinned| [(pinned, false), (pinned, true)])
                                    {
                                        let checkpoint = Checkpoint {
                                            session_id: has_session.then(|| "s-1".to_owned()),
                                            session_saved: saved,
                                            workspace_hash: hash("recorded"),
                                            event_hash: hash("row"),
                                        };
                                        let live = if workspace_match {
                                            hash("recorded")
                                        } else {
                                            hash("edited")
                                        };
                                        let decision = decide(DecisionInput {
                                            requested,
                                            capability,
                                            checkpoint: has_checkpoint.then_some(&checkpoint),
                                            live_workspace_hash: live,
                                            fresh_pinned: pinned,
                                            chain_verified: chain_ok,
                                            session_elsewhere: elsewhere,
                                        });
                                        let want = expected(
                                            requested,
                                            capability,
                                            has_checkpoint,
                                            has_session,
                                            saved,
                                            chain_ok,
                                            workspace_match,
                                            (pinned, elsewhere),
                                        );
                                        assert_eq!(
                                            (decision.mode, decision.downgrade_reason),
                                            want,
                                            "{requested:?} {capability:?} cp={has_checkpoint} session={has_session} saved={saved} \
                                         chain={chain_ok} match={workspace_match} pinned={pinned} elsewhere={elsewhere}"
                                        );
                                        assert_eq!(decision.requested, requested);
                                        seen.insert(format!(
                                            "{:?}",
                                            (decision.mode, decision.downgrade_reason)
                                        ));
                                        count += 1;
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(count, 3 * 3 * 2 * 2 * 2 * 2 * 2 * 2 * 2);
        // Every row of the table is reached, plus warm and fork as requested.
        assert_eq!(seen.len(), 12, "{seen:?}");
    }

    #[test]
    fn capability_comes_from_the_declared_strategy() {
        assert_eq!(
            ResumeStrategy::NativeForkable.capability(),
            Capability::Fork
        );
        assert_eq!(ResumeStrategy::Native.capability(), Capability::Resume);
        assert_eq!(ResumeStrategy::Unsupported.capability(), Capability::None);
    }

    #[test]
    fn a_lost_session_falls_back_to_cold_with_its_reason() {
        let first = Decision {
            mode: RetryMode::Warm,
            requested: RetryMode::Warm,
            downgrade_reason: None,
        };
        assert_eq!(
            session_unavailable(first),
            Decision {
                mode: RetryMode::Cold,
                requested: RetryMode::Warm,
                downgrade_reason: Some(DowngradeReason::SessionUnavailable)
            }
        );
    }

    fn sample_record(mode: RetryMode) -> DecisionRecord {
        let checkpoint = Checkpoint {
            session_id: Some("7d3a3f4e-1b2c-4d5e-8f90-a1b2c3d4e5f6".into()),
            session_saved: true,
            workspace_hash: Digest([0x11; 32]),
            event_hash: Digest([0x22; 32]),
        };
        let input = DecisionInput {
            requested: mode,
            capability: Capability::Fork,
            checkpoint: Some(&checkpoint),
            live_workspace_hash: Digest([0x11; 32]),
            fresh_pinned: false,
            chain_verified: true,
            session_elsewhere: false,
        };
        let decision = decide(input);
        DecisionRecord::new(
            &TaskId::parse("add-greeting").unwrap(),
            "sim",
            &input,
            decision,
            Some(("corrective/v1", Digest([0x33; 32]))),
        )
    }

    #[test]
    fn decision_hashes_are_pinned() {
        // Golden values: a change to the record's shape or encoding breaks them.
        let warm = sample_record(RetryMode::Warm);
        assert_eq!(
            String::from_utf8(crate::canonical::to_canonical_vec(&warm).unwrap()).unwrap(),
            concat!(
                r#"{"adapter":"sim","capability":"fork","checkpoint_event_hash":"2222222222222222222222222222222222222222222222222222222222222222","#,
                r#""checkpoint_session_id":"7d3a3f4e-1b2c-4d5e-8f90-a1b2c3d4e5f6","downgrade_reason":null,"#,
                r#""instruction_hash":"3333333333333333333333333333333333333333333333333333333333333333","#,
                r#""live_workspace_hash":"1111111111111111111111111111111111111111111111111111111111111111","#,
                r#""recorded_workspace_hash":"1111111111111111111111111111111111111111111111111111111111111111","#,
                r#""requested_mode":"warm","retry_mode":"warm","task_id":"add-greeting","template_id":"corrective/v1","#,
                r#""workspace_match":true}"#
            )
        );
        assert_eq!(warm.hash().unwrap().to_hex(), GOLDEN_WARM);
        let cold = sample_record(RetryMode::Cold);
        assert_eq!(
            cold.template_id, None,
            "a cold retry sends no corrective instruction"
        );
        assert_ne!(cold.hash().unwrap(), warm.hash().unwrap());
        // Identical decisions hash identically.
        assert_eq!(
            sample_record(RetryMode::Warm).hash().unwrap(),
            warm.hash().unwrap()
        );
    }

    // Computed independently: sha256 of "reprise/decision/v1\n" and the bytes above.
    const GOLDEN_WARM: &str = "0d75a6c4b1ea759800f547169b198194f82f380c66e738976bf9031100e83611";

    #[test]
    fn the_fallback_record_is_cold_and_says_why() {
        let warm = sample_record(RetryMode::Warm);
        let fallback = warm.session_unavailable();
        assert_eq!(fallback.retry_mode, RetryMode::Cold);
        assert_eq!(fallback.requested_mode, RetryMode::Warm);
        assert_eq!(
            fallback.downgrade_reason,
            Some(DowngradeReason::SessionUnavailable)
        );
        assert_eq!(
            (fallback.template_id.clone(), fallback.instruction_hash),
            (None, None)
        );
        assert_eq!(fallback.checkpoint_session_id, warm.checkpoint_session_id);
        assert_ne!(fallback.hash().unwrap(), warm.hash().unwrap());
    }

    #[test]
    fn metadata_carries_the_retry_keys() {
        let warm = sample_record(RetryMode::Warm)
            .metadata(Some("fix it"))
            .unwrap();
        for key in [
            "retry_mode",
            "retry_requested_mode",
            "retry_decision_hash",
            "retry_checkpoint_session_id",
            "retry_checkpoint_event_hash",
            "retry_corrective_instruction",
        ] {
            assert!(warm.contains_key(key), "{key}");
        }
        assert!(!warm.contains_key("retry_downgrade_reason"));
        let mut record = sample_record(RetryMode::Warm);
        record.retry_mode = RetryMode::Cold;
        record.downgrade_reason = Some(DowngradeReason::WorkspaceHashMismatch);
        let cold = record.metadata(None).unwrap();
        assert_eq!(cold["retry_downgrade_reason"], "workspace_hash_mismatch");
        assert!(!cold.contains_key("retry_checkpoint_session_id"));
        assert_eq!(failed_decision_metadata()["retry_mode"], "cold");
    }
}

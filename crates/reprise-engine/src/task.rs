//! One task's attempts: run the agent, checkpoint, judge with the gates, and
//! when a retry is due, decide its mode from the verified journal and record
//! the decision before acting on it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::time::Instant;

use reprise_agents::{
    Adapter, AttemptOutcome, AttemptReport, CancelToken, SandboxRules, SessionMode, StatePaths,
    Supervision,
};
use reprise_core::budget::{BudgetSpec, ENV_VAR as BUDGET_ENV_VAR, RetryBudget};
use reprise_core::outcome as taxonomy;
use reprise_core::plan::{Disclose, Task};
use reprise_core::prompt::{
    CORRECTIVE_TEMPLATE_ID, ContextRequest, FailedGate, Nonce, PreviousAttempt, RetryContext,
    cold_prompt, corrective, excerpt,
};
use reprise_core::retry::{
    Decision, DecisionInput, DecisionRecord, RetryMode, decide, session_unavailable,
};
use reprise_core::retry_cost::{AutoChoice, CostInput, choose};
use reprise_core::rows::{self as row, AttemptMode, Containment, TaskStarted};
use reprise_core::{PlanId, TaskKey};
use reprise_store::journal::Journal;
use reprise_store::replies::{drop_kept_reply, keep_reply};
use reprise_store::state::{StateDir, now_rfc3339};
use reprise_store::workspace::hash_workspace_cached;
use reprise_store::write_atomic;
use serde_json::Value;

use crate::checkpoints;
use crate::error::Result;
use crate::events::Event;
use crate::evidence::Signer;
use crate::gates::GateRun;
pub(crate) use crate::messages::{Message, ParkedTask, TaskResult};
use crate::records::{VerifiedPrefix, record_decision, trusted_checkpoint};
use crate::sandbox::{self, Provenance, Workspace};
use crate::settings::{AgentSetup, Supervisor};
use crate::state::{AttemptSummary, GateVerdict, Outcome, TaskStatus};
use reprise_core::digest::Digest;
use reprise_core::lifecycle::Policy;
use reprise_store::snapshot::Checkpoint;

/// A criterion's name and the levels its gates can run at, highest first.
pub(crate) type CriterionLadder = (String, Vec<i64>);

/// Everything one task's run needs.
pub(crate) struct TaskRun<'a> {
    pub(crate) state: &'a StateDir,
    /// Who signs the task's evidence: this host with its key, or (on a
    /// fleet worker) the coordinator its rows are shipped to.
    pub(crate) signing: crate::evidence::Signing,
    pub(crate) run_id: &'a str,
    /// The plan the task belongs to: its journal is the plan's.
    pub(crate) plan: &'a PlanId,
    pub(crate) task: &'a Task,
    /// Where the run's tasks work.
    pub(crate) workspace: &'a Workspace,
    /// The commit the task's worktree starts from (`None` in place).
    pub(crate) base: Option<String>,
    pub(crate) adapter: &'a dyn Adapter,
    pub(crate) project: &'a Path,
    /// For a `--retry-failed` leg: what the task's failed attempt in the
    /// earlier run said, if it was judged.
    pub(crate) carried: Option<Previous>,
    /// The task's budget envelope, reserved from the run's pool.
    pub(crate) envelope_micro_usd: Option<u64>,
    /// The run's pool: a task without an envelope draws from it per attempt.
    pub(crate) pool: &'a crate::pool::SharedPool,
    /// The agent binary the plan names, if any.
    pub(crate) bin: Option<PathBuf>,
    /// What the caller adds to the agent's process (rehearsal's server).
    pub(crate) setup: AgentSetup,
    /// Seals the audit chain held for this task when the run started.
    pub(crate) prior_seals: Vec<reprise_core::record::Head>,
    /// The run's retry budget, if any, with the plan's criteria ladders:
    /// each task consumes its own copy.
    pub(crate) budget: Option<(&'a BudgetSpec, &'a [CriterionLadder])>,
    pub(crate) cancel: &'a CancelToken,
    /// How processes are supervised and contained, if they are.
    pub(crate) supervisor: Option<&'a Supervisor>,
    pub(crate) events: Sender<Message>,
    /// Where a park request for this task arrives.
    pub(crate) control: &'a crate::park::TaskControl,
    /// What the task had spent before this leg (a resume's): its envelope
    /// is what was left.
    pub(crate) spent_before: u64,
    /// Set when the task is taken up again rather than started.
    pub(crate) continuation: Option<Continuation>,
    /// The task's permissions (agent, tools, paths, containment,
    /// envelope): what a park binds and a resume may not narrow.
    pub(crate) grant: reprise_core::grant::GrantSet,
    /// What the run knows of the task's attempts that the task does not,
    /// for its checkpoints.
    pub(crate) context: HeldContext,
    /// For a fleet task taken over after its host was lost, the sessions
    /// that host's rows name: they, and its file checkpoints, are on that
    /// host, so none of them is resumed or restored here.
    pub(crate) lost_sessions: Option<std::collections::BTreeSet<String>>,
}

/// The plan's model and agent variables for the task's CLI, and the state
/// of its dependencies when it started: what its checkpoints hold besides
/// the files.
#[derive(Debug, Clone, Default)]
pub(crate) struct HeldContext {
    pub(crate) model: Option<String>,
    /// Names only: a value may be a secret.
    pub(crate) agent_env: Vec<String>,
    /// `{task, state, commit}` of each dependency.
    pub(crate) dependencies: Vec<Value>,
}

/// A task's journal and what signs beside it, open for appending.
struct Chains<'a> {
    journal: &'a mut Journal,
    signer: &'a mut Signer,
}

/// What a retry is decided from.
struct RetryBasis<'a> {
    /// The event hash of the checkpoint row written after the failed attempt.
    own_checkpoint: Digest,
    /// The workspace hash the files were rolled back to, if they were.
    restored: Option<Digest>,
    /// What changes for the retry besides its mode, for the record.
    modification: Option<&'a Value>,
    previous: &'a Previous,
    next_attempt: u32,
    /// For `retry_policy: auto`: since the failed attempt ended, and how
    /// many times in a row its judged failure has now been seen.
    since_last_request: std::time::Duration,
    same_failure_in_a_row: u32,
    /// The journal failed verification during the attempt (its torn tail
    /// was cut): no checkpoint is trusted, and the retry goes cold.
    chain_broken: bool,
}

/// What the journal and the workspace give a retry decision to rely on.
struct DecisionGround {
    /// The latest checkpoint the journal holds, if any.
    checkpoint: Option<reprise_core::retry::Checkpoint>,
    /// It is the one the failed attempt wrote, in a chain that verifies.
    chain_verified: bool,
    /// The workspace's hash now.
    live: Digest,
}

/// What the next attempt sends, and how.
struct NextAttempt {
    mode: AttemptMode,
    session: SessionMode,
    prompt: String,
}

impl NextAttempt {
    /// An attempt that goes on with `session` in `mode` (warm or fork),
    /// sending `prompt`; `None` for a cold one, or without a session.
    fn continuing(mode: RetryMode, session: Option<String>, prompt: String) -> Option<Self> {
        let session = match (mode, session?) {
            (RetryMode::Warm, session_id) => SessionMode::Resume { session_id },
            (RetryMode::Fork, from) => SessionMode::Fork {
                from,
                new_session_id: None,
            },
            (RetryMode::Cold, _) => return None,
        };
        Some(Self {
            mode: mode.into(),
            session,
            prompt,
        })
    }
}

mod attempt;
mod bodies;
mod closing;
mod continuation;
mod executor;
mod judging;
mod resumption;
mod retrying;
mod steering;

pub(crate) use continuation::{Continuation, sessions_named, taken_up as journal_attempts};
use executor::Executor;
pub(crate) use resumption::{bind_resume_in_audit, mark_resumed};

impl TaskRun<'_> {
    /// Runs the task to a terminal state. A store failure ends the task as
    /// failed with the error as its reason; it never aborts the run.
    pub(crate) fn execute(self) -> TaskResult {
        let mut result = TaskResult {
            status: TaskStatus::Running,
            judged: false,
            reason: None,
            attempts: Vec::new(),
            spent_micro_usd: 0,
            metadata: BTreeMap::new(),
            cwd: None,
            output: None,
            gaps: Vec::new(),
            parked: None,
        };
        let done = match &self.continuation {
            Some(continuation) => self.continue_task(&mut result, continuation),
            None => self.attempts(&mut result),
        };
        if let Err(err) = done {
            result.status = TaskStatus::Failed;
            result.reason = Some(err.to_string());
        }
        // However it ended, a worktree it keeps names only objects of the
        // user's store (see `linkage`).
        if let Some(Err(err)) = self
            .linkage()
            .filter(|linkage| linkage.work_tree.exists())
            .map(|linkage| linkage.settle(self.state))
        {
            self.emit(Event::Warning {
                task: Some(self.task.id.clone()),
                message: format!("cannot settle the worktree's git state: {err}"),
            });
        }
        result
    }

    /// How this task's processes run: supervised always (when the run has a
    /// supervisor), and contained unless the plan says `containment: off` or
    /// the kernel has no Landlock. The agent may also write its CLI's state;
    /// a gate may not.
    fn supervision(&self, cwd: &Path, tmp: &Path, agent: bool) -> Option<Supervision> {
        let supervisor = self.supervisor?;
        let sandbox = (self.task.containment.confines() && supervisor.landlock).then(|| {
            let mut writable = vec![cwd.to_path_buf(), tmp.to_path_buf()];
            writable.extend(
                self.linkage()
                    .map(|linkage| linkage.writable())
                    .unwrap_or_default(),
            );
            // The absolute entries of allowed_paths are outside the worktree;
            // the relative ones are globs inside it, already writable.
            let granted = self
                .task
                .allowed_paths
                .iter()
                .map(PathBuf::from)
                .filter(|path| path.is_absolute())
                .collect();
            if agent {
                // A home the caller made for this task (rehearsal) is the agent's.
                writable.extend(self.made_home());
                let state = self.agent_state();
                writable.extend(state.dirs);
                writable.extend(state.files.into_iter().map(|(file, _)| file));
            }
            let mut hidden = vec![self.state.root().to_path_buf()];
            if let Some(dir) = supervisor.key_path.as_deref().and_then(Path::parent) {
                hidden.push(dir.to_path_buf());
            }
            SandboxRules {
                writable,
                granted,
                hidden,
                writable_shm: self.task.writable_shm,
                connect_ports: None,
                hidden_by_mounts: false,
            }
        });
        // The network: the agent's policy, a gate's own (set per gate;
        // none until then). Namespaces only around a Landlock sandbox, which
        // keeps the program from undoing them.
        let network = if agent {
            crate::walls::reach_of(&self.task.network, &self.setup.endpoints)
        } else {
            crate::walls::reach_of(&reprise_core::plan::Network::None, &[])
        };
        let namespaces = supervisor.namespaces && sandbox.is_some();
        // Without namespaces, only Landlock's TCP rules can hold it (the
        // run warned when neither can).
        let network = network.filter(|_| namespaces || supervisor.landlock_network);
        let walls = reprise_agents::Walls {
            namespaces,
            network,
        };
        Some(Supervision {
            supervisor: supervisor.program.clone(),
            sandbox,
            records: Some(self.state.supervision_dir()),
            parent_death: supervisor.parent_death,
            walls,
        })
    }

    /// The linkage of the task's worktree as reprise recorded it (see
    /// `linkage`); `None` for a task that runs in place.
    pub(crate) fn linkage(&self) -> Option<crate::linkage::Linkage> {
        let repo = self.workspace.repo()?;
        if !self.workspace.isolates(self.task) {
            return None;
        }
        let top = self.state.worktree_dir(self.run_id, &self.task.id);
        crate::linkage::Linkage::of(self.state, repo, &top)
            .ok()
            .flatten()
    }

    /// A home the caller made for this task (a rehearsal's), if any.
    fn made_home(&self) -> Option<PathBuf> {
        self.setup
            .env
            .iter()
            .rev()
            .find(|(key, _)| key == "HOME")
            .map(|(_, value)| PathBuf::from(value))
    }

    /// The agent CLI's own state outside the worktree (config home, session
    /// store), as its adapter names it for this task.
    fn agent_state(&self) -> StatePaths {
        let home = self.made_home();
        self.adapter
            .state_paths(self.setup.config_home.as_deref(), home.as_deref())
    }

    /// Before a contained attempt: makes the CLI's state that is missing,
    /// private (directories 0700, files 0600), as the sandbox lets a CLI
    /// write only what exists. A CLI on a fresh `$HOME` could otherwise not
    /// save its session, and every warm retry would go cold. What cannot be
    /// made is said as a warning; the attempt runs, and a session the CLI
    /// could not save is found after it.
    pub(crate) fn make_agent_state(&self) {
        let state = self.agent_state();
        if let Err((path, err)) = sandbox::make_private(&state.dirs, &state.files) {
            self.emit(Event::Warning {
                task: Some(self.task.id.clone()),
                message: format!(
                    "cannot create {} for the agent's own state ({err}); create it, or the agent may not save its session",
                    path.display()
                ),
            });
        }
    }

    /// What the journal says of the attempt's containment: the plan's mode,
    /// whether a sandbox was applied, and the lines of the reply that report
    /// a denied access.
    fn containment(&self, report: &AttemptReport, sandboxed: bool) -> Containment {
        // The reply's lines first, then what the agent printed on stderr
        // (a CLI's own failed writes go there).
        let mut denied = match &report.outcome {
            AttemptOutcome::Replied { reply, .. } if sandboxed => crate::gates::denied_lines(reply),
            _ => Vec::new(),
        };
        if sandboxed {
            for line in crate::gates::denied_lines(&report.streams.stderr) {
                if !denied.contains(&line) {
                    denied.push(line);
                }
            }
        }
        Containment {
            mode: self.task.containment.as_str().to_owned(),
            sandboxed,
            denied,
        }
    }

    /// `checkpoint`'s session was saved on a lost fleet host and cannot be
    /// had here: its transcript did not travel with the task, or this
    /// host's CLI would not know where to put it back (one that files its
    /// transcripts by date or by project, Codex and Gemini CLI, finds only
    /// its own).
    pub(crate) fn on_lost_host(
        &self,
        checkpoint: Option<&reprise_core::retry::Checkpoint>,
        cwd: &Path,
    ) -> bool {
        let session = checkpoint.and_then(|checkpoint| checkpoint.session_id.as_ref());
        let (Some(lost), Some(session)) = (&self.lost_sessions, session) else {
            return false;
        };
        if !lost.contains(session) {
            return false;
        }
        let travelled = self.preserved_path(session).is_file();
        let placeable = self
            .adapter
            .transcript_path(session, cwd, self.setup.config_home.as_deref())
            .is_some();
        !(travelled && placeable)
    }

    /// The ref the tree attempt `attempt` of a fleet task left travels
    /// under on the remote: one per attempt, so a partitioned host still
    /// running cannot move the one a takeover's journal names.
    fn travelling_tree_ref(&self, attempt: u32) -> String {
        format!(
            "refs/reprise/{}/trees/{}/{attempt}",
            self.run_id, self.task.id
        )
    }

    /// On a fleet worker with a remote: the tree attempt `attempt` left,
    /// snapshotted as its agent ended (before its gates run), for
    /// `send_tree`; `None` elsewhere, or when the snapshot fails (said as a
    /// warning: a retry elsewhere then finds the base and goes cold).
    pub(crate) fn snapshot_left_tree(
        &self,
        store: &reprise_store::snapshot::SnapshotStore,
        attempt: u32,
    ) -> Option<reprise_store::snapshot::Checkpoint> {
        self.signing.remote()?;
        store
            .take_unlisted(&format!("attempt {attempt} left"))
            .map_err(|err| self.warn_tree_not_sent(attempt, &err))
            .ok()
    }

    /// Sends `tree` (attempt `attempt`'s, from `snapshot_left_tree`) to the
    /// remote, so a host that takes the task over finds the files its
    /// journal's last checkpoint row hashed.
    pub(crate) fn send_tree(
        &self,
        store: &reprise_store::snapshot::SnapshotStore,
        tree: &reprise_store::snapshot::Checkpoint,
        attempt: u32,
    ) {
        let Some(remote) = self.signing.remote() else {
            return;
        };
        if let Err(err) = store.push_to(tree, remote, &self.travelling_tree_ref(attempt)) {
            self.warn_tree_not_sent(attempt, &err);
        }
    }

    fn warn_tree_not_sent(&self, attempt: u32, err: &dyn std::fmt::Display) {
        self.emit(Event::Warning {
            task: Some(self.task.id.clone()),
            message: format!(
                "the tree attempt {attempt} left did not reach the fleet's remote: {err}; a retry on another host starts from the base"
            ),
        });
    }

    /// Where a fleet park's checkpoints travel on the remote.
    pub(crate) fn park_checkpoints_prefix(run_id: &str, task: &reprise_core::TaskId) -> String {
        format!("refs/reprise/{run_id}/checkpoints/{task}")
    }

    /// On a fleet worker with a remote: every checkpoint of the task (the
    /// park's snapshot among them) sent there before the worktree is
    /// removed, so the host that resumes the park (the coordinator) holds
    /// the checkpoints its journal records and restores the park's. Without
    /// a remote a worker's park cannot leave its host: refused, and nothing
    /// is released.
    pub(crate) fn send_park_checkpoints(
        &self,
        store: &reprise_store::snapshot::SnapshotStore,
    ) -> Result<()> {
        if self.signing.key().is_some() {
            return Ok(());
        }
        let remote = self.signing.remote().ok_or_else(|| {
            crate::error::EngineError::Park(format!(
                "task {} parked on a fleet worker with no git remote to send its files through; give the run a remote (--remote)",
                self.task.id
            ))
        })?;
        store
            .push_all(remote, &Self::park_checkpoints_prefix(self.run_id, &self.task.id))
            .map_err(|err| {
                crate::error::EngineError::Park(format!(
                    "the park's checkpoints of {} did not reach the remote {remote}: {err}; its worktree is kept",
                    self.task.id
                ))
            })
    }

    /// On a host taking a fleet task over from a lost one: the tree the
    /// attempt of the journal's last `task.checkpoint` left, as that host
    /// sent it, put in the worktree, so the retry's decision finds the
    /// files that row hashed (it compares the hashes: a tree that does not
    /// match makes the retry cold, as anywhere). Nothing when the lost host
    /// sent none.
    pub(crate) fn take_sent_tree(
        &self,
        store: Option<&reprise_store::snapshot::SnapshotStore>,
        rows: &[reprise_core::record::JournalRow],
    ) {
        let (Some(_), Some(store), Some(remote)) =
            (&self.lost_sessions, store, self.signing.remote())
        else {
            return;
        };
        let Some(attempt) = rows.iter().rev().find_map(|row| {
            reprise_core::rows::body_of::<reprise_core::rows::TaskCheckpoint>(&row.kind, &row.body)
                .map(|checkpoint| checkpoint.attempt)
        }) else {
            return;
        };
        let taken = store
            .fetch_from(remote, &self.travelling_tree_ref(attempt))
            .and_then(|found| found.map_or(Ok(()), |checkpoint| store.restore(&checkpoint)));
        if let Err(err) = taken {
            self.emit(Event::Warning {
                task: Some(self.task.id.clone()),
                message: format!(
                    "the tree the lost host left could not be had from the remote {remote}: {err}; the task goes on from its base"
                ),
            });
        }
    }

    /// Checks again, where it writes, that the park `point` may still be
    /// resumed (`resume::recheck_before_resume`). A fleet worker holds no
    /// audit chain to check with: the coordinator checked before it sent the
    /// park, and checks again when it takes the resume's row, before it
    /// writes the resume's receipt.
    pub(crate) fn recheck_resume(
        &self,
        key: &TaskKey,
        point: &crate::resume::ParkPoint,
    ) -> std::result::Result<(), crate::resume::Refusal> {
        match self.signing.key() {
            Some(key_file) => {
                crate::resume::recheck_before_resume(self.state, key_file, key, point)
            }
            None => Ok(()),
        }
    }

    /// On a fleet worker resuming a park: the task's checkpoints fetched
    /// from the remote into `store` (the park's snapshot among them).
    pub(crate) fn fetch_park_checkpoints(
        &self,
        store: &reprise_store::snapshot::SnapshotStore,
    ) -> Result<()> {
        let Some(remote) = self.signing.remote() else {
            return Ok(());
        };
        store.fetch_all(
            remote,
            &Self::park_checkpoints_prefix(self.run_id, &self.task.id),
        )?;
        Ok(())
    }

    /// The audit key, for `what`, which only its holder may do.
    pub(crate) fn key_file(&self, what: &'static str) -> Result<&reprise_store::key::KeyFile> {
        self.signing
            .key()
            .ok_or(crate::error::EngineError::NeedsKey { what })
    }

    fn emit(&self, event: Event) {
        // The coordinator outlives every task; a closed channel means it is
        // shutting down and progress no longer matters.
        let _ = self.events.send(Message::Event(event));
    }

    /// The task's worktree (created, or re-created at its own path), its
    /// chains opened, its snapshot store and its retry budget: what a
    /// first start and a continuation both begin with.
    pub(crate) fn materialise(&self, result: &mut TaskResult) -> Result<Materialised> {
        let task = self.task;
        let sandbox::Prepared { cwd, fresh } = sandbox::prepare(
            self.state,
            self.workspace,
            self.project,
            self.run_id,
            task,
            self.base.as_deref(),
        )?;
        result.cwd = Some(cwd.clone());
        let key = TaskKey::new(self.plan.clone(), task.id.clone());
        let (journal, signer) = self.signing.open(self.state, &key)?;
        let isolated = self.workspace.isolates(task) && self.base.is_some();
        let snapshots = checkpoints::open_store(
            self.state,
            self.run_id,
            task,
            &cwd,
            self.workspace.repo().filter(|_| isolated),
        )?;
        if fresh && isolated {
            self.adopt_checkout(&cwd, snapshots.as_ref())?;
        }
        // The budget is validated before the run starts; building it again
        // here cannot fail unless the plan changed under us.
        let budget = match self.budget {
            Some((spec, criteria)) => Some(RetryBudget::new(spec, criteria)?),
            None => None,
        };
        Ok(Materialised {
            key,
            cwd,
            isolated,
            journal,
            signer,
            snapshots,
            budget,
        })
    }

    /// What a fresh worktree's checkout says of its files, taken up when
    /// the checkout wrote every file as its blob. Its index is a stat cache
    /// of exactly these files: the first checkpoint (and a park's restore)
    /// then reads and writes only what differs from the base. And the
    /// files whose blobs' digests the state directory knows go into the
    /// workspace stat cache unread, so the first workspace hash reads only
    /// the others. Without either, each reads every file.
    fn adopt_checkout(
        &self,
        cwd: &Path,
        snapshots: Option<&reprise_store::snapshot::SnapshotStore>,
    ) -> Result<()> {
        let Some(linkage) = self.linkage() else {
            return Ok(());
        };
        if !linkage.worktree_git().checks_out_verbatim() {
            return Ok(());
        }
        let index = linkage.stat_cache(self.state)?;
        if let Some(store) = snapshots {
            let _ = store.adopt_verbatim_index(&index);
        }
        let digests = self.state.blob_digests_path();
        let checkout = reprise_store::workspace::Checkout {
            top: &linkage.work_tree,
            index: &index,
            digests: &digests,
        };
        let cache = self.state.workspace_cache_path(cwd);
        reprise_store::workspace::seed_stat_cache(cwd, &cache, &checkout);
        Ok(())
    }

    /// Prepares the task's sandbox and chains, records `task.started`, and
    /// hands the lifecycle to its executor.
    fn attempts(&self, result: &mut TaskResult) -> Result<()> {
        let task = self.task;
        let sandbox_started = Instant::now();
        let mut materialised = self.materialise(result)?;
        let policy = Policy {
            max_attempts: task.max_retries + 1,
            budgeted: materialised.budget.is_some(),
            rollback: task.rollback_on_retry,
            snapshots: materialised.snapshots.is_some(),
        };
        self.learn_strategy(&materialised.cwd);
        let started = TaskStarted {
            run_id: self.run_id.to_owned(),
            plan: self.plan.clone(),
            base_commit: self.base.clone().filter(|_| materialised.isolated),
            adapter: self.adapter.name().to_owned(),
            cwd: materialised.cwd.clone(),
            sandbox_us: u64::try_from(sandbox_started.elapsed().as_micros()).unwrap_or(u64::MAX),
            retry_policy: task.retry_policy,
            max_retries: task.max_retries,
            envelope_micro_usd: self.envelope_micro_usd,
            lifecycle: policy,
            capability: Some(self.adapter.strategy().capability()),
        };
        materialised.journal.append_row(&now_rfc3339(), &started)?;
        // From here on the journal is the engine's: anything else writing to
        // it is noticed (see `foreign_writes_seen`).
        materialised.journal.mark()?;
        // A task carried over from an earlier run's failure starts cold, and
        // hears what its judged attempt said, once.
        let previous: Option<Previous> = self.carried.clone();
        let next = match &previous {
            Some(carried) if carried.judged => self.cold(1, Some(carried)),
            _ => NextAttempt {
                mode: AttemptMode::New,
                session: self.new_session(),
                prompt: task.prompt.clone(),
            },
        };
        Executor::new(self, materialised, (next, previous), result)?.drive(&policy)
    }

    /// Lets the adapter learn what only its agent can say before the first
    /// attempt (an ACP agent's declared sessions): the agent is started as
    /// the first attempt will be, contained and supervised, for its
    /// handshake alone. One that does not answer is said as a warning; its
    /// retries start cold until an attempt's handshake says otherwise.
    pub(super) fn learn_strategy(&self, cwd: &Path) {
        if !self.adapter.learns_strategy() {
            return;
        }
        let tmp = self.state.attempt_tmp_dir(self.run_id, &self.task.id, 1);
        let _ = fs::create_dir_all(&tmp);
        let supervision = self.supervision(cwd, &tmp, true);
        if supervision
            .as_ref()
            .is_some_and(|supervision| supervision.sandbox.is_some())
        {
            self.make_agent_state();
        }
        let mut env = self.task_env();
        env.push(("TMPDIR".to_owned(), tmp.to_string_lossy().into_owned()));
        if let Some(linkage) = self.linkage() {
            env.extend(linkage.agent_env());
        }
        let request = reprise_agents::AttemptRequest {
            task_id: self.task.id.clone(),
            attempt: 1,
            prompt: String::new(),
            session: reprise_agents::SessionMode::New { session_id: None },
            cwd: cwd.to_path_buf(),
            timeout: self.task.timeout,
            env,
            bin: self.bin.clone(),
            config_home: self.setup.config_home.clone(),
            budget_micro_usd: None,
            supervision,
            watch: reprise_agents::Watch::default(),
            model: None,
        };
        if let Err(problem) = self.adapter.learn_strategy(&request, self.cancel) {
            self.emit(Event::Warning {
                task: Some(self.task.id.clone()),
                message: format!(
                    "{} did not say what it can do with its sessions ({problem}); its retries start cold unless an attempt's handshake says otherwise",
                    self.adapter.name()
                ),
            });
        }
    }

    /// The files the task's gates are judged by, as its base has them, with
    /// the top of the tree they are in: from the base commit through the
    /// main repository for a task in a worktree, else from the tree as it
    /// is now. `None` when no gate has any.
    pub(crate) fn gate_files(
        &self,
        cwd: &Path,
        isolated: bool,
    ) -> Result<Option<(crate::gate_files::GateFiles, PathBuf)>> {
        use crate::gate_files::GateFiles;
        let subdir_of = |tree: &Path| {
            cwd.strip_prefix(tree)
                .map(|subdir| subdir.to_string_lossy().trim_end_matches('/').to_owned())
                .unwrap_or_default()
        };
        let files = match (isolated, self.workspace.repo(), self.base.as_deref()) {
            (true, Some(repo), Some(base)) => {
                let tree = self.state.worktree_dir(self.run_id, &self.task.id);
                GateFiles::from_commit(repo, base, &subdir_of(&tree), &self.task.gates)?
                    .map(|files| (files, tree))
            }
            _ => {
                let tree = checkpoints::tree_of(self.state, cwd);
                GateFiles::from_tree(&tree, &subdir_of(&tree), &self.task.gates)?
                    .map(|files| (files, tree))
            }
        };
        Ok(files)
    }

    /// What every attempt's processes get besides the allow-list of
    /// reprise's environment and the plan's agent settings: the variables
    /// the task's `pass_env` names, the caller's environment (a
    /// rehearsal's), the run id and the retry budget's spec; later ones win.
    fn task_env(&self) -> Vec<(String, String)> {
        let mut env = reprise_agents::passed_env(&self.task.pass_env);
        env.extend(self.setup.env.iter().cloned());
        env.push(("REPRISE_RUN_ID".to_owned(), self.run_id.to_owned()));
        if let Some((spec, _)) = self.budget {
            env.push((BUDGET_ENV_VAR.to_owned(), spec.to_string()));
        }
        env
    }

    /// Restores `checkpoint` (recorded in the journal and the audit chain)
    /// and warns when the tree did not come back to the checkpoint's hash.
    /// Returns what the restore left.
    #[expect(clippy::too_many_arguments)]
    fn roll_back(
        &self,
        store: &reprise_store::snapshot::SnapshotStore,
        (checkpoint, hash): (&Checkpoint, Digest),
        journal: &mut Journal,
        signer: &mut Signer,
        key: &TaskKey,
        reason: &str,
        cwd: &Path,
    ) -> Result<checkpoints::Restored> {
        let restored = checkpoints::restore(
            store,
            checkpoint,
            journal,
            signer.local_audit(),
            key,
            self.run_id,
            reason,
            Some(hash),
            || self.workspace_hash(cwd),
        )?;
        self.warn_unless_matched(restored);
        Ok(restored)
    }

    fn warn_unless_matched(&self, restored: checkpoints::Restored) {
        if !restored.matches {
            self.emit(Event::Warning {
                task: Some(self.task.id.clone()),
                message: format!(
                    "the rollback left workspace hash {}, not the checkpoint's (files the checkpoint skipped by size, or ignored files changed)",
                    restored.workspace_hash.to_hex()
                ),
            });
        }
    }

    /// Commits a passed task's worktree on its branch and records the result
    /// (`task.result`); a task that changed nothing records that and commits
    /// nothing. A commit that fails fails the task (recorded, with the
    /// error): work that cannot be delivered has not passed. Says whether
    /// the result was delivered. `orphan` is the commit a crash left on the
    /// result branch before its result was recorded: replaced, and named in
    /// the row (`replaced`).
    #[expect(clippy::too_many_arguments)]
    fn commit_output(
        &self,
        journal: &mut Journal,
        cwd: &Path,
        base: &str,
        head: reprise_core::record::Head,
        attempt: u32,
        result: &mut TaskResult,
        orphan: Option<&str>,
    ) -> Result<bool> {
        let provenance = Provenance {
            run_id: self.run_id,
            plan: self.plan,
            task: &self.task.id,
            attempt,
            journal_seq: head.seq,
            journal_hash: head.digest.to_hex(),
        };
        let started = Instant::now();
        match sandbox::commit_result(self.state, self.workspace, cwd, base, &provenance, orphan) {
            Ok(output) => {
                let body = row::TaskResult::Committed {
                    run_id: self.run_id.to_owned(),
                    base_commit: output.base.clone(),
                    commit: output.commit.clone(),
                    branch: output.branch.clone(),
                    files_changed: output.files_changed,
                    commit_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
                    replaced: orphan
                        .filter(|_| output.commit.is_some())
                        .map(str::to_owned),
                };
                journal.append_row(&now_rfc3339(), &body)?;
                result.output = Some(output);
                Ok(true)
            }
            Err(err) => {
                let reason = format!("the result could not be committed: {err}");
                let body = row::TaskResult::Failed {
                    run_id: self.run_id.to_owned(),
                    base_commit: Some(base.to_owned()),
                    error: reason.clone(),
                };
                journal.append_row(&now_rfc3339(), &body)?;
                result.reason = Some(reason);
                Ok(false)
            }
        }
    }

    /// Without a retry budget a graded gate runs at its first (strictest) level.
    fn budget_free_level(&self, criterion: &str) -> Option<i64> {
        self.task
            .gates
            .iter()
            .filter_map(|gate| gate.criterion.as_ref())
            .find(|declared| declared.name == criterion)
            .and_then(|declared| crate::budget::first_level(&declared.levels))
    }

    /// A cold attempt: the base prompt rebuilt from scratch, quoting the
    /// previous attempt's reply (fenced, bounded) only when it was judged.
    fn cold(&self, attempt: u32, previous: Option<&Previous>) -> NextAttempt {
        let built = cold_prompt(&context(&self.task.prompt, attempt, previous), &mut mint);
        self.warn_all(built.notices);
        NextAttempt {
            mode: AttemptMode::Cold,
            session: self.new_session(),
            prompt: built.text,
        }
    }

    /// The attempt a task taken over from a lost fleet host runs next, as
    /// `decision` says (warm or fork with the corrective instruction built
    /// from `previous`, else cold), and the decision's record naming that
    /// instruction.
    fn taken_over_attempt(
        &self,
        (input, decision): (
            &reprise_core::retry::DecisionInput<'_>,
            reprise_core::retry::Decision,
        ),
        session: Option<String>,
        attempt: u32,
        previous: Option<&Previous>,
    ) -> (NextAttempt, DecisionRecord) {
        let (built, instruction_hash) =
            corrective(&context(&self.task.prompt, attempt, previous), &mut mint);
        let next = NextAttempt::continuing(decision.mode, session, built.text);
        let template = next
            .is_some()
            .then_some((CORRECTIVE_TEMPLATE_ID, instruction_hash));
        if next.is_some() {
            self.warn_all(built.notices);
        }
        let record = DecisionRecord::new(
            &self.task.id,
            self.adapter.name(),
            input,
            decision,
            template,
        );
        let next = next.unwrap_or_else(|| self.cold(attempt, previous));
        (next, record)
    }

    /// A new session, its id chosen here when the CLI lets us (so it is in
    /// `attempt.started` before the agent runs).
    fn new_session(&self) -> SessionMode {
        SessionMode::New {
            session_id: self
                .adapter
                .chooses_session_ids()
                .then(|| uuid::Uuid::new_v4().to_string()),
        }
    }

    /// Keeps a judged attempt's reply at `runs/<run>/failed/<task>.out` for a
    /// later `--retry-failed`; removes it once the task passes.
    fn keep_or_drop_reply(&self, summary: &AttemptSummary, previous: &Previous) {
        let outcome = if summary.outcome == Outcome::Passed {
            drop_kept_reply(self.state, self.run_id, &self.task.id)
        } else if summary.judged {
            keep_reply(
                self.state,
                self.run_id,
                &self.task.id,
                &previous.reply,
                excerpt,
            )
            .map(|_| ())
        } else {
            Ok(())
        };
        if let Err(err) = outcome {
            self.emit(Event::Warning {
                task: Some(self.task.id.clone()),
                message: format!("could not keep the failed reply: {err}"),
            });
        }
    }

    fn warn_all(&self, notices: Vec<String>) {
        for message in notices {
            self.emit(Event::Warning {
                task: Some(self.task.id.clone()),
                message,
            });
        }
    }

    fn workspace_hash(&self, cwd: &Path) -> Result<reprise_core::digest::Digest> {
        let cache = self.state.workspace_cache_path(cwd);
        Ok(hash_workspace_cached(cwd, 0, &cache)?.hash)
    }

    /// Classifies an attempt: infrastructure, a verdict of the agent's exit,
    /// or the gates' verdicts.
    fn judge(
        &self,
        attempt: u32,
        mode: AttemptMode,
        report: &AttemptReport,
        gate_run: &GateRun<'_>,
        level_of: &dyn Fn(&str) -> Option<i64>,
        started: Instant,
    ) -> (AttemptSummary, taxonomy::AttemptOutcome) {
        let mut gates_elapsed = std::time::Duration::ZERO;
        // The outcome in the core's taxonomy: `judged` is derived from its
        // explicit list of verdict kinds, never as a fallback.
        let (classified, exit_code, gates) = match &report.outcome {
            AttemptOutcome::Infra { kind, .. } => {
                (taxonomy::AttemptOutcome::Infra(*kind), None, Vec::new())
            }
            AttemptOutcome::Replied { exit_code, reply } => {
                match unjudged_reply(*exit_code, reply) {
                    Some(outcome) => (outcome, Some(*exit_code), Vec::new()),
                    None => {
                        let gates_started = Instant::now();
                        let gates =
                            GateRun { reply, ..*gate_run }.run_all(&self.task.gates, level_of);
                        gates_elapsed = gates_started.elapsed();
                        (self.gates_outcome(&gates), Some(*exit_code), gates)
                    }
                }
            }
        };
        let (outcome, infra_kind) = outcome_names(&classified);
        let summary = AttemptSummary {
            n: attempt,
            mode: mode.as_str().to_owned(),
            session_id: report.session_id.clone(),
            judged: classified.is_judged(),
            outcome,
            infra_kind,
            exit_code,
            gates,
            cost_micro_usd: report.cost_micro_usd,
            elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            agent_us: u64::try_from(report.elapsed.as_micros()).unwrap_or(u64::MAX),
            gates_us: u64::try_from(gates_elapsed.as_micros()).unwrap_or(u64::MAX),
        };
        (summary, classified)
    }

    /// What the gates' verdicts make of an attempt: a gate that timed out or
    /// could not run leaves it unjudged; else it passed, or each gate that
    /// said no is a verdict on the work.
    fn gates_outcome(&self, gates: &[GateVerdict]) -> taxonomy::AttemptOutcome {
        use taxonomy::Verdict;
        let verdicts: Vec<Verdict> = gates
            .iter()
            .filter(|gate| !gate.passed && !gate.could_not_run)
            .map(|verdict| {
                let disclose = disclose_of(self.task, verdict);
                if verdict.exit_code.is_some() {
                    Verdict::GateRejected {
                        gate: verdict.name.clone(),
                        exit_code: verdict.exit_code,
                        disclose,
                    }
                } else {
                    Verdict::PredicateRejected {
                        gate: verdict.name.clone(),
                        disclose,
                    }
                }
            })
            .collect();
        if gates.iter().any(|gate| gate.timed_out_after_ms.is_some()) {
            taxonomy::AttemptOutcome::Infra(taxonomy::InfraKind::GateTimedOut)
        } else if gates.iter().any(|gate| gate.could_not_run) {
            taxonomy::AttemptOutcome::Infra(taxonomy::InfraKind::GateCouldNotRun)
        } else if verdicts.is_empty() {
            taxonomy::AttemptOutcome::Passed
        } else {
            taxonomy::AttemptOutcome::Judged(verdicts)
        }
    }

    /// Decides the next attempt's mode from the verified journal, records the
    /// decision in journal, spine and audit chain, and builds what to send.
    fn decide_retry(
        &self,
        chains: Chains<'_>,
        verified: &mut Option<VerifiedPrefix>,
        cwd: &Path,
        basis: RetryBasis<'_>,
    ) -> Result<(NextAttempt, BTreeMap<String, Value>, DecisionRecord)> {
        let task = self.task;
        let trusted = self.trusted_for_retry(chains.journal, verified, cwd, &basis)?;
        let checkpoint = trusted
            .checkpoint
            .as_ref()
            .filter(|_| trusted.chain_verified);
        let (requested, auto) = self.requested_mode(
            checkpoint.and_then(|checkpoint| checkpoint.session_id.as_deref()),
            basis.since_last_request,
            basis.same_failure_in_a_row,
        );
        let input = DecisionInput {
            requested,
            capability: self.adapter.strategy().capability(),
            checkpoint,
            live_workspace_hash: trusted.live,
            fresh_pinned: task.agent_restart_between_retries,
            chain_verified: trusted.chain_verified,
            session_elsewhere: self.on_lost_host(checkpoint, cwd),
        };
        let decision = decide(input);
        let (built, instruction_hash) = corrective(
            &RetryContext {
                files_rolled_back: basis.restored.is_some(),
                ..context(&task.prompt, basis.next_attempt, Some(basis.previous))
            },
            &mut mint,
        );
        self.warn_all(built.notices);
        let instruction = built.text;
        let mut record = DecisionRecord::new(
            &task.id,
            self.adapter.name(),
            &input,
            decision,
            Some((CORRECTIVE_TEMPLATE_ID, instruction_hash)),
        );
        record.predicted = auto.predicted;
        record.auto = task.retry_policy.fixed().is_none().then_some(auto);
        let session_id = record.checkpoint_session_id.clone();
        let (decision, record) =
            self.record_retry_decision(chains, (decision, record), &basis, cwd)?;
        let next = NextAttempt::continuing(decision.mode, session_id, instruction.clone())
            .unwrap_or_else(|| self.cold(basis.next_attempt, Some(basis.previous)));
        let sent_instruction = (next.mode != AttemptMode::Cold).then_some(instruction.as_str());
        let metadata = record.metadata(sent_instruction)?;
        Ok((next, metadata, record))
    }

    /// What a retry may rely on: the checkpoint the journal holds (with the
    /// workspace hash it was rolled back to, if it was), whether it is
    /// trusted, and the workspace's hash now.
    fn trusted_for_retry(
        &self,
        journal: &mut Journal,
        verified: &mut Option<VerifiedPrefix>,
        cwd: &Path,
        basis: &RetryBasis<'_>,
    ) -> Result<DecisionGround> {
        let key = TaskKey::new(self.plan.clone(), self.task.id.clone());
        let trusted = trusted_checkpoint(self.state, &key, journal, verified)?;
        // The journal's hash chain is unkeyed: anyone who can write the file
        // can append a checkpoint that verifies. The one to trust is the one
        // this attempt wrote; any other latest checkpoint means the journal
        // was written to behind the engine's back.
        let chain_verified = !basis.chain_broken
            && trusted.chain_verified
            && trusted
                .checkpoint
                .as_ref()
                .is_some_and(|checkpoint| checkpoint.event_hash == basis.own_checkpoint);
        let live = self.workspace_hash(cwd)?;
        // Files rolled back to the attempt's checkpoint are compared with
        // that checkpoint: they are what the resumed session is told it has.
        let checkpoint = trusted.checkpoint.map(|mut checkpoint| {
            if let Some(hash) = basis.restored {
                checkpoint.workspace_hash = hash;
            }
            checkpoint
        });
        Ok(DecisionGround {
            checkpoint,
            chain_verified,
            live,
        })
    }

    /// Records a retry decision and says it; when the session it continues
    /// cannot be resumed, a second decision (cold), recorded too. Returns
    /// the decision that holds, and its record.
    fn record_retry_decision(
        &self,
        Chains { journal, signer }: Chains<'_>,
        (mut decision, mut record): (Decision, DecisionRecord),
        basis: &RetryBasis<'_>,
        cwd: &Path,
    ) -> Result<(Decision, DecisionRecord)> {
        let mut write = |record: &DecisionRecord| -> Result<()> {
            record_decision(
                journal,
                signer,
                self.run_id,
                basis.next_attempt,
                record,
                basis.modification,
            )?;
            self.emit(Event::Decision {
                task: self.task.id.clone(),
                record: Box::new(record.clone()),
            });
            Ok(())
        };
        write(&record)?;
        if decision.mode != RetryMode::Cold
            && !record
                .checkpoint_session_id
                .as_deref()
                .is_some_and(|id| self.ensure_session(id, cwd))
        {
            // The session cannot be resumed: a second decision, recorded.
            decision = session_unavailable(decision);
            record = record.session_unavailable();
            write(&record)?;
        }
        Ok((decision, record))
    }

    /// The mode a retry asks for: the plan's, or under `retry_policy: auto`
    /// the one predicted to cost least (`reprise_core::retry_cost`), from the
    /// size of `session`'s last prompt as its preserved transcript says; and
    /// what `auto` would choose, with every mode's predicted cost, under any
    /// policy.
    fn requested_mode(
        &self,
        session: Option<&str>,
        since_last_request: std::time::Duration,
        same_failure_in_a_row: u32,
    ) -> (RetryMode, AutoChoice) {
        let cache = self.adapter.resume_cache();
        let history_tokens = session
            .and_then(|id| transcript_tail(&self.preserved_path(id)))
            .and_then(|tail| self.adapter.last_prompt_tokens(&tail))
            .map(|whole| whole.saturating_sub(cache.map_or(0, |cache| cache.prefix_tokens)));
        let choice = choose(&CostInput {
            capability: self.adapter.strategy().capability(),
            cache,
            history_tokens,
            since_last_request,
            same_failure_in_a_row,
        });
        (
            self.task.retry_policy.fixed().unwrap_or(choice.mode),
            choice,
        )
    }

    /// `requested_mode`'s mode alone, which reads nothing under a fixed
    /// policy (a resume after a park, where no prediction is recorded).
    fn requested_mode_only(&self, session: Option<&str>) -> RetryMode {
        match self.task.retry_policy.fixed() {
            Some(mode) => mode,
            // A park outlives any prompt cache: `auto` weighs that.
            None => self.requested_mode(session, std::time::Duration::MAX, 0).0,
        }
    }

    fn preserved_path(&self, session_id: &str) -> PathBuf {
        self.state
            .sessions_dir(self.adapter.name())
            .join(format!("{session_id}.jsonl"))
    }

    /// Copies the CLI's transcript of `session_id` aside, so it can be
    /// restored if the CLI loses it before a warm resume, and notes where it
    /// was: a CLI that files transcripts by date (Codex) cannot say where a
    /// lost one belongs.
    ///
    /// Returns whether the CLI saved the session: false when its adapter
    /// keeps transcripts and there is none where it looks (the CLI could not
    /// write its session store), said as a warning.
    fn preserve_transcript(&self, session_id: &str, cwd: &Path) -> bool {
        let native =
            self.adapter
                .transcript_path(session_id, cwd, self.setup.config_home.as_deref());
        let Some(native) = native.filter(|native| native.is_file()) else {
            let saved = !self.adapter.keeps_transcripts();
            if !saved {
                self.emit(Event::Warning {
                    task: Some(self.task.id.clone()),
                    message: format!(
                        "{} did not save session {session_id} in its session store: a retry cannot resume it (see the attempt's containment.denied)",
                        self.adapter.name()
                    ),
                });
            }
            return saved;
        };
        let copied = fs::read(&native)
            .map_err(|err| err.to_string())
            .and_then(|bytes| {
                let target = self.preserved_path(session_id);
                if let Some(dir) = target.parent() {
                    fs::create_dir_all(dir).map_err(|err| err.to_string())?;
                }
                write_atomic(&target, &bytes, 0o600).map_err(|err| err.to_string())?;
                self.ship_session(session_id, bytes);
                // A session's transcript stays where it is: note it once.
                let origin_path = target.with_extension("origin");
                let origin = native.to_string_lossy();
                if fs::read(&origin_path).is_ok_and(|noted| noted == origin.as_bytes()) {
                    return Ok(());
                }
                write_atomic(&origin_path, origin.as_bytes(), 0o600).map_err(|err| err.to_string())
            });
        if let Err(err) = copied {
            self.emit(Event::Warning {
                task: Some(self.task.id.clone()),
                message: format!("could not preserve transcript of session {session_id}: {err}"),
            });
        }
        true
    }

    /// On a fleet worker, sends the transcript just preserved on to the
    /// coordinator, so the session can be resumed on another host; one
    /// that is not UTF-8 or is too large stays here, said as a warning.
    fn ship_session(&self, session_id: &str, transcript: Vec<u8>) {
        if self.signing.key().is_some() {
            return;
        }
        let sendable = transcript.len() <= crate::evidence::SHIPPED_TRANSCRIPT_MAX_BYTES;
        match String::from_utf8(transcript) {
            Ok(transcript) if sendable => {
                self.signing
                    .ship_session(crate::evidence::ShippedSession {
                        adapter: self.adapter.name().to_owned(),
                        session_id: session_id.to_owned(),
                        transcript,
                    });
            }
            _ => self.emit(Event::Warning {
                task: Some(self.task.id.clone()),
                message: format!(
                    "session {session_id}'s transcript is not UTF-8 or is larger than {} bytes: it stays on this host, and a retry elsewhere goes cold",
                    crate::evidence::SHIPPED_TRANSCRIPT_MAX_BYTES
                ),
            }),
        }
    }

    /// Where the CLI keeps `session_id`'s transcript: as the adapter finds
    /// it, else where it was when it was preserved. A recorded place is used
    /// only if it names this session's transcript, so an edited note cannot
    /// aim a restore at any other file.
    fn native_transcript(&self, session_id: &str, cwd: &Path) -> Option<PathBuf> {
        if let Some(native) =
            self.adapter
                .transcript_path(session_id, cwd, self.setup.config_home.as_deref())
        {
            return Some(native);
        }
        let origin = fs::read_to_string(self.preserved_path(session_id).with_extension("origin"))
            .ok()
            .map(PathBuf::from)?;
        let name = origin.file_name()?.to_string_lossy().into_owned();
        (origin.is_absolute() && name.ends_with(&format!("{session_id}.jsonl"))).then_some(origin)
    }

    /// False when the transcript ends inside a tool call (its process died
    /// while the tool ran), said as a warning: the session is not resumed.
    fn resumable(&self, session_id: &str, transcript: &Path) -> bool {
        if !self.adapter.ends_in_a_tool_call(transcript) {
            return true;
        }
        self.emit(Event::Warning {
            task: Some(self.task.id.clone()),
            message: format!(
                "session {session_id}'s transcript ends inside a tool call whose result never came: it is not resumed"
            ),
        });
        false
    }

    /// True when `session_id` can be resumed: the CLI still has it, or its
    /// preserved copy was put back.
    fn ensure_session(&self, session_id: &str, cwd: &Path) -> bool {
        let Some(native) = self.native_transcript(session_id, cwd) else {
            // The adapter keeps no transcript we can see: trust the CLI.
            return true;
        };
        if native.is_file() {
            return self.resumable(session_id, &native);
        }
        let preserved = self.preserved_path(session_id);
        let Ok(bytes) = fs::read(&preserved) else {
            return false;
        };
        if !self.resumable(session_id, &preserved) {
            return false;
        }
        let restored = native
            .parent()
            .map_or(Ok(()), fs::create_dir_all)
            .map_err(|err| err.to_string())
            .and_then(|()| write_atomic(&native, &bytes, 0o600).map_err(|err| err.to_string()));
        match restored {
            Ok(()) => {
                self.emit(Event::Warning {
                    task: Some(self.task.id.clone()),
                    message: format!(
                        "session {session_id} was not in the agent's store here; restored it from the copy reprise kept"
                    ),
                });
                true
            }
            Err(_) => false,
        }
    }
}

/// What [`TaskRun::materialise`] gives a task to run in.
pub(crate) struct Materialised {
    pub(crate) key: TaskKey,
    pub(crate) cwd: PathBuf,
    /// In a worktree of its own, from the run's base.
    pub(crate) isolated: bool,
    pub(crate) journal: Journal,
    pub(crate) signer: Signer,
    pub(crate) snapshots: Option<reprise_store::snapshot::SnapshotStore>,
    pub(crate) budget: Option<RetryBudget>,
}

/// What the next prompt may say about the attempt before it, owned so it
/// outlives the attempt: its reply and its failed gates' output.
#[derive(Debug, Clone, Default)]
pub(crate) struct Previous {
    judged: bool,
    /// What it asked for (`NEEDS_CONTEXT:`), with the plan's answer.
    needs_context: Option<(String, Option<String>)>,
    reply: String,
    agent_exit_code: Option<i32>,
    failed_gates: Vec<(String, Option<i32>, Disclose, String)>,
}

impl Previous {
    fn of(task: &Task, summary: &AttemptSummary, report: &AttemptReport) -> Self {
        let reply = match &report.outcome {
            AttemptOutcome::Replied { reply, .. } => reply.clone(),
            AttemptOutcome::Infra { .. } => String::new(),
        };
        Self::replied(task, summary, reply)
    }

    /// A judged attempt known only by its journal's summary (its reply
    /// stayed on a lost fleet host): what its gates said.
    pub(crate) fn of_summary(task: &Task, summary: &AttemptSummary) -> Self {
        Self::replied(task, summary, String::new())
    }

    fn replied(task: &Task, summary: &AttemptSummary, reply: String) -> Self {
        let needs_context = (summary.outcome == Outcome::NeedsContext)
            .then(|| reprise_core::outcome::needs_context(&reply).map(str::to_owned))
            .flatten()
            .map(|what| (what, task.on_needs_context.prompt.clone()));
        Self {
            judged: summary.judged,
            needs_context,
            reply,
            agent_exit_code: (summary.judged && summary.gates.is_empty())
                .then_some(summary.exit_code)
                .flatten(),
            failed_gates: summary
                .gates
                .iter()
                .filter(|verdict| !verdict.passed)
                .map(|verdict| {
                    (
                        verdict.name.clone(),
                        verdict.exit_code,
                        disclose_of(task, verdict),
                        verdict.output.clone(),
                    )
                })
                .collect(),
        }
    }

    /// The reply a carried-over judged attempt is known by, for an order
    /// to a fleet worker (see `carried`).
    pub(crate) fn carried_reply(&self) -> Option<&str> {
        self.judged.then_some(self.reply.as_str())
    }

    /// A judged attempt of an earlier run, known only by its kept reply.
    pub(crate) fn carried(reply: String) -> Self {
        Self {
            judged: true,
            reply,
            ..Self::default()
        }
    }
}

fn context<'a>(
    base_prompt: &'a str,
    attempt: u32,
    previous: Option<&'a Previous>,
) -> RetryContext<'a> {
    RetryContext {
        base_prompt,
        attempt,
        files_rolled_back: false,
        needs_context: previous.and_then(|previous| {
            previous
                .needs_context
                .as_ref()
                .map(|(what, answer)| ContextRequest {
                    what,
                    answer: answer.as_deref(),
                })
        }),
        previous: previous.map(|previous| PreviousAttempt {
            judged: previous.judged,
            reply: &previous.reply,
            agent_exit_code: previous.agent_exit_code,
            failed_gates: previous
                .failed_gates
                .iter()
                .map(|(name, exit_code, disclose, output)| FailedGate {
                    name,
                    exit_code: *exit_code,
                    disclose: *disclose,
                    output,
                })
                .collect(),
        }),
    }
}

/// A fresh nonce from the OS CSPRNG, or `None` (the quote is then dropped).
fn mint() -> Option<Nonce> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    Some(Nonce::new(bytes))
}

/// What a reply comes to without its gates, which do not run on it: a
/// request for more context, or an agent that exited non-zero. `None` for a
/// reply the gates judge.
fn unjudged_reply(exit_code: i32, reply: &str) -> Option<taxonomy::AttemptOutcome> {
    match taxonomy::needs_context(reply) {
        Some(what) => Some(taxonomy::AttemptOutcome::NeedsContext(what.to_owned())),
        None if exit_code != 0 => Some(agent_exit_outcome(exit_code, reply)),
        None => None,
    }
}

/// An agent that exited non-zero: a verdict on its work when it replied,
/// else a failure of the infrastructure.
fn agent_exit_outcome(exit_code: i32, reply: &str) -> taxonomy::AttemptOutcome {
    if reply.trim().is_empty() {
        taxonomy::AttemptOutcome::Infra(taxonomy::InfraKind::AgentExitWithoutReply)
    } else {
        taxonomy::AttemptOutcome::Judged(vec![taxonomy::Verdict::AgentExit { exit_code }])
    }
}

/// The outcome the run's state names for a classified attempt, and its
/// infrastructure kind.
fn outcome_names(classified: &taxonomy::AttemptOutcome) -> (Outcome, Option<String>) {
    match classified {
        taxonomy::AttemptOutcome::Passed => (Outcome::Passed, None),
        taxonomy::AttemptOutcome::Judged(_) => (Outcome::Judged, None),
        taxonomy::AttemptOutcome::Infra(kind) => (Outcome::Infra, Some(kind.as_str().to_owned())),
        taxonomy::AttemptOutcome::NeedsContext(_) => (Outcome::NeedsContext, None),
    }
}

fn disclose_of(task: &Task, verdict: &GateVerdict) -> Disclose {
    task.gates
        .iter()
        .find(|gate| gate.name == verdict.name)
        .map_or(Disclose::Verdict, |gate| gate.disclose)
}

/// The last [`TRANSCRIPT_TAIL_BYTES`] of a transcript: the CLIs write the
/// usage of a session's last request at its end, and a retry should not read
/// a whole session to find it.
fn transcript_tail(path: &Path) -> Option<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = fs::File::open(path).ok()?;
    let length = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(
        length.saturating_sub(TRANSCRIPT_TAIL_BYTES),
    ))
    .ok()?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).ok()?;
    Some(tail)
}

/// How much of a transcript's end `transcript_tail` reads.
const TRANSCRIPT_TAIL_BYTES: u64 = 256 * 1024;

//! The built-in `sim` agent: a deterministic scripted agent with its own
//! fork-capable session store, so the quickstart and the tests exercise
//! warm, fork and cold retries with no account and no network.
//!
//! It runs in-process (no child). Attempt N plays step `min(N, len)` of the
//! script, so the last step repeats. A step may wait (`delay`, against the
//! attempt's timeout and the cancel token), write files into the sandbox,
//! cost money (checked against the budget before anything happens) and reply
//! with an exit code. A step that does not complete writes nothing and spends
//! nothing.
//!
//! Parks can be scripted as the real CLIs would cause them: a step that exits
//! non-zero with a reply saying a quota ran out and when it resets (`usage
//! limit reached; resets in 3 seconds`, `Claude AI usage limit
//! reached|<unix>`) ends as `usage_limit` with that reset; a step whose
//! `delay` reaches the task's `park_when_idle` waits that long and ends as
//! `awaiting_permission`, its reply the question (its turn is recorded, as a
//! real CLI's session would hold it, but it writes and spends nothing).
//!
//! Sessions are JSON-lines transcripts, `<store>/<session id>.jsonl`, one
//! line per turn: `{"turn":n,"prompt":...,"reply":...}`. New starts a file
//! (the given id or a UUID v4); resume appends to an existing one (else
//! `session_unavailable`); fork copies the original byte for byte to a new
//! id and appends there only, so the original never changes.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use reprise_core::retry::ResumeStrategy;
use serde::{Deserialize, Serialize};

use crate::outcome::{
    AttemptOutcome, AttemptReport, InfraKind, ParkSignal, Parsed, format_micro_usd, infra,
};
use crate::park::{Clock, bounded_question, settle_usage_limit};
use crate::process::{describe_duration, preflight};
use crate::request::{Adapter, AttemptRequest, CancelToken, SessionMode};

/// How often a waiting step looks at the cancel token.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// One scripted answer of the sim agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimStep {
    /// The reply text.
    pub reply: String,
    /// Files to write, as (path relative to the sandbox, content).
    pub write: Vec<(String, String)>,
    /// The exit code reported with the reply.
    pub exit_code: i32,
    /// What the step costs; beyond the attempt's budget it is refused.
    pub cost_micro_usd: u64,
    /// How long the step takes; at or beyond the timeout it times out.
    pub delay: Duration,
}

/// One turn of a sim session, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimTurn {
    /// 1-based position in the session (a fork continues the count).
    pub turn: u32,
    /// The prompt the attempt sent.
    pub prompt: String,
    /// The reply the step gave.
    pub reply: String,
}

/// The sim agent: a script and a session store directory.
#[derive(Debug, Clone)]
pub struct SimAdapter {
    script: Vec<SimStep>,
    store: PathBuf,
}

impl SimAdapter {
    /// A sim agent playing `script`, keeping sessions in `store` (the
    /// engine passes `.reprise/sim/`).
    pub fn new(script: Vec<SimStep>, store: PathBuf) -> Self {
        Self { script, store }
    }

    fn session_file(&self, session_id: &str) -> PathBuf {
        session_file(&self.store, session_id)
    }

    /// Runs the step; on return `report.session_id` names the target
    /// session when it was decided.
    fn play(
        &self,
        request: &AttemptRequest,
        cancel: &CancelToken,
        report: &mut AttemptReport,
    ) -> AttemptOutcome {
        let Some(last) = self.script.len().checked_sub(1) else {
            return infra(
                InfraKind::ApiError,
                "the sim script has no steps; give the task at least one step",
            );
        };
        let index = (request.attempt.max(1) as usize - 1).min(last);
        let step = &self.script[index];
        let step_number = index + 1;
        report.argv = vec!["sim".into(), "--step".into(), step_number.to_string()];
        if let Some(outcome) = preflight(request, cancel) {
            return outcome;
        }
        if let Some((path, _)) = step.write.iter().find(|(path, _)| !is_inside_sandbox(path)) {
            return infra(
                InfraKind::ApiError,
                format!(
                    "sim step {step_number} writes outside the sandbox: '{path}'; use a relative path without '..'"
                ),
            );
        }
        let target = match self.target_session(&request.session) {
            Ok(target) => target,
            Err(outcome) => return outcome,
        };
        report.session_id = Some(target.id().to_string());
        if let Some(budget) = request.budget_micro_usd
            && step.cost_micro_usd > budget
        {
            return infra(
                InfraKind::BudgetExhausted,
                format!(
                    "sim step {step_number} costs {} usd, beyond the attempt's budget of {} usd",
                    format_micro_usd(step.cost_micro_usd),
                    format_micro_usd(budget)
                ),
            );
        }
        // The session exists from the attempt's start, as a CLI's does: an
        // attempt stopped midway (a park, a crash) leaves it resumable.
        if let Err(error) = self.open_session(&target) {
            return infra(
                InfraKind::ApiError,
                format!(
                    "sim could not open session {} under '{}': {error}",
                    target.id(),
                    self.store.display()
                ),
            );
        }
        if let Some(quiet) = parks_after(step, request) {
            return self.go_quiet(request, cancel, report, &target, index, quiet);
        }
        self.reply(request, cancel, report, &target, step)
    }

    /// The step of script position `index`, silent for `quiet`: the turn is
    /// recorded and the attempt is taken to wait on someone.
    fn go_quiet(
        &self,
        request: &AttemptRequest,
        cancel: &CancelToken,
        report: &mut AttemptReport,
        target: &Target,
        index: usize,
        quiet: Duration,
    ) -> AttemptOutcome {
        let step = &self.script[index];
        if !wait(quiet, cancel) {
            return infra(InfraKind::Cancelled, "cancelled while the sim step ran");
        }
        if let Err(error) = self.record_turn(target, &request.prompt, &step.reply) {
            return infra(
                InfraKind::ApiError,
                format!(
                    "sim could not record the turn in session {}: {error}",
                    target.id()
                ),
            );
        }
        let question = if step.reply.trim().is_empty() {
            format!("sim step {} went quiet", index + 1)
        } else {
            bounded_question(&step.reply)
        };
        report.park = Some(ParkSignal::Approval { question });
        infra(
            InfraKind::AwaitingPermission,
            format!(
                "sim printed nothing for {} (park_when_idle): taken to wait on a permission or an answer",
                describe_duration(quiet)
            ),
        )
    }

    /// The step run to its end: after its delay (unless the attempt times
    /// out first), its files written, its turn recorded, its reply given.
    fn reply(
        &self,
        request: &AttemptRequest,
        cancel: &CancelToken,
        report: &mut AttemptReport,
        target: &Target,
        step: &SimStep,
    ) -> AttemptOutcome {
        let timed_out = step.delay >= request.timeout;
        if !wait(step.delay.min(request.timeout), cancel) {
            return infra(InfraKind::Cancelled, "cancelled while the sim step ran");
        }
        if timed_out {
            return infra(
                InfraKind::Timeout,
                format!(
                    "sim did not finish within {}",
                    describe_duration(request.timeout)
                ),
            );
        }
        if let Err(outcome) = write_files(&request.cwd, &step.write) {
            return outcome;
        }
        if let Err(error) = self.record_turn(target, &request.prompt, &step.reply) {
            return infra(
                InfraKind::ApiError,
                format!(
                    "sim could not record the turn in session {} under '{}': {error}",
                    target.id(),
                    self.store.display()
                ),
            );
        }
        report.cost_micro_usd = Some(step.cost_micro_usd);
        AttemptOutcome::Replied {
            exit_code: step.exit_code,
            reply: step.reply.clone(),
        }
    }

    /// Which session file the turn goes to, checked against the store.
    fn target_session(&self, mode: &SessionMode) -> Result<Target, AttemptOutcome> {
        let fresh = |given: &Option<String>| -> Result<String, AttemptOutcome> {
            let id = given
                .clone()
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
            if !crate::request::is_file_safe_session_id(&id) {
                return Err(infra(
                    InfraKind::ApiError,
                    format!(
                        "'{id}' is not a valid sim session id; use letters, digits, '.', '_' and '-'"
                    ),
                ));
            }
            if self.session_file(&id).exists() {
                return Err(infra(
                    InfraKind::ApiError,
                    format!("sim session id {id} is already in use; choose another"),
                ));
            }
            Ok(id)
        };
        let existing = |id: &str| -> Result<String, AttemptOutcome> {
            if crate::request::is_file_safe_session_id(id) && self.session_file(id).is_file() {
                Ok(id.to_string())
            } else {
                Err(infra(
                    InfraKind::SessionUnavailable,
                    format!(
                        "sim session {id} not found under '{}'",
                        self.store.display()
                    ),
                ))
            }
        };
        Ok(match mode {
            SessionMode::New { session_id } => Target::New(fresh(session_id)?),
            SessionMode::Resume { session_id } => Target::Resume(existing(session_id)?),
            SessionMode::Fork {
                from,
                new_session_id,
            } => {
                let from = existing(from)?;
                Target::Fork {
                    from,
                    id: fresh(new_session_id)?,
                }
            }
        })
    }

    /// Creates a new session's file, or a fork's copy of its origin.
    fn open_session(&self, target: &Target) -> io::Result<()> {
        fs::create_dir_all(&self.store)?;
        let path = self.session_file(target.id());
        match target {
            Target::New(_) => {
                OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)?;
            }
            Target::Resume(_) => {}
            Target::Fork { from, .. } => {
                let original = fs::read(self.session_file(from))?;
                let mut copy = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)?;
                copy.write_all(&original)?;
            }
        }
        Ok(())
    }

    fn record_turn(&self, target: &Target, prompt: &str, reply: &str) -> io::Result<()> {
        let path = self.session_file(target.id());
        let earlier_turns = count_turns(&fs::read(&path)?);
        let turn = SimTurn {
            turn: earlier_turns + 1,
            prompt: prompt.to_string(),
            reply: reply.to_string(),
        };
        let mut line = serde_json::to_string(&turn).map_err(io::Error::other)?;
        line.push('\n');
        OpenOptions::new()
            .append(true)
            .open(&path)?
            .write_all(line.as_bytes())
    }
}

/// The session a turn is recorded in.
#[derive(Debug)]
enum Target {
    New(String),
    Resume(String),
    Fork { from: String, id: String },
}

impl Target {
    fn id(&self) -> &str {
        match self {
            Self::New(id) | Self::Resume(id) | Self::Fork { id, .. } => id,
        }
    }
}

impl Adapter for SimAdapter {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn strategy(&self) -> ResumeStrategy {
        ResumeStrategy::NativeForkable
    }

    /// A step whose cost is past the budget is refused before it runs.
    fn bounds_spend(&self) -> bool {
        true
    }

    fn chooses_session_ids(&self) -> bool {
        true
    }

    fn run(&self, request: &AttemptRequest, cancel: &CancelToken) -> AttemptReport {
        let started = Instant::now();
        let mut report = AttemptReport {
            outcome: infra(InfraKind::ApiError, "not started"),
            session_id: None,
            cost_micro_usd: Some(0),
            session_model: None,
            adapter: "sim",
            cli_version: Some(concat!("reprise-sim ", env!("CARGO_PKG_VERSION")).to_string()),
            cwd: request.cwd.clone(),
            config_home: request.config_home.clone(),
            argv: vec!["sim".into()],
            elapsed: Duration::ZERO,
            streams: Default::default(),
            park: None,
        };
        let outcome = self.play(request, cancel, &mut report);
        // A failed step's reply may name a usage limit and its reset.
        let limit_text = match &outcome {
            AttemptOutcome::Replied { exit_code, reply } if *exit_code != 0 => Some(reply.clone()),
            _ => None,
        };
        let settled = settle_usage_limit(
            Parsed {
                limit_text,
                ..Parsed::of(outcome)
            },
            &Clock::system(),
        );
        report.outcome = settled.outcome;
        report.park = report.park.take().or(settled.park);
        // Only a session that exists is reported: a refused new session or
        // fork leaves nothing to resume.
        report.session_id = report
            .session_id
            .take()
            .filter(|id| self.session_file(id).is_file());
        report.elapsed = started.elapsed();
        report
    }

    /// `<store>/<session id>.jsonl`, whether or not it exists.
    fn transcript_path(
        &self,
        session_id: &str,
        _cwd: &Path,
        _config_home: Option<&Path>,
    ) -> Option<PathBuf> {
        crate::request::is_file_safe_session_id(session_id).then(|| self.session_file(session_id))
    }
}

/// Reads every turn of a sim session, in order.
pub fn sim_transcript(store: &Path, session_id: &str) -> io::Result<Vec<SimTurn>> {
    if !crate::request::is_file_safe_session_id(session_id) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("'{session_id}' is not a valid sim session id"),
        ));
    }
    let path = session_file(store, session_id);
    fs::read_to_string(&path)?
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line).map_err(|error| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("bad sim turn in '{}': {error}", path.display()),
                )
            })
        })
        .collect()
}

fn session_file(store: &Path, session_id: &str) -> PathBuf {
    store.join(format!("{session_id}.jsonl"))
}

/// How long `step` stays silent before the attempt is taken to wait on
/// someone: when `park_when_idle` acts before the timeout and any idle bound.
fn parks_after(step: &SimStep, request: &AttemptRequest) -> Option<Duration> {
    let watch = &request.watch;
    watch.park_when_idle.filter(|quiet| {
        step.delay >= *quiet
            && *quiet < request.timeout
            && watch.idle_timeout.is_none_or(|idle| *quiet <= idle)
    })
}

/// Writes a step's files under `cwd`, their directories made as needed.
fn write_files(cwd: &Path, files: &[(String, String)]) -> Result<(), AttemptOutcome> {
    for (relative, content) in files {
        let path = cwd.join(relative);
        let written = match path.parent() {
            Some(parent) => fs::create_dir_all(parent),
            None => Ok(()),
        }
        .and_then(|()| fs::write(&path, content));
        if let Err(error) = written {
            return Err(infra(
                InfraKind::ApiError,
                format!("sim could not write '{}': {error}", path.display()),
            ));
        }
    }
    Ok(())
}

/// A relative path made only of normal components: it cannot leave `cwd`.
fn is_inside_sandbox(path: &str) -> bool {
    let path = Path::new(path);
    path.components().next().is_some()
        && path
            .components()
            .all(|component| matches!(component, Component::Normal(_) | Component::CurDir))
        && path
            .components()
            .any(|component| matches!(component, Component::Normal(_)))
}

fn count_turns(transcript: &[u8]) -> u32 {
    let lines = transcript
        .split(|&b| b == b'\n')
        .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
        .count();
    u32::try_from(lines).unwrap_or(u32::MAX)
}

/// Sleeps `duration`, watching `cancel`; false if cancelled.
fn wait(duration: Duration, cancel: &CancelToken) -> bool {
    let until = Instant::now() + duration;
    loop {
        if cancel.is_cancelled() {
            return false;
        }
        let now = Instant::now();
        if now >= until {
            return true;
        }
        thread::sleep((until - now).min(POLL_INTERVAL));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::tests::request;

    struct World {
        _dir: tempfile::TempDir,
        sandbox: PathBuf,
        store: PathBuf,
    }

    fn world() -> World {
        let dir = tempfile::tempdir().expect("tempdir");
        let sandbox = dir.path().join("sandbox");
        fs::create_dir(&sandbox).expect("mkdir");
        let store = dir.path().join(".reprise/sim");
        World {
            sandbox,
            store,
            _dir: dir,
        }
    }

    fn step(reply: &str) -> SimStep {
        SimStep {
            reply: reply.into(),
            ..SimStep::default()
        }
    }

    fn attempt(world: &World, number: u32, prompt: &str, session: SessionMode) -> AttemptRequest {
        AttemptRequest {
            attempt: number,
            prompt: prompt.into(),
            ..request(session, &world.sandbox)
        }
    }

    fn run(adapter: &SimAdapter, request: &AttemptRequest) -> AttemptReport {
        adapter.run(request, &CancelToken::new())
    }

    fn replied(report: &AttemptReport) -> (i32, &str) {
        match &report.outcome {
            AttemptOutcome::Replied { exit_code, reply } => (*exit_code, reply),
            other => panic!("expected a reply, got {other:?}"),
        }
    }

    fn infra_kind(report: &AttemptReport) -> InfraKind {
        match &report.outcome {
            AttemptOutcome::Infra { kind, .. } => *kind,
            other => panic!("expected infra, got {other:?}"),
        }
    }

    fn turn(turn: u32, prompt: &str, reply: &str) -> SimTurn {
        SimTurn {
            turn,
            prompt: prompt.into(),
            reply: reply.into(),
        }
    }

    #[test]
    fn new_then_resume_appends_to_the_same_transcript() {
        let world = world();
        let sim = SimAdapter::new(vec![step("first"), step("second")], world.store.clone());
        let first = run(
            &sim,
            &attempt(
                &world,
                1,
                "do it",
                SessionMode::New {
                    session_id: Some("s1".into()),
                },
            ),
        );
        assert_eq!(replied(&first), (0, "first"));
        assert_eq!(first.session_id.as_deref(), Some("s1"));
        assert_eq!(first.adapter, "sim");
        assert_eq!(first.argv, ["sim", "--step", "1"]);
        assert_eq!(
            sim_transcript(&world.store, "s1").expect("read"),
            [turn(1, "do it", "first")]
        );

        let second = run(
            &sim,
            &attempt(
                &world,
                2,
                "fix it",
                SessionMode::Resume {
                    session_id: "s1".into(),
                },
            ),
        );
        assert_eq!(replied(&second), (0, "second"));
        assert_eq!(second.session_id.as_deref(), Some("s1"));
        assert_eq!(
            sim_transcript(&world.store, "s1").expect("read"),
            [turn(1, "do it", "first"), turn(2, "fix it", "second")]
        );
        assert_eq!(
            fs::read_to_string(world.store.join("s1.jsonl")).expect("raw"),
            "{\"turn\":1,\"prompt\":\"do it\",\"reply\":\"first\"}\n{\"turn\":2,\"prompt\":\"fix it\",\"reply\":\"second\"}\n"
        );
        assert_eq!(
            sim.transcript_path("s1", &world.sandbox, None),
            Some(world.store.join("s1.jsonl"))
        );
    }

    #[test]
    fn a_new_session_without_an_id_gets_a_uuid() {
        let world = world();
        let sim = SimAdapter::new(vec![step("ok")], world.store.clone());
        let report = run(
            &sim,
            &attempt(&world, 1, "p", SessionMode::New { session_id: None }),
        );
        let id = report.session_id.expect("an id");
        assert_eq!(
            uuid::Uuid::parse_str(&id).expect("uuid").get_version_num(),
            4
        );
        assert_eq!(sim_transcript(&world.store, &id).expect("read").len(), 1);
    }

    #[test]
    fn fork_copies_byte_for_byte_and_leaves_the_original_alone() {
        let world = world();
        let sim = SimAdapter::new(
            vec![step("one"), step("two"), step("three")],
            world.store.clone(),
        );
        run(
            &sim,
            &attempt(
                &world,
                1,
                "p1",
                SessionMode::New {
                    session_id: Some("orig".into()),
                },
            ),
        );
        run(
            &sim,
            &attempt(
                &world,
                2,
                "p2",
                SessionMode::Resume {
                    session_id: "orig".into(),
                },
            ),
        );
        let original = fs::read(world.store.join("orig.jsonl")).expect("original");

        let forked = run(
            &sim,
            &attempt(
                &world,
                3,
                "p3",
                SessionMode::Fork {
                    from: "orig".into(),
                    new_session_id: Some("branch".into()),
                },
            ),
        );
        assert_eq!(replied(&forked), (0, "three"));
        assert_eq!(forked.session_id.as_deref(), Some("branch"));
        assert_eq!(
            fs::read(world.store.join("orig.jsonl")).expect("original"),
            original
        );
        let branch = fs::read(world.store.join("branch.jsonl")).expect("branch");
        assert!(branch.starts_with(&original));
        assert_eq!(
            sim_transcript(&world.store, "branch").expect("read"),
            [
                turn(1, "p1", "one"),
                turn(2, "p2", "two"),
                turn(3, "p3", "three")
            ]
        );

        let unnamed = run(
            &sim,
            &attempt(
                &world,
                3,
                "p4",
                SessionMode::Fork {
                    from: "orig".into(),
                    new_session_id: None,
                },
            ),
        );
        let id = unnamed.session_id.expect("a fork id");
        assert_ne!(id, "orig");
        assert_ne!(id, "branch");
        assert_eq!(
            fs::read(world.store.join("orig.jsonl")).expect("original"),
            original
        );
    }

    #[test]
    fn cold_retries_start_independent_sessions() {
        let world = world();
        let sim = SimAdapter::new(vec![step("one"), step("two")], world.store.clone());
        let first = run(
            &sim,
            &attempt(&world, 1, "p", SessionMode::New { session_id: None }),
        );
        let second = run(
            &sim,
            &attempt(&world, 2, "p again", SessionMode::New { session_id: None }),
        );
        let (first_id, second_id) = (
            first.session_id.expect("id"),
            second.session_id.expect("id"),
        );
        assert_ne!(first_id, second_id);
        assert_eq!(
            sim_transcript(&world.store, &first_id).expect("read"),
            [turn(1, "p", "one")]
        );
        assert_eq!(
            sim_transcript(&world.store, &second_id).expect("read"),
            [turn(1, "p again", "two")]
        );
    }

    #[test]
    fn resuming_or_forking_a_missing_session_is_session_unavailable() {
        let world = world();
        let sim = SimAdapter::new(vec![step("x")], world.store.clone());
        let resumed = run(
            &sim,
            &attempt(
                &world,
                2,
                "p",
                SessionMode::Resume {
                    session_id: "gone".into(),
                },
            ),
        );
        assert_eq!(infra_kind(&resumed), InfraKind::SessionUnavailable);
        assert_eq!(resumed.session_id, None);
        let forked = run(
            &sim,
            &attempt(
                &world,
                2,
                "p",
                SessionMode::Fork {
                    from: "gone".into(),
                    new_session_id: Some("new".into()),
                },
            ),
        );
        assert_eq!(infra_kind(&forked), InfraKind::SessionUnavailable);
        assert!(!world.store.join("new.jsonl").exists());
        let escaping = run(
            &sim,
            &attempt(
                &world,
                2,
                "p",
                SessionMode::Resume {
                    session_id: "../sandbox/x".into(),
                },
            ),
        );
        assert_eq!(infra_kind(&escaping), InfraKind::SessionUnavailable);
    }

    #[test]
    fn a_new_session_id_in_use_is_refused() {
        let world = world();
        let sim = SimAdapter::new(vec![step("x")], world.store.clone());
        run(
            &sim,
            &attempt(
                &world,
                1,
                "p",
                SessionMode::New {
                    session_id: Some("s".into()),
                },
            ),
        );
        let before = fs::read(world.store.join("s.jsonl")).expect("read");
        let again = run(
            &sim,
            &attempt(
                &world,
                1,
                "q",
                SessionMode::New {
                    session_id: Some("s".into()),
                },
            ),
        );
        assert_eq!(infra_kind(&again), InfraKind::ApiError);
        assert_eq!(fs::read(world.store.join("s.jsonl")).expect("read"), before);
        let bad = run(
            &sim,
            &attempt(
                &world,
                1,
                "q",
                SessionMode::New {
                    session_id: Some("a/b".into()),
                },
            ),
        );
        assert_eq!(infra_kind(&bad), InfraKind::ApiError);
    }

    #[test]
    fn steps_are_picked_by_attempt_and_the_last_repeats() {
        let world = world();
        let script = vec![
            SimStep {
                reply: "first".into(),
                exit_code: 1,
                ..SimStep::default()
            },
            SimStep {
                reply: "second".into(),
                exit_code: 0,
                ..SimStep::default()
            },
        ];
        let sim = SimAdapter::new(script, world.store.clone());
        for (number, expected) in [
            (0, (1, "first")),
            (1, (1, "first")),
            (2, (0, "second")),
            (3, (0, "second")),
            (9, (0, "second")),
        ] {
            let report = run(
                &sim,
                &attempt(&world, number, "p", SessionMode::New { session_id: None }),
            );
            assert_eq!(replied(&report), expected, "attempt {number}");
        }
        let empty = SimAdapter::new(Vec::new(), world.store.clone());
        assert_eq!(
            infra_kind(&run(
                &empty,
                &attempt(&world, 1, "p", SessionMode::New { session_id: None })
            )),
            InfraKind::ApiError
        );
    }

    #[test]
    fn files_are_written_relative_to_the_sandbox() {
        let world = world();
        let script = vec![SimStep {
            reply: "DONE".into(),
            write: vec![
                ("greeting.txt".into(), "hello\n".into()),
                ("./nested/deeper/file.md".into(), "# x".into()),
            ],
            cost_micro_usd: 1_500,
            ..SimStep::default()
        }];
        let sim = SimAdapter::new(script, world.store.clone());
        let report = run(
            &sim,
            &attempt(&world, 1, "p", SessionMode::New { session_id: None }),
        );
        assert_eq!(replied(&report), (0, "DONE"));
        assert_eq!(report.cost_micro_usd, Some(1_500));
        assert_eq!(
            fs::read_to_string(world.sandbox.join("greeting.txt")).expect("read"),
            "hello\n"
        );
        assert_eq!(
            fs::read_to_string(world.sandbox.join("nested/deeper/file.md")).expect("read"),
            "# x"
        );
    }

    fn nothing_written(world: &World) -> bool {
        fs::read_dir(&world.sandbox)
            .expect("sandbox")
            .next()
            .is_none()
            && fs::read_dir(&world.store).map_or(true, |mut entries| entries.next().is_none())
    }

    /// The sandbox is untouched, and every session in the store (an attempt
    /// stopped midway leaves its session open, as a CLI does) has no turn.
    fn no_turn_written(world: &World) -> bool {
        fs::read_dir(&world.sandbox)
            .expect("sandbox")
            .next()
            .is_none()
            && fs::read_dir(&world.store).map_or(true, |entries| {
                entries
                    .flatten()
                    .all(|entry| fs::read(entry.path()).is_ok_and(|bytes| bytes.is_empty()))
            })
    }

    #[test]
    fn a_delay_beyond_the_timeout_times_out_and_writes_nothing() {
        let world = world();
        let script = vec![SimStep {
            reply: "late".into(),
            write: vec![("late.txt".into(), "x".into())],
            delay: Duration::from_millis(100),
            ..SimStep::default()
        }];
        let sim = SimAdapter::new(script, world.store.clone());
        for timeout in [Duration::from_millis(50), Duration::from_millis(100)] {
            let request = AttemptRequest {
                timeout,
                ..attempt(
                    &world,
                    1,
                    "p",
                    SessionMode::New {
                        session_id: Some("late".into()),
                    },
                )
            };
            let report = run(&sim, &request);
            assert_eq!(infra_kind(&report), InfraKind::Timeout);
            // The session was opened when the attempt started: resumable.
            assert_eq!(report.session_id.as_deref(), Some("late"));
            assert!(no_turn_written(&world));
            fs::remove_file(world.store.join("late.jsonl")).expect("the open session");
        }
        let request = AttemptRequest {
            timeout: Duration::from_secs(30),
            ..attempt(
                &world,
                1,
                "p",
                SessionMode::New {
                    session_id: Some("late".into()),
                },
            )
        };
        assert_eq!(replied(&run(&sim, &request)), (0, "late"));
        assert!(world.sandbox.join("late.txt").exists());
    }

    #[test]
    fn cost_beyond_the_budget_is_budget_exhausted_and_writes_nothing() {
        let world = world();
        let script = vec![SimStep {
            reply: "pricey".into(),
            write: vec![("out.txt".into(), "x".into())],
            cost_micro_usd: 2_000_000,
            ..SimStep::default()
        }];
        let sim = SimAdapter::new(script, world.store.clone());
        let over = AttemptRequest {
            budget_micro_usd: Some(1_999_999),
            ..attempt(&world, 1, "p", SessionMode::New { session_id: None })
        };
        let report = run(&sim, &over);
        assert_eq!(
            report.outcome,
            AttemptOutcome::Infra {
                kind: InfraKind::BudgetExhausted,
                detail: "sim step 1 costs 2 usd, beyond the attempt's budget of 1.999999 usd"
                    .into()
            }
        );
        assert_eq!(report.cost_micro_usd, Some(0));
        assert!(nothing_written(&world));
        let exact = AttemptRequest {
            budget_micro_usd: Some(2_000_000),
            ..over
        };
        assert_eq!(replied(&run(&sim, &exact)), (0, "pricey"));
    }

    #[test]
    fn paths_leaving_the_sandbox_are_refused_and_nothing_is_written() {
        let world = world();
        for bad in ["../escape.txt", "/tmp/absolute.txt", "a/../../b", "", "."] {
            let script = vec![SimStep {
                reply: "x".into(),
                write: vec![("fine.txt".into(), "x".into()), (bad.into(), "x".into())],
                ..SimStep::default()
            }];
            let sim = SimAdapter::new(script, world.store.clone());
            let report = run(
                &sim,
                &attempt(&world, 1, "p", SessionMode::New { session_id: None }),
            );
            assert_eq!(infra_kind(&report), InfraKind::ApiError, "{bad:?}");
            assert!(nothing_written(&world), "{bad:?}");
        }
        let AttemptOutcome::Infra { detail, .. } = run(
            &SimAdapter::new(
                vec![SimStep {
                    write: vec![("../x".into(), String::new())],
                    ..SimStep::default()
                }],
                world.store.clone(),
            ),
            &attempt(&world, 1, "p", SessionMode::New { session_id: None }),
        )
        .outcome
        else {
            unreachable!()
        };
        assert_eq!(
            detail,
            "sim step 1 writes outside the sandbox: '../x'; use a relative path without '..'"
        );
    }

    #[test]
    fn cancel_stops_a_waiting_step_and_writes_nothing() {
        let world = world();
        let script = vec![SimStep {
            write: vec![("x.txt".into(), "x".into())],
            delay: Duration::from_secs(60),
            ..SimStep::default()
        }];
        let sim = SimAdapter::new(script, world.store.clone());
        let cancel = CancelToken::new();
        let canceller = {
            let cancel = cancel.clone();
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(50));
                cancel.cancel();
            })
        };
        let request = AttemptRequest {
            timeout: Duration::from_secs(120),
            ..attempt(&world, 1, "p", SessionMode::New { session_id: None })
        };
        let report = sim.run(&request, &cancel);
        canceller.join().expect("canceller");
        assert_eq!(infra_kind(&report), InfraKind::Cancelled);
        assert!(no_turn_written(&world));
        assert_eq!(
            infra_kind(&sim.run(&request, &cancel)),
            InfraKind::Cancelled
        );
    }

    #[test]
    fn transcripts_refuse_bad_ids_and_bad_lines() {
        let world = world();
        assert_eq!(
            sim_transcript(&world.store, "../x")
                .expect_err("bad id")
                .kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            sim_transcript(&world.store, "missing")
                .expect_err("missing")
                .kind(),
            io::ErrorKind::NotFound
        );
        fs::create_dir_all(&world.store).expect("mkdir");
        fs::write(world.store.join("bad.jsonl"), "{\"turn\":1}\n").expect("write");
        assert_eq!(
            sim_transcript(&world.store, "bad")
                .expect_err("bad line")
                .kind(),
            io::ErrorKind::InvalidData
        );
        let sim = SimAdapter::new(vec![step("x")], world.store.clone());
        assert_eq!(sim.transcript_path("../x", &world.sandbox, None), None);
    }

    #[test]
    fn the_strategy_is_fork() {
        let sim = SimAdapter::new(Vec::new(), PathBuf::from("/store"));
        assert_eq!(sim.name(), "sim");
        assert_eq!(sim.strategy(), ResumeStrategy::NativeForkable);
        assert_eq!(
            sim.strategy().capability(),
            reprise_core::retry::Capability::Fork
        );
    }

    #[test]
    fn a_step_that_fails_naming_a_usage_limit_s_reset_is_to_be_parked_until_then() {
        let world = world();
        let limited = SimStep {
            reply: "usage limit reached; resets in 3 seconds".into(),
            exit_code: 1,
            ..SimStep::default()
        };
        let adapter = SimAdapter::new(vec![limited], world.store.clone());
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let report = run(
            &adapter,
            &attempt(&world, 1, "p", SessionMode::New { session_id: None }),
        );
        assert_eq!(infra_kind(&report), InfraKind::UsageLimit);
        let Some(ParkSignal::Until { unix, source }) = report.park else {
            panic!("{report:?}")
        };
        assert_eq!(source, reprise_core::reset::ResetSource::Relative);
        assert!(
            (before + 3..=before + 4).contains(&unix),
            "{unix} vs {before}"
        );
        // The same words with exit 0 are a reply.
        let fine = SimAdapter::new(
            vec![step("usage limit reached; resets in 3 seconds")],
            world.store.clone(),
        );
        let report = run(
            &fine,
            &attempt(&world, 1, "p", SessionMode::New { session_id: None }),
        );
        assert_eq!(
            replied(&report),
            (0, "usage limit reached; resets in 3 seconds")
        );
        assert_eq!(report.park, None);
    }

    #[test]
    fn a_step_silent_past_park_when_idle_awaits_permission_with_its_reply_as_the_question() {
        let world = world();
        let waiting = SimStep {
            reply: "May I run the migration?".into(),
            write: vec![("x.txt".into(), "x".into())],
            delay: Duration::from_secs(60),
            ..SimStep::default()
        };
        let adapter = SimAdapter::new(vec![waiting], world.store.clone());
        let request = AttemptRequest {
            watch: crate::request::Watch {
                park_when_idle: Some(Duration::from_millis(50)),
                ..Default::default()
            },
            ..attempt(&world, 1, "p", SessionMode::New { session_id: None })
        };
        let report = run(&adapter, &request);
        assert_eq!(infra_kind(&report), InfraKind::AwaitingPermission);
        assert_eq!(
            report.park,
            Some(ParkSignal::Approval {
                question: "May I run the migration?".into()
            })
        );
        // Nothing written; the session holds the turn, to be resumed warm.
        assert!(!world.sandbox.join("x.txt").exists());
        let session = report.session_id.expect("a session");
        assert_eq!(
            sim_transcript(&world.store, &session).unwrap(),
            [turn(1, "p", "May I run the migration?")]
        );
        // Without the key the step just takes its time (here: past the timeout).
        let report = run(
            &adapter,
            &AttemptRequest {
                timeout: Duration::from_millis(50),
                ..attempt(&world, 1, "p", SessionMode::New { session_id: None })
            },
        );
        assert_eq!(infra_kind(&report), InfraKind::Timeout);
        assert_eq!(report.park, None);
    }
}

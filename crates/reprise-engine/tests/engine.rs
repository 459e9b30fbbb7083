//! The run engine end to end, through its public API: plans run by the `sim`
//! and `command` agents, gates that act between attempts (edit the workspace,
//! tamper with the journal, delete sessions), and every claim checked against
//! what was recorded: the run state, journal rows, the spine, the audit chain
//! and the sim agent's own transcripts.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use reprise_agents::{CancelToken, SimTurn, sim_transcript};
use reprise_core::TaskId;
use reprise_core::digest::{Digest, tagged_sha256};
use reprise_core::plan::parse_plan;
use reprise_core::prompt::{CORRECTIVE_TEMPLATE_ID, INSTRUCTION_TAG, cold_retry_prompt};
use reprise_core::record::{AuditRow, JournalRow, SpineRow, decision_hash};
use reprise_core::retry::{Capability, DecisionRecord, DowngradeReason, RetryMode};
use reprise_core::verify::{Coverage, Identity};
use reprise_engine::{
    AttemptSummary, Event, EventSink, Outcome, RunOptions, RunState, TaskRecord, TaskStatus,
    load_run, new_run_id, read_decisions, resolve_budget, run_plan,
};
use reprise_store::audit::read_audit;
use reprise_store::journal::verify_journal;
use reprise_testkit::Fixture;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The first line of every corrective instruction.
const INSTRUCTION_OPENING: &str = "Checks did not accept your last attempt:";

/// A project, a state directory with its key, and a directory "aside" (outside
/// both, so nothing there changes the workspace hash) for gate scripts,
/// markers and logs.
struct World {
    _temp: tempfile::TempDir,
    fixture: Fixture,
    project: PathBuf,
    aside: PathBuf,
    /// The plan of the latest run: task journals are the plan's.
    plan: std::cell::RefCell<Option<reprise_core::PlanId>>,
}

/// What a run returned, and the events it reported.
struct Ran {
    state: RunState,
    events: Vec<Event>,
}

/// Keeps every event, in order.
#[derive(Default)]
struct Recorder(Vec<Event>);

impl EventSink for Recorder {
    fn event(&mut self, event: &Event) {
        self.0.push(event.clone());
    }
}

impl World {
    fn new() -> Self {
        let temp = tempfile::tempdir().expect("tempdir");
        let fixture = Fixture::create(temp.path()).expect("fixture");
        let project = temp.path().join("project");
        let aside = temp.path().join("aside");
        fs::create_dir(&project).expect("project");
        fs::create_dir(&aside).expect("aside");
        Self {
            _temp: temp,
            fixture,
            project,
            aside,
            plan: std::cell::RefCell::new(None),
        }
    }

    /// A project that is a git repository with one commit, so each task gets
    /// its own worktree.
    fn git() -> Self {
        let world = Self::new();
        fs::write(world.project.join("README"), "a project\n").expect("readme");
        for args in [
            &["init", "-q"][..],
            &["add", "README"],
            &[
                "-c",
                "user.name=reprise",
                "-c",
                "user.email=reprise@localhost",
                "-c",
                "commit.gpgsign=false",
                "commit",
                "-qm",
                "start",
            ],
        ] {
            let status = Command::new("git")
                .args(args)
                .current_dir(&world.project)
                .status()
                .expect("git");
            assert!(status.success(), "git {args:?}");
        }
        world
    }

    fn state_root(&self) -> &Path {
        self.fixture.state.root()
    }

    /// `plan` with `@ASIDE@` and `@STATE@` replaced by those directories.
    fn expand(&self, text: &str) -> String {
        text.replace("@ASIDE@", &self.aside.display().to_string())
            .replace("@STATE@", &self.state_root().display().to_string())
    }

    fn run(&self, plan: &str) -> Ran {
        self.run_with_seats(plan, None)
    }

    fn run_with_seats(&self, plan: &str, seats: Option<u32>) -> Ran {
        self.run_with(plan, seats, None)
    }

    fn run_with_budget(&self, plan: &str, budget: Option<reprise_core::budget::BudgetSpec>) -> Ran {
        self.run_with(plan, None, budget)
    }

    fn run_with(
        &self,
        plan: &str,
        seats: Option<u32>,
        retry_budget: Option<reprise_core::budget::BudgetSpec>,
    ) -> Ran {
        let plan =
            parse_plan(&self.expand(plan), "plan.yaml").unwrap_or_else(|err| panic!("{err}"));
        *self.plan.borrow_mut() = Some(plan.id().clone());
        let mut recorder = Recorder::default();
        let state = run_plan(
            &self.fixture.state,
            &plan,
            RunOptions {
                run_id: new_run_id(),
                plan_path: PathBuf::from("plan.yaml"),
                project: self.project.clone(),
                seats,
                retry_of: None,
                retry_budget,
                agent_setup: Default::default(),
                key: self.fixture.key.clone(),
                include_uncommitted: false,
                supervisor: None,
                continuing: None,
                keep_worktrees: false,
            },
            &CancelToken::new(),
            &mut recorder,
        )
        .expect("run");
        // What the run returned is what it left on disk.
        assert_eq!(
            load_run(&self.fixture.state, &state.run_id).expect("state.json"),
            state
        );
        assert!(state.finished_at.is_some());
        Ran {
            state,
            events: recorder.0,
        }
    }

    /// A gate script that does `action` once (during the first attempt's
    /// gates), marking `<name>.done` only if the action succeeded, and then
    /// runs `check`. Returns the gate's command line.
    fn once_then(&self, name: &str, action: &str, check: &str) -> String {
        let aside = self.aside.display();
        let script = format!(
            "if [ ! -e '{aside}/{name}.once' ]; then\n  touch '{aside}/{name}.once'\n  {{ {action}; }} && touch '{aside}/{name}.done'\nfi\n{check}\n",
            action = self.expand(action),
            check = self.expand(check),
        );
        let path = self.aside.join(format!("{name}.sh"));
        fs::write(&path, script).expect("gate script");
        format!("sh '{}'", path.display())
    }

    /// Asserts that the `once_then` action `name` ran and succeeded.
    fn assert_done(&self, name: &str) {
        assert!(
            self.aside.join(format!("{name}.done")).is_file(),
            "the gate's action {name} did not run or failed"
        );
    }

    /// The session id a `lose_session` action deleted.
    fn lost_id(&self) -> String {
        fs::read_to_string(self.aside.join("lost-id"))
            .expect("lost-id")
            .trim()
            .to_owned()
    }

    fn id(task: &str) -> TaskId {
        TaskId::parse(task).expect("task id")
    }

    /// `task` of the latest run's plan.
    fn key(&self, task: &str) -> reprise_core::TaskKey {
        let plan = self.plan.borrow().clone().expect("a plan has run");
        reprise_core::TaskKey::new(plan, Self::id(task))
    }

    fn journal(&self, task: &str) -> Vec<JournalRow> {
        rows(&self.fixture.state.journal_path(&self.key(task)))
    }

    fn spine(&self, task: &str) -> Vec<SpineRow> {
        let path = self.fixture.state.spine_path(&self.key(task));
        if path.exists() {
            rows(&path)
        } else {
            Vec::new()
        }
    }

    fn audit(&self) -> Vec<AuditRow> {
        rows(&self.fixture.state.audit_path())
    }

    fn transcript(&self, session: &str) -> Vec<SimTurn> {
        sim_transcript(&self.fixture.state.sim_store(), session)
            .unwrap_or_else(|err| panic!("transcript of {session}: {err}"))
    }

    fn transcript_path(&self, session: &str) -> PathBuf {
        self.fixture
            .state
            .sim_store()
            .join(format!("{session}.jsonl"))
    }

    fn preserved_path(&self, session: &str) -> PathBuf {
        self.fixture
            .state
            .sessions_dir("sim")
            .join(format!("{session}.jsonl"))
    }

    fn decisions(&self, task: &str) -> Vec<DecisionRecord> {
        read_decisions(&self.fixture.state, &self.key(task))
            .expect("decisions")
            .into_iter()
            .map(|row| row.record.expect("a readable decision"))
            .collect()
    }

    /// Every decision of `task` is in its journal, sealed in its spine at
    /// that row's seq, and bound in the audit chain to both rows; the
    /// decisions `read_decisions` returns are these. Returns them.
    fn assert_recorded(&self, task: &str) -> Vec<DecisionRecord> {
        let journal = self.journal(task);
        let spine = self.spine(task);
        let receipts: Vec<AuditRow> = self
            .audit()
            .into_iter()
            .filter(|row| row.kind == "retry.checkpoint_decision" && row.body["task_id"] == task)
            .collect();
        let decisions: Vec<&JournalRow> = journal
            .iter()
            .filter(|row| row.kind == "retry.decision")
            .collect();
        assert_eq!(
            spine.len(),
            decisions.len(),
            "{task}: one seal per decision"
        );
        assert_eq!(
            receipts.len(),
            decisions.len(),
            "{task}: one audit row per decision"
        );
        let mut records = Vec::new();
        for ((row, seal), receipt) in decisions.iter().zip(&spine).zip(&receipts) {
            let decision = &row.body["decision"];
            let hash: Digest =
                serde_json::from_value(row.body["decision_hash"].clone()).expect("decision_hash");
            assert_eq!(
                decision_hash(decision).expect("hash"),
                hash,
                "{task} seq {}",
                row.seq
            );
            assert_eq!(seal.kind, "retry.decision");
            assert_eq!(
                seal.sealed_at, row.seq,
                "sealed_at is the journal row's seq"
            );
            assert_eq!(seal.decision_hash, hash);
            assert_eq!(&seal.decision, decision);
            assert_eq!(receipt.body["decision_hash"], json!(hash));
            assert_eq!(receipt.body["journal_event_hash"], json!(row.event_hash));
            assert_eq!(receipt.body["spine_entry_hash"], json!(seal.entry_hash));
            for key in [
                "retry_mode",
                "requested_mode",
                "capability",
                "checkpoint_event_hash",
                "workspace_match",
                "downgrade_reason",
            ] {
                assert_eq!(receipt.body[key], decision[key], "{task}: audit {key}");
            }
            let record: DecisionRecord =
                serde_json::from_value(decision.clone()).expect("a decision record");
            // A trusted checkpoint is the latest one before the decision.
            if let Some(event_hash) = record.checkpoint_event_hash {
                let latest = journal
                    .iter()
                    .rfind(|earlier| earlier.seq < row.seq && earlier.kind == "task.checkpoint")
                    .expect("a checkpoint row before the decision");
                assert_eq!(
                    latest.event_hash, event_hash,
                    "{task}: not the latest checkpoint"
                );
                assert_eq!(
                    latest.body["session_id"],
                    json!(record.checkpoint_session_id)
                );
                assert_eq!(
                    latest.body["workspace_hash"],
                    json!(record.recorded_workspace_hash)
                );
            }
            records.push(record);
        }
        assert_eq!(self.decisions(task), records);
        records
    }

    /// The task's journal verifies in full, is sealed (identity verified),
    /// its spine verifies, and the audit chain verifies.
    fn assert_verified(&self, task: &str) {
        let key = self.fixture.key.clone();
        let verification =
            verify_journal(&self.fixture.state, &self.key(task), || Ok(key)).expect("verify");
        assert_eq!(verification.chain.first_problem(), None, "{task}");
        assert_eq!(verification.chain.coverage(), Coverage::Complete, "{task}");
        assert_eq!(verification.identity, Identity::Verified, "{task}");
        assert_eq!(verification.unsealed_rows, 0, "{task}");
        assert!(verification.ok(), "{task}: {verification:?}");
        let audit = read_audit(&self.fixture.state, &self.fixture.key).expect("audit");
        assert_eq!(audit.report.first_problem(), None);
    }
}

/// A gate action that deletes the sim session of `task`'s latest
/// checkpoint from the agent's store, and with `preserved` also reprise's
/// preserved copy, and writes the session id to `@ASIDE@/lost-id`.
fn lose_session(task: &str, preserved: bool) -> String {
    let also = if preserved {
        r#" && rm "@STATE@/sessions/sim/$id.jsonl""#
    } else {
        r#" && test -e "@STATE@/sessions/sim/$id.jsonl""#
    };
    format!(
        r#"id=$(grep '"kind":"task.checkpoint"' '@STATE@/plans/'*'/tasks/{task}/journal.jsonl' | tail -n 1 | sed 's/.*"session_id":"\([^"]*\)".*/\1/') && [ -n "$id" ] && echo "$id" > '@ASIDE@/lost-id' && rm "@STATE@/sim/$id.jsonl"{also}"#
    )
}

/// Every line of a JSON-lines file, parsed.
fn rows<T: DeserializeOwned>(path: &Path) -> Vec<T> {
    fs::read_to_string(path)
        .unwrap_or_else(|err| panic!("{}: {err}", path.display()))
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("{err}: {line}")))
        .collect()
}

fn task<'a>(ran: &'a Ran, id: &str) -> &'a TaskRecord {
    ran.state
        .task(&World::id(id))
        .unwrap_or_else(|| panic!("no task {id}"))
}

fn modes(record: &TaskRecord) -> Vec<&str> {
    record.attempts.iter().map(|a| a.mode.as_str()).collect()
}

fn session(attempt: &AttemptSummary) -> &str {
    attempt.session_id.as_deref().expect("a session id")
}

fn metadata_keys(record: &TaskRecord) -> Vec<&str> {
    record.metadata.keys().map(String::as_str).collect()
}

fn warnings<'a>(ran: &'a Ran, id: &str) -> Vec<&'a str> {
    ran.events
        .iter()
        .filter_map(|event| match event {
            Event::Warning {
                task: Some(task),
                message,
            } if task.as_str() == id => Some(message.as_str()),
            _ => None,
        })
        .collect()
}

const WARM_PLAN: &str = r#"
version: 1
name: warm
defaults: { agent: sim, timeout: 30s }
tasks:
  - id: greet
    prompt: "Create greeting.txt containing hello"
    retry_policy: warm
    sim:
      - { reply: "I wrote greeting.txt.", write: { greeting.txt: "hi\n" } }
      - { reply: "DONE: it says hello.", write: { greeting.txt: "hello\n" } }
    gates:
      - { name: content, run: "grep -qx hello greeting.txt", disclose: output, timeout: 10s }
"#;

#[test]
fn a_warm_retry_resumes_the_same_session_with_only_the_instruction() {
    let world = World::git();
    let ran = world.run(WARM_PLAN);
    assert_eq!(ran.state.ok, Some(true));
    let greet = task(&ran, "greet");
    assert_eq!(greet.state, TaskStatus::Passed);
    assert_eq!(modes(greet), ["new", "warm"]);
    let outcomes: Vec<_> = greet
        .attempts
        .iter()
        .map(|a| (a.outcome, a.judged))
        .collect();
    assert_eq!(
        outcomes,
        [(Outcome::Judged, true), (Outcome::Passed, false)]
    );
    let id = session(&greet.attempts[0]);
    assert_eq!(
        session(&greet.attempts[1]),
        id,
        "warm resumes the same session"
    );

    // The work happened in the task's worktree, not in the project: its
    // result commit holds it, and the worktree was reclaimed.
    let worktree = world
        .fixture
        .state
        .worktree_dir(&ran.state.run_id, &World::id("greet"));
    assert!(!worktree.exists(), "a passed task's worktree is reclaimed");
    let commit = greet
        .output
        .as_ref()
        .and_then(|output| output.commit.clone());
    let shown = Command::new("git")
        .args([
            "show",
            &format!("{}:greeting.txt", commit.expect("a result")),
        ])
        .current_dir(&world.project)
        .output()
        .expect("git");
    assert_eq!(String::from_utf8_lossy(&shown.stdout), "hello\n");
    assert!(!world.project.join("greeting.txt").exists());

    // The session holds both turns; the second prompt is the instruction alone.
    let turns = world.transcript(id);
    assert_eq!(turns.len(), 2, "{turns:?}");
    assert_eq!(turns[0].prompt, "Create greeting.txt containing hello");
    let instruction = &turns[1].prompt;
    assert!(
        instruction.starts_with(INSTRUCTION_OPENING),
        "{instruction}"
    );
    assert!(
        !instruction.contains("Create greeting.txt"),
        "{instruction}"
    );
    assert!(
        instruction.contains("- `content` failed (exit status 1)\n"),
        "{instruction}"
    );

    let decisions = world.assert_recorded("greet");
    assert_eq!(decisions.len(), 1);
    let decision = &decisions[0];
    assert_eq!(
        (
            decision.retry_mode,
            decision.requested_mode,
            decision.downgrade_reason
        ),
        (RetryMode::Warm, RetryMode::Warm, None)
    );
    assert_eq!(decision.capability, Capability::Fork);
    assert_eq!(decision.checkpoint_session_id.as_deref(), Some(id));
    assert_eq!(decision.workspace_match, Some(true));
    assert_eq!(
        decision.template_id.as_deref(),
        Some(CORRECTIVE_TEMPLATE_ID)
    );
    assert_eq!(
        decision.instruction_hash,
        Some(tagged_sha256(INSTRUCTION_TAG, &[instruction.as_bytes()])),
        "the decision names the instruction that was sent"
    );

    assert_eq!(
        metadata_keys(greet),
        [
            "retry_checkpoint_event_hash",
            "retry_checkpoint_session_id",
            "retry_corrective_instruction",
            "retry_decision_hash",
            "retry_mode",
            "retry_requested_mode",
        ]
    );
    let metadata = &greet.metadata;
    assert_eq!(metadata["retry_mode"], "warm");
    assert_eq!(metadata["retry_requested_mode"], "warm");
    assert_eq!(
        metadata["retry_decision_hash"],
        json!(decision.hash().expect("hash"))
    );
    assert_eq!(metadata["retry_checkpoint_session_id"], id);
    let checkpoint = world
        .journal("greet")
        .into_iter()
        .find(|row| row.kind == "task.checkpoint")
        .expect("a checkpoint");
    assert_eq!(checkpoint.body["attempt"], 1);
    assert_eq!(checkpoint.body["session_id"], id);
    assert_eq!(
        metadata["retry_checkpoint_event_hash"],
        json!(checkpoint.event_hash)
    );
    assert_eq!(metadata["retry_corrective_instruction"], json!(instruction));

    // Prompts never enter a chain: only ids, hashes, modes and reasons.
    for path in [
        world.fixture.state.journal_path(&world.key("greet")),
        world.fixture.state.spine_path(&world.key("greet")),
        world.fixture.state.audit_path(),
    ] {
        let text = fs::read_to_string(&path).expect("chain");
        assert!(
            !text.contains("greeting.txt containing"),
            "{}",
            path.display()
        );
        assert!(!text.contains(INSTRUCTION_OPENING), "{}", path.display());
    }
    world.assert_verified("greet");
}

#[test]
fn a_fork_gets_a_new_session_and_the_original_is_unchanged() {
    let world = World::new();
    // During the first attempt's gates the store holds only the original
    // session: keep a copy of its bytes as they were then.
    let gate = world.once_then(
        "copy",
        "cp '@STATE@'/sim/*.jsonl '@ASIDE@/original.jsonl'",
        "grep -qx goodbye farewell.txt",
    );
    let ran = world.run(&format!(
        r#"
version: 1
name: fork
defaults: {{ agent: sim, timeout: 30s, sandbox: none }}
tasks:
  - id: part
    prompt: "Create farewell.txt containing goodbye"
    retry_policy: fork
    sim:
      - {{ reply: "Here it is.", write: {{ farewell.txt: "bye\n" }} }}
      - {{ reply: "DONE", write: {{ farewell.txt: "goodbye\n" }} }}
    gates:
      - {{ name: content, run: "{gate}" }}
"#
    ));
    world.assert_done("copy");
    let part = task(&ran, "part");
    assert_eq!(part.state, TaskStatus::Passed);
    assert_eq!(modes(part), ["new", "fork"]);
    let (original, fork) = (session(&part.attempts[0]), session(&part.attempts[1]));
    assert_ne!(original, fork, "a fork runs in a new session");

    let before = fs::read(world.aside.join("original.jsonl")).expect("copy");
    let after = fs::read(world.transcript_path(original)).expect("original");
    assert_eq!(
        after, before,
        "the original session was changed by the fork"
    );
    let original_turns = world.transcript(original);
    assert_eq!(original_turns.len(), 1);
    let fork_turns = world.transcript(fork);
    assert_eq!(fork_turns.len(), 2);
    assert_eq!(fork_turns[0], original_turns[0]);
    assert!(fork_turns[1].prompt.starts_with(INSTRUCTION_OPENING));
    assert!(!fork_turns[1].prompt.contains("farewell.txt containing"));
    assert!(
        fs::read(world.transcript_path(fork))
            .expect("fork")
            .starts_with(&before)
    );

    let decisions = world.assert_recorded("part");
    assert_eq!(decisions.len(), 1);
    assert_eq!(
        (decisions[0].retry_mode, decisions[0].downgrade_reason),
        (RetryMode::Fork, None)
    );
    assert_eq!(
        decisions[0].checkpoint_session_id.as_deref(),
        Some(original)
    );
    assert_eq!(part.metadata["retry_mode"], "fork");
    assert_eq!(part.metadata["retry_requested_mode"], "fork");
    assert_eq!(part.metadata["retry_checkpoint_session_id"], original);
    assert_eq!(
        part.metadata["retry_corrective_instruction"],
        json!(fork_turns[1].prompt)
    );
    world.assert_verified("part");
}

/// A sim task in place whose first attempt writes "hi" and second "hello",
/// checked by `gate`.
fn greeting_plan(gate: &str, policy: &str) -> String {
    format!(
        r#"
version: 1
name: greeting
defaults: {{ agent: sim, timeout: 30s, sandbox: none }}
tasks:
  - id: mend
    prompt: "Create greeting.txt containing hello"
    retry_policy: {policy}
    sim:
      - {{ reply: "I wrote greeting.txt.", write: {{ greeting.txt: "hi\n" }} }}
      - {{ reply: "DONE", write: {{ greeting.txt: "hello\n" }} }}
    gates:
      - {{ name: content, run: "{gate}" }}
"#
    )
}

/// Asserts attempt `n` of `record` ran cold in a session of its own whose
/// only prompt is the rebuilt base prompt.
fn assert_cold_attempt(world: &World, record: &TaskRecord, n: usize, base: &str) {
    let attempt = &record.attempts[n - 1];
    assert_eq!(attempt.mode, "cold");
    let id = session(attempt);
    for earlier in &record.attempts[..n - 1] {
        assert_ne!(session(earlier), id, "a cold retry reused a session");
    }
    let turns = world.transcript(id);
    assert_eq!(turns.len(), 1, "{turns:?}");
    let prompt = &turns[0].prompt;
    assert!(
        prompt.starts_with(&cold_retry_prompt(base, n as u32)),
        "{prompt}"
    );
    assert!(prompt.starts_with(base), "{prompt}");
    assert!(prompt.contains("in a fresh session"), "{prompt}");
    assert!(!prompt.contains(INSTRUCTION_OPENING), "{prompt}");
    // The attempt before it was judged: its reply arrives quoted, once.
    // (Its transcript may be gone: some tests delete it on purpose.)
    let before = &record.attempts[n - 2];
    let earlier_reply = sim_transcript(&world.state_root().join("sim"), session(before))
        .ok()
        .and_then(|turns| turns.last().map(|turn| turn.reply.clone()));
    if before.judged {
        assert_eq!(prompt.matches("<<<QUOTE ").count(), 1, "{prompt}");
        if let Some(reply) = earlier_reply {
            assert!(prompt.contains(reply.as_str()), "{prompt}");
        }
    } else {
        assert!(!prompt.contains("<<<QUOTE "), "{prompt}");
    }
}

fn assert_cold_metadata(record: &TaskRecord, requested: &str, reason: &str) {
    assert_eq!(
        metadata_keys(record),
        [
            "retry_decision_hash",
            "retry_downgrade_reason",
            "retry_mode",
            "retry_requested_mode"
        ]
    );
    assert_eq!(record.metadata["retry_mode"], "cold");
    assert_eq!(record.metadata["retry_requested_mode"], requested);
    assert_eq!(record.metadata["retry_downgrade_reason"], reason);
}

#[test]
fn a_workspace_edited_between_attempts_downgrades_to_cold() {
    let world = World::new();
    let gate = world.once_then(
        "edit",
        "echo 'edited by someone else' > stray.txt",
        "grep -qx hello greeting.txt",
    );
    let ran = world.run(&greeting_plan(&gate, "warm"));
    world.assert_done("edit");
    let mend = task(&ran, "mend");
    assert_eq!(mend.state, TaskStatus::Passed);
    assert_eq!(modes(mend), ["new", "cold"]);
    assert_cold_attempt(&world, mend, 2, "Create greeting.txt containing hello");

    let decisions = world.assert_recorded("mend");
    assert_eq!(decisions.len(), 1);
    let decision = &decisions[0];
    assert_eq!(
        (
            decision.retry_mode,
            decision.requested_mode,
            decision.downgrade_reason
        ),
        (
            RetryMode::Cold,
            RetryMode::Warm,
            Some(DowngradeReason::WorkspaceHashMismatch)
        )
    );
    assert_eq!(decision.workspace_match, Some(false));
    assert_ne!(
        decision.recorded_workspace_hash,
        Some(decision.live_workspace_hash)
    );
    assert_eq!(
        (&decision.template_id, decision.instruction_hash),
        (&None, None)
    );
    assert_cold_metadata(mend, "warm", "workspace_hash_mismatch");
    world.assert_verified("mend");
}

/// Row 1 of `mend`'s journal is attempt 1's `attempt.started`; `rewrite`
/// turns `"mode":"new"` in it into `"mode":"old"` (same length, so only its
/// event_hash gives it away) during the first attempt's gates.
fn tampered_journal_downgrades_to_cold_and_the_run_goes_on(rewrite: &str) {
    let world = World::new();
    let gate = world.once_then(
        "tamper",
        &format!(
            r#"{rewrite} && grep -q '"mode":"old"' '@STATE@/plans/'*'/tasks/mend/journal.jsonl'"#
        ),
        "grep -qx hello greeting.txt",
    );
    let ran = world.run(&greeting_plan(&gate, "warm"));
    world.assert_done("tamper");
    assert_eq!(ran.state.ok, Some(true), "the run goes on");
    let mend = task(&ran, "mend");
    assert_eq!(mend.state, TaskStatus::Passed);
    assert_eq!(modes(mend), ["new", "cold"]);
    assert_cold_attempt(&world, mend, 2, "Create greeting.txt containing hello");

    let journal = world.journal("mend");
    // Row 1 is the file checkpoint taken before the attempt.
    assert_eq!(journal[1].kind, "checkpoint.taken");
    assert_eq!(journal[2].kind, "attempt.started");
    assert_eq!(
        journal[2].body["mode"], "old",
        "the tampering is in the file"
    );
    // Everything after the tampering was still appended to the journal file.
    let kinds: Vec<&str> = journal.iter().map(|row| row.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "task.started",
            "checkpoint.taken",
            "attempt.started",
            "task.checkpoint",
            "attempt.finished",
            "recovery.diagnosis",
            "retry.decision",
            // The retry went cold: it starts from the files as they were.
            "checkpoint.restored",
            "checkpoint.taken",
            "attempt.started",
            "task.checkpoint",
            "attempt.finished",
            "task.finished",
        ]
    );
    let decisions = world.assert_recorded("mend");
    assert_eq!(decisions.len(), 1);
    let decision = &decisions[0];
    assert_eq!(
        (decision.retry_mode, decision.downgrade_reason),
        (RetryMode::Cold, Some(DowngradeReason::JournalUnverified))
    );
    assert_eq!(decision.checkpoint_event_hash, None, "nothing is trusted");
    assert_eq!(decision.checkpoint_session_id, None);
    assert_cold_metadata(mend, "warm", "journal_unverified");

    // Verification reports the tampering afterwards; the journal is not
    // sealed over it.
    let key = world.fixture.key.clone();
    let verification =
        verify_journal(&world.fixture.state, &world.key("mend"), || Ok(key)).expect("verify");
    let fault = verification.chain.first_problem().expect("a fault");
    assert_eq!(fault.row, 2, "the attempt.started row that was edited");
    assert_eq!(
        reprise_core::chain::ChainFormat::Journal.reason_name(fault.reason),
        "event_hash_mismatch"
    );
    assert!(!verification.ok());
    assert_ne!(verification.identity, Identity::Verified);
    assert!(
        warnings(&ran, "mend")
            .iter()
            .any(|message| message.contains("not sealed")),
        "{:?}",
        ran.events
    );
    let audit = read_audit(&world.fixture.state, &world.fixture.key).expect("audit");
    assert_eq!(audit.report.first_problem(), None);
    assert!(audit.seals_of(&world.key("mend")).is_empty());
}

#[test]
fn a_journal_replaced_by_a_tampered_copy_downgrades_to_cold() {
    // `sed -i` writes a new file and renames it over the journal.
    tampered_journal_downgrades_to_cold_and_the_run_goes_on(
        r#"sed -i '3s/"mode":"new"/"mode":"old"/' '@STATE@/plans/'*'/tasks/mend/journal.jsonl'"#,
    );
}

#[test]
fn a_journal_tampered_in_place_downgrades_to_cold() {
    // The same bytes written back into the same file: same inode, same length.
    tampered_journal_downgrades_to_cold_and_the_run_goes_on(
        r#"J=$(ls '@STATE@/plans/'*'/tasks/mend/journal.jsonl') && sed '3s/"mode":"new"/"mode":"old"/' "$J" > '@ASIDE@/tampered' && cat '@ASIDE@/tampered' > "$J""#,
    );
}

#[test]
fn tampering_after_a_verified_retry_is_still_caught() {
    // The first retry verifies the whole journal; later retries read only the
    // rows appended since, and only while nothing but the engine's own
    // appends touched the file. Tampering with an already-verified row
    // between the first and second retries must still make the second cold.
    let world = World::new();
    let script = world.aside.join("tamper-second.sh");
    let counter = world.aside.join("count");
    fs::write(
        &script,
        world.expand(&format!(
            "n=$(cat '{counter}' 2>/dev/null || echo 0); n=$((n+1)); echo $n > '{counter}'\n\
             if [ $n = 2 ]; then\n\
               J=$(ls '@STATE@/plans/'*'/tasks/mend/journal.jsonl') && \
               sed '3s/\"mode\":\"new\"/\"mode\":\"old\"/' \"$J\" > '@ASIDE@/t' && \
               cat '@ASIDE@/t' > \"$J\" && touch '@ASIDE@/tampered'\n\
             fi\n\
             grep -qx hello greeting.txt\n",
            counter = counter.display()
        )),
    )
    .expect("gate script");
    let gate = format!("sh '{}'", script.display());
    let ran = world.run(&format!(
        r#"
version: 1
name: late-tamper
defaults: {{ agent: sim, timeout: 30s, sandbox: none }}
tasks:
  - id: mend
    prompt: "Create greeting.txt containing hello"
    retry_policy: warm
    sim:
      - {{ reply: "one", write: {{ greeting.txt: "hi\n" }} }}
      - {{ reply: "two", write: {{ greeting.txt: "hey\n" }} }}
      - {{ reply: "DONE", write: {{ greeting.txt: "hello\n" }} }}
    gates:
      - {{ name: content, run: "{gate}" }}
"#
    ));
    assert!(
        world.aside.join("tampered").is_file(),
        "the gate tampered on its second run"
    );
    let mend = task(&ran, "mend");
    assert_eq!(mend.state, TaskStatus::Passed, "the run goes on");
    assert_eq!(modes(mend), ["new", "warm", "cold"]);
    let decisions: Vec<_> = read_decisions(&world.fixture.state, &world.key("mend"))
        .expect("decisions")
        .into_iter()
        .map(|row| row.record.expect("record"))
        .collect();
    assert_eq!(decisions.len(), 2);
    assert_eq!(
        (decisions[0].retry_mode, decisions[0].downgrade_reason),
        (RetryMode::Warm, None)
    );
    assert_eq!(
        (decisions[1].retry_mode, decisions[1].downgrade_reason),
        (RetryMode::Cold, Some(DowngradeReason::JournalUnverified))
    );
}

#[test]
fn a_pinned_task_is_cold_on_every_retry() {
    let world = World::new();
    let ran = world.run(
        r#"
version: 1
name: pinned
defaults: { agent: sim, timeout: 30s, sandbox: none, agent_restart_between_retries: true }
tasks:
  - id: pinned-warm
    prompt: "Say DONE, eventually"
    retry_policy: warm
    sim: [ { reply: "no" }, { reply: "still no" }, { reply: "DONE" } ]
    gates: [ { name: answer, result_matches: "^DONE" } ]
  - id: pinned-fork
    prompt: "Say DONE as well"
    retry_policy: fork
    sim: [ { reply: "no" }, { reply: "still no" }, { reply: "DONE" } ]
    gates: [ { name: answer, result_matches: "^DONE" } ]
"#,
    );
    for (id, base, requested) in [
        ("pinned-warm", "Say DONE, eventually", RetryMode::Warm),
        ("pinned-fork", "Say DONE as well", RetryMode::Fork),
    ] {
        let record = task(&ran, id);
        assert_eq!(record.state, TaskStatus::Passed, "{id}");
        assert_eq!(modes(record), ["new", "cold", "cold"], "{id}");
        assert_cold_attempt(&world, record, 2, base);
        assert_cold_attempt(&world, record, 3, base);
        let decisions = world.assert_recorded(id);
        assert_eq!(decisions.len(), 2, "{id}");
        for decision in &decisions {
            assert_eq!(
                (
                    decision.retry_mode,
                    decision.requested_mode,
                    decision.downgrade_reason
                ),
                (
                    RetryMode::Cold,
                    requested,
                    Some(DowngradeReason::FreshContextPinned)
                ),
                "{id}"
            );
            // The checkpoint was trusted and matched: only the pin made it cold.
            assert_eq!(decision.workspace_match, Some(true), "{id}");
        }
        assert_cold_metadata(record, requested.as_str(), "fresh_context_pinned");
        world.assert_verified(id);
    }
}

#[test]
fn a_session_lost_by_the_agent_is_restored_and_resumed_warm() {
    let world = World::new();
    let gate = world.once_then(
        "lose",
        &lose_session("mend", false),
        "grep -qx hello greeting.txt",
    );
    let ran = world.run(&greeting_plan(&gate, "warm"));
    world.assert_done("lose");
    let mend = task(&ran, "mend");
    assert_eq!(mend.state, TaskStatus::Passed);
    assert_eq!(modes(mend), ["new", "warm"]);
    let id = session(&mend.attempts[0]);
    assert_eq!(world.lost_id(), id);
    assert_eq!(session(&mend.attempts[1]), id);
    let turns = world.transcript(id);
    assert_eq!(
        turns.len(),
        2,
        "the resumed session continues the restored one"
    );
    assert_eq!(turns[0].prompt, "Create greeting.txt containing hello");
    assert!(turns[1].prompt.starts_with(INSTRUCTION_OPENING));
    assert!(
        warnings(&ran, "mend")
            .iter()
            .any(|message| message.contains(id) && message.contains("restored")),
        "{:?}",
        ran.events
    );
    let decisions = world.assert_recorded("mend");
    assert_eq!(
        decisions.len(),
        1,
        "a restored session needs no second decision"
    );
    assert_eq!(
        (decisions[0].retry_mode, decisions[0].downgrade_reason),
        (RetryMode::Warm, None)
    );
    assert_eq!(mend.metadata["retry_mode"], "warm");
    world.assert_verified("mend");
}

#[test]
fn a_session_gone_everywhere_falls_back_to_cold_with_a_second_decision() {
    let world = World::new();
    let gate = world.once_then(
        "lose",
        &lose_session("mend", true),
        "grep -qx hello greeting.txt",
    );
    let ran = world.run(&greeting_plan(&gate, "warm"));
    world.assert_done("lose");
    let mend = task(&ran, "mend");
    assert_eq!(mend.state, TaskStatus::Passed);
    assert_eq!(modes(mend), ["new", "cold"]);
    let lost = session(&mend.attempts[0]);
    assert_eq!(world.lost_id(), lost);
    assert!(!world.transcript_path(lost).exists());
    assert!(!world.preserved_path(lost).exists());
    assert_cold_attempt(&world, mend, 2, "Create greeting.txt containing hello");

    let decisions = world.assert_recorded("mend");
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    let (first, second) = (&decisions[0], &decisions[1]);
    assert_eq!(
        (first.retry_mode, first.downgrade_reason),
        (RetryMode::Warm, None)
    );
    assert_eq!(
        (
            second.retry_mode,
            second.requested_mode,
            second.downgrade_reason
        ),
        (
            RetryMode::Cold,
            RetryMode::Warm,
            Some(DowngradeReason::SessionUnavailable)
        )
    );
    assert_eq!(second.checkpoint_session_id.as_deref(), Some(lost));
    assert_eq!(second.checkpoint_event_hash, first.checkpoint_event_hash);
    assert_eq!(
        (&second.template_id, second.instruction_hash),
        (&None, None)
    );
    let attempts: Vec<Option<u64>> = read_decisions(&world.fixture.state, &world.key("mend"))
        .expect("decisions")
        .iter()
        .map(|row| row.attempt)
        .collect();
    assert_eq!(
        attempts,
        [Some(2), Some(2)],
        "both decisions are for attempt 2"
    );
    assert_cold_metadata(mend, "warm", "session_unavailable");
    assert_eq!(
        mend.metadata["retry_decision_hash"],
        json!(second.hash().expect("hash"))
    );
    world.assert_verified("mend");
}

/// A decision's mode and downgrade reason.
type Decided = (RetryMode, Option<DowngradeReason>);

#[test]
fn every_decision_is_in_the_journal_the_spine_and_the_audit_chain() {
    let world = World::new();
    // Passes from its second run on.
    let lose = world.once_then(
        "lose",
        &lose_session("lost", true),
        "[ -e '@ASIDE@/lose.checked' ] || { touch '@ASIDE@/lose.checked'; exit 1; }",
    );
    let ran = world.run(&format!(
        r#"
version: 1
name: records
seats: 1
defaults: {{ agent: sim, timeout: 30s, sandbox: none, max_retries: 3 }}
tasks:
  - id: warm-thrice
    prompt: "Say DONE on the fourth try"
    sim: [ {{ reply: "a" }}, {{ reply: "b" }}, {{ reply: "c" }}, {{ reply: "DONE" }} ]
    gates: [ {{ name: answer, result_matches: "^DONE" }} ]
  - id: forked
    prompt: "Say DONE on the second try"
    retry_policy: fork
    sim: [ {{ reply: "a" }}, {{ reply: "DONE" }} ]
    gates: [ {{ name: answer, result_matches: "^DONE" }} ]
  - id: asked-cold
    prompt: "Say DONE on the third try"
    retry_policy: cold
    sim: [ {{ reply: "a" }}, {{ reply: "b" }}, {{ reply: "DONE" }} ]
    gates: [ {{ name: answer, result_matches: "^DONE" }} ]
  - id: lost
    prompt: "Pass on the second try"
    sim: [ {{ reply: "a" }} ]
    gates: [ {{ name: check, run: "{lose}" }} ]
  - id: gives-up
    prompt: "Never say it"
    max_retries: 1
    sim: [ {{ reply: "no" }} ]
    gates: [ {{ name: answer, result_matches: "^DONE" }} ]
"#
    ));
    world.assert_done("lose");
    let expected: [(&str, TaskStatus, &[Decided]); 5] = [
        (
            "warm-thrice",
            TaskStatus::Passed,
            &[(RetryMode::Warm, None); 3],
        ),
        ("forked", TaskStatus::Passed, &[(RetryMode::Fork, None)]),
        (
            "asked-cold",
            TaskStatus::Passed,
            &[(RetryMode::Cold, None); 2],
        ),
        (
            "lost",
            TaskStatus::Passed,
            &[
                (RetryMode::Warm, None),
                (RetryMode::Cold, Some(DowngradeReason::SessionUnavailable)),
            ],
        ),
        ("gives-up", TaskStatus::Failed, &[(RetryMode::Warm, None)]),
    ];
    let mut total = 0;
    for (id, status, decisions) in expected {
        assert_eq!(task(&ran, id).state, status, "{id}");
        let recorded: Vec<_> = world
            .assert_recorded(id)
            .iter()
            .map(|record| (record.retry_mode, record.downgrade_reason))
            .collect();
        assert_eq!(recorded, decisions, "{id}");
        total += decisions.len();
        world.assert_verified(id);
    }
    let receipts = world
        .audit()
        .iter()
        .filter(|row| row.kind == "retry.checkpoint_decision")
        .count();
    assert_eq!(receipts, total);
    assert_eq!(ran.state.ok, Some(false));
    assert_eq!(
        task(&ran, "gives-up").reason.as_deref(),
        Some("not accepted after 2 attempts")
    );
    // The sealed heads are the journals' last rows.
    let audit = read_audit(&world.fixture.state, &world.fixture.key).expect("audit");
    for (id, ..) in expected {
        let journal = world.journal(id);
        let last = journal.last().expect("rows");
        assert_eq!(last.kind, "task.finished");
        let seals = audit.seals_of(&world.key(id));
        assert_eq!(seals.len(), 1, "{id}");
        assert_eq!((seals[0].seq, seals[0].digest), (last.seq, last.event_hash));
    }
}

#[test]
fn a_command_agent_has_no_capability_and_every_retry_is_cold() {
    let world = World::new();
    let ran = world.run(
        r#"
version: 1
name: command
defaults: { timeout: 30s, sandbox: none }
tasks:
  - id: scripted
    prompt: "Print the attempt number"
    agent: command
    retry_policy: fork
    command: ["sh", "-c", "cat > '@ASIDE@/prompt-'$REPRISE_ATTEMPT; echo attempt $REPRISE_ATTEMPT"]
    gates: [ { name: third, result_matches: "^attempt 3$" } ]
"#,
    );
    let scripted = task(&ran, "scripted");
    assert_eq!(scripted.state, TaskStatus::Passed);
    assert_eq!(modes(scripted), ["new", "cold", "cold"]);
    assert!(scripted.attempts.iter().all(|a| a.session_id.is_none()));
    let base = "Print the attempt number";
    let prompt =
        |n: u32| fs::read_to_string(world.aside.join(format!("prompt-{n}"))).expect("prompt");
    assert_eq!(prompt(1), base);
    // Each cold retry is rebuilt from the base prompt and quotes only the
    // attempt right before it, fenced, with a nonce of its own.
    for (n, quoted, not_quoted) in [(2, "attempt 1", None), (3, "attempt 2", Some("attempt 1"))] {
        let text = prompt(n);
        assert!(text.starts_with(&cold_retry_prompt(base, n)), "{text}");
        assert_eq!(text.matches("<<<QUOTE ").count(), 1, "{text}");
        assert!(text.contains(quoted), "{text}");
        if let Some(earlier) = not_quoted {
            assert!(!text.contains(earlier), "{text}");
        }
        // The predicate the gate checks is never handed over.
        assert!(
            !text.contains("^attempt 3$") && !text.contains("result_matches"),
            "{text}"
        );
        assert!(!text.contains("third"), "{text}");
    }
    let nonce = |text: &str| text.split("<<<QUOTE ").nth(1).unwrap()[..32].to_owned();
    assert_ne!(nonce(&prompt(2)), nonce(&prompt(3)));

    let decisions = world.assert_recorded("scripted");
    assert_eq!(decisions.len(), 2);
    for decision in &decisions {
        assert_eq!(decision.capability, Capability::None);
        assert_eq!(
            (
                decision.retry_mode,
                decision.requested_mode,
                decision.downgrade_reason
            ),
            (
                RetryMode::Cold,
                RetryMode::Fork,
                Some(DowngradeReason::AdapterCapabilityNone)
            )
        );
    }
    assert_cold_metadata(scripted, "fork", "adapter_capability_none");
    let checkpoints: Vec<Value> = world
        .journal("scripted")
        .into_iter()
        .filter(|row| row.kind == "task.checkpoint")
        .map(|row| row.body["session_id"].clone())
        .collect();
    assert_eq!(checkpoints, [Value::Null, Value::Null, Value::Null]);
    world.assert_verified("scripted");
}

/// Two command tasks that each log `start <ns> <task>`, sleep 0.3 s, and log
/// `end <ns> <task>` to `@ASIDE@/times`; `header` holds the plan-level keys
/// and `envelope` the tasks' `budget_usd`, if any.
fn timed_plan(header: &str, envelope: Option<&str>) -> String {
    let budget = envelope
        .map(|usd| format!("\n    budget_usd: \"{usd}\""))
        .unwrap_or_default();
    let log = r#"command: ["sh", "-c", "echo start $(date +%s%N) $REPRISE_TASK_ID >> '@ASIDE@/times'; sleep 0.3; echo end $(date +%s%N) $REPRISE_TASK_ID >> '@ASIDE@/times'"]"#;
    format!(
        r#"
version: 1
name: timed
{header}
defaults: {{ agent: command, timeout: 30s, sandbox: none }}
tasks:
  - id: one
    prompt: "first"{budget}
    {log}
  - id: two
    prompt: "second"{budget}
    {log}
"#
    )
}

/// The (start, end) of each task in `@ASIDE@/times`, which is then removed.
fn intervals(world: &World) -> BTreeMap<String, (u128, u128)> {
    let path = world.aside.join("times");
    let text = fs::read_to_string(&path).expect("times");
    fs::remove_file(&path).expect("remove times");
    let mut out: BTreeMap<String, (u128, u128)> = BTreeMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let [what, at, task] = fields[..] else {
            panic!("bad line {line:?}")
        };
        let at: u128 = at.parse().expect("nanoseconds");
        let entry = out.entry(task.to_owned()).or_default();
        match what {
            "start" => entry.0 = at,
            "end" => entry.1 = at,
            _ => panic!("bad line {line:?}"),
        }
    }
    assert_eq!(out.len(), 2, "{text}");
    for (start, end) in out.values() {
        assert!(start < end, "{text}");
    }
    out
}

fn overlap(times: &BTreeMap<String, (u128, u128)>) -> bool {
    let (a, b) = (times["one"], times["two"]);
    a.0 < b.1 && b.0 < a.1
}

fn assert_all_passed(ran: &Ran) {
    for record in &ran.state.tasks {
        assert_eq!(record.state, TaskStatus::Passed, "{record:?}");
    }
}

#[test]
fn one_seat_runs_one_task_at_a_time_and_two_seats_run_two() {
    let world = World::new();
    let ran = world.run(&timed_plan("seats: 1", None));
    assert_all_passed(&ran);
    let times = intervals(&world);
    assert!(!overlap(&times), "seats: 1 overlapped: {times:?}");

    let ran = world.run(&timed_plan("seats: 2", None));
    assert_all_passed(&ran);
    let times = intervals(&world);
    assert!(overlap(&times), "seats: 2 did not overlap: {times:?}");

    // The run's seats override the plan's.
    let ran = world.run_with_seats(&timed_plan("seats: 2", None), Some(1));
    assert_all_passed(&ran);
    let times = intervals(&world);
    assert!(!overlap(&times), "--seats 1 overlapped: {times:?}");
}

#[test]
fn a_task_whose_envelope_cannot_be_reserved_waits_for_headroom() {
    let world = World::new();
    // Two seats, but the pool holds only one of the two envelopes at a time.
    let ran = world.run(&timed_plan("seats: 2\nbudget_usd: \"1.00\"", Some("0.60")));
    assert_all_passed(&ran);
    let times = intervals(&world);
    assert!(!overlap(&times), "both envelopes were reserved: {times:?}");

    // Both fit: they run side by side.
    let ran = world.run(&timed_plan("seats: 2\nbudget_usd: \"1.20\"", Some("0.60")));
    assert_all_passed(&ran);
    let times = intervals(&world);
    assert!(overlap(&times), "the tasks did not overlap: {times:?}");
}

#[test]
fn spend_beyond_the_envelope_is_an_infrastructure_failure_never_judged() {
    let world = World::new();
    let ran = world.run(
        r#"
version: 1
name: spend
budget_usd: "1.00"
defaults: { agent: sim, timeout: 30s, sandbox: none }
tasks:
  - id: pricey
    prompt: "Do the expensive thing"
    budget_usd: "0.01"
    sim: [ { reply: "DONE", write: { pricey.txt: "x" }, cost_usd: "0.05" } ]
    gates: [ { name: never, run: "touch '@ASIDE@/gate-ran'" } ]
  - id: metered
    prompt: "Keep trying"
    budget_usd: "0.10"
    max_retries: 5
    sim: [ { reply: "not yet", cost_usd: "0.04" } ]
    gates: [ { name: answer, result_matches: "^DONE" } ]
"#,
    );
    let pricey = task(&ran, "pricey");
    // Fatal: the task is blocked with the reason, never retried past it.
    assert_eq!(pricey.state, TaskStatus::Blocked);
    assert!(
        pricey
            .reason
            .as_deref()
            .is_some_and(|reason| reason.starts_with("budget_exhausted")),
        "{pricey:?}"
    );
    assert_eq!(pricey.attempts.len(), 1, "budget exhaustion is not retried");
    let attempt = &pricey.attempts[0];
    assert_eq!(attempt.outcome, Outcome::Infra);
    assert_eq!(attempt.infra_kind.as_deref(), Some("budget_exhausted"));
    assert!(!attempt.judged);
    assert!(
        attempt.gates.is_empty(),
        "an infrastructure failure is not gated"
    );
    assert!(!world.aside.join("gate-ran").exists());
    assert!(
        !world.project.join("pricey.txt").exists(),
        "the refused step wrote"
    );
    assert_eq!(pricey.spent_micro_usd, 0);
    let finished = world
        .journal("pricey")
        .into_iter()
        .find(|row| row.kind == "attempt.finished")
        .expect("attempt.finished");
    assert_eq!(finished.body["judged"], false);
    assert_eq!(finished.body["outcome"], "infra");
    assert_eq!(finished.body["infra_kind"], "budget_exhausted");
    assert!(world.assert_recorded("pricey").is_empty());
    world.assert_verified("pricey");

    // Spend accumulates over attempts: the third 0.04 does not fit in 0.10.
    let metered = task(&ran, "metered");
    assert_eq!(metered.state, TaskStatus::Blocked);
    let kinds: Vec<_> = metered
        .attempts
        .iter()
        .map(|a| (a.outcome, a.judged, a.infra_kind.as_deref()))
        .collect();
    assert_eq!(
        kinds,
        [
            (Outcome::Judged, true, None),
            (Outcome::Judged, true, None),
            (Outcome::Infra, false, Some("budget_exhausted")),
        ]
    );
    assert_eq!(metered.spent_micro_usd, 80_000);
    assert_eq!(world.assert_recorded("metered").len(), 2);
    world.assert_verified("metered");
}

#[test]
fn an_envelope_larger_than_what_is_left_in_the_pool_blocks_the_task() {
    let world = World::new();
    let ran = world.run(
        r#"
version: 1
name: pool
seats: 1
budget_usd: "1.00"
defaults: { agent: sim, timeout: 30s, sandbox: none }
tasks:
  - id: spender
    prompt: "Spend half"
    budget_usd: "0.60"
    sim: [ { reply: "DONE", cost_usd: "0.50" } ]
  - id: starved
    prompt: "Needs more than is left"
    budget_usd: "0.60"
    depends_on: [spender]
    sim: [ { reply: "DONE" } ]
  - id: modest
    prompt: "Fits in what is left"
    budget_usd: "0.40"
    depends_on: [spender]
    sim: [ { reply: "DONE" } ]
"#,
    );
    assert_eq!(task(&ran, "spender").state, TaskStatus::Passed);
    assert_eq!(task(&ran, "spender").spent_micro_usd, 500_000);
    let starved = task(&ran, "starved");
    assert_eq!(starved.state, TaskStatus::Blocked);
    assert!(
        starved
            .reason
            .as_deref()
            .is_some_and(|reason| reason.contains("budget_exhausted")),
        "{starved:?}"
    );
    assert!(starved.attempts.is_empty());
    assert!(
        !world
            .fixture
            .state
            .journal_path(&world.key("starved"))
            .exists(),
        "a blocked task never started"
    );
    assert_eq!(task(&ran, "modest").state, TaskStatus::Passed);
    assert_eq!(ran.state.ok, Some(false));
}

#[test]
fn spend_beyond_an_envelope_still_comes_out_of_the_pool() {
    let world = World::new();
    // The command reports its spend only when it is done: 0.50 against an
    // envelope of 0.10. What is left of the pool of 1.00 is then 0.50, so
    // the next task's envelope of 0.60 can never be reserved.
    let ran = world.run(
        r#"
version: 1
name: overspend
seats: 1
budget_usd: "1.00"
defaults: { timeout: 30s, sandbox: none }
tasks:
  - id: overspender
    prompt: "Spend too much"
    agent: command
    budget_usd: "0.10"
    command: ["sh", "-c", "echo done; echo REPRISE_COST_USD=0.50"]
  - id: after
    prompt: "Needs 0.60"
    agent: sim
    budget_usd: "0.60"
    sim: [ { reply: "DONE" } ]
"#,
    );
    let overspender = task(&ran, "overspender");
    // Budget exhausted is fatal (DESIGN.md section 7): blocked, not retried.
    assert_eq!(overspender.state, TaskStatus::Blocked);
    assert_eq!(
        overspender.attempts[0].infra_kind.as_deref(),
        Some("budget_exhausted")
    );
    assert!(!overspender.attempts[0].judged);
    assert_eq!(overspender.spent_micro_usd, 500_000);
    let after = task(&ran, "after");
    assert_eq!(after.state, TaskStatus::Blocked, "{after:?}");
    assert!(
        after
            .reason
            .as_deref()
            .is_some_and(|reason| reason.contains("budget_exhausted")),
        "{after:?}"
    );
    assert!(after.attempts.is_empty());
}

#[test]
fn a_forged_checkpoint_is_never_resumed_and_the_run_goes_on() {
    let world = World::new();
    // The checkpoint is the journal's last row when the gates run: point its
    // session id at another session. The store refuses to append onto a row
    // that does not verify, so the task stops there; what must never happen
    // is a resume of the forged session.
    let gate = world.once_then(
        "forge",
        r#"sed -i '4s/"session_id":"[^"]*"/"session_id":"forged-session"/' '@STATE@/plans/'*'/tasks/mend/journal.jsonl' && grep -q forged-session '@STATE@/plans/'*'/tasks/mend/journal.jsonl'"#,
        "grep -qx hello greeting.txt",
    );
    let plan = greeting_plan(&gate, "warm").replace("tasks:\n", "seats: 1\ntasks:\n")
        + r#"
  - id: bystander
    prompt: "Say DONE"
    sim: [ { reply: "DONE" } ]
    gates: [ { name: answer, result_matches: "^DONE" } ]
"#;
    let ran = world.run(&plan);
    world.assert_done("forge");
    let mend = task(&ran, "mend");
    assert_eq!(mend.state, TaskStatus::Failed);
    assert!(
        mend.reason
            .as_deref()
            .is_some_and(|reason| reason.contains("does not verify")),
        "{mend:?}"
    );
    // The attempt that ran is in the run state, though its row could not be
    // written.
    assert_eq!(mend.attempts.len(), 1);
    assert_eq!(mend.attempts[0].outcome, Outcome::Judged);
    let kinds: Vec<String> = world
        .journal("mend")
        .into_iter()
        .map(|row| row.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            "task.started",
            "checkpoint.taken",
            "attempt.started",
            "task.checkpoint"
        ],
        "nothing was appended onto the forged row"
    );
    assert!(world.assert_recorded("mend").is_empty());
    assert!(!world.transcript_path("forged-session").exists());
    assert_eq!(
        fs::read_dir(world.fixture.state.sim_store())
            .expect("sim store")
            .count(),
        2,
        "one session for mend's only attempt, one for bystander"
    );
    assert_eq!(task(&ran, "bystander").state, TaskStatus::Passed);
    world.assert_verified("bystander");
}

/// A gate action that appends a checkpoint row to `mend`'s journal that
/// verifies (the chain is unkeyed: SHA-256 over the row, linked to the last
/// row), naming a session `forged` made to exist in the sim store, with the
/// real checkpoint's workspace hash.
const FORGE_CHECKPOINT: &str = r#"J=$(ls '@STATE@/plans/'*'/tasks/mend/journal.jsonl')
last=$(tail -n 1 "$J")
field() { printf '%s' "$last" | sed "s/.*\"$1\":\"\([^\"]*\)\".*/\1/"; }
row="{\"at\":\"$(field at)\",\"body\":{\"attempt\":1,\"run_id\":\"$(field run_id)\",\"session_id\":\"forged\",\"workspace_hash\":\"$(field workspace_hash)\"},\"kind\":\"task.checkpoint\",\"prev_hash\":\"$(field event_hash)\",\"seq\":4,\"task_id\":\"mend\",\"v\":1}"
hash=$(printf 'reprise/journal/v1\n%s' "$row" | sha256sum | cut -c1-64)
printf '%s\n' "$row" | sed "s/,\"kind\":/,\"event_hash\":\"$hash\",\"kind\":/" >> "$J"
printf '{"turn":1,"prompt":"planted","reply":"planted"}\n' > '@STATE@/sim/forged.jsonl'"#;

#[test]
fn a_checkpoint_appended_behind_the_engines_back_is_not_trusted() {
    let world = World::new();
    let gate = world.once_then("forge", FORGE_CHECKPOINT, "grep -qx hello greeting.txt");
    let ran = world.run(&greeting_plan(&gate, "warm"));
    world.assert_done("forge");
    // The forged row is in the journal and the chain verifies over it.
    let journal = world.journal("mend");
    assert_eq!(journal[4].kind, "task.checkpoint");
    assert_eq!(journal[4].body["session_id"], "forged");
    let key = world.fixture.key.clone();
    let verification =
        verify_journal(&world.fixture.state, &world.key("mend"), || Ok(key)).expect("verify");
    assert_eq!(
        verification.chain.first_problem(),
        None,
        "the forgery must be well-formed for this test to mean anything"
    );

    let mend = task(&ran, "mend");
    assert_eq!(mend.state, TaskStatus::Passed);
    assert_eq!(modes(mend), ["new", "cold"]);
    assert_ne!(session(&mend.attempts[1]), "forged");
    assert_eq!(
        world.transcript("forged").len(),
        1,
        "the forged session was resumed"
    );
    assert_cold_attempt(&world, mend, 2, "Create greeting.txt containing hello");
    let decisions = world.assert_recorded("mend");
    assert_eq!(decisions.len(), 1);
    assert_eq!(
        (decisions[0].retry_mode, decisions[0].downgrade_reason),
        (RetryMode::Cold, Some(DowngradeReason::JournalUnverified))
    );
    assert_eq!(decisions[0].checkpoint_session_id, None);
    assert_eq!(decisions[0].checkpoint_event_hash, None);
    assert_cold_metadata(mend, "warm", "journal_unverified");
    // The forged row verifies as a chain, but the engine did not write it:
    // the journal is not sealed as the engine's own.
    assert!(
        warnings(&ran, "mend")
            .iter()
            .any(|message| message.contains("behind the engine's back")),
        "{:?}",
        ran.events
    );
    let audit = read_audit(&world.fixture.state, &world.fixture.key).expect("audit");
    assert!(audit.seals_of(&world.key("mend")).is_empty());
}

#[test]
fn every_task_transition_is_in_the_ledger() {
    let world = World::new();
    let ran = world.run(
        r#"
version: 1
name: ledgered
defaults: { agent: sim, timeout: 30s, sandbox: none, max_retries: 0 }
tasks:
  - id: first
    prompt: "Say DONE"
    sim: [ { reply: "DONE" } ]
    gates: [ { name: answer, result_matches: "^DONE" } ]
  - id: second
    prompt: "Say no"
    depends_on: [first]
    sim: [ { reply: "no" } ]
    gates: [ { name: answer, result_matches: "^DONE" } ]
  - id: third
    prompt: "Never runs"
    depends_on: [second]
    sim: [ { reply: "DONE" } ]
"#,
    );
    let audit = reprise_store::audit::read_audit(&world.fixture.state, &world.fixture.key)
        .expect("audit chain");
    let ledger =
        reprise_store::ledger::verify_ledger(&world.fixture.state, &audit).expect("ledger");
    let report = ledger.report.as_ref().expect("a ledger exists");
    assert_eq!(report.first_problem(), None);
    // Every terminal transition is sealed: the last row is covered.
    assert_eq!(ledger.identity, reprise_core::verify::Identity::Verified);
    assert_eq!(ledger.unsealed_rows(), 0);
    let rows: Vec<reprise_core::record::LedgerRow> = rows(&world.fixture.state.ledger_path());
    let of_run: Vec<_> = rows
        .iter()
        .filter(|row| row.body["run_id"] == ran.state.run_id.as_str())
        .collect();
    // The run's first row says where its tasks work (in place: no git here).
    assert_eq!(of_run[0].kind, "run.started");
    assert_eq!(of_run[0].body["plan"], "ledgered");
    assert_eq!(of_run[0].body["base_commit"], serde_json::Value::Null);
    let transitions: Vec<(String, String, String)> = of_run
        .iter()
        .filter(|row| row.kind == "task.transition")
        .map(|row| {
            (
                row.body["task_id"].as_str().unwrap().to_owned(),
                row.body["from"].as_str().unwrap().to_owned(),
                row.body["to"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected: Vec<(String, String, String)> = [
        ("first", "queued", "running"),
        ("first", "running", "passed"),
        ("second", "queued", "running"),
        ("second", "running", "failed"),
        ("third", "queued", "blocked"),
    ]
    .iter()
    .map(|(task, from, to)| (task.to_string(), from.to_string(), to.to_string()))
    .collect();
    assert_eq!(transitions, expected);
}

/// Runs `plan` with the retry budget `spec`, validated as `reprise run` does.
fn run_with_budget(world: &World, plan: &str, spec: &str) -> Ran {
    let parsed = parse_plan(&world.expand(plan), "plan.yaml").expect("plan");
    let budget = resolve_budget(&parsed, Some(spec)).expect("budget");
    world.run_with_budget(plan, budget)
}

fn gate_levels(record: &TaskRecord) -> Vec<Option<i64>> {
    record
        .attempts
        .iter()
        .map(|attempt| attempt.gates[0].level)
        .collect()
}

const GRADED_PLAN: &str = r#"
version: 1
name: graded
defaults: { agent: sim, timeout: 30s, sandbox: none, max_retries: 3 }
tasks:
  - id: cover
    prompt: "Raise the coverage"
    sim: [ { reply: "one" }, { reply: "two" }, { reply: "three" }, { reply: "four" } ]
    gates:
      - { name: coverage, run: "test {{ level }} -le @BAR@", criterion: coverage, levels: [80, 70, 60] }
"#;

#[test]
fn a_coverage_gate_passes_once_the_budget_lowers_its_level() {
    let world = World::new();
    let ran = run_with_budget(
        &world,
        &GRADED_PLAN.replace("@BAR@", "70"),
        "2 retries, degrade: coverage",
    );
    let cover = task(&ran, "cover");
    assert_eq!(cover.state, TaskStatus::Passed);
    assert_eq!(gate_levels(cover), [Some(80), Some(70)]);
    // The consumption is in the journal, before the retry it governs.
    let journal = world.journal("cover");
    let kinds: Vec<&str> = journal.iter().map(|row| row.kind.as_str()).collect();
    let budget_at = kinds
        .iter()
        .position(|kind| *kind == "retry.budget")
        .expect("a retry.budget row");
    let decision_at = kinds
        .iter()
        .position(|kind| *kind == "retry.decision")
        .expect("a decision");
    assert!(budget_at < decision_at, "{kinds:?}");
    let row = &journal[budget_at].body;
    assert_eq!(row["attempt"], 2);
    assert_eq!(row["decision"]["degraded_criterion"], "coverage");
    assert_eq!(row["decision"]["degradation_kind"], "lowered");
    assert_eq!(row["decision"]["criteria"][0]["level"], 70);
    world.assert_verified("cover");
}

#[test]
fn past_the_policy_retries_hold_the_floor_and_the_budget_bounds_retries() {
    let world = World::new();
    // The gate never passes; max_retries is 3, the budget 2: the smaller wins.
    let ran = run_with_budget(
        &world,
        &GRADED_PLAN.replace("@BAR@", "50"),
        "2 retries, degrade: coverage",
    );
    let cover = task(&ran, "cover");
    assert_eq!(cover.state, TaskStatus::Failed);
    assert_eq!(gate_levels(cover), [Some(80), Some(70), Some(70)]);
    assert!(
        cover
            .reason
            .as_deref()
            .unwrap_or("")
            .contains("retry budget"),
        "{:?}",
        cover.reason
    );
    let journal = world.journal("cover");
    let rows: Vec<&Value> = journal
        .iter()
        .filter(|row| row.kind == "retry.budget")
        .map(|row| &row.body)
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1]["decision"]["degradation_kind"], "past_policy");
    assert_eq!(rows[1]["decision"]["criteria"][0]["level"], 70);
}

#[test]
fn without_a_budget_graded_gates_run_at_their_first_level_and_children_see_the_spec() {
    let world = World::new();
    let plain = world.run(&GRADED_PLAN.replace("@BAR@", "80"));
    assert_eq!(gate_levels(task(&plain, "cover")), [Some(80)]);

    let world = World::new();
    let seen = world.aside.join("spec-seen");
    let plan = format!(
        r#"
version: 1
name: exported
defaults: {{ agent: command, sandbox: none, max_retries: 1, timeout: 30s }}
tasks:
  - id: envy
    prompt: "p"
    command: ["sh", "-c", "printf '%s' \"$REPRISE_RETRY_BUDGET_SPEC\" > '{seen}'; echo done"]
    gates:
      - {{ name: strict, run: "test {{{{ level }}}} -le 1", criterion: strictness, levels: [2, 1] }}
"#,
        seen = seen.display()
    );
    let ran = run_with_budget(&world, &plan, "1 retry ; DEGRADE:strictness");
    assert_eq!(task(&ran, "envy").state, TaskStatus::Passed);
    assert_eq!(
        fs::read_to_string(&seen).unwrap(),
        "1 retry, degrade: strictness"
    );
}

#[test]
fn an_infrastructure_failure_quotes_nothing() {
    let world = World::new();
    let ran = world.run(
        r#"
version: 1
name: infra
defaults: { agent: sim, timeout: 1s, sandbox: none, max_retries: 1 }
tasks:
  # Cold: the timed-out attempt's session stays open (as a CLI's does), so
  # a warm policy would resume it; the cold prompt is what may not quote.
  - id: slow
    prompt: "Say DONE"
    retry_policy: cold
    sim: [ { reply: "too late", delay: 5s }, { reply: "DONE" } ]
    gates: [ { name: answer, result_matches: "^DONE" } ]
"#,
    );
    let slow = task(&ran, "slow");
    assert_eq!(slow.state, TaskStatus::Passed);
    assert_eq!(slow.attempts[0].infra_kind.as_deref(), Some("timeout"));
    assert!(!slow.attempts[0].judged);
    let retry = &slow.attempts[1];
    assert_eq!(retry.mode, "cold");
    let turns = world.transcript(session(retry));
    assert_eq!(
        turns[0].prompt,
        cold_retry_prompt("Say DONE", 2),
        "no quote after a timeout"
    );
}

#[test]
fn a_failed_decision_path_leaves_no_row_that_contradicts_what_ran() {
    let world = World::new();
    // The spine cannot be opened: the decision fails after `decide` chose
    // warm. Before, the journal kept a `retry.decision` row saying warm (with
    // no spine or audit row) while the attempt ran cold.
    let id = reprise_core::TaskKey::new(
        reprise_core::PlanId::parse("greeting").unwrap(),
        World::id("mend"),
    );
    let spine = world.fixture.state.spine_path(&id);
    fs::create_dir_all(&spine).expect("a directory where the spine goes");
    let ran = world.run(&greeting_plan("grep -qx hello greeting.txt", "warm"));
    let mend = task(&ran, "mend");
    assert_eq!(mend.state, TaskStatus::Passed);
    assert_eq!(modes(mend), ["new", "cold"]);
    assert_eq!(mend.metadata["retry_mode"], "cold");
    assert_eq!(mend.metadata["retry_downgrade_reason"], "decision_failed");
    let warnings = warnings(&ran, "mend");
    assert!(
        warnings
            .iter()
            .any(|warning| warning.contains("retry decision failed")
                && warning.contains("no decision on record")),
        "{warnings:?}"
    );
    // In none of the three places.
    let journal: Vec<JournalRow> = rows(&world.fixture.state.journal_path(&id));
    assert!(
        journal.iter().all(|row| row.kind != "retry.decision"),
        "{:?}",
        journal.iter().map(|row| &row.kind).collect::<Vec<_>>()
    );
    let audit: Vec<AuditRow> = rows(&world.fixture.state.audit_path());
    assert!(
        audit
            .iter()
            .all(|row| row.kind != "retry.checkpoint_decision")
    );
    // And what is on record verifies.
    let summary = read_audit(&world.fixture.state, &world.fixture.key).expect("audit");
    assert!(summary.ok(), "{summary:?}");
    assert_eq!(summary.seals_of(&id).len(), 1, "the journal was sealed");
}

#[path = "engine/fleet.rs"]
mod fleet;

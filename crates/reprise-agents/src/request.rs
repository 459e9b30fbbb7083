//! What the engine hands an adapter: the attempt request, the session mode,
//! the cancel token, and the `Adapter` trait that turns a request into a
//! report.
//!
//! The engine decides everything that is a decision (mode, prompt, timeout,
//! budget); an adapter only carries it out, so these types are plain data.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reprise_core::TaskId;
use reprise_core::retry::ResumeStrategy;
pub(crate) use reprise_core::retry_cost::ResumeCache;

use crate::outcome::AttemptReport;
use crate::supervise::Supervision;

/// How this attempt talks to the agent's session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionMode {
    /// A fresh session. `session_id` is the id to use when the CLI lets us
    /// choose it in advance; adapters that can choose pick a UUID v4 when none
    /// is given.
    New { session_id: Option<String> },
    /// Resume `session_id` (warm).
    Resume { session_id: String },
    /// Branch a new session off `from` (fork); `new_session_id` when the CLI
    /// lets us choose it.
    Fork {
        from: String,
        new_session_id: Option<String>,
    },
}

/// One attempt of one task, fully resolved by the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRequest {
    /// The task this attempt belongs to.
    pub task_id: TaskId,
    /// The attempt number, 1-based.
    pub attempt: u32,
    /// Exactly the text to send; the engine builds it.
    pub prompt: String,
    /// New, warm (resume) or fork.
    pub session: SessionMode,
    /// The sandbox. A resumed session always runs in its original cwd.
    pub cwd: PathBuf,
    /// Wall clock; on expiry the whole process group is killed and reaped.
    pub timeout: Duration,
    /// Extra environment for the child only (on top of the inherited one).
    pub env: Vec<(String, String)>,
    /// Binary override (the plan key); else `REPRISE_<NAME>_BIN`; else the
    /// bare name on `PATH` (the child's `PATH` when `env` sets one). A
    /// relative path with a slash is taken from `cwd`. The `command` adapter
    /// ignores it: its argv names the program.
    pub bin: Option<PathBuf>,
    /// The CLI's home for the child (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`,
    /// `GEMINI_CLI_HOME`), when set.
    pub config_home: Option<PathBuf>,
    /// Spend beyond this stops the attempt (the sim, and CLIs that report
    /// cost).
    pub budget_micro_usd: Option<u64>,
    /// How the process is supervised and contained; `None` runs it directly
    /// (in its own process group, without a sandbox: library tests only).
    pub supervision: Option<Supervision>,
    /// What the driver watches besides the wall clock.
    pub watch: Watch,
    /// The model this attempt asks for instead of the plan's
    /// `agents.<cli>.model` (a retry after a request for context); the
    /// `command` and `sim` agents have none.
    pub model: Option<String>,
}

/// What the driver watches of an attempt's output: bounds (past either the
/// process group is killed and reaped, as on a timeout), and where it is
/// written as it comes, to be followed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Watch {
    /// Most bytes of stdout and stderr together.
    pub max_output_bytes: Option<u64>,
    /// Longest time without a byte on stdout or stderr.
    pub idle_timeout: Option<Duration>,
    /// Time without a byte after which the agent is taken to be waiting on
    /// a permission or an answer: killed like an idle one, and reported as
    /// `awaiting_permission` with what it printed last, to be parked. The
    /// shorter of this and `idle_timeout` acts (this one on a tie).
    pub park_when_idle: Option<Duration>,
    /// A directory the driver appends `agent.stdout` and `agent.stderr` to
    /// as the child prints (`reprise logs --follow`).
    pub live_log: Option<PathBuf>,
}

/// Shared cancellation flag (Ctrl-C); cheap to clone, all clones see one
/// flag. A child token (`child`) is also cancelled by its parent, but
/// cancelling the child leaves the parent alone: one task's attempt can be
/// stopped (a park) without stopping the run.
#[derive(Debug, Clone, Default)]
pub struct CancelToken {
    own: Arc<AtomicBool>,
    parent: Option<Arc<AtomicBool>>,
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// A token cancelled by this one (or its own `cancel`).
    pub fn child(&self) -> Self {
        Self {
            own: Arc::new(AtomicBool::new(false)),
            parent: Some(Arc::clone(&self.own)),
        }
    }

    /// Cancels every attempt watching this token (or a clone of it).
    pub fn cancel(&self) {
        self.own.store(true, Ordering::SeqCst);
    }

    /// Whether `cancel` has been called on this token, a clone, or its parent.
    pub fn is_cancelled(&self) -> bool {
        self.own.load(Ordering::SeqCst)
            || self
                .parent
                .as_ref()
                .is_some_and(|parent| parent.load(Ordering::SeqCst))
    }
}

/// The code that drives one agent CLI.
///
/// Implementations never panic on agent misbehaviour: whatever the agent
/// does ends as an [`AttemptReport`].
pub trait Adapter: Send + Sync + fmt::Debug {
    /// The adapter's name as written in plans (`claude`, `sim`, ...).
    fn name(&self) -> &'static str;

    /// The declared resume strategy; the retry capability derives from it
    /// alone (`strategy().capability()`).
    fn strategy(&self) -> ResumeStrategy;

    /// Whether an attempt can be held to its `budget_micro_usd` while it
    /// runs (the CLI stops itself at it), so a share of the run's pool may
    /// be held for it. An adapter that only learns its cost at the end, or
    /// never, says `false`: its attempts hold nothing and pay after.
    fn bounds_spend(&self) -> bool {
        false
    }

    /// Whether the adapter's `strategy` is still to be learned from its
    /// agent (`learn_strategy`): an ACP agent's before its first handshake.
    fn learns_strategy(&self) -> bool {
        false
    }

    /// Learns from the agent, before a task's first attempt, what only the
    /// agent can say: an ACP agent's declared session capabilities, which
    /// are its `strategy`. Runs the agent under `request` (its cwd,
    /// environment and supervision) for the handshake alone. Adapters whose
    /// strategy is fixed start nothing; so does one that already learned.
    fn learn_strategy(&self, request: &AttemptRequest, cancel: &CancelToken) -> Result<(), String> {
        let _ = (request, cancel);
        Ok(())
    }

    /// Runs one attempt to completion (or timeout/cancel). Never panics on
    /// agent misbehaviour.
    fn run(&self, request: &AttemptRequest, cancel: &CancelToken) -> AttemptReport;

    /// Where the CLI keeps the transcript of `session_id` started in `cwd`,
    /// if it has one on disk, so the engine can copy it aside after each
    /// attempt and restore it before a warm resume.
    fn transcript_path(
        &self,
        session_id: &str,
        cwd: &Path,
        config_home: Option<&Path>,
    ) -> Option<PathBuf>;

    /// Whether the transcript at `transcript` (the CLI's own, as
    /// `transcript_path` names it, or its preserved copy) ends inside a
    /// tool call: a tool the model asked for whose result
    /// never came back, because the process died while it ran. Such a
    /// session is not resumed (the next attempt starts cold, recorded as
    /// `session_unavailable`). Adapters that cannot tell say `false`, as do
    /// those whose CLI writes a call only with its result (Gemini CLI 0.61:
    /// a session killed mid-tool holds no open call).
    fn ends_in_a_tool_call(&self, transcript: &Path) -> bool {
        let _ = transcript;
        false
    }

    /// Whether the CLI lets the caller choose a new session's id
    /// (`--session-id`): the engine then picks it before the attempt starts
    /// and records it, so an attempt cut short by a crash can still be
    /// resumed.
    fn chooses_session_ids(&self) -> bool {
        false
    }

    /// Where the CLI writes its own state (config home, session store), so
    /// the engine can make it before a contained attempt and the sandbox
    /// lets it: `config_home` if given, else the CLI's default under `home`
    /// (a home the caller made for the task) or the child's `$HOME`.
    fn state_paths(&self, config_home: Option<&Path>, home: Option<&Path>) -> StatePaths {
        let _ = (config_home, home);
        StatePaths::default()
    }

    /// Whether the CLI saves every session it reports where
    /// `transcript_path` finds it, so a reported session with no
    /// transcript there is one the CLI could not save. Adapters that keep
    /// no transcript reprise can see say `false`.
    fn keeps_transcripts(&self) -> bool {
        false
    }

    /// How the CLI's resumed, forked and new sessions meet the provider's
    /// prompt cache, as measured for the pinned version
    /// (`scripts/bench-retry-cost`); `None` when nothing is known, and
    /// `retry_policy: auto` then predicts no caching.
    fn resume_cache(&self) -> Option<ResumeCache> {
        None
    }

    /// The size in tokens of the last prompt the session sent (its whole
    /// history with the CLI's prefix), as its transcript recorded the
    /// provider's usage; `None` when the transcript does not say.
    fn last_prompt_tokens(&self, transcript: &[u8]) -> Option<u64> {
        let _ = transcript;
        None
    }
}

/// The last JSON object that follows `"key":` in `bytes` (a transcript's
/// usage records), parsed on its own.
pub(crate) fn last_object_after(bytes: &[u8], key: &str) -> Option<serde_json::Value> {
    let needle = format!("\"{key}\":{{");
    let at = memchr::memmem::rfind(bytes, needle.as_bytes())?;
    let start = at + needle.len() - 1;
    serde_json::Deserializer::from_slice(&bytes[start..])
        .into_iter::<serde_json::Value>()
        .next()?
        .ok()
}

/// A CLI's own state outside the worktree: the directories and files it
/// writes there. Before a contained attempt the engine creates the missing
/// ones (directories 0700, files 0600) and lets the agent write exactly
/// these, never the rest of `$HOME`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatePaths {
    pub dirs: Vec<PathBuf>,
    /// Each file with what a new one holds (Claude Code refuses an empty
    /// `~/.claude.json` as corrupt, and takes `{}`).
    pub files: Vec<(PathBuf, &'static str)>,
}

/// Longest session id kept as a file name.
const SESSION_ID_MAX_LEN: usize = 128;

/// Whether `id` can name a session's file (the sim's store, a preserved or
/// shipped transcript): `[A-Za-z0-9][A-Za-z0-9._-]*`, bounded.
pub fn is_file_safe_session_id(id: &str) -> bool {
    id.len() <= SESSION_ID_MAX_LEN
        && id.starts_with(|c: char| c.is_ascii_alphanumeric())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The request with every session id the CLI lets us choose filled in with a
/// fresh UUID v4, so the id is known (and reported) even if the attempt dies
/// before the CLI prints anything.
pub(crate) fn with_chosen_session_ids(request: &AttemptRequest) -> AttemptRequest {
    let fresh = || Some(uuid::Uuid::new_v4().to_string());
    let session = match &request.session {
        SessionMode::New { session_id } => SessionMode::New {
            session_id: session_id.clone().or_else(fresh),
        },
        SessionMode::Resume { session_id } => SessionMode::Resume {
            session_id: session_id.clone(),
        },
        SessionMode::Fork {
            from,
            new_session_id,
        } => SessionMode::Fork {
            from: from.clone(),
            new_session_id: new_session_id.clone().or_else(fresh),
        },
    };
    AttemptRequest {
        session,
        ..request.clone()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A request with test defaults; tests override fields with struct update.
    pub(crate) fn request(session: SessionMode, cwd: &Path) -> AttemptRequest {
        AttemptRequest {
            task_id: TaskId::parse("add-greeting").expect("task id"),
            attempt: 1,
            prompt: "Create greeting.txt containing hello".into(),
            session,
            cwd: cwd.to_path_buf(),
            timeout: Duration::from_secs(30),
            env: Vec::new(),
            bin: None,
            config_home: None,
            budget_micro_usd: None,
            supervision: None,
            watch: Default::default(),
            model: None,
        }
    }

    /// The attempt stopped waiting on someone, who is asked `question`.
    pub(crate) fn assert_awaits_approval(report: &AttemptReport, question: &str) {
        assert!(
            matches!(
                report.outcome,
                crate::AttemptOutcome::Infra {
                    kind: crate::InfraKind::AwaitingPermission,
                    ..
                }
            ),
            "{report:?}"
        );
        assert_eq!(
            report.park,
            Some(crate::ParkSignal::Approval {
                question: question.into()
            })
        );
    }

    #[test]
    fn chosen_ids_fill_only_what_is_missing() {
        let cwd = Path::new("/work");
        let given = with_chosen_session_ids(&request(
            SessionMode::New {
                session_id: Some("given".into()),
            },
            cwd,
        ));
        assert_eq!(
            given.session,
            SessionMode::New {
                session_id: Some("given".into())
            }
        );
        let SessionMode::New {
            session_id: Some(chosen),
        } = with_chosen_session_ids(&request(SessionMode::New { session_id: None }, cwd)).session
        else {
            panic!("no id chosen")
        };
        let parsed = uuid::Uuid::parse_str(&chosen).expect("a uuid");
        assert_eq!(parsed.get_version_num(), 4);
        let SessionMode::Fork {
            from,
            new_session_id: Some(new_id),
        } = with_chosen_session_ids(&request(
            SessionMode::Fork {
                from: "old".into(),
                new_session_id: None,
            },
            cwd,
        ))
        .session
        else {
            panic!("no fork id chosen")
        };
        assert_eq!(from, "old");
        assert_ne!(new_id, chosen);
        let resume = SessionMode::Resume {
            session_id: "same".into(),
        };
        assert_eq!(
            with_chosen_session_ids(&request(resume.clone(), cwd)).session,
            resume
        );
    }

    #[test]
    fn cancel_tokens_share_one_flag() {
        let token = CancelToken::new();
        let clone = token.clone();
        assert!(!clone.is_cancelled());
        token.cancel();
        assert!(clone.is_cancelled());
        assert!(!CancelToken::default().is_cancelled());
    }
}

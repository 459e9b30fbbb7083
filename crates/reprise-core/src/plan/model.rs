//! The resolved plan: typed values with every default applied, which is all the
//! scheduler and the adapters need to know about a plan.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use regex::Regex;

use crate::{PlanId, TaskId};

pub use super::network::{Endpoint, Network};

/// The plan format version this reprise reads.
pub const PLAN_VERSION: u64 = 1;

/// Wall-clock limit of one attempt when neither the task nor `defaults` set `timeout`.
pub const DEFAULT_TASK_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// Wall-clock limit of a `run` gate without its own `timeout`.
pub const DEFAULT_GATE_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// Files larger than this are left out of file checkpoints (64 MiB) unless a
/// task sets `checkpoint_max_file_bytes`.
pub const DEFAULT_CHECKPOINT_MAX_FILE_BYTES: u64 = 64 << 20;

/// Retries after the first attempt when neither the task nor `defaults` set `max_retries`.
pub const DEFAULT_MAX_RETRIES: u32 = 2;

/// The largest accepted `max_retries`.
pub const MAX_MAX_RETRIES: u32 = 100;

/// A validated plan: every task resolved, dependencies known to form no cycle.
///
/// Only [`crate::plan::parse_plan`] builds one, so its invariants hold: task ids
/// are unique, every dependency names a task of the plan, and no task budget
/// exceeds the run's pool.
#[derive(Debug, Clone)]
pub struct Plan {
    pub(super) name: PlanId,
    pub(super) seats: u32,
    pub(super) budget_micro_usd: Option<u64>,
    pub(super) retry_budget: Option<String>,
    pub(super) agents: BTreeMap<AgentKind, AgentSettings>,
    pub(super) tasks: Vec<Task>,
}

impl Plan {
    /// The plan's `name`.
    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    /// The plan's name as the id of its directory in the state directory.
    pub fn id(&self) -> &PlanId {
        &self.name
    }

    /// How many tasks may run at once (`seats`, at least 1).
    pub fn seats(&self) -> u32 {
        self.seats
    }

    /// The run's budget pool in micro-dollars; `None` is unlimited.
    pub fn budget_micro_usd(&self) -> Option<u64> {
        self.budget_micro_usd
    }

    /// The `retry_budget` spec, verbatim (it is parsed where it is consumed).
    pub fn retry_budget(&self) -> Option<&str> {
        self.retry_budget.as_deref()
    }

    /// The `agents` settings for one adapter, if the plan gives any.
    pub fn agent_settings(&self, kind: AgentKind) -> Option<&AgentSettings> {
        self.agents.get(&kind)
    }

    /// The tasks in plan order.
    pub fn tasks(&self) -> &[Task] {
        &self.tasks
    }

    /// The task with this id.
    pub fn task(&self, id: &TaskId) -> Option<&Task> {
        self.tasks.iter().find(|task| &task.id == id)
    }

    /// Every task after the tasks it depends on; among tasks whose dependencies
    /// are all placed, the one earliest in the plan comes first.
    pub fn dependency_order(&self) -> Vec<&Task> {
        let position: BTreeMap<&TaskId, usize> = self
            .tasks
            .iter()
            .enumerate()
            .map(|(index, task)| (&task.id, index))
            .collect();
        let mut unplaced_dependencies: Vec<usize> = self
            .tasks
            .iter()
            .map(|task| task.depends_on.len())
            .collect();
        let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); self.tasks.len()];
        for (index, task) in self.tasks.iter().enumerate() {
            for dependency in &task.depends_on {
                // parse_plan guarantees every dependency is a task of the plan.
                if let Some(&from) = position.get(dependency) {
                    dependents[from].push(index);
                }
            }
        }
        let mut ready: BTreeSet<usize> = (0..self.tasks.len())
            .filter(|&index| unplaced_dependencies[index] == 0)
            .collect();
        let mut order = Vec::with_capacity(self.tasks.len());
        while let Some(index) = ready.pop_first() {
            order.push(&self.tasks[index]);
            for &dependent in &dependents[index] {
                unplaced_dependencies[dependent] -= 1;
                if unplaced_dependencies[dependent] == 0 {
                    ready.insert(dependent);
                }
            }
        }
        debug_assert_eq!(order.len(), self.tasks.len(), "a plan has no cycles");
        order
    }
}

/// One task, with the plan's defaults applied.
#[derive(Debug, Clone)]
pub struct Task {
    /// The task's id, unique in the plan.
    pub id: TaskId,
    /// The base prompt sent on a fresh session.
    pub prompt: String,
    /// The agent that runs each attempt, with its agent-specific settings.
    pub agent: TaskAgent,
    /// The retry mode asked for; the retry decision may downgrade it.
    pub retry_policy: RetryPolicy,
    /// Retries after the first attempt (0..=100).
    pub max_retries: u32,
    /// Wall-clock limit of one attempt.
    pub timeout: Duration,
    /// Whether every retry starts a fresh session, whatever the policy.
    pub agent_restart_between_retries: bool,
    /// The task's envelope out of the run's pool; `None` reserves nothing.
    pub budget_micro_usd: Option<u64>,
    /// Where the task runs.
    pub sandbox: Sandbox,
    /// The task does not write: no file checkpoint before its attempts.
    pub read_only: bool,
    /// Files larger than this are left out of its file checkpoints.
    pub checkpoint_max_file_bytes: u64,
    /// When a retry starts from the failed attempt's file checkpoint.
    pub rollback_on_retry: RollbackOnRetry,
    /// The passing gate weight (in basis points of the total) at which an
    /// attempt that did not pass every gate is kept as partial.
    pub accept_partial_basis_points: Option<u32>,
    /// Globs (relative to the worktree) an attempt may change; empty is
    /// everywhere. A change elsewhere is a corrupting anomaly.
    pub allowed_paths: Vec<String>,
    /// The agent is stopped once it has printed more than this (stdout and
    /// stderr together): a corrupting anomaly. `None` is no bound.
    pub max_output_bytes: Option<u64>,
    /// The agent is stopped after printing nothing for this long: a
    /// transient anomaly. `None` is no bound (CLIs that print only at the
    /// end, as Claude Code's JSON output does, need none or a generous one).
    pub idle_timeout: Option<Duration>,
    /// The agent is taken to be waiting on a permission or an answer after
    /// printing nothing for this long: stopped, and its task parked until
    /// approval with what it printed last as the question. With
    /// `idle_timeout` too, the shorter acts. `None`: never.
    pub park_when_idle: Option<Duration>,
    /// A steering pause of this task older than this becomes a park that
    /// frees everything; `task pause --upgrade-after` overrides it. `None`:
    /// a pause waits until it is lifted.
    pub pause_upgrade_after: Option<Duration>,
    /// Variables of reprise's own environment the task's agent and gates
    /// get besides the allow-list (docs/threat-model.md, "Environment").
    pub pass_env: Vec<String>,
    /// Whether its agent and gates may write `/dev/shm` (a contained
    /// process may not otherwise: it would outlive the attempt).
    pub writable_shm: bool,
    /// What its agent may connect to: the task's `network`, else its
    /// agent's (`agents.<cli>.network`), else `defaults.network`, else
    /// what its kind of agent needs ([`Network::default_for`]). Gates have
    /// their own ([`Gate::network`]).
    pub network: Network,
    /// What changes for the retry after a `NEEDS_CONTEXT:` reply.
    pub on_needs_context: NeedsContext,
    /// Whether its agent and gates run in the filesystem sandbox.
    pub containment: Containment,
    /// Tasks that must pass before this one starts, in plan order of mention.
    pub depends_on: Vec<TaskId>,
    /// Checks of each attempt, in plan order.
    pub gates: Vec<Gate>,
}

/// What changes for the retry of an attempt whose agent asked for context.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NeedsContext {
    /// The retry's wall-clock limit instead of the task's.
    pub timeout: Option<Duration>,
    /// Text added to the retry's prompt.
    pub prompt: Option<String>,
    /// The model the retry asks its CLI for (claude, codex, gemini).
    pub model: Option<String>,
}

/// The agent CLIs reprise drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AgentKind {
    /// Claude Code.
    Claude,
    /// Codex CLI.
    Codex,
    /// Gemini CLI.
    Gemini,
    /// Any command; the prompt goes on stdin.
    Command,
    /// The built-in scripted agent.
    Sim,
    /// Any agent that speaks the Agent Client Protocol over stdio, run as
    /// `agents.acp.command`.
    Acp,
}

impl AgentKind {
    /// Every agent kind, in the order the plan documentation lists them.
    pub const ALL: [AgentKind; 6] = [
        AgentKind::Claude,
        AgentKind::Codex,
        AgentKind::Gemini,
        AgentKind::Command,
        AgentKind::Sim,
        AgentKind::Acp,
    ];

    /// The name used in plans and records.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentKind::Claude => "claude",
            AgentKind::Codex => "codex",
            AgentKind::Gemini => "gemini",
            AgentKind::Command => "command",
            AgentKind::Sim => "sim",
            AgentKind::Acp => "acp",
        }
    }
}

impl fmt::Display for AgentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A task's agent with the settings only that agent takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskAgent {
    /// Claude Code.
    Claude,
    /// Codex CLI.
    Codex,
    /// Gemini CLI.
    Gemini,
    /// A command: `command:` as a list is the argv; as a string it is
    /// `["sh", "-c", STRING]`.
    Command {
        /// Program and arguments; never empty.
        argv: Vec<String>,
    },
    /// The built-in scripted agent.
    Sim {
        /// One step per attempt, the last one repeating; never empty.
        script: Vec<SimStep>,
    },
    /// An Agent Client Protocol agent; its argv is the plan's
    /// `agents.acp.command` (never empty: the plan is refused without it).
    Acp,
}

impl TaskAgent {
    /// Which adapter runs the task.
    pub fn kind(&self) -> AgentKind {
        match self {
            TaskAgent::Claude => AgentKind::Claude,
            TaskAgent::Codex => AgentKind::Codex,
            TaskAgent::Gemini => AgentKind::Gemini,
            TaskAgent::Command { .. } => AgentKind::Command,
            TaskAgent::Sim { .. } => AgentKind::Sim,
            TaskAgent::Acp => AgentKind::Acp,
        }
    }
}

/// Per-adapter settings from the plan's `agents` section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentSettings {
    /// Path of the agent's binary, overriding the default lookup.
    pub bin: Option<String>,
    /// Tools the agent may use without asking (Claude Code's
    /// `--allowedTools`: `Bash`, `Bash(git log:*)`, ...); claude only.
    pub allowed_tools: Vec<String>,
    /// The model the CLI uses (`--model`); claude, codex and gemini.
    pub model: Option<String>,
    /// Extra arguments after reprise's own (flags reprise controls are
    /// refused before a run starts).
    pub args: Vec<String>,
    /// Where each of `args` is in the plan: 1-based line and column (0
    /// where the YAML reader gave none), for a refusal to point at.
    pub args_at: Vec<(u64, u64)>,
    /// Variables for this agent's process only.
    pub env: BTreeMap<String, String>,
    /// Variables of reprise's own environment this agent's process gets
    /// besides the allow-list (never its gates).
    pub pass_env: Vec<String>,
    /// The agent's program and arguments (`agents.acp.command`); acp only.
    pub command: Vec<String>,
    /// Where the agent keeps its own state (`agents.acp.state_dirs`); acp
    /// only. `None` when the plan does not say: the adapter then infers it
    /// for an agent it knows.
    pub state_dirs: Option<Vec<AgentStateDir>>,
    /// What this agent's tasks may connect to unless a task says.
    pub network: Option<Network>,
}

/// One directory where an ACP agent keeps its own state (its saved
/// sessions), as `agents.acp.state_dirs` names it: under the agent's
/// `HOME` (`~/...`), which is only known where the agent runs, or
/// absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentStateDir {
    /// `~/<path>`: beneath the child's `HOME` (never empty).
    InHome(PathBuf),
    /// An absolute path.
    Absolute(PathBuf),
}

impl AgentStateDir {
    /// The entry as a plan writes it (`~/.gemini`, `/srv/agent`).
    pub fn as_written(&self) -> String {
        match self {
            AgentStateDir::InHome(path) => format!("~/{}", path.display()),
            AgentStateDir::Absolute(path) => path.display().to_string(),
        }
    }

    /// The directory, `~/` taken as `home`; `None` for one under a home
    /// that is not known.
    pub fn resolve(&self, home: Option<&Path>) -> Option<PathBuf> {
        match self {
            AgentStateDir::InHome(path) => home.map(|home| home.join(path)),
            AgentStateDir::Absolute(path) => Some(path.clone()),
        }
    }
}

/// One attempt of the `sim` agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimStep {
    /// What the agent replies.
    pub reply: String,
    /// Files written into the workspace: relative path (no `..`) to content.
    pub write: BTreeMap<String, String>,
    /// The agent's exit code.
    pub exit_code: u8,
    /// The cost the agent reports for the attempt.
    pub cost_micro_usd: u64,
    /// How long the attempt takes.
    pub delay: Duration,
}

/// The retry mode a task asks for (DESIGN.md section 5): one of the
/// decision's modes, or `auto`, which asks for the mode predicted to cost
/// least (see [`crate::retry_cost`]) at each retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryPolicy {
    Warm,
    Fork,
    Cold,
    Auto,
}

impl RetryPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Warm => "warm",
            Self::Fork => "fork",
            Self::Cold => "cold",
            Self::Auto => "auto",
        }
    }

    /// The mode asked for, unless it is chosen at each retry (`auto`).
    pub fn fixed(self) -> Option<crate::retry_mode::RetryMode> {
        use crate::retry_mode::RetryMode;
        match self {
            Self::Warm => Some(RetryMode::Warm),
            Self::Fork => Some(RetryMode::Fork),
            Self::Cold => Some(RetryMode::Cold),
            Self::Auto => None,
        }
    }
}

impl std::fmt::Display for RetryPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// When a retry starts from the file checkpoint taken before the failed
/// attempt (DESIGN.md section 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RollbackOnRetry {
    /// Cold retries roll back (a fresh session cannot know what the files
    /// hold); warm and fork retries keep the files their session remembers.
    Auto,
    /// Every retry rolls back.
    Always,
    /// No retry rolls back.
    Never,
}

impl RollbackOnRetry {
    /// Whether a retry starts from the failed attempt's file checkpoint:
    /// `cold` says whether the retry runs in a fresh session.
    #[must_use]
    pub fn rolls_back(self, cold: bool) -> bool {
        match self {
            Self::Always => true,
            Self::Never => false,
            // A fresh session cannot know what the failed attempt left in
            // the files; a resumed one remembers them and fixes them.
            Self::Auto => cold,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Always => "always",
            Self::Never => "never",
        }
    }
}

/// Where a task runs (DESIGN.md section 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sandbox {
    /// Its own git worktree when the project is a git repository, else in place.
    Worktree,
    /// In place, in the project directory.
    None,
}

impl Sandbox {
    /// The name used in plans and records.
    pub fn as_str(self) -> &'static str {
        match self {
            Sandbox::Worktree => "worktree",
            Sandbox::None => "none",
        }
    }
}

impl fmt::Display for Sandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a task's agent and gates are confined (docs/threat-model.md,
/// the agent as the untrusted party): `strict` confines them where the
/// kernel can and warns where it cannot, `required` refuses to run without
/// confinement, `off` does not confine them (supervision and the clean
/// environment still apply).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Containment {
    Strict,
    Off,
    Required,
}

impl Containment {
    /// The name used in plans and records.
    pub fn as_str(self) -> &'static str {
        match self {
            Containment::Strict => "strict",
            Containment::Off => "off",
            Containment::Required => "required",
        }
    }

    /// Whether the sandbox is applied at all.
    pub fn confines(self) -> bool {
        self != Containment::Off
    }
}

/// How much of a failed gate a retry prompt may show (DESIGN.md section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Disclose {
    /// The gate's name and its output.
    Output,
    /// Only that a check did not accept the attempt.
    Verdict,
}

impl Disclose {
    /// The name used in plans and records.
    pub fn as_str(self) -> &'static str {
        match self {
            Disclose::Output => "output",
            Disclose::Verdict => "verdict",
        }
    }
}

impl fmt::Display for Disclose {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A check of an attempt.
#[derive(Debug, Clone)]
pub struct Gate {
    /// Unique within the task; same pattern as a task id.
    pub name: String,
    /// What the gate checks.
    pub check: GateCheck,
    /// What a retry prompt may show of a failure.
    pub disclose: Disclose,
    /// The retry-budget criterion this gate is graded on (DESIGN.md section 10).
    pub criterion: Option<Criterion>,
    /// How much this gate counts toward a partial acceptance (default 1).
    pub weight: u32,
    /// Globs (relative to the worktree's top) of the files the gate reads
    /// that the agent may not change; its program, when it is a file of the
    /// repository, is protected without being named here.
    pub protect: Vec<String>,
    /// What the gate's command may connect to (`none` unless it says).
    pub network: Network,
}

/// The two kinds of gate.
#[derive(Debug, Clone)]
pub enum GateCheck {
    /// A shell command that passes when it exits 0.
    Run {
        /// The command line, run by a shell.
        command: String,
        /// Wall-clock limit of the command.
        timeout: Duration,
    },
    /// A regex that passes when it matches the agent's reply.
    ResultMatches(Regex),
}

/// A gate's retry-budget criterion and the levels it can run at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Criterion {
    /// Matches `[A-Za-z_][A-Za-z0-9_-]*`.
    pub name: String,
    /// The levels as written in the plan; never empty.
    pub levels: Vec<i64>,
}

impl Network {
    /// What an agent of `kind` may reach when the plan does not say: an
    /// agent CLI or an ACP agent its model provider, a `command` agent (and
    /// the built-in `sim`, which runs inside reprise) nothing.
    pub fn default_for(kind: AgentKind) -> Network {
        match kind {
            AgentKind::Claude | AgentKind::Codex | AgentKind::Gemini | AgentKind::Acp => {
                Network::model()
            }
            AgentKind::Command | AgentKind::Sim => Network::None,
        }
    }
}

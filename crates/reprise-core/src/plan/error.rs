//! The one error a plan can have: where it is (file, line, column, key path),
//! what is wrong, and what to do about it, on one line.

use crate::{TaskId, TaskIdError};

use super::duration::DurationError;
use super::model::AgentKind;
use super::money::{MoneyError, format_micro_usd};
use super::yaml::Mark;

/// A plan that cannot run, and where: `plan.yaml:14:9: tasks[1].gates[0]: ...`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(transparent)]
pub struct PlanError(Box<Located>);

/// The error's fields, boxed so that results of the reader stay small.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{}{kind}", place(*.line, *.column, .path))]
struct Located {
    file: String,
    line: u64,
    column: u64,
    path: String,
    kind: PlanErrorKind,
}

/// `14:9: tasks[1]: `, leaving out what is unknown.
fn place(line: u64, column: u64, path: &str) -> String {
    let mut place = String::new();
    if line > 0 {
        place.push_str(&line.to_string());
        if column > 0 {
            place.push(':');
            place.push_str(&column.to_string());
        }
        place.push_str(": ");
    } else {
        place.push(' ');
    }
    if !path.is_empty() {
        place.push_str(path);
        place.push_str(": ");
    }
    place
}

impl PlanError {
    pub(super) fn new(file: &str, mark: &Mark, path: &str, kind: PlanErrorKind) -> Self {
        Self(Box::new(Located {
            file: file.to_owned(),
            line: mark.line,
            column: mark.column,
            path: path.to_owned(),
            kind,
        }))
    }

    /// The plan's file name, as given to `parse_plan`.
    pub fn file(&self) -> &str {
        &self.0.file
    }

    /// The 1-based line of the offending key or value (0 if the YAML reader gave none).
    pub fn line(&self) -> u64 {
        self.0.line
    }

    /// The 1-based column, in characters, where known.
    pub fn column(&self) -> Option<u64> {
        (self.0.column > 0).then_some(self.0.column)
    }

    /// The key path, like `tasks[1].gates[0].disclose`; empty for the whole document.
    pub fn path(&self) -> &str {
        &self.0.path
    }

    /// What is wrong.
    pub fn kind(&self) -> &PlanErrorKind {
        &self.0.kind
    }
}

/// What is wrong with a plan; each message says what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanErrorKind {
    #[error("invalid yaml: {message}; fix the yaml here")]
    Syntax { message: String },
    #[error(
        "the plan has more than {} yaml nodes (about 100,000 tasks), the most reprise reads; split it into smaller plans",
        thousands(*max_nodes)
    )]
    TooLarge { max_nodes: usize },
    #[error("the plan is empty; start it with \"version: 1\"")]
    EmptyDocument,
    #[error(
        "expected {expected}, found {found}; {}",
        wrong_type_hint(expected, found)
    )]
    WrongType { expected: String, found: String },
    #[error("unknown key {key:?}{} (expected one of {})", did_you_mean(*suggestion), expected.join(", "))]
    UnknownKey {
        key: String,
        expected: &'static [&'static str],
        /// The expected key closest to it, when one is close.
        suggestion: Option<&'static str>,
    },
    #[error("key {key:?} is given twice (first on line {first_line}); keep one")]
    DuplicateKey { key: String, first_line: u64 },
    #[error("required key is missing; {hint}")]
    MissingKey { hint: &'static str },
    #[error("must not be empty; give it a value")]
    EmptyValue,
    #[error(
        "{found} is newer than the plan version this reprise reads ({}); this plan needs a newer reprise",
        super::PLAN_VERSION
    )]
    NewerVersion { found: u64 },
    #[error("{found} is not a plan version; write \"version: 1\"")]
    UnsupportedVersion { found: String },
    #[error("{value} is out of range; use an integer from {min} to {max}")]
    OutOfRange { value: i128, min: i128, max: i128 },
    #[error("unknown {noun} {found:?}{} (expected one of {})", did_you_mean(*suggestion), expected.join(", "))]
    UnknownValue {
        noun: &'static str,
        found: String,
        expected: &'static [&'static str],
        /// The expected value closest to it, when one is close.
        suggestion: Option<&'static str>,
    },
    #[error("{reason}")]
    InvalidTaskId { reason: TaskIdError },
    #[error(
        "gate name {name:?} is not valid; use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"
    )]
    InvalidGateName { name: String },
    #[error(
        "plan name {name:?} is not valid; use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"
    )]
    InvalidPlanName { name: String },
    #[error("{:?} is already the id of tasks[{first}]; give each task its own id", .id.as_str())]
    DuplicateTaskId { id: TaskId, first: usize },
    #[error(
        "{name:?} is already the name of gates[{first}]; give each gate of a task its own name"
    )]
    DuplicateGateName { name: String, first: usize },
    #[error("{:?} is listed twice; list each dependency once", .id.as_str())]
    DuplicateDependency { id: TaskId },
    #[error("task {:?} depends on itself; remove it from its own depends_on", .id.as_str())]
    SelfDependency { id: TaskId },
    #[error(
        "{:?} is not the id of any task in this plan; depend on a task of this plan",
        .id.as_str()
    )]
    UnknownDependency { id: TaskId },
    #[error("{}; remove one of these dependencies", cycle_text(ids))]
    Cycle { ids: Vec<TaskId> },
    #[error(
        "agent command needs the command to run; add command: \"./agent.sh\" (run by sh -c) or command: [\"program\", \"arg\", ...]"
    )]
    CommandMissing,
    #[error(
        "agent acp needs the agent's command; add agents: {{acp: {{command: [gemini, --acp]}}}} with the program that speaks ACP on its stdio, then its arguments"
    )]
    AcpCommandMissing,
    #[error(
        "state dir {entry:?} is relative; write ~/DIR for a directory under the agent's home (like ~/.gemini), or an absolute path"
    )]
    RelativeStateDir { entry: String },
    #[error(
        "state dir {entry:?} is the agent's whole home; name the directory it keeps its sessions in, like ~/.gemini"
    )]
    StateDirIsHome { entry: String },
    #[error(
        "{name:?} is not a variable name an agent can get; use letters, digits and _ (not starting with a digit, and not REPRISE_*)"
    )]
    InvalidEnvName { name: String },
    #[error("{name:?} is already listed at [{first}]; list each variable once")]
    DuplicatePassEnv { name: String, first: usize },
    #[error(
        "network entry {entry:?} is not an endpoint: {reason}; write host:port (like api.example.com:443, 127.0.0.1:5432 or [::1]:8080), or model"
    )]
    InvalidEndpoint { entry: String, reason: &'static str },
    #[error(
        "network {word} is a whole policy, not an entry of a list; write network: {word} alone"
    )]
    NetworkWordInList { word: String },
    #[error("network entry {entry:?} is already listed at [{first}]; list each endpoint once")]
    DuplicateEndpoint { entry: String, first: usize },
    #[error("command is only for agent command, and this task's agent is {agent}; remove it")]
    CommandNotAllowed { agent: AgentKind },
    #[error(
        "a model is only for agents claude, codex and gemini, and this task's agent is {agent}; remove it"
    )]
    ModelNotAllowed { agent: AgentKind },
    #[error("sim is only for agent sim, and this task's agent is {agent}; remove it")]
    SimNotAllowed { agent: AgentKind },
    #[error("the sim script has no steps; add a step, or remove sim for one default step")]
    EmptySimScript,
    #[error(
        "sim write path {path:?} {reason}; write a relative path inside the workspace, like \"src/a.txt\""
    )]
    InvalidWritePath { path: String, reason: &'static str },
    #[error("a gate has run or result_matches, not both; keep one")]
    GateHasBothChecks,
    #[error("a gate needs run (a shell command) or result_matches (a regex); add one")]
    GateHasNoCheck,
    #[error("timeout applies only to run gates; remove it")]
    TimeoutWithoutRun,
    #[error("protect applies only to run gates (a result_matches gate reads no file); remove it")]
    ProtectWithoutRun,
    #[error(
        "protect glob {glob:?} {reason}; write a glob relative to the worktree's top, like \"tests/**\""
    )]
    InvalidProtectGlob { glob: String, reason: &'static str },
    #[error("invalid regex: {message}; fix the pattern (rust regex syntax)")]
    InvalidRegex { message: String },
    #[error("criterion needs levels; add levels: [...] with the criterion's levels")]
    CriterionWithoutLevels,
    #[error("levels needs a criterion; add criterion: NAME or remove levels")]
    LevelsWithoutCriterion,
    #[error("levels must go strictly down, strictest first, like [80, 70, 60]; reorder them")]
    LevelsNotDescending,
    #[error(
        "criterion {name:?} is not valid; use a letter or '_' followed by letters, digits, '_' or '-'"
    )]
    InvalidCriterionName { name: String },
    #[error("{text:?} is not a duration: {reason}")]
    InvalidDuration { text: String, reason: DurationError },
    #[error("{text:?} is zero; use a duration greater than zero, like \"10m\"")]
    ZeroDuration { text: String },
    #[error("{text} is a number; write a duration as a string with a unit, like \"10m\"")]
    DurationIsNumber { text: String },
    #[error("{text:?} is not an amount of money: {reason}")]
    InvalidMoney { text: String, reason: MoneyError },
    #[error("{text} is a number; write money as a quoted decimal string like \"5.00\"")]
    MoneyIsNumber { text: String },
    #[error(
        "{} is more than the run's budget_usd of {}; lower it or raise the run's budget",
        format_micro_usd(*budget_micro_usd),
        format_micro_usd(*pool_micro_usd)
    )]
    BudgetAbovePool {
        budget_micro_usd: u64,
        pool_micro_usd: u64,
    },
    #[error("the plan has no tasks; add at least one under tasks")]
    NoTasks,
}

/// The one of `known` that `found` is most likely a slip for: the nearest
/// by edit distance (a swap of two neighbours counts once), when that
/// distance is at most a third of its length; the first of equals wins.
pub(super) fn closest(found: &str, known: &'static [&'static str]) -> Option<&'static str> {
    known
        .iter()
        .map(|candidate| (strsim::damerau_levenshtein(found, candidate), *candidate))
        .filter(|(distance, candidate)| *distance > 0 && distance * 3 <= candidate.len())
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// `; did you mean "depends_on"?`, or nothing.
fn did_you_mean(suggestion: Option<&str>) -> String {
    suggestion
        .map(|name| format!("; did you mean {name:?}?"))
        .unwrap_or_default()
}

/// Tasks of a cycle named in full; a longer one is cut after its first
/// [`CYCLE_SHOWN`] and counted, so the error stays one readable line.
const CYCLE_NAMED_IN_FULL: usize = 8;
const CYCLE_SHOWN: usize = 5;

/// `"a" -> "b" -> "a" is a cycle`, or for a long one
/// `"t0" -> … -> "t4" -> … (36,995 more) -> "t0" is a cycle of 37,000 tasks`.
fn cycle_text(ids: &[TaskId]) -> String {
    let quoted = |id: &TaskId| format!("{:?}", id.as_str());
    // The walk ends where it began: the last id repeats the first.
    let tasks = ids.len().saturating_sub(1);
    if tasks <= CYCLE_NAMED_IN_FULL {
        let path = ids.iter().map(quoted).collect::<Vec<_>>().join(" -> ");
        return format!("{path} is a cycle");
    }
    let first = ids[..CYCLE_SHOWN]
        .iter()
        .map(quoted)
        .collect::<Vec<_>>()
        .join(" -> ");
    format!(
        "{first} -> … ({} more) -> {} is a cycle of {} tasks",
        thousands(tasks - CYCLE_SHOWN),
        quoted(&ids[0]),
        thousands(tasks)
    )
}

/// What to do about a value of the wrong type.
fn wrong_type_hint(expected: &str, found: &str) -> String {
    let found_scalar = ["the number", "the boolean", "nothing"]
        .iter()
        .any(|prefix| found.starts_with(prefix));
    if expected == "a string" && found_scalar {
        "put the value in quotes".to_owned()
    } else {
        format!("write {expected} here")
    }
}

/// `2000000` as `2,000,000`.
fn thousands(number: usize) -> String {
    let digits = number.to_string();
    let mut grouped = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    grouped
}

#[cfg(test)]
mod tests {
    use super::closest;

    const KEYS: &[&str] = &[
        "id",
        "prompt",
        "depends_on",
        "retry_policy",
        "warm",
        "claude",
    ];

    #[test]
    fn a_slip_of_a_letter_or_two_is_suggested_and_a_stranger_is_not() {
        assert_eq!(closest("depend_on", KEYS), Some("depends_on"));
        assert_eq!(closest("wram", KEYS), Some("warm"));
        assert_eq!(closest("cladue", KEYS), Some("claude"));
        assert_eq!(closest("retry-policy", KEYS), Some("retry_policy"));
        assert_eq!(closest("zzz", KEYS), None);
        assert_eq!(closest("ix", KEYS), None, "too short to guess");
    }
}

//! Plans: the YAML file that says which tasks to run, with which agent, checked
//! by which gates, retried how, and within what budget.
//!
//! [`parse_plan`] takes the text and the file's name (the caller reads the
//! file) and validates the whole plan before it returns: YAML syntax, every key
//! and value, ids, dependencies, agents and budgets. Nothing runs on a plan with
//! any error, and the error names the file, line, column and key path. What
//! comes back is resolved: typed values, with defaults applied to every task and
//! money in micro-dollars, so the engine never looks at YAML again.

mod duration;
mod error;
mod graph;
mod model;
mod money;
mod network;
mod parse;
mod program;
mod reader;
#[cfg(test)]
mod tests;
mod yaml;

pub use duration::{DurationError, format_duration, parse_duration};
pub use error::{PlanError, PlanErrorKind};
pub use model::{
    AgentKind, AgentSettings, AgentStateDir, Containment, Criterion,
    DEFAULT_CHECKPOINT_MAX_FILE_BYTES, DEFAULT_GATE_TIMEOUT, DEFAULT_MAX_RETRIES,
    DEFAULT_TASK_TIMEOUT, Disclose, Endpoint, Gate, GateCheck, MAX_MAX_RETRIES, NeedsContext,
    Network, PLAN_VERSION, Plan, RetryPolicy, RollbackOnRetry, Sandbox, SimStep, Task, TaskAgent,
};
pub use money::{
    MAX_MICRO_USD, MICRO_USD_PER_USD, MoneyError, Spend, format_micro_usd, parse_micro_usd,
};
pub use parse::{accepted_keys, parse_plan};
pub use program::{ShellProgram, gate_script, shell_program};

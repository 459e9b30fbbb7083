//! Each task's agent adapter, built from the plan: one per agent CLI (and
//! one for the ACP agent) for the whole run, the plan's binary, model,
//! arguments and environment for it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use reprise_agents::{
    AcpAdapter, Adapter, ClaudeAdapter, CliOptions, CodexAdapter, CommandAdapter, GeminiAdapter,
    SimAdapter, SimStep,
};
use reprise_core::TaskId;
use reprise_core::plan::{AgentKind, Plan, Task, TaskAgent};
use reprise_store::state::StateDir;

/// One adapter per task; one per agent CLI for the whole run, so its
/// version cache asks each binary `--version` once however many tasks start
/// together.
pub(crate) fn adapters_of(
    order: &[&Task],
    plan: &Plan,
    state: &StateDir,
) -> BTreeMap<TaskId, Arc<dyn Adapter>> {
    let mut cli_adapters: BTreeMap<AgentKind, Arc<dyn Adapter>> = BTreeMap::new();
    order
        .iter()
        .map(|task| {
            let adapter = match &task.agent {
                TaskAgent::Claude | TaskAgent::Codex | TaskAgent::Gemini | TaskAgent::Acp => {
                    Arc::clone(
                        cli_adapters
                            .entry(task.agent.kind())
                            .or_insert_with(|| adapter_for(task, plan, state)),
                    )
                }
                TaskAgent::Command { .. } | TaskAgent::Sim { .. } => adapter_for(task, plan, state),
            };
            (task.id.clone(), adapter)
        })
        .collect()
}

/// The binary a plan names for an adapter (`agents: {claude: {bin: ...}}`);
/// otherwise the adapter looks at `REPRISE_<NAME>_BIN`, then PATH.
pub(crate) fn bin_for(plan: &Plan, kind: AgentKind) -> Option<PathBuf> {
    plan.agent_settings(kind)
        .and_then(|settings| settings.bin.clone())
        .map(PathBuf::from)
}

fn adapter_for(task: &Task, plan: &Plan, state: &StateDir) -> Arc<dyn Adapter> {
    match &task.agent {
        TaskAgent::Command { argv } => Arc::new(
            CommandAdapter::new(argv.clone()).with_env(agent_env(plan, AgentKind::Command)),
        ),
        TaskAgent::Sim { script } => {
            let steps = script
                .iter()
                .map(|step| SimStep {
                    reply: step.reply.clone(),
                    write: step
                        .write
                        .iter()
                        .map(|(path, text)| (path.clone(), text.clone()))
                        .collect(),
                    exit_code: i32::from(step.exit_code),
                    cost_micro_usd: step.cost_micro_usd,
                    delay: step.delay,
                })
                .collect();
            Arc::new(SimAdapter::new(steps, state.sim_store()))
        }
        TaskAgent::Claude => cli_adapter(AgentKind::Claude, plan).expect("claude is a CLI"),
        TaskAgent::Codex => cli_adapter(AgentKind::Codex, plan).expect("codex is a CLI"),
        TaskAgent::Gemini => cli_adapter(AgentKind::Gemini, plan).expect("gemini is a CLI"),
        TaskAgent::Acp => Arc::new(acp_adapter(plan)),
    }
}

/// The plan's Claude Code, Codex or Gemini CLI adapter, as a run drives it.
fn cli_adapter(kind: AgentKind, plan: &Plan) -> Option<Arc<dyn Adapter>> {
    let options = cli_options(plan, kind);
    Some(match kind {
        AgentKind::Claude => Arc::new(
            ClaudeAdapter::with_allowed_tools(
                plan.agent_settings(AgentKind::Claude)
                    .map(|settings| settings.allowed_tools.clone())
                    .unwrap_or_default(),
            )
            .with_options(options),
        ),
        AgentKind::Codex => Arc::new(CodexAdapter::new().with_options(options)),
        AgentKind::Gemini => Arc::new(GeminiAdapter::new().with_options(options)),
        _ => return None,
    })
}

/// Where each agent CLI the plan uses keeps its own state (its config home,
/// its session store), as a run makes it writable in the agent's sandbox
/// (the plan's `agents.<cli>.env` can move it): for `run --check` to hold
/// against what containment hides.
pub fn cli_state_dirs(plan: &Plan) -> Vec<(AgentKind, Vec<PathBuf>)> {
    let mut kinds: Vec<AgentKind> = plan.tasks().iter().map(|task| task.agent.kind()).collect();
    kinds.sort();
    kinds.dedup();
    kinds
        .into_iter()
        .filter_map(|kind| {
            let adapter = cli_adapter(kind, plan)?;
            Some((kind, adapter.state_paths(None, None).dirs))
        })
        .collect()
}

/// The plan's ACP agent as a run drives it: `agents.acp.command` then
/// `.args`, its environment, allowed tools and state directories. `run
/// --check` asks the same adapter what the run's would say.
pub fn acp_adapter(plan: &Plan) -> AcpAdapter {
    let settings = plan.agent_settings(AgentKind::Acp);
    AcpAdapter::new(settings.map(|s| s.command.clone()).unwrap_or_default())
        .with_args(settings.map(|s| s.args.clone()).unwrap_or_default())
        .with_env(agent_env(plan, AgentKind::Acp))
        .with_allowed_tools(
            settings
                .map(|s| s.allowed_tools.clone())
                .unwrap_or_default(),
        )
        .with_state_dirs(settings.and_then(|s| s.state_dirs.clone()))
}

/// The plan's `agents.<cli>.model`, `.args` and `.env` for an adapter.
pub(crate) fn cli_options(plan: &Plan, kind: AgentKind) -> CliOptions {
    plan.agent_settings(kind)
        .map(|settings| CliOptions {
            model: settings.model.clone(),
            args: settings.args.clone(),
            env: agent_env(plan, kind),
        })
        .unwrap_or_default()
}

/// The variables the plan gives one agent's process (never its gates):
/// what `agents.<kind>.pass_env` names, from reprise's environment, then
/// `agents.<kind>.env`, which wins.
fn agent_env(plan: &Plan, kind: AgentKind) -> Vec<(String, String)> {
    let Some(settings) = plan.agent_settings(kind) else {
        return Vec::new();
    };
    let mut env = reprise_agents::passed_env(&settings.pass_env);
    env.extend(
        settings
            .env
            .iter()
            .map(|(name, value)| (name.clone(), value.clone())),
    );
    env
}

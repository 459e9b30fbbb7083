//! `reprise run --check PLAN` and `reprise plan check PLAN`: everything a run
//! can find out before it spends anything, without running an agent. The
//! plan is validated; every task's agent binary is resolved as the adapter
//! will resolve it (and asked its version); every gate's program, and a
//! `command` agent's, is looked for where the shell will look. `reprise
//! run` makes the same checks (without the version probes) before it
//! writes anything, and refuses with exit 2 on a problem.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use reprise_agents::{
    AcpState, AcpStateSource, bin_env_var, clashing_arg, find_program, resolve_agent_binary,
};
use reprise_core::plan::{AgentKind, GateCheck, Plan, ShellProgram, TaskAgent, shell_program};
use reprise_engine::{load_plan, resolve_budget};
use serde_json::{Value, json};

use crate::error::CliError;
use crate::output::{Outcome, count};
use crate::settings::Settings;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum PlanCommand {
    /// Check a plan as `run --check` does: the plan, every task's agent
    /// binary (and version), each gate's command; nothing runs or is written.
    #[command(after_help = help!("\
  reprise plan check plan.yaml"))]
    Check(PlanCheckArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct PlanCheckArgs {
    /// The plan file (YAML).
    plan: PathBuf,
}

impl PlanCommand {
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        match self {
            Self::Check(args) => check(settings, &args.plan, None),
        }
    }
}

/// What the checks found: a line per thing checked, and the problems.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    pub(crate) lines: Vec<String>,
    pub(crate) problems: Vec<String>,
    pub(crate) json: Vec<Value>,
}

pub(crate) fn check(
    settings: &Settings,
    plan_path: &Path,
    retry_budget: Option<&str>,
) -> Result<Outcome, CliError> {
    let plan = load_plan(plan_path).map_err(|err| CliError::usage(err.to_string()))?;
    refuse_hidden_paths(settings, plan_path, &plan)?;
    resolve_budget(&plan, retry_budget).map_err(|err| CliError::usage(err.to_string()))?;
    let findings = inspect(settings, plan_path, &plan, true);
    if !findings.problems.is_empty() {
        return Err(problems_error(plan_path, &findings, "nothing was run"));
    }
    let mut text = format!(
        "plan {}: ok ({}, {})\n",
        plan_path.display(),
        count(plan.tasks().len() as u64, "task"),
        count(
            plan.tasks()
                .iter()
                .map(|task| task.gates.len() as u64)
                .sum::<u64>(),
            "gate"
        ),
    );
    for line in &findings.lines {
        let _ = writeln!(text, "  {line}");
    }
    let mut warnings = retry_cost_warnings(&plan);
    warnings.extend(acp_permission_warning(&plan));
    for warning in &warnings {
        let _ = writeln!(text, "  warning: {warning}");
    }
    text.push_str("check: ok; nothing was run or written\n");
    Ok(Outcome {
        exit: None,
        json: json!({"plan": plan_path, "ok": true, "checks": findings.json, "warnings": warnings}),
        text,
        ok: true,
    })
}

/// The session a retry is priced for in `run --check`: 40,000 tokens of
/// history, retried within the cache's lifetime.
const NOMINAL_HISTORY_TOKENS: u64 = 40_000;

/// A warning for each task whose fixed `retry_policy` is predicted to cost
/// more than another mode its agent could retry in (`reprise_core::retry_cost`).
fn retry_cost_warnings(plan: &Plan) -> Vec<String> {
    use reprise_agents::{Adapter, ClaudeAdapter, CodexAdapter, GeminiAdapter};
    use reprise_core::retry_cost::{CostInput, predict};
    let mut warnings = Vec::new();
    for task in plan.tasks() {
        let Some(policy) = task.retry_policy.fixed() else {
            continue;
        };
        let adapter: Box<dyn Adapter> = match task.agent {
            TaskAgent::Claude => Box::new(ClaudeAdapter::new()),
            TaskAgent::Codex => Box::new(CodexAdapter::new()),
            TaskAgent::Gemini => Box::new(GeminiAdapter::new()),
            _ => continue,
        };
        let input = CostInput {
            capability: adapter.strategy().capability(),
            cache: adapter.resume_cache(),
            history_tokens: Some(NOMINAL_HISTORY_TOKENS),
            since_last_request: std::time::Duration::ZERO,
            same_failure_in_a_row: 1,
        };
        let predicted = predict(&input, NOMINAL_HISTORY_TOKENS);
        let (Some(mine), Some(&(best, least))) = (predicted.of(policy), predicted.ranked().first())
        else {
            continue;
        };
        if least < mine {
            warnings.push(format!(
                "[{}] retry_policy {policy} on {} is predicted to cost {:.1}x a {best} retry (a 40k-token session retried within the prompt cache's lifetime); `retry_policy: auto` chooses by predicted cost at each retry",
                task.id,
                adapter.name(),
                mine as f64 / least as f64
            ));
        }
    }
    warnings
}

/// A warning when the plan has ACP tasks but names no tool their
/// permission requests may use: every request is then rejected, and an ACP
/// agent asks before each edit, so it can change no file.
fn acp_permission_warning(plan: &Plan) -> Option<String> {
    let tasks: Vec<&str> = plan
        .tasks()
        .iter()
        .filter(|task| matches!(task.agent, TaskAgent::Acp))
        .map(|task| task.id.as_str())
        .collect();
    let allowed = plan
        .agent_settings(AgentKind::Acp)
        .is_some_and(|settings| !settings.allowed_tools.is_empty());
    if tasks.is_empty() || allowed {
        return None;
    }
    Some(format!(
        "[{}] agents.acp.allowed_tools is empty: every permission request of the ACP agent is rejected, so it cannot edit a file or run a command; allow what the task needs, e.g. agents: {{acp: {{allowed_tools: [edit]}}}}",
        tasks.join(", ")
    ))
}

/// The one-line refusal for what `inspect` found.
pub(crate) fn problems_error(plan_path: &Path, findings: &Findings, what: &str) -> CliError {
    CliError::usage(format!(
        "{}: {} before anything ran ({what}): {}",
        plan_path.display(),
        match findings.problems.len() {
            1 => "1 problem".to_owned(),
            n => format!("{n} problems"),
        },
        findings.problems.join("; ")
    ))
}

/// The check `reprise run` makes before it writes anything.
pub(crate) fn before_run(
    settings: &Settings,
    plan_path: &Path,
    plan: &Plan,
) -> Result<(), CliError> {
    let findings = inspect(settings, plan_path, plan, false);
    if findings.problems.is_empty() {
        Ok(())
    } else {
        Err(problems_error(plan_path, &findings, "nothing was written"))
    }
}

/// Refuses a plan whose absolute `allowed_paths` entry would open to an
/// agent what containment hides: an entry that is, holds or lies inside
/// the state directory or the audit key's directory, compared as real
/// paths (symlinks followed as far as the path exists). `/`, the home
/// holding the key and the project holding `.reprise` are all refused.
/// The sandbox checks again, as each grant opens, for a link made since.
pub(crate) fn refuse_hidden_paths(
    settings: &Settings,
    plan_path: &Path,
    plan: &Plan,
) -> Result<(), CliError> {
    let mut hidden = vec![("the state directory", state_root(settings))];
    if let Ok(key) = &settings.key_path
        && let Some(dir) = key.parent()
    {
        hidden.push(("the audit key's directory", dir.to_path_buf()));
    }
    let hidden: Vec<(&str, PathBuf, PathBuf)> = hidden
        .into_iter()
        .map(|(what, path)| (what, real_path(&path), path))
        .collect();
    let mut problems = Vec::new();
    for (task_index, task) in plan.tasks().iter().enumerate() {
        for (index, entry) in task.allowed_paths.iter().enumerate() {
            let path = Path::new(entry);
            if !path.is_absolute() {
                continue; // a glob inside the worktree
            }
            if let Some(reach) = reaches_hidden(path, &hidden) {
                problems.push(format!(
                    "tasks[{task_index}].allowed_paths[{index}]: {entry}{reach}, which no agent or gate may reach; take it out, or name only the directory the task must write"
                ));
            }
        }
    }
    // The ACP agent's own state is made writable as its allowed paths are.
    if let Some(state) = acp_state(plan) {
        let key = match state.source {
            AcpStateSource::Inferred { program } => {
                format!("agents.acp.state_dirs (inferred for {program})")
            }
            AcpStateSource::Plan | AcpStateSource::Unknown => "agents.acp.state_dirs".to_owned(),
        };
        for dir in &state.dirs {
            if let Some(reach) = reaches_hidden(dir, &hidden) {
                problems.push(format!(
                    "{key}: {}{reach}, which no agent or gate may reach; name only the directory the agent keeps its sessions in",
                    dir.display()
                ));
            }
        }
    }
    // So is each agent CLI's own state (its config home), which the plan's
    // env can move.
    for (kind, dirs) in reprise_engine::cli_state_dirs(plan) {
        for dir in dirs {
            if let Some(reach) = reaches_hidden(&dir, &hidden) {
                problems.push(format!(
                    "agents.{kind}: its own state {}{reach}, which no agent or gate may reach; point its config home (agents.{kind}.env) elsewhere",
                    dir.display(),
                    kind = kind.as_str()
                ));
            }
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(CliError::usage(format!(
        "{}: {}; nothing was run",
        plan_path.display(),
        problems.join("; ")
    )))
}

/// How `path` reaches one of `hidden` (what, real path, path as given):
/// ` (it leads to REAL) is|holds|lies inside WHAT GIVEN`, or `None`.
fn reaches_hidden(path: &Path, hidden: &[(&str, PathBuf, PathBuf)]) -> Option<String> {
    let real = real_path(path);
    hidden.iter().find_map(|(what, secret, given)| {
        let relation = if real == *secret {
            "is"
        } else if secret.starts_with(&real) {
            "holds"
        } else if real.starts_with(secret) {
            "lies inside"
        } else {
            return None;
        };
        let through = if real.as_path() == path {
            String::new()
        } else {
            format!(" (it leads to {})", real.display())
        };
        Some(format!("{through} {relation} {what} {}", given.display()))
    })
}

/// Where the plan's ACP agent may write its own state, `~/` as reprise's
/// `HOME` (or the plan's `agents.acp.env` one), as the run's adapter will
/// say; `None` when no task's agent is `acp`.
fn acp_state(plan: &Plan) -> Option<AcpState> {
    if !plan.tasks().iter().any(|task| task.agent == TaskAgent::Acp) {
        return None;
    }
    Some(reprise_engine::acp_adapter(plan).own_state(None))
}

/// The line `run --check` shows of the ACP agent's own state.
fn acp_state_line(state: &AcpState) -> String {
    let dirs = state
        .dirs
        .iter()
        .map(|dir| dir.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    match state.source {
        AcpStateSource::Plan if state.dirs.is_empty() => {
            "none (agents.acp.state_dirs is empty, or HOME is unset for its ~/ entries)".to_owned()
        }
        AcpStateSource::Plan => format!("{dirs} (agents.acp.state_dirs)"),
        AcpStateSource::Inferred { program } => {
            format!("{dirs} (inferred for {program}; agents.acp.state_dirs to change)")
        }
        AcpStateSource::Unknown => "none known (set agents.acp.state_dirs to where the agent saves its sessions, or a contained agent's warm retries go cold)".to_owned(),
    }
}

/// The state directory a run would use: the one given, else the nearest
/// `.reprise` up from here, else the one it would create here.
fn state_root(settings: &Settings) -> PathBuf {
    settings
        .state_dir
        .clone()
        .or_else(|| {
            settings
                .cwd
                .ancestors()
                .map(|dir| dir.join(reprise_store::state::STATE_DIR_NAME))
                .find(|candidate| candidate.is_dir())
        })
        .unwrap_or_else(|| settings.init_target())
}

/// `path` with its longest existing ancestor resolved to its real path and
/// the rest appended (`.` dropped, `..` taken lexically): what a grant of
/// it would open, or would open once it exists.
fn real_path(path: &Path) -> PathBuf {
    let mut existing = path;
    let mut rest = Vec::new();
    let base = loop {
        if let Ok(real) = existing.canonicalize() {
            break real;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => break existing.to_path_buf(),
        }
    };
    let mut real = base;
    for name in rest.iter().rev() {
        if name == ".." {
            real.pop();
        } else if name != "." {
            real.push(name);
        }
    }
    real
}

/// Where tasks' programs are looked for: the project (a worktree holds its
/// committed files).
fn project_dir(settings: &Settings) -> PathBuf {
    settings
        .state_dir
        .as_deref()
        .and_then(Path::parent)
        .map_or_else(|| settings.cwd.clone(), Path::to_path_buf)
}

/// Checks every agent binary, agent setting and gate program of `plan`
/// (read from `plan_path`); `probe` also asks each agent binary its version.
/// Each agent argument of the plan that sets a flag reprise controls, as a
/// problem located in the plan file.
fn clashing_args(plan_path: &Path, plan: &Plan, findings: &mut Findings) {
    for kind in [AgentKind::Claude, AgentKind::Codex, AgentKind::Gemini] {
        if let Some(agent) = plan.agent_settings(kind)
            && let Some((arg, flag)) = clashing_arg(kind.as_str(), &agent.args)
        {
            // The argument itself, not the first one spelled the same.
            let index = agent
                .args
                .iter()
                .position(|given| std::ptr::eq(given.as_str(), arg))
                .unwrap_or_default();
            let place = match agent.args_at.get(index) {
                Some(&(line, column)) if line > 0 && column > 0 => {
                    format!("{}:{line}:{column}: ", plan_path.display())
                }
                Some(&(line, _)) if line > 0 => format!("{}:{line}: ", plan_path.display()),
                _ => String::new(),
            };
            findings.problems.push(format!(
                "{place}agents.{kind}.args[{index}]: {arg:?} sets {flag}, which reprise controls for {kind}; remove it{}",
                if flag.contains("model") {
                    format!(" (set agents.{kind}.model instead)")
                } else {
                    String::new()
                }
            ));
        }
    }
}

/// Where `kind`'s binary is (and its version, when `probe`), or why it
/// cannot be found: found once per agent CLI and kept in `probed`.
fn agent_binary(
    settings: &Settings,
    plan: &Plan,
    kind: AgentKind,
    (project, path_var): (&Path, Option<&OsStr>),
    probe: bool,
    probed: &mut Vec<(AgentKind, Result<String, String>)>,
) -> Result<String, String> {
    match probed.iter().find(|(seen, _)| *seen == kind) {
        Some((_, resolved)) => resolved.clone(),
        None => {
            let cli = kind.as_str();
            let bin = plan
                .agent_settings(kind)
                .and_then(|agent| agent.bin.as_deref())
                .map(Path::new);
            let env_value = bin_env_var(cli)
                .and_then(|name| settings.agent_bins.get(name))
                .map(Into::into);
            let resolved =
                resolve_agent_binary(cli, bin, env_value, project, path_var, probe).map(|found| {
                    // `dir/./bin` reads as `dir/bin`.
                    let program: PathBuf = found.program.components().collect();
                    match found.version {
                        Some(version) => {
                            format!("{} ({version})", program.display())
                        }
                        None => program.display().to_string(),
                    }
                });
            probed.push((kind, resolved.clone()));
            resolved
        }
    }
}

pub(crate) fn inspect(settings: &Settings, plan_path: &Path, plan: &Plan, probe: bool) -> Findings {
    let mut findings = Findings::default();
    let project = project_dir(settings);
    let path_var = settings.path_var.as_deref().map(OsStr::new);
    clashing_args(plan_path, plan, &mut findings);
    let mut probed: Vec<(AgentKind, Result<String, String>)> = Vec::new();
    let mut acp_probed: Option<Result<String, String>> = None;
    for task in plan.tasks() {
        let id = task.id.as_str();
        let kind = task.agent.kind();
        match &task.agent {
            TaskAgent::Claude | TaskAgent::Codex | TaskAgent::Gemini => {
                let resolved = agent_binary(
                    settings,
                    plan,
                    kind,
                    (&project, path_var),
                    probe,
                    &mut probed,
                );
                match resolved {
                    Ok(found) => {
                        findings.lines.push(format!("[{id}] agent {kind}: {found}"));
                        findings
                            .json
                            .push(json!({"task": id, "agent": kind.as_str(), "found": found}));
                    }
                    Err(problem) => findings.problems.push(format!("task {id}: {problem}")),
                }
            }
            TaskAgent::Command { argv } => {
                let (program, through_shell) = match argv.as_slice() {
                    [sh, flag, line] if sh == "sh" && flag == "-c" => (shell_program(line), true),
                    [program, ..] if program.contains('/') => (ShellProgram::Path(program), false),
                    [program, ..] => (ShellProgram::Name(program), false),
                    [] => (ShellProgram::Undecided, false),
                };
                let what = if through_shell {
                    "its command (through sh -c)"
                } else {
                    "its command"
                };
                look_for(
                    &mut findings,
                    id,
                    &format!("agent command: {what}"),
                    program,
                    &project,
                    path_var,
                    "fix the task's command:",
                );
            }
            TaskAgent::Sim { .. } => {
                findings.lines.push(format!("[{id}] agent sim: built in"));
            }
            TaskAgent::Acp => {
                let found = acp_agent(plan, (&project, path_var), probe, &mut acp_probed);
                let state = acp_state(plan);
                match found {
                    Ok(found) => {
                        findings.lines.push(format!("[{id}] agent acp: {found}"));
                        let state_dirs: Vec<String> = state
                            .iter()
                            .flat_map(|state| &state.dirs)
                            .map(|dir| dir.display().to_string())
                            .collect();
                        findings.json.push(json!({
                            "task": id,
                            "agent": "acp",
                            "found": found,
                            "state_dirs": state_dirs,
                        }));
                    }
                    Err(problem) => findings.problems.push(format!("task {id}: {problem}")),
                }
                if let Some(state) = &state {
                    findings
                        .lines
                        .push(format!("[{id}] agent acp state: {}", acp_state_line(state)));
                }
            }
        }
        network_lines(&mut findings, task);
        for gate in &task.gates {
            if let GateCheck::Run { command, .. } = &gate.check {
                look_for(
                    &mut findings,
                    id,
                    &format!("gate {}", gate.name),
                    shell_program(command),
                    &project,
                    path_var,
                    "install it, or fix the gate's run:",
                );
            }
        }
    }
    findings
}

/// What the task's agent, and each gate that may reach more than nothing,
/// may connect to (the plan's `network:`).
fn network_lines(findings: &mut Findings, task: &reprise_core::plan::Task) {
    let id = task.id.as_str();
    let said = |network: &reprise_core::plan::Network| match network {
        reprise_core::plan::Network::Allow { model: true, .. } => {
            format!("{network} (model: its provider's API, or the base URL its CLI is given)")
        }
        _ => network.to_string(),
    };
    if task.containment.confines() {
        findings
            .lines
            .push(format!("[{id}] network: {}", said(&task.network)));
    } else {
        findings
            .lines
            .push(format!("[{id}] network: all (containment: off)"));
    }
    let gates: Vec<Value> = task
        .gates
        .iter()
        .filter(|gate| matches!(gate.check, GateCheck::Run { .. }) && !gate.network.is_none())
        .map(|gate| {
            findings.lines.push(format!(
                "[{id}] gate {} network: {}",
                gate.name,
                said(&gate.network)
            ));
            json!({"gate": gate.name, "network": gate.network.to_string()})
        })
        .collect();
    findings.json.push(json!({
        "task": id,
        "network": task.network.to_string(),
        "gates_network": gates,
    }));
}

/// Where the ACP agent's program is and, when `probe`, what it declares
/// at `initialize` (its name and version, and the retry capability that
/// follows), asked once: the agent is started in the project, uncontained
/// as a version probe is, and ended after its handshake.
fn acp_agent(
    plan: &Plan,
    (project, path_var): (&Path, Option<&OsStr>),
    probe: bool,
    probed: &mut Option<Result<String, String>>,
) -> Result<String, String> {
    if let Some(found) = probed {
        return found.clone();
    }
    let settings = plan.agent_settings(AgentKind::Acp);
    let command = settings.map(|s| s.command.clone()).unwrap_or_default();
    let found = match command.first() {
        None => {
            Err("agent acp has no command; set agents.acp.command, e.g. [gemini, --acp]".to_owned())
        }
        Some(name) => match find_program(name, project, path_var) {
            None => Err(format!(
                "agents.acp.command runs `{name}`, which is not an executable file or not on PATH; install it, or fix agents.acp.command"
            )),
            Some(program) if !probe => Ok(program.display().to_string()),
            Some(program) => Ok(acp_handshake(settings, project, path_var).map_or_else(
                |problem| format!("{} (no handshake: {problem})", program.display()),
                |said| format!("{} ({said})", program.display()),
            )),
        },
    };
    *probed = Some(found.clone());
    found
}

/// What the plan's ACP agent says at `initialize`, in a line.
fn acp_handshake(
    settings: Option<&reprise_core::plan::AgentSettings>,
    project: &Path,
    path_var: Option<&OsStr>,
) -> Result<String, String> {
    use reprise_agents::{AcpAdapter, AttemptRequest, CancelToken, SessionMode};
    let settings = settings.cloned().unwrap_or_default();
    let mut env: Vec<(String, String)> = path_var
        .map(|path| ("PATH".to_owned(), path.to_string_lossy().into_owned()))
        .into_iter()
        .collect();
    env.extend(reprise_agents::passed_env(&settings.pass_env));
    env.extend(settings.env.clone());
    let adapter = AcpAdapter::new(settings.command.clone()).with_args(settings.args);
    let request = AttemptRequest {
        task_id: reprise_core::TaskId::parse("check").map_err(|err| err.to_string())?,
        attempt: 1,
        prompt: String::new(),
        session: SessionMode::New { session_id: None },
        cwd: project.to_path_buf(),
        timeout: std::time::Duration::from_secs(30),
        env,
        bin: None,
        config_home: None,
        budget_micro_usd: None,
        supervision: None,
        watch: reprise_agents::Watch::default(),
        model: None,
    };
    let said = adapter.handshake(&request, &CancelToken::new())?;
    Ok(match &said.agent {
        Some(agent) => format!("{agent}; {}", said.describe()),
        None => said.describe(),
    })
}

/// Looks for the program `what` starts and records what was found.
fn look_for(
    findings: &mut Findings,
    task: &str,
    what: &str,
    program: ShellProgram<'_>,
    project: &Path,
    path_var: Option<&OsStr>,
    fix: &str,
) {
    match program {
        ShellProgram::Undecided => findings.lines.push(format!(
            "[{task}] {what}: not checked (the shell resolves it at run time)"
        )),
        ShellProgram::Name(name) => match find_program(name, project, path_var) {
            Some(found) => findings
                .lines
                .push(format!("[{task}] {what}: {name} is {}", found.display())),
            None => findings.problems.push(format!(
                "task {task}: {what} runs `{name}`, which is not on PATH; {fix}"
            )),
        },
        ShellProgram::Path(path) => match find_program(path, project, path_var) {
            Some(found) => findings
                .lines
                .push(format!("[{task}] {what}: {}", found.display())),
            None if Path::new(path).is_absolute() => findings.problems.push(format!(
                "task {task}: {what} runs `{path}`, which is not an executable file; {fix}"
            )),
            // A relative path the agent may yet create: not a problem.
            None => findings.lines.push(format!(
                "[{task}] {what}: {path} is not in the project yet (not checked: the agent may create it)"
            )),
        },
    }
}

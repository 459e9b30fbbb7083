//! Reading a plan: YAML text to a validated [`Plan`], key by key.
//!
//! The reader walks the node tree once, checking keys and values as it goes
//! (in a fixed order: the version first, then each mapping's keys, then its
//! values), then checks what needs the whole plan: that dependencies name
//! tasks of the plan and form no cycle. The first problem found is returned,
//! located at the key or value that has it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use regex::Regex;

use crate::{PlanId, TaskId};

use super::error::{PlanError, PlanErrorKind};
use super::graph::find_cycle;
use super::model::{
    AgentKind, AgentSettings, AgentStateDir, Containment, Criterion,
    DEFAULT_CHECKPOINT_MAX_FILE_BYTES, DEFAULT_GATE_TIMEOUT, DEFAULT_MAX_RETRIES,
    DEFAULT_TASK_TIMEOUT, Disclose, Endpoint, Gate, GateCheck, MAX_MAX_RETRIES, NeedsContext,
    Network, PLAN_VERSION, Plan, RetryPolicy, RollbackOnRetry, Sandbox, SimStep, Task, TaskAgent,
};

/// The largest integer a record can hold (2^53 - 1).
const MAX_SAFE_U64: u64 = (1 << 53) - 1;
use super::reader::{Fields, Reader, Result, item_path};
use super::yaml::{self, Entry, Kind, Mark, Node};

const ROOT_KEYS: &[&str] = &[
    "version",
    "name",
    "seats",
    "budget_usd",
    "retry_budget",
    "agents",
    "defaults",
    "tasks",
];
/// `sim` takes only a binary, which it ignores: it is built in.
const AGENT_SETTINGS_KEYS: &[&str] = &["bin"];
/// `command` takes a binary (ignored: its argv names the program) and
/// environment.
const COMMAND_SETTINGS_KEYS: &[&str] = &["bin", "env", "pass_env", "network"];
/// The agent CLIs take a model, extra arguments and environment.
const CLI_SETTINGS_KEYS: &[&str] = &["bin", "model", "args", "env", "pass_env", "network"];
/// Claude Code also takes the tools it may use without asking.
const CLAUDE_SETTINGS_KEYS: &[&str] = &[
    "bin",
    "model",
    "args",
    "env",
    "pass_env",
    "allowed_tools",
    "network",
];
/// An ACP agent takes its argv, extra arguments, environment, the tools
/// whose permission requests are allowed, and where it keeps its own state.
const ACP_SETTINGS_KEYS: &[&str] = &[
    "command",
    "args",
    "env",
    "pass_env",
    "allowed_tools",
    "state_dirs",
    "network",
];
const DEFAULTS_KEYS: &[&str] = &[
    "agent",
    "retry_policy",
    "max_retries",
    "timeout",
    "agent_restart_between_retries",
    "budget_usd",
    "sandbox",
    "read_only",
    "checkpoint_max_file_bytes",
    "rollback_on_retry",
    "containment",
    "max_output_bytes",
    "idle_timeout",
    "park_when_idle",
    "pause_upgrade_after",
    "pass_env",
    "writable_shm",
    "network",
];
const TASK_KEYS: &[&str] = &[
    "id",
    "prompt",
    "agent",
    "retry_policy",
    "max_retries",
    "timeout",
    "agent_restart_between_retries",
    "budget_usd",
    "sandbox",
    "read_only",
    "checkpoint_max_file_bytes",
    "rollback_on_retry",
    "accept_partial",
    "containment",
    "max_output_bytes",
    "idle_timeout",
    "park_when_idle",
    "pause_upgrade_after",
    "pass_env",
    "writable_shm",
    "network",
    "on_needs_context",
    "allowed_paths",
    "depends_on",
    "command",
    "sim",
    "gates",
];
const NEEDS_CONTEXT_KEYS: &[&str] = &["timeout", "prompt", "model"];
const SIM_STEP_KEYS: &[&str] = &["reply", "write", "exit_code", "cost_usd", "delay"];
const GATE_KEYS: &[&str] = &[
    "name",
    "run",
    "result_matches",
    "disclose",
    "timeout",
    "criterion",
    "levels",
    "weight",
    "protect",
    "network",
];

// Names and values in the same order; a test checks them against `as_str`.
const AGENT_NAMES: &[&str] = &["claude", "codex", "gemini", "command", "sim", "acp"];
const RETRY_POLICY_NAMES: &[&str] = &["warm", "fork", "cold", "auto"];
const RETRY_POLICIES: [RetryPolicy; 4] = [
    RetryPolicy::Warm,
    RetryPolicy::Fork,
    RetryPolicy::Cold,
    RetryPolicy::Auto,
];
const SANDBOX_NAMES: &[&str] = &["worktree", "none"];
const SANDBOXES: [Sandbox; 2] = [Sandbox::Worktree, Sandbox::None];
const ROLLBACK_NAMES: &[&str] = &["auto", "always", "never"];
const ROLLBACKS: [RollbackOnRetry; 3] = [
    RollbackOnRetry::Auto,
    RollbackOnRetry::Always,
    RollbackOnRetry::Never,
];
const CONTAINMENT_NAMES: &[&str] = &["strict", "off", "required"];
const CONTAINMENTS: [Containment; 3] =
    [Containment::Strict, Containment::Off, Containment::Required];
const DISCLOSE_NAMES: &[&str] = &["output", "verdict"];
const DISCLOSES: [Disclose; 2] = [Disclose::Output, Disclose::Verdict];

/// Reads and validates a whole plan; `file` is only used to name the plan in errors.
///
/// Nothing is returned unless every check passes, so a caller that gets a
/// [`Plan`] may run it.
pub fn parse_plan(text: &str, file: &str) -> Result<Plan, PlanError> {
    let root = yaml::load(text).map_err(|error| match error {
        yaml::LoadError::Syntax { mark, message } => {
            PlanError::new(file, &mark, "", PlanErrorKind::Syntax { message })
        }
        yaml::LoadError::TooLarge { mark } => PlanError::new(
            file,
            &mark,
            "",
            PlanErrorKind::TooLarge {
                max_nodes: yaml::MAX_PLAN_NODES,
            },
        ),
    })?;
    Reader { text, file }.plan(&root)
}

/// The task settings `defaults` may give and a task may override; `None` is unset.
#[derive(Default)]
struct Settings {
    agent: Option<AgentKind>,
    retry_policy: Option<RetryPolicy>,
    max_retries: Option<u32>,
    timeout: Option<Duration>,
    agent_restart_between_retries: Option<bool>,
    budget_micro_usd: Option<u64>,
    sandbox: Option<Sandbox>,
    read_only: Option<bool>,
    checkpoint_max_file_bytes: Option<u64>,
    rollback_on_retry: Option<RollbackOnRetry>,
    containment: Option<Containment>,
    max_output_bytes: Option<u64>,
    idle_timeout: Option<Duration>,
    park_when_idle: Option<Duration>,
    pause_upgrade_after: Option<Duration>,
    pass_env: Option<Vec<String>>,
    writable_shm: Option<bool>,
    network: Option<Network>,
}

impl Settings {
    /// These settings, each one left unset taken from `defaults`.
    fn or(self, defaults: &Settings) -> Settings {
        Settings {
            agent: self.agent.or(defaults.agent),
            retry_policy: self.retry_policy.or(defaults.retry_policy),
            max_retries: self.max_retries.or(defaults.max_retries),
            timeout: self.timeout.or(defaults.timeout),
            agent_restart_between_retries: self
                .agent_restart_between_retries
                .or(defaults.agent_restart_between_retries),
            budget_micro_usd: self.budget_micro_usd.or(defaults.budget_micro_usd),
            sandbox: self.sandbox.or(defaults.sandbox),
            read_only: self.read_only.or(defaults.read_only),
            checkpoint_max_file_bytes: self
                .checkpoint_max_file_bytes
                .or(defaults.checkpoint_max_file_bytes),
            rollback_on_retry: self.rollback_on_retry.or(defaults.rollback_on_retry),
            containment: self.containment.or(defaults.containment),
            max_output_bytes: self.max_output_bytes.or(defaults.max_output_bytes),
            idle_timeout: self.idle_timeout.or(defaults.idle_timeout),
            park_when_idle: self.park_when_idle.or(defaults.park_when_idle),
            pause_upgrade_after: self.pause_upgrade_after.or(defaults.pause_upgrade_after),
            pass_env: self.pass_env.or_else(|| defaults.pass_env.clone()),
            writable_shm: self.writable_shm.or(defaults.writable_shm),
            network: self.network.or_else(|| defaults.network.clone()),
        }
    }
}

/// A `depends_on` entry, kept with its position until every id is known.
struct Dependency {
    id: TaskId,
    mark: Mark,
    path: String,
}

impl Reader<'_> {
    fn plan(&self, root: &Node) -> Result<Plan> {
        let entries = match &root.kind {
            Kind::Map(entries) => entries,
            Kind::Null => return Err(self.error(&root.mark, "", PlanErrorKind::EmptyDocument)),
            _ => return Err(self.wrong_type(root, "", "a mapping of plan keys")),
        };
        // The version says how to read everything else, so it goes first: a
        // newer plan's new keys must not be reported as unknown.
        self.version(root, entries)?;
        let fields = self.fields(root, "", ROOT_KEYS)?;
        let name_node = self.required(&fields, "name", "add name: with the plan's name")?;
        let name = self.non_empty_string(name_node, "name")?;
        // The name is the plan's directory in the state directory: refused,
        // never sanitised, so two plans never share one.
        let name = PlanId::parse(&name).map_err(|_| {
            self.error(
                &name_node.mark,
                "name",
                PlanErrorKind::InvalidPlanName { name: name.clone() },
            )
        })?;
        let seats = match fields.get("seats") {
            Some(node) => self.integer(node, "seats", 1, u32::MAX)?,
            None => 1,
        };
        let budget_micro_usd = match fields.get("budget_usd") {
            Some(node) => Some(self.money(node, "budget_usd")?),
            None => None,
        };
        let retry_budget = match fields.get("retry_budget") {
            Some(node) => Some(self.non_empty_string(node, "retry_budget")?),
            None => None,
        };
        let agents = match fields.get("agents") {
            Some(node) => self.agents(node, "agents")?,
            None => BTreeMap::new(),
        };
        let defaults = match fields.get("defaults") {
            Some(node) => {
                let defaults = self.fields(node, "defaults", DEFAULTS_KEYS)?;
                self.settings(&defaults, budget_micro_usd)?
            }
            None => Settings::default(),
        };
        let tasks_node = self.required(&fields, "tasks", "add tasks: with at least one task")?;
        let tasks = self.tasks(tasks_node, &defaults, budget_micro_usd, &agents)?;
        self.acp_tasks_have_a_command(tasks_node, &tasks, &agents)?;
        Ok(Plan {
            name,
            seats,
            budget_micro_usd,
            retry_budget,
            agents,
            tasks,
        })
    }

    fn version(&self, root: &Node, entries: &[Entry]) -> Result<()> {
        let Some(entry) = entries.iter().find(|entry| entry.key == "version") else {
            return Err(self.error(
                &root.mark,
                "version",
                PlanErrorKind::MissingKey {
                    hint: "add \"version: 1\" at the top of the plan",
                },
            ));
        };
        let node = &entry.value;
        let supported = i128::from(PLAN_VERSION);
        match node.kind {
            Kind::Int(found) if found == supported => Ok(()),
            Kind::Int(found) if found > supported => Err(self.error(
                &node.mark,
                "version",
                PlanErrorKind::NewerVersion {
                    found: u64::try_from(found).unwrap_or(u64::MAX),
                },
            )),
            Kind::Int(found) => Err(self.error(
                &node.mark,
                "version",
                PlanErrorKind::UnsupportedVersion {
                    found: found.to_string(),
                },
            )),
            _ => Err(self.wrong_type(node, "version", "the integer 1")),
        }
    }

    fn agents(&self, node: &Node, path: &str) -> Result<BTreeMap<AgentKind, AgentSettings>> {
        let fields = self.fields(node, path, AGENT_NAMES)?;
        let mut agents = BTreeMap::new();
        for entry in fields.entries {
            let Some(index) = AGENT_NAMES.iter().position(|name| *name == entry.key) else {
                continue; // fields() refused unknown keys already.
            };
            let agent_path = fields.path_of(&entry.key);
            let kind = AgentKind::ALL[index];
            let keys = agent_settings_keys(kind);
            let settings = self.fields(&entry.value, &agent_path, keys)?;
            let bin = match settings.get("bin") {
                Some(bin) => Some(self.non_empty_string(bin, &settings.path_of("bin"))?),
                None => None,
            };
            let allowed_tools = match settings.get("allowed_tools") {
                Some(node) => {
                    let list_path = settings.path_of("allowed_tools");
                    self.seq(node, &list_path, "a list of tool names")?
                        .iter()
                        .enumerate()
                        .map(|(index, item)| {
                            self.non_empty_string(item, &item_path(&list_path, index))
                        })
                        .collect::<Result<_>>()?
                }
                None => Vec::new(),
            };
            let model = match settings.get("model") {
                Some(node) => Some(self.non_empty_string(node, &settings.path_of("model"))?),
                None => None,
            };
            let (args, args_at) = match settings.get("args") {
                Some(node) => {
                    let list_path = settings.path_of("args");
                    let items = self.seq(node, &list_path, "a list of arguments")?;
                    let args = items
                        .iter()
                        .enumerate()
                        .map(|(index, item)| self.string(item, &item_path(&list_path, index)))
                        .collect::<Result<_>>()?;
                    let at = items
                        .iter()
                        .map(|item| (item.mark.line, item.mark.column))
                        .collect();
                    (args, at)
                }
                None => (Vec::new(), Vec::new()),
            };
            let env = match settings.get("env") {
                Some(node) => self.agent_env(node, &settings.path_of("env"))?,
                None => BTreeMap::new(),
            };
            let pass_env = match settings.get("pass_env") {
                Some(node) => self.pass_env(node, &settings.path_of("pass_env"))?,
                None => Vec::new(),
            };
            let command = match settings.get("command") {
                Some(node) => self.acp_command(node, &settings.path_of("command"))?,
                None => Vec::new(),
            };
            let state_dirs = match settings.get("state_dirs") {
                Some(node) => Some(self.state_dirs(node, &settings.path_of("state_dirs"))?),
                None => None,
            };
            let network = match settings.get("network") {
                Some(node) => Some(self.network(node, &settings.path_of("network"))?),
                None => None,
            };
            agents.insert(
                kind,
                AgentSettings {
                    bin,
                    allowed_tools,
                    model,
                    args,
                    args_at,
                    env,
                    pass_env,
                    command,
                    state_dirs,
                    network,
                },
            );
        }
        Ok(agents)
    }

    /// `agents.acp.command`: the agent's program and arguments, a list
    /// (no shell: an ACP agent talks on the program's own stdio).
    fn acp_command(&self, node: &Node, path: &str) -> Result<Vec<String>> {
        let items = self.seq(
            node,
            path,
            "a list of strings (the agent's program, then its arguments, e.g. [gemini, --acp])",
        )?;
        let Some(program) = items.first() else {
            return Err(self.error(&node.mark, path, PlanErrorKind::AcpCommandMissing));
        };
        self.non_empty_string(program, &item_path(path, 0))?;
        items
            .iter()
            .enumerate()
            .map(|(index, item)| self.string(item, &item_path(path, index)))
            .collect()
    }

    /// `agents.acp.state_dirs`: directories under the agent's home (`~/...`)
    /// or absolute. A relative one is refused: it would be relative to
    /// whichever worktree the agent runs in, which is writable already.
    fn state_dirs(&self, node: &Node, path: &str) -> Result<Vec<AgentStateDir>> {
        let items = self.seq(
            node,
            path,
            "a list of directories (~/.agent under the agent's home, or absolute)",
        )?;
        let mut dirs = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let entry_path = item_path(path, index);
            let entry = self.non_empty_string(item, &entry_path)?;
            let dir = match entry.strip_prefix("~/") {
                Some(rest) if !rest.trim_matches('/').is_empty() => {
                    AgentStateDir::InHome(PathBuf::from(rest))
                }
                Some(_) => {
                    return Err(self.error(
                        &item.mark,
                        &entry_path,
                        PlanErrorKind::StateDirIsHome { entry },
                    ));
                }
                None if entry.starts_with('/') => AgentStateDir::Absolute(PathBuf::from(entry)),
                None => {
                    return Err(self.error(
                        &item.mark,
                        &entry_path,
                        PlanErrorKind::RelativeStateDir { entry },
                    ));
                }
            };
            dirs.push(dir);
        }
        Ok(dirs)
    }

    /// Every task whose agent is `acp` needs `agents.acp.command`: the
    /// first one without is refused at its `agent` (or its item).
    fn acp_tasks_have_a_command(
        &self,
        tasks_node: &Node,
        tasks: &[Task],
        agents: &BTreeMap<AgentKind, AgentSettings>,
    ) -> Result<()> {
        let has_command = agents
            .get(&AgentKind::Acp)
            .is_some_and(|settings| !settings.command.is_empty());
        if has_command {
            return Ok(());
        }
        let Some(index) = tasks.iter().position(|task| task.agent == TaskAgent::Acp) else {
            return Ok(());
        };
        let items = self.seq(tasks_node, "tasks", "a list of tasks")?;
        let item = &items[index];
        let mark = match &item.kind {
            Kind::Map(entries) => entries
                .iter()
                .find(|entry| entry.key == "agent")
                .map_or(&item.mark, |entry| &entry.value.mark),
            _ => &item.mark,
        };
        Err(self.error(
            mark,
            &format!("{}.agent", item_path("tasks", index)),
            PlanErrorKind::AcpCommandMissing,
        ))
    }

    /// `env:`, a mapping of variable names to string values. reprise's own
    /// `REPRISE_*` names are refused: the child gets those from reprise.
    fn agent_env(&self, node: &Node, path: &str) -> Result<BTreeMap<String, String>> {
        let Kind::Map(entries) = &node.kind else {
            return Err(self.wrong_type(node, path, "a mapping of variable name to value"));
        };
        let mut env = BTreeMap::new();
        for entry in entries {
            let entry_path = format!("{path}.{}", entry.key);
            if !is_env_name(&entry.key) || entry.key.starts_with("REPRISE_") {
                return Err(self.error(
                    &entry.key_mark,
                    &entry_path,
                    PlanErrorKind::InvalidEnvName {
                        name: entry.key.clone(),
                    },
                ));
            }
            if let Some(first_line) = env.contains_key(&entry.key).then_some(entry.key_mark.line) {
                return Err(self.error(
                    &entry.key_mark,
                    &entry_path,
                    PlanErrorKind::DuplicateKey {
                        key: entry.key.clone(),
                        first_line,
                    },
                ));
            }
            let value = match &entry.value.kind {
                Kind::Str(text) => text.clone(),
                Kind::Int(value) => value.to_string(),
                Kind::Bool(value) => value.to_string(),
                _ => return Err(self.wrong_type(&entry.value, &entry_path, "a string")),
            };
            env.insert(entry.key.clone(), value);
        }
        Ok(env)
    }

    /// `pass_env:`, a list of variable names the child gets from reprise's
    /// own environment (when set there). `REPRISE_*` names are refused, as
    /// in `env`; so is a name given twice.
    fn pass_env(&self, node: &Node, path: &str) -> Result<Vec<String>> {
        let items = self.seq(node, path, "a list of variable names")?;
        let mut names: Vec<String> = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let item_path = item_path(path, index);
            let name = self.non_empty_string(item, &item_path)?;
            if !is_env_name(&name) || name.starts_with("REPRISE_") {
                return Err(self.error(
                    &item.mark,
                    &item_path,
                    PlanErrorKind::InvalidEnvName { name },
                ));
            }
            if let Some(first) = names.iter().position(|earlier| *earlier == name) {
                return Err(self.error(
                    &item.mark,
                    &item_path,
                    PlanErrorKind::DuplicatePassEnv { name, first },
                ));
            }
            names.push(name);
        }
        Ok(names)
    }

    /// `network:`, a policy: `none`, `model` or `all`, or a list of
    /// `host:port` endpoints, `model` among them for the model provider's
    /// own. An empty list is `none`.
    fn network(&self, node: &Node, path: &str) -> Result<Network> {
        const WORDS: &[&str] = &["none", "model", "all"];
        if let Kind::Str(word) = &node.kind {
            return match word.as_str() {
                "none" => Ok(Network::None),
                "model" => Ok(Network::model()),
                "all" => Ok(Network::All),
                _ => Err(self.error(
                    &node.mark,
                    path,
                    PlanErrorKind::UnknownValue {
                        noun: "network",
                        found: word.clone(),
                        expected: WORDS,
                        suggestion: super::error::closest(word, WORDS),
                    },
                )),
            };
        }
        let items = self.seq(
            node,
            path,
            "none, model, all, or a list of host:port endpoints (model among them)",
        )?;
        let mut model = false;
        let mut endpoints: Vec<Endpoint> = Vec::with_capacity(items.len());
        let mut written: Vec<String> = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let entry_path = item_path(path, index);
            let entry = self.non_empty_string(item, &entry_path)?;
            if let Some(first) = written.iter().position(|earlier| *earlier == entry) {
                return Err(self.error(
                    &item.mark,
                    &entry_path,
                    PlanErrorKind::DuplicateEndpoint { entry, first },
                ));
            }
            written.push(entry.clone());
            match entry.as_str() {
                "model" => model = true,
                "none" | "all" => {
                    return Err(self.error(
                        &item.mark,
                        &entry_path,
                        PlanErrorKind::NetworkWordInList { word: entry },
                    ));
                }
                _ => {
                    let endpoint = Endpoint::parse(&entry).map_err(|reason| {
                        self.error(
                            &item.mark,
                            &entry_path,
                            PlanErrorKind::InvalidEndpoint {
                                entry: entry.clone(),
                                reason,
                            },
                        )
                    })?;
                    endpoints.push(endpoint);
                }
            }
        }
        if !model && endpoints.is_empty() {
            return Ok(Network::None);
        }
        Ok(Network::Allow { model, endpoints })
    }

    /// The keys `defaults` and tasks share; a budget is checked against the pool.
    fn settings(&self, fields: &Fields<'_>, pool_micro_usd: Option<u64>) -> Result<Settings> {
        let mut settings = Settings::default();
        if let Some(node) = fields.get("agent") {
            let path = fields.path_of("agent");
            settings.agent =
                Some(self.choice(node, &path, "agent", AGENT_NAMES, &AgentKind::ALL)?);
        }
        if let Some(node) = fields.get("retry_policy") {
            let path = fields.path_of("retry_policy");
            settings.retry_policy = Some(self.choice(
                node,
                &path,
                "retry policy",
                RETRY_POLICY_NAMES,
                &RETRY_POLICIES,
            )?);
        }
        if let Some(node) = fields.get("max_retries") {
            let path = fields.path_of("max_retries");
            settings.max_retries = Some(self.integer(node, &path, 0, MAX_MAX_RETRIES)?);
        }
        if let Some(node) = fields.get("timeout") {
            let path = fields.path_of("timeout");
            settings.timeout = Some(self.duration(node, &path, false)?);
        }
        if let Some(node) = fields.get("agent_restart_between_retries") {
            let path = fields.path_of("agent_restart_between_retries");
            settings.agent_restart_between_retries = Some(self.boolean(node, &path)?);
        }
        if let Some(node) = fields.get("budget_usd") {
            let path = fields.path_of("budget_usd");
            let budget_micro_usd = self.money(node, &path)?;
            if let Some(pool_micro_usd) = pool_micro_usd
                && budget_micro_usd > pool_micro_usd
            {
                return Err(self.error(
                    &node.mark,
                    &path,
                    PlanErrorKind::BudgetAbovePool {
                        budget_micro_usd,
                        pool_micro_usd,
                    },
                ));
            }
            settings.budget_micro_usd = Some(budget_micro_usd);
        }
        if let Some(node) = fields.get("sandbox") {
            let path = fields.path_of("sandbox");
            settings.sandbox =
                Some(self.choice(node, &path, "sandbox", SANDBOX_NAMES, &SANDBOXES)?);
        }
        if let Some(node) = fields.get("read_only") {
            let path = fields.path_of("read_only");
            settings.read_only = Some(self.boolean(node, &path)?);
        }
        if let Some(node) = fields.get("checkpoint_max_file_bytes") {
            let path = fields.path_of("checkpoint_max_file_bytes");
            settings.checkpoint_max_file_bytes =
                Some(self.integer(node, &path, 1, MAX_SAFE_U64)?);
        }
        if let Some(node) = fields.get("rollback_on_retry") {
            let path = fields.path_of("rollback_on_retry");
            settings.rollback_on_retry =
                Some(self.choice(node, &path, "rollback_on_retry", ROLLBACK_NAMES, &ROLLBACKS)?);
        }
        if let Some(node) = fields.get("containment") {
            let path = fields.path_of("containment");
            settings.containment =
                Some(self.choice(node, &path, "containment", CONTAINMENT_NAMES, &CONTAINMENTS)?);
        }
        if let Some(node) = fields.get("max_output_bytes") {
            let path = fields.path_of("max_output_bytes");
            settings.max_output_bytes = Some(self.integer(node, &path, 1, MAX_SAFE_U64)?);
        }
        if let Some(node) = fields.get("idle_timeout") {
            let path = fields.path_of("idle_timeout");
            settings.idle_timeout = Some(self.duration(node, &path, false)?);
        }
        if let Some(node) = fields.get("park_when_idle") {
            let path = fields.path_of("park_when_idle");
            settings.park_when_idle = Some(self.duration(node, &path, false)?);
        }
        if let Some(node) = fields.get("pause_upgrade_after") {
            let path = fields.path_of("pause_upgrade_after");
            settings.pause_upgrade_after = Some(self.duration(node, &path, false)?);
        }
        if let Some(node) = fields.get("pass_env") {
            settings.pass_env = Some(self.pass_env(node, &fields.path_of("pass_env"))?);
        }
        if let Some(node) = fields.get("writable_shm") {
            let path = fields.path_of("writable_shm");
            settings.writable_shm = Some(self.boolean(node, &path)?);
        }
        if let Some(node) = fields.get("network") {
            settings.network = Some(self.network(node, &fields.path_of("network"))?);
        }
        Ok(settings)
    }

    fn tasks(
        &self,
        node: &Node,
        defaults: &Settings,
        pool_micro_usd: Option<u64>,
        agents: &BTreeMap<AgentKind, AgentSettings>,
    ) -> Result<Vec<Task>> {
        let path = "tasks";
        let items = self.seq(node, path, "a list of tasks")?;
        if items.is_empty() {
            return Err(self.error(&node.mark, path, PlanErrorKind::NoTasks));
        }
        let mut tasks = Vec::with_capacity(items.len());
        let mut dependencies = Vec::with_capacity(items.len());
        let mut index_of: BTreeMap<TaskId, usize> = BTreeMap::new();
        for (index, item) in items.iter().enumerate() {
            let task_path = item_path(path, index);
            let (task, task_dependencies) = self.task(
                item,
                &task_path,
                defaults,
                pool_micro_usd,
                &index_of,
                agents,
            )?;
            index_of.insert(task.id.clone(), index);
            tasks.push(task);
            dependencies.push(task_dependencies);
        }
        for dependency in dependencies.iter().flatten() {
            if !index_of.contains_key(&dependency.id) {
                return Err(self.error(
                    &dependency.mark,
                    &dependency.path,
                    PlanErrorKind::UnknownDependency {
                        id: dependency.id.clone(),
                    },
                ));
            }
        }
        let edges: Vec<Vec<usize>> = dependencies
            .iter()
            .map(|task_dependencies| {
                task_dependencies
                    .iter()
                    .filter_map(|dependency| index_of.get(&dependency.id).copied())
                    .collect()
            })
            .collect();
        if let Some(cycle) = find_cycle(&edges) {
            let closing = &dependencies[cycle.task][cycle.entry];
            return Err(self.error(
                &closing.mark,
                &closing.path,
                PlanErrorKind::Cycle {
                    ids: cycle
                        .tasks
                        .iter()
                        .map(|&index| tasks[index].id.clone())
                        .collect(),
                },
            ));
        }
        Ok(tasks)
    }

    fn task(
        &self,
        node: &Node,
        path: &str,
        defaults: &Settings,
        pool_micro_usd: Option<u64>,
        earlier_ids: &BTreeMap<TaskId, usize>,
        agents: &BTreeMap<AgentKind, AgentSettings>,
    ) -> Result<(Task, Vec<Dependency>)> {
        let fields = self.fields(node, path, TASK_KEYS)?;
        let id_node = self.required(&fields, "id", "add id: with the task's id")?;
        let id = self.task_id(id_node, &fields.path_of("id"))?;
        if let Some(&first) = earlier_ids.get(&id) {
            return Err(self.error(
                &id_node.mark,
                &fields.path_of("id"),
                PlanErrorKind::DuplicateTaskId { id, first },
            ));
        }
        let prompt = self.non_empty_string(
            self.required(
                &fields,
                "prompt",
                "add prompt: with what the agent should do",
            )?,
            &fields.path_of("prompt"),
        )?;
        let own = self.settings(&fields, pool_micro_usd)?;
        let own_network = own.network.clone();
        let settings = own.or(defaults);
        let agent = self.task_agent(&fields, settings.agent)?;
        // The task's own policy, else its agent's, else the defaults', else
        // what its kind of agent needs.
        let network = own_network
            .or_else(|| {
                agents
                    .get(&agent.kind())
                    .and_then(|settings| settings.network.clone())
            })
            .or_else(|| defaults.network.clone())
            .unwrap_or_else(|| Network::default_for(agent.kind()));
        let dependencies = self.dependencies(&fields, &id)?;
        let gates = match fields.get("gates") {
            Some(node) => self.gates(node, &fields.path_of("gates"))?,
            None => Vec::new(),
        };
        let on_needs_context = match fields.get("on_needs_context") {
            Some(node) => {
                self.on_needs_context(node, &fields.path_of("on_needs_context"), agent.kind())?
            }
            None => NeedsContext::default(),
        };
        let accept_partial_basis_points = match fields.get("accept_partial") {
            Some(node) => Some(self.fraction(node, &fields.path_of("accept_partial"))?),
            None => None,
        };
        let allowed_paths = self.allowed_paths(&fields)?;
        let task = Task {
            id,
            accept_partial_basis_points,
            allowed_paths,
            prompt,
            agent,
            retry_policy: settings.retry_policy.unwrap_or(RetryPolicy::Warm),
            max_retries: settings.max_retries.unwrap_or(DEFAULT_MAX_RETRIES),
            timeout: settings.timeout.unwrap_or(DEFAULT_TASK_TIMEOUT),
            agent_restart_between_retries: settings.agent_restart_between_retries.unwrap_or(false),
            budget_micro_usd: settings.budget_micro_usd,
            sandbox: settings.sandbox.unwrap_or(Sandbox::Worktree),
            read_only: settings.read_only.unwrap_or(false),
            checkpoint_max_file_bytes: settings
                .checkpoint_max_file_bytes
                .unwrap_or(DEFAULT_CHECKPOINT_MAX_FILE_BYTES),
            rollback_on_retry: settings.rollback_on_retry.unwrap_or(RollbackOnRetry::Auto),
            containment: settings.containment.unwrap_or(Containment::Strict),
            max_output_bytes: settings.max_output_bytes,
            idle_timeout: settings.idle_timeout,
            park_when_idle: settings.park_when_idle,
            pause_upgrade_after: settings.pause_upgrade_after,
            pass_env: settings.pass_env.unwrap_or_default(),
            writable_shm: settings.writable_shm.unwrap_or(false),
            network,
            on_needs_context,
            depends_on: dependencies
                .iter()
                .map(|dependency| dependency.id.clone())
                .collect(),
            gates,
        };
        Ok((task, dependencies))
    }

    /// A task's `depends_on` entries, each with where it was written: none
    /// may name the task itself or repeat an earlier one (whether each names
    /// a task is known only once every task is read).
    fn dependencies(&self, fields: &Fields<'_>, id: &TaskId) -> Result<Vec<Dependency>> {
        let mut dependencies: Vec<Dependency> = Vec::new();
        let mut named: std::collections::HashSet<TaskId> = std::collections::HashSet::new();
        let Some(node) = fields.get("depends_on") else {
            return Ok(dependencies);
        };
        let list_path = fields.path_of("depends_on");
        for (index, item) in self
            .seq(node, &list_path, "a list of task ids")?
            .iter()
            .enumerate()
        {
            let entry_path = item_path(&list_path, index);
            let dependency = self.task_id(item, &entry_path)?;
            let problem = if &dependency == id {
                Some(PlanErrorKind::SelfDependency {
                    id: dependency.clone(),
                })
            } else if named.contains(&dependency) {
                Some(PlanErrorKind::DuplicateDependency {
                    id: dependency.clone(),
                })
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(self.error(&item.mark, &entry_path, problem));
            }
            named.insert(dependency.clone());
            dependencies.push(Dependency {
                id: dependency,
                mark: item.mark.clone(),
                path: entry_path,
            });
        }
        Ok(dependencies)
    }

    /// A task's `allowed_paths`: paths or globs relative to the worktree.
    fn allowed_paths(&self, fields: &Fields<'_>) -> Result<Vec<String>> {
        let Some(node) = fields.get("allowed_paths") else {
            return Ok(Vec::new());
        };
        let list_path = fields.path_of("allowed_paths");
        self.seq(
            node,
            &list_path,
            "a list of paths or globs relative to the worktree",
        )?
        .iter()
        .enumerate()
        .map(|(index, item)| self.non_empty_string(item, &item_path(&list_path, index)))
        .collect()
    }

    /// What changes for the retry after an agent asked for context.
    fn on_needs_context(&self, node: &Node, path: &str, agent: AgentKind) -> Result<NeedsContext> {
        let fields = self.fields(node, path, NEEDS_CONTEXT_KEYS)?;
        if let Some(node) = fields.get("model") {
            let model_path = fields.path_of("model");
            if matches!(agent, AgentKind::Command | AgentKind::Sim | AgentKind::Acp) {
                return Err(self.error(
                    &node.mark,
                    &model_path,
                    PlanErrorKind::ModelNotAllowed { agent },
                ));
            }
        }
        let mut changes = NeedsContext::default();
        if let Some(node) = fields.get("model") {
            changes.model = Some(self.non_empty_string(node, &fields.path_of("model"))?);
        }
        if let Some(node) = fields.get("timeout") {
            changes.timeout = Some(self.duration(node, &fields.path_of("timeout"), false)?);
        }
        if let Some(node) = fields.get("prompt") {
            changes.prompt = Some(self.non_empty_string(node, &fields.path_of("prompt"))?);
        }
        Ok(changes)
    }

    /// The task's agent with its agent-only keys: `command` exactly for
    /// `command`, `sim` only for `sim`.
    fn task_agent(&self, fields: &Fields<'_>, kind: Option<AgentKind>) -> Result<TaskAgent> {
        let Some(kind) = kind else {
            return Err(self.error(
                fields.mark,
                &fields.path_of("agent"),
                PlanErrorKind::MissingKey {
                    hint: "set agent (claude, codex, gemini, command, sim or acp) here or in defaults.agent",
                },
            ));
        };
        let command = fields.get("command");
        let sim = fields.get("sim");
        if kind != AgentKind::Command
            && let Some(node) = command
        {
            return Err(self.error(
                &node.mark,
                &fields.path_of("command"),
                PlanErrorKind::CommandNotAllowed { agent: kind },
            ));
        }
        if kind != AgentKind::Sim
            && let Some(node) = sim
        {
            return Err(self.error(
                &node.mark,
                &fields.path_of("sim"),
                PlanErrorKind::SimNotAllowed { agent: kind },
            ));
        }
        Ok(match kind {
            AgentKind::Claude => TaskAgent::Claude,
            AgentKind::Codex => TaskAgent::Codex,
            AgentKind::Gemini => TaskAgent::Gemini,
            AgentKind::Command => {
                let Some(node) = command else {
                    return Err(self.error(
                        fields.mark,
                        &fields.path_of("command"),
                        PlanErrorKind::CommandMissing,
                    ));
                };
                TaskAgent::Command {
                    argv: self.argv(node, &fields.path_of("command"))?,
                }
            }
            AgentKind::Sim => TaskAgent::Sim {
                script: match sim {
                    Some(node) => self.sim_script(node, &fields.path_of("sim"))?,
                    None => vec![SimStep::default()],
                },
            },
            AgentKind::Acp => TaskAgent::Acp,
        })
    }

    /// `command:` as a list is the argv itself; as a string it is a shell
    /// command line, run as `sh -c STRING` (as a gate's `run:` is).
    fn argv(&self, node: &Node, path: &str) -> Result<Vec<String>> {
        if let Kind::Str(_) = &node.kind {
            let line = self.non_empty_string(node, path)?;
            return Ok(vec!["sh".to_owned(), "-c".to_owned(), line]);
        }
        let items = self.seq(node, path, "a list of strings (program, then arguments)")?;
        let Some(program) = items.first() else {
            return Err(self.error(&node.mark, path, PlanErrorKind::EmptyValue));
        };
        let program_path = item_path(path, 0);
        self.non_empty_string(program, &program_path)?;
        items
            .iter()
            .enumerate()
            .map(|(index, item)| self.string(item, &item_path(path, index)))
            .collect()
    }

    fn sim_script(&self, node: &Node, path: &str) -> Result<Vec<SimStep>> {
        let items = self.seq(node, path, "a list of sim steps")?;
        if items.is_empty() {
            return Err(self.error(&node.mark, path, PlanErrorKind::EmptySimScript));
        }
        items
            .iter()
            .enumerate()
            .map(|(index, item)| self.sim_step(item, &item_path(path, index)))
            .collect()
    }

    fn sim_step(&self, node: &Node, path: &str) -> Result<SimStep> {
        let fields = self.fields(node, path, SIM_STEP_KEYS)?;
        let mut step = SimStep::default();
        if let Some(node) = fields.get("reply") {
            step.reply = self.string(node, &fields.path_of("reply"))?;
        }
        if let Some(node) = fields.get("write") {
            step.write = self.sim_writes(node, &fields.path_of("write"))?;
        }
        if let Some(node) = fields.get("exit_code") {
            step.exit_code = self.integer(node, &fields.path_of("exit_code"), 0, u8::MAX)?;
        }
        if let Some(node) = fields.get("cost_usd") {
            step.cost_micro_usd = self.money(node, &fields.path_of("cost_usd"))?;
        }
        if let Some(node) = fields.get("delay") {
            step.delay = self.duration(node, &fields.path_of("delay"), true)?;
        }
        Ok(step)
    }

    fn sim_writes(&self, node: &Node, path: &str) -> Result<BTreeMap<String, String>> {
        let Kind::Map(entries) = &node.kind else {
            return Err(self.wrong_type(node, path, "a mapping of relative path to content"));
        };
        let mut writes = BTreeMap::new();
        // Where each path was first written: one look-up per entry, so a
        // plan with many writes is checked in linear time.
        let mut first_lines: std::collections::HashMap<&str, u64> =
            std::collections::HashMap::with_capacity(entries.len());
        for entry in entries.iter() {
            let entry_path = format!("{path}[{:?}]", entry.key);
            if let Err(reason) = check_relative_path(&entry.key) {
                return Err(self.error(
                    &entry.key_mark,
                    &entry_path,
                    PlanErrorKind::InvalidWritePath {
                        path: entry.key.clone(),
                        reason,
                    },
                ));
            }
            if let Some(&first_line) = first_lines.get(entry.key.as_str()) {
                return Err(self.error(
                    &entry.key_mark,
                    &entry_path,
                    PlanErrorKind::DuplicateKey {
                        key: entry.key.clone(),
                        first_line,
                    },
                ));
            }
            first_lines.insert(entry.key.as_str(), entry.key_mark.line);
            let content = self.string(&entry.value, &entry_path)?;
            writes.insert(entry.key.clone(), content);
        }
        Ok(writes)
    }

    fn gates(&self, node: &Node, path: &str) -> Result<Vec<Gate>> {
        let items = self.seq(node, path, "a list of gates")?;
        let mut gates: Vec<Gate> = Vec::with_capacity(items.len());
        let mut names: std::collections::HashMap<String, usize> =
            std::collections::HashMap::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let gate = self.gate(item, &item_path(path, index), &names)?;
            names.insert(gate.name.clone(), index);
            gates.push(gate);
        }
        Ok(gates)
    }

    fn gate(
        &self,
        node: &Node,
        path: &str,
        earlier: &std::collections::HashMap<String, usize>,
    ) -> Result<Gate> {
        let fields = self.fields(node, path, GATE_KEYS)?;
        let name_path = fields.path_of("name");
        let name_node = self.required(&fields, "name", "add name: with the gate's name")?;
        let name = self.string(name_node, &name_path)?;
        if TaskId::parse(&name).is_err() {
            return Err(self.error(
                &name_node.mark,
                &name_path,
                PlanErrorKind::InvalidGateName { name },
            ));
        }
        if let Some(&first) = earlier.get(&name) {
            return Err(self.error(
                &name_node.mark,
                &name_path,
                PlanErrorKind::DuplicateGateName { name, first },
            ));
        }
        let timeout = fields.get("timeout");
        let check = match (fields.get("run"), fields.get("result_matches")) {
            (Some(_), Some(pattern)) => {
                return Err(self.error(&pattern.mark, path, PlanErrorKind::GateHasBothChecks));
            }
            (None, None) => {
                return Err(self.error(fields.mark, path, PlanErrorKind::GateHasNoCheck));
            }
            (Some(command), None) => GateCheck::Run {
                command: self.non_empty_string(command, &fields.path_of("run"))?,
                timeout: match timeout {
                    Some(node) => self.duration(node, &fields.path_of("timeout"), false)?,
                    None => DEFAULT_GATE_TIMEOUT,
                },
            },
            (None, Some(pattern)) => {
                if let Some(node) = timeout {
                    return Err(self.error(
                        &node.mark,
                        &fields.path_of("timeout"),
                        PlanErrorKind::TimeoutWithoutRun,
                    ));
                }
                let pattern_path = fields.path_of("result_matches");
                let text = self.non_empty_string(pattern, &pattern_path)?;
                let regex = Regex::new(&text).map_err(|error| {
                    self.error(
                        &pattern.mark,
                        &pattern_path,
                        PlanErrorKind::InvalidRegex {
                            message: regex_message(&error),
                        },
                    )
                })?;
                GateCheck::ResultMatches(regex)
            }
        };
        let disclose = match fields.get("disclose") {
            Some(node) => self.choice(
                node,
                &fields.path_of("disclose"),
                "disclose",
                DISCLOSE_NAMES,
                &DISCLOSES,
            )?,
            None => match check {
                GateCheck::Run { .. } => Disclose::Output,
                GateCheck::ResultMatches(_) => Disclose::Verdict,
            },
        };
        let criterion = self.criterion(&fields)?;
        let weight = match fields.get("weight") {
            Some(node) => self.integer(node, &fields.path_of("weight"), 1, 1000)?,
            None => 1,
        };
        let protect = match fields.get("protect") {
            Some(node) => self.protect(node, &fields.path_of("protect"), &check)?,
            None => Vec::new(),
        };
        let network = match fields.get("network") {
            Some(node) => self.network(node, &fields.path_of("network"))?,
            None => Network::None,
        };
        Ok(Gate {
            name,
            check,
            disclose,
            criterion,
            weight,
            protect,
            network,
        })
    }

    /// A gate's `protect`: relative globs of files inside the tree, for a
    /// `run` gate only (a `result_matches` gate reads no file).
    fn protect(&self, node: &Node, path: &str, check: &GateCheck) -> Result<Vec<String>> {
        if matches!(check, GateCheck::ResultMatches(_)) {
            return Err(self.error(&node.mark, path, PlanErrorKind::ProtectWithoutRun));
        }
        let items = self.seq(node, path, "a list of globs relative to the worktree")?;
        let mut globs = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let entry_path = item_path(path, index);
            let glob = self.non_empty_string(item, &entry_path)?;
            if let Err(reason) = check_protect_glob(&glob) {
                return Err(self.error(
                    &item.mark,
                    &entry_path,
                    PlanErrorKind::InvalidProtectGlob { glob, reason },
                ));
            }
            globs.push(glob);
        }
        Ok(globs)
    }

    fn criterion(&self, fields: &Fields<'_>) -> Result<Option<Criterion>> {
        let (name_node, levels_node) = match (fields.get("criterion"), fields.get("levels")) {
            (None, None) => return Ok(None),
            (Some(node), None) => {
                return Err(self.error(
                    &node.mark,
                    &fields.path_of("criterion"),
                    PlanErrorKind::CriterionWithoutLevels,
                ));
            }
            (None, Some(node)) => {
                return Err(self.error(
                    &node.mark,
                    &fields.path_of("levels"),
                    PlanErrorKind::LevelsWithoutCriterion,
                ));
            }
            (Some(name), Some(levels)) => (name, levels),
        };
        let name_path = fields.path_of("criterion");
        let name = self.string(name_node, &name_path)?;
        if !is_criterion_name(&name) {
            return Err(self.error(
                &name_node.mark,
                &name_path,
                PlanErrorKind::InvalidCriterionName { name },
            ));
        }
        let levels_path = fields.path_of("levels");
        let items = self.seq(levels_node, &levels_path, "a list of integers")?;
        if items.is_empty() {
            return Err(self.error(&levels_node.mark, &levels_path, PlanErrorKind::EmptyValue));
        }
        let levels = items
            .iter()
            .enumerate()
            .map(|(index, item)| {
                self.integer(item, &item_path(&levels_path, index), i64::MIN, i64::MAX)
            })
            .collect::<Result<Vec<i64>>>()?;
        // A retry budget steps down this ladder one rung at a time.
        if levels.windows(2).any(|pair| pair[0] <= pair[1]) {
            return Err(self.error(
                &levels_node.mark,
                &levels_path,
                PlanErrorKind::LevelsNotDescending,
            ));
        }
        Ok(Some(Criterion { name, levels }))
    }
}

/// Why a `protect` glob could name something outside the tree, if it could.
fn check_protect_glob(glob: &str) -> Result<(), &'static str> {
    if glob.starts_with('/') {
        Err("is absolute")
    } else if glob.contains('\\') {
        Err("contains a backslash; separate directories with '/'")
    } else if glob.contains('\0') {
        Err("contains a nul character")
    } else if glob.split('/').any(|component| component == "..") {
        Err("has a \"..\" component")
    } else {
        Ok(())
    }
}

/// Why a `write` path could escape or miss the workspace, if it could.
fn check_relative_path(path: &str) -> Result<(), &'static str> {
    let bytes = path.as_bytes();
    if path.is_empty() {
        Err("is empty")
    } else if path.starts_with('/')
        || (bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':')
    {
        Err("is absolute")
    } else if path.contains('\\') {
        Err("contains a backslash; separate directories with '/'")
    } else if path.contains('\0') {
        Err("contains a nul character")
    } else if path.split('/').any(|component| component == "..") {
        Err("has a \"..\" component")
    } else if path.ends_with('/')
        || path
            .split('/')
            .all(|component| matches!(component, "" | "."))
    {
        Err("names a directory, not a file")
    } else {
        Ok(())
    }
}

/// The settings keys `agents.<kind>` takes.
fn agent_settings_keys(kind: AgentKind) -> &'static [&'static str] {
    match kind {
        AgentKind::Claude => CLAUDE_SETTINGS_KEYS,
        AgentKind::Codex | AgentKind::Gemini => CLI_SETTINGS_KEYS,
        AgentKind::Command => COMMAND_SETTINGS_KEYS,
        AgentKind::Sim => AGENT_SETTINGS_KEYS,
        AgentKind::Acp => ACP_SETTINGS_KEYS,
    }
}

/// Every key the parser accepts, as a path: `seats`, `defaults.timeout`,
/// `agents.claude.model`, `tasks[].gates[].run`. The plan reference
/// (docs/plan.md) is checked against this list.
pub fn accepted_keys() -> Vec<String> {
    let mut keys: Vec<String> = ROOT_KEYS.iter().map(|key| (*key).to_owned()).collect();
    for kind in AgentKind::ALL {
        keys.extend(
            agent_settings_keys(kind)
                .iter()
                .map(|key| format!("agents.{kind}.{key}")),
        );
    }
    keys.extend(DEFAULTS_KEYS.iter().map(|key| format!("defaults.{key}")));
    keys.extend(TASK_KEYS.iter().map(|key| format!("tasks[].{key}")));
    keys.extend(
        SIM_STEP_KEYS
            .iter()
            .map(|key| format!("tasks[].sim[].{key}")),
    );
    keys.extend(
        NEEDS_CONTEXT_KEYS
            .iter()
            .map(|key| format!("tasks[].on_needs_context.{key}")),
    );
    keys.extend(GATE_KEYS.iter().map(|key| format!("tasks[].gates[].{key}")));
    keys
}

/// `[A-Za-z_][A-Za-z0-9_]*`: a name a shell can export.
fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `[A-Za-z_][A-Za-z0-9_-]*`.
fn is_criterion_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
}

/// The regex crate's error on one line: its multi-line syntax report is
/// reduced to the line that says what is wrong.
fn regex_message(error: &regex::Error) -> String {
    let full = error.to_string();
    full.lines()
        .rev()
        .find_map(|line| line.trim().strip_prefix("error: "))
        .map(str::to_owned)
        .unwrap_or_else(|| full.split_whitespace().collect::<Vec<_>>().join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_choice_tables_match_the_enums() {
        let agents: Vec<_> = AgentKind::ALL.iter().map(|kind| kind.as_str()).collect();
        assert_eq!(agents, AGENT_NAMES);
        let policies: Vec<_> = RETRY_POLICIES
            .iter()
            .map(|policy| policy.as_str())
            .collect();
        assert_eq!(policies, RETRY_POLICY_NAMES);
        let sandboxes: Vec<_> = SANDBOXES.iter().map(|sandbox| sandbox.as_str()).collect();
        assert_eq!(sandboxes, SANDBOX_NAMES);
        let containments: Vec<_> = CONTAINMENTS.iter().map(|mode| mode.as_str()).collect();
        assert_eq!(containments, CONTAINMENT_NAMES);
        let discloses: Vec<_> = DISCLOSES.iter().map(|disclose| disclose.as_str()).collect();
        assert_eq!(discloses, DISCLOSE_NAMES);
    }

    #[test]
    fn plan_write_paths_stay_inside_the_workspace() {
        for ok in [
            "a.txt", "src/a.rs", "./a", "a/./b", ".hidden", "a..b", "..a",
        ] {
            assert_eq!(check_relative_path(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "/etc/x",
            "../x",
            "a/../../x",
            "..",
            "a/..",
            "C:x",
            "a\\b",
            "a\0",
            "dir/",
            ".",
            "./",
        ] {
            assert!(check_relative_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn plan_criterion_names_follow_the_pattern() {
        for ok in ["coverage", "_x", "a-b_c9", "Z"] {
            assert!(is_criterion_name(ok), "{ok}");
        }
        for bad in ["", "9a", "-a", "a b", "a.b", "é"] {
            assert!(!is_criterion_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn plan_regex_errors_fit_on_one_line() {
        // Built at run time: clippy rightly refuses an invalid literal pattern.
        let pattern = ["(", "unclosed"].concat();
        let error = Regex::new(&pattern).unwrap_err();
        let message = regex_message(&error);
        assert_eq!(message, "unclosed group");
    }
}

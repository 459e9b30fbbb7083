//! `reprise rehearse PLAN --scenario FILE`: run a plan through the real agent
//! CLIs against a scripted model server on loopback, then report per task
//! what was sent and what it would have cost; and `reprise rehearse serve`,
//! the server alone.
//!
//! Each task's agent gets the server's address, a dummy key and a home of its
//! own through its environment and config home only (`reprise_rehearse::setup`);
//! nothing of the user's own CLI configuration is read or changed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reprise_core::plan::{AgentKind, Plan};
use reprise_core::{TaskId, TaskKey};
use reprise_engine::{AgentSetup, RunState, new_run_id};
use reprise_rehearse::check::{PlanTask, check};
use reprise_rehearse::model_server::{ModelServer, Scenario, ServerOptions};
use reprise_rehearse::pricing::{PriceTable, StoredPricesError, TokenUsage, parse_price};
use reprise_rehearse::report::{Traffic, Turn, summarise};
use reprise_rehearse::setup::{Client, client_setup};
use reprise_store::write_atomic;
use serde_json::{Value, json};

use crate::commands::run::{
    Prepared, execute, parked_code, prepare_checked, prepare_continue, run_json, summary_priced,
};
use crate::commands::spend::insert_spend;
use crate::error::CliError;
use crate::output::Outcome;
use crate::output::money;
use crate::settings::Settings;

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct RehearseArgs {
    #[command(subcommand)]
    command: Option<RehearseCommand>,
    /// The plan file (YAML). Not needed with --continue, which re-reads
    /// the run's own plan.
    #[arg(required_unless_present = "continue_run")]
    plan: Option<PathBuf>,
    /// What the server answers (YAML rules; see the README).
    #[arg(long, value_name = "FILE", required = true)]
    scenario: Option<PathBuf>,
    /// Take up rehearsal RUN, interrupted or parked, in this process, as
    /// `run --continue` does, with a new server that goes on from the
    /// run's request log and the agents' homes (their sessions) kept.
    #[arg(long = "continue", value_name = "RUN", conflicts_with_all = ["plan", "retry_budget"])]
    continue_run: Option<String>,
    /// With --continue: resume this parked task first, as `task resume`
    /// would (repeatable).
    #[arg(long, value_name = "TASK", requires = "continue_run")]
    resume: Vec<String>,
    /// Tasks running at once (overrides the plan's `seats`).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    seats: Option<u32>,
    /// A retry budget (overrides the plan's `retry_budget`).
    #[arg(long, value_name = "SPEC")]
    retry_budget: Option<String>,
    /// Dollars per million tokens for the would-cost figures, over the
    /// shipped list and the scenario's `prices:`: `IN/OUT[/WRITE/READ]` for
    /// every model, or `MODEL=IN/OUT[/WRITE/READ]` for one (repeatable).
    #[arg(long, value_name = "[MODEL=]IN/OUT")]
    price: Vec<String>,
    /// Keep every request body the agents sent, beside the request log.
    #[arg(long)]
    keep_requests: bool,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum RehearseCommand {
    /// Serve a scenario on loopback until Ctrl-C, logging every request.
    #[command(after_help = help!("\
  reprise rehearse serve --scenario scenario.yaml --port 8080"))]
    Serve(ServeArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// What the server answers (YAML rules).
    #[arg(long, value_name = "FILE")]
    scenario: PathBuf,
    /// The request log, one JSON line per request (default: ./requests.jsonl).
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// The port on 127.0.0.1 (default: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Keep every request body in DIR, one file per request.
    #[arg(long, value_name = "DIR")]
    keep_requests: Option<PathBuf>,
}

impl RehearseArgs {
    /// `rehearse serve`, or a rehearsal of a plan or of a run taken up.
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        if let Some(RehearseCommand::Serve(serve_args)) = self.command {
            return serve(
                settings,
                &serve_args.scenario,
                serve_args.log.as_deref(),
                serve_args.port,
                serve_args.keep_requests,
            );
        }
        let what = match (self.plan, self.continue_run) {
            // clap's `requires` is lifted with the subcommand's
            // requirements: said here instead.
            (Some(_), None) if !self.resume.is_empty() => {
                return Err(CliError::usage(
                    "--resume TASK resumes a parked task of a rehearsal taken up with --continue RUN; give --continue RUN instead of a plan",
                ));
            }
            (Some(plan), None) => What::Plan {
                plan,
                retry_budget: self.retry_budget,
            },
            (None, Some(run)) => What::Continue {
                run,
                resume: self.resume,
            },
            _ => {
                return Err(CliError::usage(
                    "give a plan (or --continue RUN) and --scenario FILE, or `rehearse serve --scenario FILE`",
                ));
            }
        };
        let Some(scenario) = self.scenario else {
            return Err(CliError::usage(
                "give --scenario FILE: what the model server answers",
            ));
        };
        rehearse(
            settings,
            what,
            &scenario,
            self.seats,
            &self.price,
            self.keep_requests,
        )
    }
}

/// The price table: the shipped list, the scenario's `prices:` over it, and
/// every `--price [MODEL=]IN/OUT[/WRITE/READ]` over both.
fn price_table(scenario: &Scenario, prices: &[String]) -> Result<PriceTable, CliError> {
    let mut table = PriceTable {
        models: scenario.prices.clone(),
        ..PriceTable::default()
    };
    for text in prices {
        let bad = |err: reprise_rehearse::pricing::PriceError| {
            CliError::usage(format!("--price {text:?}: {err}"))
        };
        match text.split_once('=') {
            Some((model, price)) if !model.trim().is_empty() => {
                let price = parse_price(price).map_err(bad)?;
                table.models.insert(0, (model.trim().to_owned(), price));
            }
            _ => table.all = Some(parse_price(text).map_err(bad)?),
        }
    }
    Ok(table)
}

/// The client a task's agent is; `None` for one that calls no server.
fn client_for(kind: AgentKind) -> Option<Client> {
    match kind {
        AgentKind::Claude => Some(Client::Claude),
        AgentKind::Codex => Some(Client::Codex),
        AgentKind::Command => Some(Client::Command),
        AgentKind::Gemini => Some(Client::Gemini),
        AgentKind::Acp => Some(Client::Acp),
        AgentKind::Sim => None,
    }
}

/// What a rehearsal runs: a plan anew, or an earlier rehearsal taken up.
enum What {
    Plan {
        plan: PathBuf,
        retry_budget: Option<String>,
    },
    /// `--continue RUN [--resume TASK]...`.
    Continue { run: String, resume: Vec<String> },
}

/// Whether `scenario` can answer every task of `plan` that calls a server.
fn servable(scenario: &Scenario, scenario_path: &Path, plan: &Plan) -> Result<(), CliError> {
    let tasks: Vec<PlanTask<'_>> = plan
        .tasks()
        .iter()
        .map(|task| PlanTask {
            id: task.id.as_str(),
            client: client_for(task.agent.kind()),
        })
        .collect();
    check(scenario, &scenario_path.display().to_string(), &tasks)
        .map_err(|err| CliError::usage(err.to_string()))
}

/// A rehearsal run taken up: checked as `run --continue` is, the scenario
/// against the run's own plan, and each `--resume TASK` as `task resume`
/// checks it, all before anything is written.
fn prepare_continued(
    settings: &Settings,
    run_id: &str,
    resume: &[String],
    scenario: &Scenario,
    scenario_path: &Path,
) -> Result<Prepared, CliError> {
    let mut resumes = BTreeMap::new();
    if !resume.is_empty() {
        reprise_core::check_run_id(run_id).map_err(|err| CliError::usage(err.to_string()))?;
        let (state, key) = settings.keyed_state()?;
        let prior = reprise_engine::load_run(&state, run_id)
            .map_err(|err| CliError::usage(err.to_string()))?;
        let plan = prior.plan_id().ok_or_else(|| {
            CliError::usage(format!(
                "run {run_id} names no plan; it cannot be continued"
            ))
        })?;
        for task in resume {
            let task = TaskKey::new(plan.clone(), TaskId::parse(task)?);
            let point = reprise_engine::check_resume(&state, &key, &task, None)
                .map_err(|refusal| CliError::usage(refusal.to_string()))?;
            if point.run_id != run_id {
                return Err(CliError::usage(format!(
                    "task {task} was parked by run {}, not {run_id}; continue that run",
                    point.run_id
                )));
            }
            resumes.insert(
                task.task,
                reprise_engine::Resume {
                    point,
                    mode: None,
                    approval: None,
                },
            );
        }
    }
    prepare_continue(
        settings,
        run_id,
        resumes,
        Some(&|plan: &Plan| servable(scenario, scenario_path, plan)),
    )
}

/// A step of the rehearsal that failed on the machine, not on its input.
fn failed(what: &str, err: &dyn std::fmt::Display) -> CliError {
    CliError::failed(format!("cannot {what}: {err}"))
}

fn rehearse(
    settings: &Settings,
    what: What,
    scenario_path: &Path,
    seats: Option<u32>,
    prices: &[String],
    keep_requests: bool,
) -> Result<Outcome, CliError> {
    // Everything the user wrote is checked before anything is written.
    let scenario = Scenario::load(scenario_path).map_err(|err| CliError::usage(err.to_string()))?;
    let prices = price_table(&scenario, prices)?;
    let (prepared, run_id, take_up) = match &what {
        What::Plan { plan, retry_budget } => {
            let prepared = prepare_checked(
                settings,
                Some(plan),
                None,
                retry_budget.as_deref(),
                |plan, _| servable(&scenario, scenario_path, plan),
            )?;
            (prepared, new_run_id(), false)
        }
        What::Continue { run, resume } => {
            let prepared = prepare_continued(settings, run, resume, &scenario, scenario_path)?;
            (prepared, run.clone(), true)
        }
    };
    let dir = prepared.state.runs_dir().join(&run_id).join("rehearsal");
    std::fs::create_dir_all(&dir)
        .map_err(|err| failed(&format!("create {}", dir.display()), &err))?;
    // The prices go with the run before it starts, so `status`, `runs` and
    // `report` price it as this process does, even if it dies. A continued
    // rehearsal stores its own: its summary prices the whole log with them.
    let stored = dir.join(PRICES_FILE);
    write_atomic(&stored, prices.to_stored().as_bytes(), 0o644)
        .map_err(|err| failed(&format!("write {}", stored.display()), &err))?;
    let log = dir.join("requests.jsonl");
    let options = ServerOptions {
        port: 0,
        bodies: keep_requests.then(|| dir.join("requests")),
        clock: None,
        // A continued rehearsal's server goes on from the log: its turns
        // and request numbers follow the dead process's.
        take_up,
    };
    let server = ModelServer::start_with(scenario, log.clone(), options)
        .map_err(|err| failed("start the model server", &err))?;
    let base_url = server.base_url();
    let agent_setup = agent_homes(&dir, &prepared.plan, &base_url)?;
    if !settings.json {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(
            stdout,
            "rehearsal: model server at {base_url}, requests logged to {}",
            log.display()
        );
    }
    let run = execute(
        settings,
        prepared,
        run_id,
        seats,
        agent_setup,
        crate::commands::run::WorktreeOptions::default(),
    );
    server.stop();
    let run = run?;
    let text = std::fs::read_to_string(&log).map_err(|err| failed("read the request log", &err))?;
    let traffic =
        summarise(&text, &prices).map_err(|err| failed("summarise the request log", &err))?;
    let priced = Priced {
        tasks: task_reports(&run, &traffic),
        prices,
        prices_stored: true,
    };
    // The agents' cost figures are for tokens never spent: say so.
    let continue_with = format!("reprise rehearse --continue {} --scenario FILE", run.run_id);
    let mut text = summary_priced(&run, &continue_with, Some(&priced));
    text.push_str(&traffic_table(&priced.tasks, &priced.prices));
    let rehearsal = json!({
        "server": base_url,
        "log": log,
        "requests": keep_requests.then(|| dir.join("requests")),
        "prices": stored,
        "prices_taken": priced.prices.list_taken,
        "tasks": priced.tasks.iter().map(TaskReport::json).collect::<Vec<_>>(),
        "would_cost_micro_usd": priced.would_cost_micro_usd(),
    });
    Ok(Outcome {
        exit: parked_code(&run),
        json: json!({
            "run": nothing_spent(run_json(&run)),
            "rehearsal": rehearsal,
        }),
        text,
        ok: run.ok == Some(true),
    })
}

/// Where a rehearsal keeps the prices it ran with, in `runs/<run>/rehearsal/`.
const PRICES_FILE: &str = "prices.json";

/// `run_json` of a rehearsal: its tasks spent nothing (each attempt's
/// `cost_micro_usd` stays the agent's own figure, for tokens nobody paid).
pub(crate) fn nothing_spent(mut json: Value) -> Value {
    let nothing = reprise_core::plan::Spend::default();
    if let Some(object) = json.as_object_mut() {
        insert_spend(object, nothing);
        object.insert("rehearsal".into(), json!(true));
    }
    if let Some(tasks) = json["tasks"].as_array_mut() {
        for task in tasks.iter_mut().filter_map(Value::as_object_mut) {
            insert_spend(task, nothing);
        }
    }
    json
}

/// The whole run's would-cost: `None` when a task's model has no price.
fn would_cost(tasks: &[TaskReport<'_>]) -> Option<u64> {
    tasks
        .iter()
        .map(|task| {
            if task.traffic.requests == 0 {
                Some(0)
            } else {
                task.traffic.would_cost_micro_usd
            }
        })
        .sum()
}

/// A finished or stopped rehearsal read back: what each task sent and what
/// it would have cost at the prices the rehearsal ran with.
pub(crate) struct Priced<'a> {
    tasks: Vec<TaskReport<'a>>,
    prices: PriceTable,
    /// The rehearsal stored no prices (made by an older reprise): it is
    /// priced at this reprise's list.
    prices_stored: bool,
}

impl Priced<'_> {
    /// The whole run, `would cost $0.21` or `would cost unknown (...)`.
    pub(crate) fn would_cost_text(&self) -> String {
        match would_cost(&self.tasks) {
            Some(micro) => format!("would cost {}", money(micro)),
            None => {
                let models: std::collections::BTreeSet<&str> = self
                    .tasks
                    .iter()
                    .flat_map(|task| task.traffic.unpriced_models.iter().map(String::as_str))
                    .collect();
                format!(
                    "would cost unknown (no price for {})",
                    models.into_iter().collect::<Vec<_>>().join(", ")
                )
            }
        }
    }

    pub(crate) fn would_cost_micro_usd(&self) -> Option<u64> {
        would_cost(&self.tasks)
    }

    /// Which prices: `prices: the list of 2026-12-02, under this run's own`,
    /// or the list alone.
    pub(crate) fn prices_text(&self) -> String {
        let mut text = format!("prices: the list of {}", list_date(&self.prices));
        if self.prices.overridden() {
            text.push_str(", under this run's own from --price or the scenario");
        }
        if !self.prices_stored {
            text.push_str("; the run stored none, so this reprise's list");
        }
        text
    }

    /// What attempt `n` of `task` would have cost.
    pub(crate) fn attempt_text(&self, task: &str, n: u32) -> String {
        let Some(report) = self.tasks.iter().find(|report| report.task_id == task) else {
            return "would cost unknown".to_owned();
        };
        let index = n.saturating_sub(1) as usize;
        report.would_cost(
            report
                .traffic
                .turns
                .get(index)
                .and_then(|turn| turn.would_cost_micro_usd)
                .or((report.traffic.requests == 0).then_some(0)),
            false,
        )
    }

    /// What `task` would have cost.
    pub(crate) fn task_micro_usd(&self, task: &str) -> Option<u64> {
        let report = self.tasks.iter().find(|report| report.task_id == task)?;
        if report.traffic.requests == 0 {
            return Some(0);
        }
        report.traffic.would_cost_micro_usd
    }

    /// Adds to `status --json` of the rehearsal what it would cost, the
    /// run's and each task's (`would_cost_micro_usd`), and its `prices`.
    pub(crate) fn annotate(&self, json: &mut Value) {
        json["would_cost_micro_usd"] = json!(self.would_cost_micro_usd());
        json["prices"] = json!({
            "taken": self.prices.list_taken,
            "overridden": self.prices.overridden(),
            "stored": self.prices_stored,
        });
        if let Some(tasks) = json["tasks"].as_array_mut() {
            for task in tasks {
                let id = task["task_id"].as_str().unwrap_or_default().to_owned();
                task["would_cost_micro_usd"] = json!(self.task_micro_usd(&id));
            }
        }
    }
}

/// The date a price table's list was taken.
fn list_date(prices: &PriceTable) -> &str {
    prices.list_taken.split(':').next().unwrap_or("")
}

/// `run` read back as the rehearsal it was, if it was one: its request log
/// priced at the prices it stored.
pub(crate) fn priced<'a>(
    state: &reprise_store::state::StateDir,
    run: &'a RunState,
) -> Result<Option<Priced<'a>>, CliError> {
    let dir = state.runs_dir().join(&run.run_id).join("rehearsal");
    if !dir.is_dir() {
        return Ok(None);
    }
    let stored = dir.join(PRICES_FILE);
    let (prices, prices_stored) = match std::fs::read_to_string(&stored) {
        Ok(text) => (
            PriceTable::from_stored(&text).map_err(|err| {
                let fix = match err {
                    StoredPricesError::Newer { .. } => "",
                    StoredPricesError::Malformed(_) => {
                        "; remove the file to price the run at this reprise's list"
                    }
                };
                CliError::usage(format!(
                    "cannot read the prices of rehearsal {} from {}: {err}{fix}",
                    run.run_id,
                    stored.display()
                ))
            })?,
            true,
        ),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => (PriceTable::default(), false),
        Err(err) => return Err(failed(&format!("read {}", stored.display()), &err)),
    };
    let log = match std::fs::read_to_string(dir.join("requests.jsonl")) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(err) => return Err(failed("read the request log", &err)),
    };
    let traffic =
        summarise(&log, &prices).map_err(|err| failed("summarise the request log", &err))?;
    Ok(Some(Priced {
        tasks: task_reports(run, &traffic),
        prices,
        prices_stored,
    }))
}

/// Each server-calling task's home under `dir/homes/<task>/` and what its
/// agent is given to reach the server at `base_url`. A home is kept across
/// a continue (its sessions are there); only the files naming the server's
/// address are written again.
fn agent_homes(
    dir: &Path,
    plan: &Plan,
    base_url: &str,
) -> Result<BTreeMap<TaskId, AgentSetup>, CliError> {
    let mut agent_setup = BTreeMap::new();
    for task in plan.tasks() {
        let Some(client) = client_for(task.agent.kind()) else {
            continue;
        };
        let home = dir.join("homes").join(task.id.as_str());
        let setup = client_setup(client, base_url, task.id.as_str(), &home);
        std::fs::create_dir_all(&home)
            .map_err(|err| failed(&format!("create {}", home.display()), &err))?;
        for (path, contents) in &setup.files {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|err| failed(&format!("create {}", parent.display()), &err))?;
            }
            write_atomic(path, contents.as_bytes(), 0o600)
                .map_err(|err| failed(&format!("write {}", path.display()), &err))?;
        }
        agent_setup.insert(
            task.id.clone(),
            AgentSetup {
                env: setup.env,
                config_home: setup.config_home,
                endpoints: reprise_core::plan::Endpoint::of_url(base_url)
                    .into_iter()
                    .collect(),
            },
        );
    }
    Ok(agent_setup)
}

/// What one task sent and what it would have cost.
struct TaskReport<'a> {
    task_id: &'a str,
    agent: &'a str,
    traffic: Traffic,
    /// The agent's own figure per attempt (Claude Code's `total_cost_usd`).
    reported_micro_usd: Vec<Option<u64>>,
    /// How each attempt ended, from the run.
    outcomes: Vec<String>,
}

impl TaskReport<'_> {
    /// The agent's own figure for the whole task, when every attempt gave one.
    fn reported_total(&self) -> Option<u64> {
        if self.reported_micro_usd.is_empty() {
            return None;
        }
        self.reported_micro_usd.iter().copied().sum()
    }

    fn attempts(&self) -> Vec<(usize, Option<&Turn>)> {
        let count = self.outcomes.len().max(self.traffic.turns.len());
        (0..count)
            .map(|index| (index, self.traffic.turns.get(index)))
            .collect()
    }

    fn attempt_outcome(&self, index: usize, turn: Option<&Turn>) -> String {
        if turn.is_some_and(|turn| turn.rehearsal_loop) {
            return "rehearsal_loop".to_owned();
        }
        self.outcomes.get(index).cloned().unwrap_or_default()
    }

    fn json(&self) -> Value {
        let attempts: Vec<Value> = self
            .attempts()
            .into_iter()
            .map(|(index, turn)| {
                let usage = turn.map(|turn| turn.usage).unwrap_or_default();
                json!({
                    "attempt": index + 1,
                    "outcome": self.attempt_outcome(index, turn),
                    "requests": turn.map_or(0, |turn| turn.requests),
                    "bytes": turn.map_or(0, |turn| turn.bytes),
                    "usage": usage_json(&usage),
                    "would_cost_micro_usd": turn.and_then(|turn| turn.would_cost_micro_usd),
                    "reported_cost_micro_usd": self.reported_micro_usd.get(index).copied().flatten(),
                    "rehearsal_loop": turn.is_some_and(|turn| turn.rehearsal_loop),
                })
            })
            .collect();
        json!({
            "task_id": self.task_id,
            "agent": self.agent,
            "requests": self.traffic.requests,
            "bytes": self.traffic.bytes,
            "usage": usage_json(&self.traffic.usage),
            "input_tokens": self.traffic.usage.input(),
            "output_tokens": self.traffic.usage.output,
            "failed_requests": self.traffic.failed,
            "unmatched_requests": self.traffic.unmatched,
            "first_unmatched": self.traffic.first_unmatched,
            "rehearsal_loops": self.traffic.loops,
            "unpriced_models": self.traffic.unpriced_models,
            "turns": self.traffic.turns,
            "attempts": attempts,
            "reported_cost_micro_usd": self.reported_total(),
            "would_cost_micro_usd": self.traffic.would_cost_micro_usd,
        })
    }

    /// The would-cost figure; `explain` says which prices are missing.
    fn would_cost(&self, figure: Option<u64>, explain: bool) -> String {
        match figure {
            Some(micro) => format!("would cost {}", money(micro)),
            None if self.traffic.unpriced_models.is_empty() => "would cost -".to_owned(),
            None if !explain => "would cost unknown".to_owned(),
            None => format!(
                "would cost unknown (no price for {}; give --price MODEL=IN/OUT or a prices: entry)",
                self.traffic.unpriced_models.join(", ")
            ),
        }
    }
}

fn usage_json(usage: &TokenUsage) -> Value {
    json!({
        "fresh_input_tokens": usage.fresh_input,
        "cache_write_tokens": usage.cache_write + usage.cache_write_1h,
        "cache_write_1h_tokens": usage.cache_write_1h,
        "cache_read_tokens": usage.cache_read,
        "output_tokens": usage.output,
    })
}

fn usage_text(usage: &TokenUsage) -> String {
    format!(
        "{} fresh in, {} cache write, {} cache read, {} out",
        usage.fresh_input,
        usage.cache_write + usage.cache_write_1h,
        usage.cache_read,
        usage.output
    )
}

fn task_reports<'a>(
    run: &'a RunState,
    traffic: &BTreeMap<Option<String>, Traffic>,
) -> Vec<TaskReport<'a>> {
    run.tasks
        .iter()
        .map(|task| {
            let traffic = traffic
                .get(&Some(task.task_id.as_str().to_owned()))
                .cloned()
                .unwrap_or_default();
            TaskReport {
                task_id: task.task_id.as_str(),
                agent: &task.agent,
                traffic,
                reported_micro_usd: task
                    .attempts
                    .iter()
                    .map(|attempt| attempt.cost_micro_usd)
                    .collect(),
                outcomes: task
                    .attempts
                    .iter()
                    .map(|attempt| {
                        let outcome = serde_json::to_value(attempt.outcome)
                            .ok()
                            .and_then(|value| value.as_str().map(str::to_owned))
                            .unwrap_or_default();
                        match &attempt.infra_kind {
                            Some(kind) => format!("{outcome}: {kind}"),
                            None => outcome,
                        }
                    })
                    .collect(),
            }
        })
        .collect()
}

fn traffic_table(tasks: &[TaskReport<'_>], prices: &PriceTable) -> String {
    let mut text = String::from("sent to the model server, per task (prices: list of ");
    text.push_str(list_date(prices));
    text.push_str(", or as set):\n");
    for task in tasks {
        let reported = task
            .reported_total()
            .map(|micro| format!("; the agent's own figure {}", money(micro)))
            .unwrap_or_default();
        let _ = writeln!(
            text,
            "  {} ({}): {}, {} B; {}; {}{reported}",
            task.task_id,
            task.agent,
            crate::output::count(task.traffic.requests, "request"),
            task.traffic.bytes,
            usage_text(&task.traffic.usage),
            task.would_cost(task.traffic.would_cost_micro_usd, true),
        );
        for (index, turn) in task.attempts() {
            let usage = turn.map(|turn| turn.usage).unwrap_or_default();
            let reported = task
                .reported_micro_usd
                .get(index)
                .copied()
                .flatten()
                .map(|micro| format!("; agent's figure {}", money(micro)))
                .unwrap_or_default();
            let _ = writeln!(
                text,
                "    attempt {} ({}): {}; {}; {}{reported}",
                index + 1,
                task.attempt_outcome(index, turn),
                crate::output::count(turn.map_or(0, |turn| turn.requests), "request"),
                usage_text(&usage),
                task.would_cost(turn.and_then(|turn| turn.would_cost_micro_usd), false),
            );
        }
        if task.traffic.loops > 0 {
            let _ = writeln!(
                text,
                "    {} attempt(s) ended as rehearsal_loop: past max_requests_per_attempt; the scenario keeps the agent looping",
                task.traffic.loops
            );
        }
        if let Some(first) = &task.traffic.first_unmatched {
            let _ = writeln!(
                text,
                "    {} request{} matched no rule; first: task {} turn {}, {:?}",
                task.traffic.unmatched,
                if task.traffic.unmatched == 1 { "" } else { "s" },
                task.task_id,
                first.turn,
                excerpt(&first.prompt),
            );
        }
    }
    text
}

/// The first 80 characters of a prompt, on one line.
fn excerpt(text: &str) -> String {
    let line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match line.char_indices().nth(80) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line,
    }
}

/// `reprise rehearse serve`: the server alone, until Ctrl-C.
fn serve(
    settings: &Settings,
    scenario_path: &Path,
    log: Option<&Path>,
    port: u16,
    keep_requests: Option<PathBuf>,
) -> Result<Outcome, CliError> {
    let scenario = Scenario::load(scenario_path).map_err(|err| CliError::usage(err.to_string()))?;
    let log = log.map_or_else(|| settings.cwd.join("requests.jsonl"), Path::to_path_buf);
    let options = ServerOptions {
        port,
        bodies: keep_requests,
        clock: None,
        take_up: false,
    };
    let server = ModelServer::start_with(scenario, log.clone(), options).map_err(|err| {
        CliError::failed(format!(
            "cannot serve on 127.0.0.1:{port} with log {}: {err}",
            log.display()
        ))
    })?;
    let url = server.base_url();
    {
        let mut stderr = std::io::stderr().lock();
        let _ = writeln!(stderr, "listening on {url}");
        let _ = writeln!(
            stderr,
            "point a client at it: ANTHROPIC_BASE_URL={url} (Claude Code), a Responses provider at {url}/v1 (Codex), GOOGLE_GEMINI_BASE_URL={url} with the gemini-api-key auth type (Gemini CLI); Ctrl-C stops"
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    let handler = Arc::clone(&stop);
    ctrlc::set_handler(move || handler.store(true, Ordering::SeqCst))
        .map_err(|err| CliError::usage(format!("cannot watch for Ctrl-C: {err}")))?;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
    }
    server.stop();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let traffic = summarise(&text, &PriceTable::default())
        .map_err(|err| CliError::failed(err.to_string()))?;
    let mut out = format!("served {url}; requests logged to {}\n", log.display());
    let mut tasks = Vec::new();
    for (task, traffic) in &traffic {
        let name = task.as_deref().unwrap_or("(no task)");
        let _ = writeln!(
            out,
            "  {name}: {}, {} B",
            crate::output::count(traffic.requests, "request"),
            traffic.bytes
        );
        tasks.push(json!({"task": task, "traffic": traffic}));
    }
    Ok(Outcome {
        exit: None,
        json: json!({"server": url, "log": log, "tasks": tasks}),
        text: out,
        ok: true,
    })
}

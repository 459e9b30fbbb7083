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

use reprise_core::plan::{AgentKind, Plan, parse_micro_usd};
use reprise_engine::{AgentSetup, RunState, new_run_id};
use reprise_rehearse::model_server::{ModelServer, Scenario, ServerOptions};
use reprise_rehearse::report::{Traffic, summarise};
use reprise_rehearse::setup::{Client, client_setup};
use reprise_store::write_atomic;
use serde_json::{Value, json};

use crate::commands::run::{execute, prepare_checked, run_json, summary_text};
use crate::commands::status::money;
use crate::error::{CliError, EXIT_FAILED};
use crate::output::Outcome;
use crate::settings::Settings;

/// A price per million input and output tokens, in micro-dollars.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Price {
    input: u64,
    output: u64,
}

impl Price {
    /// Reads `IN/OUT`, dollars per million tokens (`3/15`, `1.25/10`).
    pub(crate) fn parse(text: &str) -> Result<Self, CliError> {
        let bad = || {
            CliError::usage(format!(
                "--price {text:?} is not IN/OUT dollars per million tokens; write e.g. --price 3/15"
            ))
        };
        let (input, output) = text.split_once('/').ok_or_else(bad)?;
        Ok(Self {
            input: parse_micro_usd(input.trim()).map_err(|_| bad())?,
            output: parse_micro_usd(output.trim()).map_err(|_| bad())?,
        })
    }

    fn cost(self, traffic: &Traffic) -> u64 {
        let micro = u128::from(traffic.input_tokens) * u128::from(self.input)
            + u128::from(traffic.output_tokens) * u128::from(self.output);
        u64::try_from(micro.div_ceil(1_000_000)).unwrap_or(u64::MAX)
    }
}

/// The client a task's agent is, or why rehearsal cannot serve it.
fn client_for(kind: AgentKind) -> Result<Option<Client>, &'static str> {
    match kind {
        AgentKind::Claude => Ok(Some(Client::Claude)),
        AgentKind::Codex => Ok(Some(Client::Codex)),
        AgentKind::Command => Ok(Some(Client::Command)),
        AgentKind::Sim => Ok(None),
        AgentKind::Gemini => Err(
            "the scripted server speaks the Anthropic and OpenAI APIs, not Gemini's; rehearse this task with claude, codex or sim",
        ),
    }
}

pub(crate) fn rehearse(
    settings: &Settings,
    plan_path: &Path,
    scenario_path: &Path,
    seats: Option<u32>,
    retry_budget: Option<&str>,
    price: Option<&str>,
    keep_requests: bool,
) -> Result<Outcome, CliError> {
    // Everything the user wrote is checked before anything is written.
    let scenario = Scenario::load(scenario_path).map_err(|err| CliError::usage(err.to_string()))?;
    let price = price.map(Price::parse).transpose()?;
    let servable = |plan: &Plan| {
        for task in plan.tasks() {
            if let Err(why) = client_for(task.agent.kind()) {
                return Err(CliError::usage(format!(
                    "task {} uses {}: {why}",
                    task.id,
                    task.agent.kind()
                )));
            }
        }
        Ok(())
    };
    let prepared = prepare_checked(settings, Some(plan_path), None, retry_budget, |plan, _| {
        servable(plan)
    })?;
    let run_id = new_run_id();
    let dir = prepared.state.runs_dir().join(&run_id).join("rehearsal");
    let failed = |what: &str, err: &dyn std::fmt::Display| CliError {
        message: format!("cannot {what}: {err}"),
        code: EXIT_FAILED,
    };
    std::fs::create_dir_all(&dir)
        .map_err(|err| failed(&format!("create {}", dir.display()), &err))?;
    let log = dir.join("requests.jsonl");
    let options = ServerOptions {
        port: 0,
        bodies: keep_requests.then(|| dir.join("requests")),
    };
    let server = ModelServer::start_with(scenario, log.clone(), options)
        .map_err(|err| failed("start the model server", &err))?;
    let base_url = server.base_url();
    let mut agent_setup = BTreeMap::new();
    for task in prepared.plan.tasks() {
        let Ok(Some(client)) = client_for(task.agent.kind()) else {
            continue;
        };
        let home = dir.join("homes").join(task.id.as_str());
        let setup = client_setup(client, &base_url, task.id.as_str(), &home);
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
            },
        );
    }
    if !settings.json {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(
            stdout,
            "rehearsal: model server at {base_url}, requests logged to {}",
            log.display()
        );
    }
    let run = execute(settings, prepared, run_id, seats, agent_setup, false);
    server.stop();
    let run = run?;
    let text = std::fs::read_to_string(&log).map_err(|err| failed("read the request log", &err))?;
    let traffic = summarise(&text).map_err(|err| failed("summarise the request log", &err))?;
    let tasks = task_reports(&run, &traffic, price);
    let ok = run.ok == Some(true);
    let mut text = summary_text(&run);
    text.push_str(&traffic_table(&tasks));
    Ok(Outcome {
        json: json!({
            "run": run_json(&run),
            "rehearsal": {
                "server": base_url,
                "log": log,
                "requests": keep_requests.then(|| dir.join("requests")),
                "tasks": tasks.iter().map(TaskReport::json).collect::<Vec<_>>(),
            },
        }),
        text,
        ok,
    })
}

/// What one task sent and what it would have cost.
struct TaskReport<'a> {
    task_id: &'a str,
    agent: &'a str,
    traffic: Traffic,
    /// The agent's own figure, when every attempt reported one.
    reported_micro_usd: Option<u64>,
    /// At `--price`, from the server's token counts.
    priced_micro_usd: Option<u64>,
}

impl TaskReport<'_> {
    fn json(&self) -> Value {
        json!({
            "task_id": self.task_id,
            "agent": self.agent,
            "requests": self.traffic.requests,
            "bytes": self.traffic.bytes,
            "input_tokens": self.traffic.input_tokens,
            "output_tokens": self.traffic.output_tokens,
            "failed_requests": self.traffic.failed,
            "turns": self.traffic.turns,
            "reported_cost_micro_usd": self.reported_micro_usd,
            "priced_cost_micro_usd": self.priced_micro_usd,
        })
    }

    fn cost(&self) -> String {
        match (self.reported_micro_usd, self.priced_micro_usd) {
            (Some(reported), _) if self.traffic.requests > 0 => {
                format!("{} (agent's figure)", money(reported))
            }
            (_, Some(priced)) => format!("{} (at --price)", money(priced)),
            _ if self.traffic.requests == 0 => "-".to_owned(),
            _ => "unknown (the agent reports none; give --price IN/OUT)".to_owned(),
        }
    }
}

fn task_reports<'a>(
    run: &'a RunState,
    traffic: &BTreeMap<Option<String>, Traffic>,
    price: Option<Price>,
) -> Vec<TaskReport<'a>> {
    run.tasks
        .iter()
        .map(|task| {
            let traffic = traffic
                .get(&Some(task.task_id.as_str().to_owned()))
                .cloned()
                .unwrap_or_default();
            let reported = task
                .attempts
                .iter()
                .map(|attempt| attempt.cost_micro_usd)
                .sum::<Option<u64>>()
                .filter(|_| !task.attempts.is_empty());
            TaskReport {
                task_id: task.task_id.as_str(),
                agent: &task.agent,
                priced_micro_usd: price.map(|price| price.cost(&traffic)),
                traffic,
                reported_micro_usd: reported,
            }
        })
        .collect()
}

fn traffic_table(tasks: &[TaskReport<'_>]) -> String {
    let mut text = String::from("sent to the model server, per task:\n");
    for task in tasks {
        let turns: Vec<String> = task
            .traffic
            .turns
            .iter()
            .map(|turn| format!("{} B", turn.bytes))
            .collect();
        let _ = writeln!(
            text,
            "  {} ({}): {}, {} B (~{} tokens in, {} out){}; cost {}",
            task.task_id,
            task.agent,
            crate::output::count(task.traffic.requests, "request"),
            task.traffic.bytes,
            task.traffic.input_tokens,
            task.traffic.output_tokens,
            if turns.is_empty() {
                String::new()
            } else {
                format!("; per attempt {}", turns.join(", "))
            },
            task.cost(),
        );
    }
    text
}

/// `reprise rehearse serve`: the server alone, until Ctrl-C.
pub(crate) fn serve(
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
    };
    let server =
        ModelServer::start_with(scenario, log.clone(), options).map_err(|err| CliError {
            message: format!(
                "cannot serve on 127.0.0.1:{port} with log {}: {err}",
                log.display()
            ),
            code: EXIT_FAILED,
        })?;
    let url = server.base_url();
    {
        let mut stderr = std::io::stderr().lock();
        let _ = writeln!(stderr, "listening on {url}");
        let _ = writeln!(
            stderr,
            "point a client at it: ANTHROPIC_BASE_URL={url} (Claude Code), a Responses provider at {url}/v1 (Codex); Ctrl-C stops"
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
    let traffic = summarise(&text).map_err(|err| CliError {
        message: err.to_string(),
        code: EXIT_FAILED,
    })?;
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
        json: json!({"server": url, "log": log, "tasks": tasks}),
        text: out,
        ok: true,
    })
}

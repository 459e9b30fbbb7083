//! `reprise logs TASK`: what each attempt of a task printed (kept by the
//! engine under `runs/<run>/logs/`), and where the agent CLI's own
//! transcript of each session is.

use std::fmt::Write as _;

use reprise_core::TaskKey;
use reprise_engine::{RunState, load_run};
use reprise_store::logs::attempt_logs;
use reprise_store::state::StateDir;
use serde_json::json;

use crate::commands::PlanArg;
use crate::commands::resolve::{latest_run_of, task_key};
use crate::error::CliError;
use crate::output::Outcome;
use crate::settings::Settings;

#[derive(Debug, clap::Args)]
pub(crate) struct LogsArgs {
    /// The task (or PLAN/TASK).
    task: String,
    /// The run (default: the latest run of the task's plan).
    #[arg(long, value_name = "RUN")]
    run: Option<String>,
    /// Only this attempt.
    #[arg(long, value_name = "N")]
    attempt: Option<u32>,
    /// Only this gate's output.
    #[arg(long, value_name = "NAME")]
    gate: Option<String>,
    /// Follow a live run: print the running attempt's output as it
    /// comes, until the task ends.
    #[arg(long, short = 'f', conflicts_with_all = ["attempt", "gate"])]
    follow: bool,
    #[command(flatten)]
    plan: PlanArg,
}

impl LogsArgs {
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        let settings = settings.with_plan(self.plan.name);
        if self.follow {
            return follow(&settings, &self.task, self.run.as_deref());
        }
        logs(
            &settings,
            &self.task,
            self.run.as_deref(),
            self.attempt,
            self.gate.as_deref(),
        )
    }
}

/// The state directory, the task's key and the run asked for (default: the
/// latest run of the task's plan).
fn resolve(
    settings: &Settings,
    task: &str,
    run: Option<&str>,
) -> Result<(StateDir, TaskKey, RunState), CliError> {
    let state = settings.state()?;
    let key = task_key(settings, &state, task)?;
    let run = match run {
        Some(run) => load_run(&state, run).map_err(|err| CliError::usage(err.to_string()))?,
        None => latest_run_of(&state, Some(&key.plan))?,
    };
    Ok((state, key, run))
}

fn logs(
    settings: &Settings,
    task: &str,
    run: Option<&str>,
    attempt: Option<u32>,
    gate: Option<&str>,
) -> Result<Outcome, CliError> {
    let (state, key, run) = resolve(settings, task, run)?;
    let record = run.task(&key.task).ok_or_else(|| {
        CliError::usage(format!(
            "task {key} is not in run {}; see `reprise runs`",
            run.run_id
        ))
    })?;
    let logs = attempt_logs(&state, &run.run_id, &key.task)
        .map_err(|err| CliError::usage(err.to_string()))?;
    let wanted = |log: &&reprise_store::logs::KeptLog| {
        attempt.is_none_or(|n| log.attempt == n)
            && gate.is_none_or(|gate| log.name == format!("gate.{gate}"))
    };
    let chosen: Vec<_> = logs.iter().filter(wanted).collect();
    if chosen.is_empty() {
        let what = match (attempt, gate) {
            (Some(n), Some(gate)) => format!("attempt {n} of {key} kept no output of gate {gate}"),
            (Some(n), None) => format!("attempt {n} of {key} kept no output"),
            (None, Some(gate)) => format!("no attempt of {key} kept output of gate {gate}"),
            (None, None) => format!("no attempt of {key} kept any output"),
        };
        return Err(CliError::usage(format!(
            "{what} in run {}; `reprise status {}` lists its attempts",
            run.run_id, run.run_id
        )));
    }
    let mut text = String::new();
    let mut entries = Vec::new();
    for log in chosen {
        let body = std::fs::read_to_string(&log.path).unwrap_or_default();
        let mode = record
            .attempts
            .iter()
            .find(|summary| summary.n == log.attempt)
            .map_or("?", |summary| summary.mode.as_str());
        let _ = writeln!(
            text,
            "== attempt {} ({mode}) {} ({}) ==",
            log.attempt,
            log.name,
            log.path.display()
        );
        text.push_str(&body);
        if !body.ends_with('\n') {
            text.push('\n');
        }
        entries.push(
            json!({"attempt": log.attempt, "name": log.name, "path": log.path, "text": body}),
        );
    }
    // The CLI's own record of each session, where reprise saw it.
    let mut transcripts = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for summary in record
        .attempts
        .iter()
        .filter(|summary| attempt.is_none_or(|n| summary.n == n))
    {
        let Some(session) = summary.session_id.as_deref() else {
            continue;
        };
        if !seen.insert(session.to_owned()) {
            continue;
        }
        let copy = state
            .sessions_dir(&record.agent)
            .join(format!("{session}.jsonl"));
        let native = std::fs::read_to_string(copy.with_extension("origin")).ok();
        if native.is_none() && !copy.is_file() {
            continue;
        }
        let _ = writeln!(
            text,
            "transcript of session {session}: {} (a copy: {})",
            native.as_deref().unwrap_or("(not noted)"),
            copy.display()
        );
        transcripts.push(json!({"session_id": session, "native": native, "copy": copy}));
    }
    Ok(Outcome {
        exit: None,
        json: json!({"run_id": run.run_id, "task": key.to_string(), "logs": entries, "transcripts": transcripts}),
        text,
        ok: true,
    })
}

/// `reprise logs TASK --follow`: while the task's run is live, prints each
/// attempt's agent output as the process driver writes it, a header as each
/// attempt starts; ends when the task ends or its run stops.
pub(crate) fn follow(
    settings: &Settings,
    task: &str,
    run: Option<&str>,
) -> Result<Outcome, CliError> {
    use std::io::Write as _;
    let (state, key, run) = resolve(settings, task, run)?;
    let run_id = run.run_id;
    let mut tail = LiveOutput::new(&state, &run_id, &key)?;
    let mut out = std::io::stdout();
    loop {
        let current = load_run(&state, &run_id).map_err(|err| CliError::usage(err.to_string()))?;
        let ended = current
            .task(&key.task)
            .is_none_or(|task| task.state.is_terminal())
            || !matches!(
                reprise_engine::liveness(&state, &current),
                reprise_engine::Liveness::Live { .. }
            );
        let fresh = tail.read_new();
        if !fresh.is_empty() {
            let _ = out.write_all(&fresh);
            let _ = out.flush();
        }
        if ended {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    Ok(Outcome {
        exit: None,
        json: json!({"run_id": run_id, "task": key.to_string(), "followed": true}),
        text: format!(
            "[{}] run {run_id}: the task is no longer running\n",
            key.task
        ),
        ok: true,
    })
}

/// A task's agent output in a run, read as the process driver writes it:
/// each call hands back what was written since the last, a header as each
/// attempt starts (`logs -f`, and `l` in `reprise watch`).
#[derive(Debug)]
pub(crate) struct LiveOutput {
    dir: std::path::PathBuf,
    /// How much of each file has been read.
    read: std::collections::BTreeMap<std::path::PathBuf, u64>,
    attempt_shown: u32,
}

impl LiveOutput {
    pub(crate) fn new(state: &StateDir, run_id: &str, key: &TaskKey) -> Result<Self, CliError> {
        let dir = state
            .task_logs_dir(run_id, &key.task)
            .map_err(|err| CliError::usage(err.to_string()))?;
        Ok(Self {
            dir,
            read: Default::default(),
            attempt_shown: 0,
        })
    }

    /// What the agent wrote since the last call.
    pub(crate) fn read_new(&mut self) -> Vec<u8> {
        use std::io::{Read as _, Seek as _};
        let mut out = Vec::new();
        let mut attempts: Vec<u32> = std::fs::read_dir(&self.dir)
            .map(|entries| {
                entries
                    .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        attempts.sort_unstable();
        let floor = self.attempt_shown.max(1);
        for attempt in attempts.into_iter().filter(|n| *n >= floor) {
            for name in ["agent.stdout", "agent.stderr"] {
                let path = self.dir.join(attempt.to_string()).join(name);
                let Ok(mut file) = std::fs::File::open(&path) else {
                    continue;
                };
                let from = self.read.get(&path).copied().unwrap_or(0);
                let len = file.metadata().map_or(0, |meta| meta.len());
                if len <= from {
                    continue;
                }
                if attempt != self.attempt_shown {
                    out.extend_from_slice(format!("== attempt {attempt} ==\n").as_bytes());
                    self.attempt_shown = attempt;
                }
                let mut fresh = Vec::new();
                if file.seek(std::io::SeekFrom::Start(from)).is_ok()
                    && file.read_to_end(&mut fresh).is_ok()
                {
                    out.extend_from_slice(&fresh);
                    self.read.insert(path, from + fresh.len() as u64);
                }
            }
        }
        out
    }
}

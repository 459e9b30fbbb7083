//! `reprise task suspend` and `reprise task resume`: parking a task so it
//! holds nothing while it waits, and taking it back. A live run owns its
//! tasks' processes, journals and seats, so it is asked over its control
//! socket; with no live run the command does the work itself (a resume then
//! continues the run in this process).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use reprise_core::TaskKey;
use reprise_core::retry::RetryMode;
use reprise_core::rows::{BudgetReleased, ProcessReleased, Resource, SandboxReleased};
use reprise_engine::{ControlOp, ParkRequest, ParkedAnswer, ReleasedResource};
use reprise_store::locks::task_holder;
use reprise_store::suspension::{ParkCause, Wake};
use serde_json::Value;

use crate::commands::PlanArg;
use crate::commands::resolve::{latest_run_of, task_key};
use crate::error::CliError;
use crate::output::Outcome;
use crate::settings::Settings;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum TaskCommand {
    /// List the tasks of the latest run.
    #[command(after_help = help!("\
  reprise task list"))]
    List,
    /// Show one task: state, attempts and its retry metadata.
    #[command(after_help = help!("\
  reprise task show add-greeting
  reprise task show quickstart/add-greeting --json"))]
    Show(TaskArgs),
    /// Park a running task: stop its agent, snapshot and remove its
    /// worktree, give back its seat and unspent budget, until a resume.
    #[command(after_help = help!("\
  reprise task suspend add-greeting
  reprise task suspend add-greeting --until approval --reason \"check the schema first\"
  reprise task suspend add-greeting --until 2026-12-01T18:00:00Z
  reprise task suspend add-greeting --until 30m --json"))]
    Suspend(SuspendArgs),
    /// Resume a parked task: its worktree comes back from the park's
    /// snapshot, and its agent continues its own session when nothing
    /// changed (warm), else starts over (cold, recorded).
    #[command(after_help = help!("\
  reprise task resume add-greeting
  reprise task resume add-greeting --mode cold --json"))]
    Resume(ResumeArgs),
    /// Halt a running task's agent at once, keeping its worktree, seat and
    /// budget (a moment's steering); past --upgrade-after it becomes a park.
    #[command(after_help = help!("\
  reprise task pause add-greeting
  reprise task pause add-greeting --upgrade-after 10m"))]
    Pause(PauseArgs),
    /// Let a paused task go on: its agent continues its own session when
    /// nothing changed, else starts over (cold, recorded).
    #[command(after_help = help!("\
  reprise task unpause add-greeting"))]
    Unpause(TaskArgs),
    /// List every task whose latest park is not settled: what wakes it,
    /// how long it has waited, its parked workspace, what it freed.
    #[command(after_help = help!("\
  reprise task list-suspended
  reprise task list-suspended --json"))]
    ListSuspended,
}

impl TaskCommand {
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        match self {
            Self::List => crate::commands::status::list(settings),
            Self::Show(args) => crate::commands::status::show(&args.settings(settings), &args.task),
            Self::Suspend(args) => args.run(settings),
            Self::Resume(args) => args.run(settings),
            Self::Pause(args) => args.run(settings),
            Self::Unpause(args) => unpause(&args.settings(settings), &args.task),
            Self::ListSuspended => crate::commands::suspended::list(settings),
        }
    }
}

// A task, named alone or with its plan: the arguments of every command
// about one task that takes nothing more. (A plain comment: a doc comment
// here would be a candidate for those commands' own help.)
#[derive(Debug, clap::Args)]
pub(crate) struct TaskArgs {
    /// The task (or PLAN/TASK).
    pub(crate) task: String,
    #[command(flatten)]
    pub(crate) plan: PlanArg,
}

impl TaskArgs {
    /// The settings with `--plan` as the task's plan.
    pub(crate) fn settings(&self, settings: &Settings) -> Settings {
        settings.with_plan(self.plan.name.clone())
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct SuspendArgs {
    /// The task (or PLAN/TASK).
    task: String,
    #[command(flatten)]
    plan: PlanArg,
    /// What wakes it: `approval` (`reprise approve` first), a time
    /// (RFC 3339) or a duration from now (`30m`); default: a resume.
    #[arg(long, value_name = "approval|TIME")]
    until: Option<String>,
    /// Why, for the record and `reprise task list-suspended`.
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
}

impl SuspendArgs {
    fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        suspend(
            &settings.with_plan(self.plan.name),
            &self.task,
            self.until.as_deref(),
            self.reason,
        )
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct ResumeArgs {
    /// The task (or PLAN/TASK).
    task: String,
    #[command(flatten)]
    plan: PlanArg,
    /// The mode to ask for (default: the task's retry policy); a
    /// drifted workspace still goes cold.
    #[arg(long, value_enum)]
    mode: Option<ResumeMode>,
    /// The park's receipt (from `task suspend --json`): refused unless
    /// it binds the task's latest park.
    #[arg(long, value_name = "HEX")]
    receipt: Option<String>,
}

impl ResumeArgs {
    fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        resume(
            &settings.with_plan(self.plan.name),
            &self.task,
            self.mode,
            self.receipt.as_deref(),
        )
    }
}

/// A resume's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ResumeMode {
    Warm,
    Fork,
    Cold,
}

#[derive(Debug, clap::Args)]
pub(crate) struct PauseArgs {
    /// The task (or PLAN/TASK).
    task: String,
    #[command(flatten)]
    plan: PlanArg,
    /// Park the task (releasing everything) if it is still paused after
    /// this long (`30s`, `10m`); default: the task's
    /// `pause_upgrade_after` plan key, else never.
    #[arg(long, value_name = "DURATION")]
    upgrade_after: Option<String>,
}

impl PauseArgs {
    fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        pause(
            &settings.with_plan(self.plan.name),
            &self.task,
            self.upgrade_after.as_deref(),
        )
    }
}

/// What `--until` says: `approval`, an RFC 3339 time, or a duration from now.
pub(crate) fn parse_until(until: Option<&str>) -> Result<Wake, CliError> {
    let Some(until) = until else {
        return Ok(Wake::Resume);
    };
    if until == "approval" {
        return Ok(Wake::Approval);
    }
    let at = match humantime::parse_rfc3339_weak(until) {
        Ok(at) => at,
        Err(_) => match humantime::parse_duration(until) {
            Ok(after) => std::time::SystemTime::now() + after,
            Err(_) => {
                return Err(CliError::usage(format!(
                    "--until {until:?} is not `approval`, a time (2026-12-01T18:00:00Z) or a duration (30m)"
                )));
            }
        },
    };
    if at <= std::time::SystemTime::now() {
        return Err(CliError::usage(format!(
            "--until {until} is in the past; give a later time, or leave --until out to wake it by hand"
        )));
    }
    Ok(Wake::Time {
        at: humantime::format_rfc3339_seconds(at).to_string(),
    })
}

/// Parks `task`: through its live run, else directly (`task suspend`, and
/// `s` in `reprise watch`).
pub(crate) fn suspend(
    settings: &Settings,
    task: &str,
    until: Option<&str>,
    reason: Option<String>,
) -> Result<Outcome, CliError> {
    let wake = parse_until(until)?;
    let (state, key) = settings.keyed_state()?;
    let task = task_key(settings, &state, task)?;
    let parked = match task_holder(&state, &task) {
        // A live run owns the task: it parks it.
        Some(holder) => ask_holder(
            &state,
            &task,
            &holder,
            &ControlOp::Suspend {
                task: task.task.clone(),
                wake,
                reason,
            },
        )?,
        None => {
            let run = latest_run_of(&state, Some(&task.plan))?;
            let request = ParkRequest {
                wake,
                cause: ParkCause::Request,
                reason,
                question: None,
                requested_by: Some(reprise_engine::requester_of(std::process::id())),
            };
            let parked = reprise_engine::park_directly(&state, &key, &task, &run.run_id, &request)
                .map_err(|err| CliError::usage(err.to_string()))?;
            serde_json::to_value(parked.answer()).expect("a park's answer serialises")
        }
    };
    let answer = serde_json::from_value::<ParkedAnswer>(parked.clone()).map_err(|err| {
        CliError::usage(format!(
            "the run's answer to the park of {task} is not one this reprise reads ({err}); `reprise task list-suspended` shows the park"
        ))
    })?;
    Ok(Outcome {
        exit: None,
        text: parked_text(&task, &answer),
        json: parked,
        ok: true,
    })
}

fn parked_text(task: &TaskKey, parked: &ParkedAnswer) -> String {
    let mut text = format!(
        "parked {task} in run {} (park {}, receipt {})\n",
        parked.run_id,
        crate::output::short(&parked.park.to_hex()),
        crate::output::short(&parked.receipt.to_hex()),
    );
    for release in &parked.released {
        let _ = writeln!(
            text,
            "  released {}: {}",
            release.resource.as_str(),
            released_text(release)
        );
    }
    let _ = match &parked.wake {
        Wake::Approval => writeln!(
            text,
            "wake it: reprise approve {0}, then reprise task resume {0}",
            task.task
        ),
        Wake::Time { at } => writeln!(
            text,
            "it wakes at {at} (in this run, or with `reprise run --continue`); sooner: reprise task resume {}",
            task.task
        ),
        Wake::Resume => writeln!(text, "wake it: reprise task resume {}", task.task),
    };
    text
}

/// What one release gave back, in words.
fn released_text(release: &ReleasedResource) -> String {
    let detail = &release.detail;
    match release.resource {
        Resource::Process => match serde_json::from_value::<ProcessReleased>(detail.clone()) {
            Ok(process) if process.stopped => "the agent was stopped and reaped".to_owned(),
            _ => "no agent process was running".to_owned(),
        },
        Resource::Sandbox => match serde_json::from_value::<SandboxReleased>(detail.clone()) {
            Ok(sandbox) if sandbox.removed => format!(
                "worktree snapshotted ({}) and removed",
                crate::output::count(sandbox.files.unwrap_or(0), "file")
            ),
            _ => "the task works in place: its files stay".to_owned(),
        },
        Resource::Seat => "its seat is free".to_owned(),
        Resource::Budget => format!(
            "{} returned to the run's budget",
            crate::output::money(
                serde_json::from_value::<BudgetReleased>(detail.clone())
                    .map_or(0, |budget| budget.returned_micro_usd())
            )
        ),
    }
}

fn resume(
    settings: &Settings,
    task: &str,
    mode: Option<ResumeMode>,
    receipt: Option<&str>,
) -> Result<Outcome, CliError> {
    let receipt = receipt
        .map(|hex| {
            reprise_core::digest::Digest::from_hex(hex.as_bytes()).ok_or_else(|| {
                CliError::usage(format!(
                    "--receipt {hex:?} is not a 64-digit hex digest; copy it from `reprise task suspend --json`"
                ))
            })
        })
        .transpose()?;
    let (state, key) = settings.keyed_state()?;
    let task = task_key(settings, &state, task)?;
    let mode = mode.map(|mode| match mode {
        ResumeMode::Warm => RetryMode::Warm,
        ResumeMode::Fork => RetryMode::Fork,
        ResumeMode::Cold => RetryMode::Cold,
    });
    if let Some(holder) = task_holder(&state, &task) {
        return resume_in(&state, &task, &holder, mode, receipt);
    }
    let point = reprise_engine::check_resume(&state, &key, &task, receipt)
        .map_err(|refusal| CliError::usage(refusal.to_string()))?;
    let run_id = point.run_id.clone();
    let mut resumes = BTreeMap::new();
    resumes.insert(
        task.task,
        reprise_engine::Resume {
            point,
            mode,
            approval: None,
        },
    );
    // No live run: this command continues the run, the task first.
    crate::commands::run::continue_run(settings, &run_id, (None, None), resumes, false)
}

/// Asks the live run that parked `task` to take it back into one of its
/// seats.
fn resume_in(
    state: &reprise_store::state::StateDir,
    task: &TaskKey,
    holder: &reprise_store::locks::Holder,
    mode: Option<RetryMode>,
    receipt: Option<reprise_core::digest::Digest>,
) -> Result<Outcome, CliError> {
    let answer = ask_holder(
        state,
        task,
        holder,
        &ControlOp::Resume {
            task: task.task.clone(),
            mode: mode.map(|mode| mode.as_str().to_owned()),
            receipt,
        },
    )?;
    Ok(Outcome {
        exit: None,
        text: format!(
            "resumed {task} in live run {}: it runs again when a seat is free\n",
            holder.run_id
        ),
        json: answer,
        ok: true,
    })
}

/// Resumes `task` in the live run that holds it (`r` in `reprise watch`,
/// which cannot continue a run itself); with no live run, says which
/// command does.
pub(crate) fn resume_live(settings: &Settings, task: &str) -> Result<Outcome, CliError> {
    let state = settings.state()?;
    let task = task_key(settings, &state, task)?;
    match task_holder(&state, &task) {
        Some(holder) => resume_in(&state, &task, &holder, None, None),
        None => Err(CliError::usage(format!(
            "no live run holds task {task}: `reprise task resume {}` continues its run in a terminal of its own",
            task.task
        ))),
    }
}

/// Asks the live run that holds `task` to do `op`; its answer, or why there
/// is none.
fn ask_live(
    state: &reprise_store::state::StateDir,
    task: &TaskKey,
    op: &ControlOp,
    what: &str,
) -> Result<Value, CliError> {
    let Some(holder) = task_holder(state, task) else {
        return Err(CliError::usage(format!(
            "no live run holds task {task}: only a running task can be {what} (`reprise task suspend` parks an interrupted one)"
        )));
    };
    ask_holder(state, task, &holder, op)
}

/// Sends `op` to the run `holder` names over its control socket; its `ok`
/// answer, or its refusal as a one-line error.
fn ask_holder(
    state: &reprise_store::state::StateDir,
    task: &TaskKey,
    holder: &reprise_store::locks::Holder,
    op: &ControlOp,
) -> Result<Value, CliError> {
    let socket = reprise_engine::socket_path(state, &holder.run_id);
    let answer = reprise_engine::ask_run(&socket, op).map_err(|err| {
        CliError::usage(format!(
            "run {} (pid {}) holds task {task} but its control socket {} does not answer ({err}); stop that run or wait for it",
            holder.run_id,
            holder.pid,
            socket.display()
        ))
    })?;
    if answer.get("ok").and_then(Value::as_bool) != Some(true) {
        return Err(CliError::usage(
            answer
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("the run refused")
                .to_owned(),
        ));
    }
    Ok(answer)
}

/// Pauses `task` in its live run (`task pause`, and `p` in `reprise watch`).
pub(crate) fn pause(
    settings: &Settings,
    task: &str,
    upgrade_after: Option<&str>,
) -> Result<Outcome, CliError> {
    let upgrade_after_ms = upgrade_after
        .map(|text| {
            humantime::parse_duration(text)
                .map(|after| u64::try_from(after.as_millis()).unwrap_or(u64::MAX))
                .map_err(|_| {
                    CliError::usage(format!(
                        "--upgrade-after {text:?} is not a duration (30s, 10m, 1h)"
                    ))
                })
        })
        .transpose()?;
    let state = settings.state()?;
    let task = task_key(settings, &state, task)?;
    let answer = ask_live(
        &state,
        &task,
        &ControlOp::Pause {
            task: task.task.clone(),
            upgrade_after_ms,
        },
        "paused",
    )?;
    Ok(Outcome {
        exit: None,
        text: format!(
            "paused {task} (its worktree, seat and budget kept); go on: reprise task unpause {}\n",
            task.task
        ),
        json: answer,
        ok: true,
    })
}

/// Lets a paused `task` go on (`task unpause`, and `p` in `reprise watch`).
pub(crate) fn unpause(settings: &Settings, task: &str) -> Result<Outcome, CliError> {
    let state = settings.state()?;
    let task = task_key(settings, &state, task)?;
    let answer = ask_live(
        &state,
        &task,
        &ControlOp::Unpause {
            task: task.task.clone(),
        },
        "unpaused",
    )?;
    Ok(Outcome {
        exit: None,
        text: format!(
            "unpaused {task}: attempt continues {}\n",
            answer["mode"].as_str().unwrap_or("")
        ),
        json: answer,
        ok: true,
    })
}

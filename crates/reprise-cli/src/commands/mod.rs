//! One file per command. Each takes resolved settings and returns an
//! `Outcome`; printing happens here, once.

mod approve;
mod audit;
mod audit_suspension;
mod budget;
mod check;
mod checkpoint;
mod deliver;
mod init;
mod journal;
mod lineage;
mod logs;
pub(crate) mod progress;
mod rehearse;
mod replay;
mod report;
mod resolve;
mod run;
mod shell;
mod spend;
mod status;
mod suspended;
mod task;
mod workspace;

use crate::cli::{
    AuditCommand, BudgetCommand, CheckpointCommand, Command, JournalCommand, LineageCommand,
    PlanCommand, RehearseArgs, RehearseCommand, ReplayCommand, TaskCommand, WorkspaceCommand,
};
use crate::error::CliError;
use crate::output::Outcome;
use crate::settings::Settings;

pub(crate) use run::stopped_by;

pub(crate) fn run(command: Command, settings: &Settings) -> Result<Outcome, CliError> {
    // An event stream's last line carries the outcome: nothing more is printed.
    let streamed = matches!(&command, Command::Run { events: true, .. });
    let outcome = match command {
        Command::Init { plan } => init::run(settings, plan)?,
        Command::Run {
            plan: Some(plan),
            check: true,
            retry_budget,
            ..
        } => check::check(settings, &plan, retry_budget.as_deref())?,
        Command::Plan(PlanCommand::Check { plan }) => check::check(settings, &plan, None)?,
        Command::Completions { shell } => shell::completions(shell),
        Command::Man => shell::man()?,
        Command::Run {
            continue_run: Some(run_id),
            seats,
            events,
            keep_worktrees,
            ..
        } => run::continue_run(
            &settings.with_events(events),
            &run_id,
            seats,
            std::collections::BTreeMap::new(),
            keep_worktrees,
        )?,
        Command::Run {
            plan,
            retry_failed,
            seats,
            retry_budget,
            include_uncommitted,
            keep_worktrees,
            check: _,
            events,
            continue_run: None,
        } => run::run(
            &settings.with_events(events),
            plan.as_deref(),
            retry_failed.as_deref(),
            seats,
            retry_budget.as_deref(),
            run::WorktreeOptions {
                include_uncommitted,
                keep_worktrees,
            },
        )?,
        Command::Apply {
            run,
            task,
            branch,
            dry_run,
        } => deliver::apply(
            settings,
            run.as_deref(),
            task.as_deref(),
            branch.as_deref(),
            dry_run,
        )?,
        Command::Diff { run, task } => deliver::diff(settings, run.as_deref(), task.as_deref())?,
        Command::Clean {
            run,
            finished: _,
            all,
            branches,
            force,
            dry_run,
        } => deliver::clean(
            settings,
            run.as_deref(),
            all,
            deliver::BranchCleaning { branches, force },
            dry_run,
        )?,
        Command::Rehearse(RehearseArgs {
            command:
                Some(RehearseCommand::Serve {
                    scenario,
                    log,
                    port,
                    keep_requests,
                }),
            ..
        }) => rehearse::serve(settings, &scenario, log.as_deref(), port, keep_requests)?,
        Command::Rehearse(RehearseArgs {
            command: None,
            plan,
            scenario,
            seats,
            retry_budget,
            price,
            keep_requests,
            continue_run,
            resume,
        }) => {
            let what = match (plan, continue_run) {
                // clap's `requires` is lifted with the subcommand's
                // requirements: said here instead.
                (Some(_), None) if !resume.is_empty() => {
                    return Err(CliError::usage(
                        "--resume TASK resumes a parked task of a rehearsal taken up with --continue RUN; give --continue RUN instead of a plan",
                    ));
                }
                (Some(plan), None) => rehearse::What::Plan { plan, retry_budget },
                (None, Some(run)) => rehearse::What::Continue { run, resume },
                _ => {
                    return Err(CliError::usage(
                        "give a plan (or --continue RUN) and --scenario FILE, or `rehearse serve --scenario FILE`",
                    ));
                }
            };
            let Some(scenario) = scenario else {
                return Err(CliError::usage(
                    "give --scenario FILE: what the model server answers",
                ));
            };
            rehearse::rehearse(settings, what, &scenario, seats, &price, keep_requests)?
        }
        Command::Budget(BudgetCommand::Check { spec, plan }) => {
            budget::check(settings, &spec, plan.as_deref())?
        }
        Command::Status { run } => status::status(settings, run.as_deref())?,
        Command::Runs => status::runs(settings)?,
        Command::Report { run, output, open } => {
            report::report(settings, run.as_deref(), output.as_deref(), open)?
        }
        Command::Logs {
            task,
            run,
            follow: true,
            plan,
            ..
        } => logs::follow(&settings.with_plan(plan.name), &task, run.as_deref())?,
        Command::Logs {
            task,
            run,
            attempt,
            gate,
            plan,
            ..
        } => logs::logs(
            &settings.with_plan(plan.name),
            &task,
            run.as_deref(),
            attempt,
            gate.as_deref(),
        )?,
        Command::Task(TaskCommand::List) => status::list(settings)?,
        Command::Task(TaskCommand::ListSuspended) => suspended::list(settings)?,
        Command::Approve { task, note, plan } => {
            approve::approve(&settings.with_plan(plan.name), &task, note)?
        }
        Command::Task(TaskCommand::Show { task, plan }) => {
            status::show(&settings.with_plan(plan.name), &task)?
        }
        Command::Task(TaskCommand::Suspend {
            task,
            plan,
            until,
            reason,
        }) => task::suspend(
            &settings.with_plan(plan.name),
            &task,
            until.as_deref(),
            reason,
        )?,
        Command::Task(TaskCommand::Pause {
            task,
            plan,
            upgrade_after,
        }) => task::pause(
            &settings.with_plan(plan.name),
            &task,
            upgrade_after.as_deref(),
        )?,
        Command::Task(TaskCommand::Unpause { task, plan }) => {
            task::unpause(&settings.with_plan(plan.name), &task)?
        }
        Command::Task(TaskCommand::Resume {
            task,
            plan,
            mode,
            receipt,
        }) => task::resume(
            &settings.with_plan(plan.name),
            &task,
            mode,
            receipt.as_deref(),
        )?,
        Command::Lineage(LineageCommand::Show { task, plan }) => {
            lineage::show(&settings.with_plan(plan.name), &task)?
        }
        Command::Journal(JournalCommand::Show { task, plan, full }) => {
            journal::show(&settings.with_plan(plan.name), &task, full)?
        }
        Command::Journal(JournalCommand::Verify { task, plan }) => {
            journal::verify(&settings.with_plan(plan.name), &task)?
        }
        Command::Audit(AuditCommand::Verify) => audit::verify(settings)?,
        Command::Audit(AuditCommand::VerifySuspension { task, plan }) => {
            audit_suspension::verify(&settings.with_plan(plan.name), &task)?
        }
        Command::Replay(ReplayCommand::Repair { target, all, plan }) => {
            replay::repair(&settings.with_plan(plan.name), target.as_deref(), all)?
        }
        Command::Checkpoint(CheckpointCommand::List { task, run, plan }) => {
            checkpoint::list(&settings.with_plan(plan.name), &task, run.as_deref())?
        }
        Command::Checkpoint(CheckpointCommand::Restore {
            task,
            checkpoint: id,
            run,
            dry_run,
            plan,
        }) => checkpoint::restore(
            &settings.with_plan(plan.name),
            &task,
            &id,
            run.as_deref(),
            dry_run,
        )?,
        Command::Workspace(WorkspaceCommand::Hash {
            dir,
            threads,
            no_cache,
        }) => workspace::hash(settings, dir.as_deref(), threads, no_cache)?,
    };
    if !streamed {
        outcome.print(settings.json);
    }
    Ok(outcome)
}

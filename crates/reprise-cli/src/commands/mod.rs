//! One file per command. Each takes resolved settings and returns an
//! `Outcome`; printing happens here, once.

mod audit;
mod budget;
mod init;
mod journal;
mod lineage;
mod rehearse;
mod replay;
mod run;
mod status;
mod workspace;

use crate::cli::{
    AuditCommand, BudgetCommand, Command, JournalCommand, LineageCommand, RehearseArgs,
    RehearseCommand, ReplayCommand, TaskCommand, WorkspaceCommand,
};
use crate::error::CliError;
use crate::output::Outcome;
use crate::settings::Settings;

pub(crate) fn run(command: Command, settings: &Settings) -> Result<Outcome, CliError> {
    let outcome = match command {
        Command::Init => init::run(settings)?,
        Command::Run {
            plan,
            retry_failed,
            seats,
            retry_budget,
        } => run::run(
            settings,
            plan.as_deref(),
            retry_failed.as_deref(),
            seats,
            retry_budget.as_deref(),
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
        }) => {
            let (Some(plan), Some(scenario)) = (plan, scenario) else {
                return Err(CliError::usage(
                    "give a plan and --scenario FILE, or `rehearse serve --scenario FILE`",
                ));
            };
            rehearse::rehearse(
                settings,
                &plan,
                &scenario,
                seats,
                retry_budget.as_deref(),
                price.as_deref(),
                keep_requests,
            )?
        }
        Command::Budget(BudgetCommand::Check { spec, plan }) => {
            budget::check(settings, &spec, plan.as_deref())?
        }
        Command::Status { run } => status::status(settings, run.as_deref())?,
        Command::Task(TaskCommand::List) => status::list(settings)?,
        Command::Task(TaskCommand::Show { task }) => status::show(settings, &task)?,
        Command::Lineage(LineageCommand::Show { task }) => lineage::show(settings, &task)?,
        Command::Journal(JournalCommand::Show { task }) => journal::show(settings, &task)?,
        Command::Journal(JournalCommand::Verify { task }) => journal::verify(settings, &task)?,
        Command::Audit(AuditCommand::Verify) => audit::verify(settings)?,
        Command::Replay(ReplayCommand::Repair { task }) => replay::repair(settings, &task)?,
        Command::Workspace(WorkspaceCommand::Hash {
            dir,
            threads,
            no_cache,
        }) => workspace::hash(settings, dir.as_deref(), threads, no_cache)?,
    };
    outcome.print(settings.json);
    Ok(outcome)
}

//! Which plan's task a TASK argument names. Task ids are unique only within
//! a plan: `PLAN/TASK` and `--plan PLAN` say it outright; a bare id means the
//! latest run's plan when that plan has the task, else the one plan that
//! does; when several do, the candidates are listed.

use reprise_core::{PlanId, TaskId, TaskKey};
use reprise_engine::{RunState, latest_run, load_run, run_ids};
use reprise_store::state::StateDir;

use crate::error::CliError;
use crate::settings::Settings;

/// Resolves `raw` (a task id or `PLAN/TASK`) to one plan's task.
pub(crate) fn task_key(
    settings: &Settings,
    state: &StateDir,
    raw: &str,
) -> Result<TaskKey, CliError> {
    if raw.contains('/') {
        return TaskKey::parse(raw)
            .map_err(|err| CliError::usage(format!("{raw:?} is not PLAN/TASK: {err}")));
    }
    let task = TaskId::parse(raw)?;
    if let Some(plan) = &settings.plan {
        let plan = PlanId::parse(plan)
            .map_err(|_| CliError::usage(format!("--plan {plan:?} is not a plan name")))?;
        return Ok(TaskKey::new(plan, task));
    }
    let latest = latest_run(state).ok().and_then(|run| run.plan_id());
    let candidates = state.plans_with_task(&task)?;
    if let Some(plan) = latest
        && (candidates.contains(&plan) || candidates.is_empty())
    {
        return Ok(TaskKey::new(plan, task));
    }
    match candidates.as_slice() {
        [] => Err(CliError::usage(format!(
            "no journal for task {task} in any plan of {}; `reprise task list` lists the latest run's tasks",
            state.root().display()
        ))),
        [only] => Ok(TaskKey::new(only.clone(), task)),
        several => Err(CliError::usage(format!(
            "task {task} is in several plans ({}); name one as PLAN/TASK or with --plan",
            several
                .iter()
                .map(|plan| format!("{plan}/{task}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The latest run of `plan`, or of any plan when `plan` is `None`.
pub(crate) fn latest_run_of(state: &StateDir, plan: Option<&PlanId>) -> Result<RunState, CliError> {
    let Some(plan) = plan else {
        return latest_run(state).map_err(|err| CliError::usage(err.to_string()));
    };
    let ids = run_ids(state).map_err(|err| CliError::usage(err.to_string()))?;
    for id in ids.iter().rev() {
        if let Ok(run) = load_run(state, id)
            && run.plan_id().as_ref() == Some(plan)
        {
            return Ok(run);
        }
    }
    Err(CliError::usage(format!(
        "no run of plan {plan} is recorded in {}",
        state.root().display()
    )))
}

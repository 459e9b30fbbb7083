//! `reprise approve TASK`: the signed decision a park `--until approval`
//! waits for.

use reprise_store::approvals::{ApprovalError, approval_path, approve as write_approval, approver};
use reprise_store::state::now_rfc3339;
use serde_json::json;

use crate::commands::PlanArg;
use crate::commands::resolve::task_key;
use crate::error::{CliError, ErrorKind};
use crate::output::{Outcome, short};
use crate::settings::Settings;

#[derive(Debug, clap::Args)]
pub(crate) struct ApproveArgs {
    /// The task (or PLAN/TASK).
    task: String,
    /// Why, kept in the signed approval.
    #[arg(long, value_name = "TEXT")]
    note: Option<String>,
    #[command(flatten)]
    plan: PlanArg,
}

impl ApproveArgs {
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        approve(&settings.with_plan(self.plan.name), &self.task, self.note)
    }
}

/// Refusals of the request are bad input (2); evidence that does not verify
/// and damage found on the way are failures (1).
pub(crate) fn cli_error(err: ApprovalError) -> CliError {
    match err {
        ApprovalError::Store(err) => err.into(),
        err @ (ApprovalError::NoPark { .. }
        | ApprovalError::Settled { .. }
        | ApprovalError::AlreadyApproved { .. }
        | ApprovalError::NotApproved { .. }) => CliError::usage(err.to_string()),
        err => CliError::from_source(ErrorKind::Failed, err),
    }
}

/// Writes the signed approval of `task`'s park: `reprise approve`, and `a`
/// in `reprise watch`.
pub(crate) fn approve(
    settings: &Settings,
    task: &str,
    note: Option<String>,
) -> Result<Outcome, CliError> {
    let (state, key) = settings.keyed_state()?;
    let task = task_key(settings, &state, task)?;
    let approval = write_approval(
        &state,
        &key,
        &task,
        note,
        approver(settings.user.clone()),
        &now_rfc3339(),
    )
    .map_err(cli_error)?;
    let path = approval_path(&state, &task, approval.park);
    let digest = approval.digest();
    let text = format!(
        "approved park {} of {task} (run {}) as {}\n  wrote {}\n  digest {}\n  wake it with `reprise task resume {task}`\n",
        short(&approval.park.to_hex()),
        approval.run,
        approval.approver,
        path.display(),
        short(&digest.to_hex()),
    );
    Ok(Outcome {
        json: json!({
            "plan": task.plan.as_str(),
            "task_id": task.task.as_str(),
            "run_id": approval.run,
            "park": approval.park,
            "approval_digest": digest,
            "path": path,
            "approver": approval.approver,
            "approved_at": approval.approved_at,
            "note": approval.note,
        }),
        text,
        ok: true,
        exit: None,
    })
}

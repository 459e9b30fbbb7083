//! The workspace through a git remote every host can reach: the
//! coordinator pushes each task's base under `refs/reprise/<run>/bases/`,
//! a worker fetches it into its own clone and pushes its result branch
//! `reprise/<run>/<task>`, and the coordinator fetches that branch into the
//! user's repository (created only, never moved), so `diff` and `apply`
//! find it as a local run leaves it.

use std::path::Path;

use reprise_core::TaskId;
use reprise_store::git::Git;

use super::order::TaskOrder;
use super::worker::WorkerHost;
use crate::error::{EngineError, Result};
use crate::sandbox::Workspace;

/// The ref a task's base is published under on the remote (and kept
/// under in a worker's clone).
fn base_ref(run_id: &str, task: &TaskId) -> String {
    format!("refs/reprise/{run_id}/bases/{task}")
}

/// On the coordinator: makes `base` fetchable from `remote` for `task`.
pub(crate) fn publish_base(
    workspace: &Workspace,
    remote: &str,
    run_id: &str,
    task: &TaskId,
    base: &str,
) -> Result<()> {
    let repo = repo_of(workspace, task)?;
    let spec = format!("{base}:{}", base_ref(run_id, task));
    Git::new(repo)
        .run(["push", "-q", remote, spec.as_str()])
        .map_err(|err| remote_error(task, "publish its base", remote, &err))?;
    Ok(())
}

/// On the coordinator: the worker's result branch, fetched into the user's
/// repository under the same name. Fetched without force: an existing
/// branch of that name that is not the same commit is left as it is, and
/// the fetch fails.
pub(crate) fn fetch_result(
    workspace: &Workspace,
    remote: &str,
    task: &TaskId,
    branch: &str,
) -> Result<()> {
    let repo = repo_of(workspace, task)?;
    let spec = format!("refs/heads/{branch}:refs/heads/{branch}");
    Git::new(repo)
        .run(["fetch", "-q", "--no-tags", remote, spec.as_str()])
        .map_err(|err| remote_error(task, "fetch its result", remote, &err))?;
    Ok(())
}

/// On a worker: where the order runs. With a base, the host's clone (made
/// on first use) with the base fetched from the order's remote; without
/// one, the host's project directory, in place.
pub(crate) fn worker_workspace(host: &WorkerHost, order: &TaskOrder) -> Result<Workspace> {
    let Some(base) = &order.base else {
        return Ok(Workspace::InPlace {
            reason: "the task runs in place on its worker".to_owned(),
        });
    };
    let Some(remote) = &order.remote else {
        return Err(EngineError::Sandbox {
            task: order.task.to_string(),
            detail:
                "the order names a base but no git remote to fetch it from; give the run a remote"
                    .to_owned(),
        });
    };
    let clone = &host.project;
    ensure_clone(clone, &order.task)?;
    let spec = format!("+{0}:{0}", base_ref(&order.run_id, &order.task));
    Git::new(clone)
        .run(["fetch", "-q", "--no-tags", remote, spec.as_str()])
        .map_err(|err| remote_error(&order.task, "fetch its base", remote, &err))?;
    Ok(Workspace::Worktrees {
        repo: clone.clone(),
        head: base.clone(),
        base: base.clone(),
        uncommitted: 0,
        included: false,
        subdir: order.subdir.clone(),
    })
}

/// On a worker: pushes the task's result branch to the remote.
pub(crate) fn push_result(workspace: &Workspace, remote: &str, branch: &str) -> Result<()> {
    let task = TaskId::parse(branch.rsplit('/').next().unwrap_or(branch))
        .map_err(|err| EngineError::Lifecycle(err.to_string()))?;
    let repo = repo_of(workspace, &task)?;
    let spec = format!("refs/heads/{branch}:refs/heads/{branch}");
    Git::new(repo)
        .run(["push", "-q", remote, spec.as_str()])
        .map_err(|err| remote_error(&task, "push its result", remote, &err))?;
    Ok(())
}

/// A host's clone: an empty repository until its first fetch.
fn ensure_clone(clone: &Path, task: &TaskId) -> Result<()> {
    if clone.join(".git").exists() {
        return Ok(());
    }
    std::fs::create_dir_all(clone).map_err(|err| EngineError::Sandbox {
        task: task.to_string(),
        detail: format!("cannot create the clone {}: {err}", clone.display()),
    })?;
    Git::new(clone)
        .run(["init", "-q"])
        .map_err(|err| EngineError::Sandbox {
            task: task.to_string(),
            detail: format!("cannot make a clone at {}: {err}", clone.display()),
        })?;
    Ok(())
}

fn repo_of<'w>(workspace: &'w Workspace, task: &TaskId) -> Result<&'w Path> {
    workspace.repo().ok_or_else(|| EngineError::Sandbox {
        task: task.to_string(),
        detail: "the run works in place: there is no repository to share through a remote"
            .to_owned(),
    })
}

fn remote_error(
    task: &TaskId,
    what: &str,
    remote: &str,
    err: &dyn std::fmt::Display,
) -> EngineError {
    EngineError::Sandbox {
        task: task.to_string(),
        detail: format!(
            "cannot {what} through the remote {remote}: {err}; check that every host can reach it"
        ),
    }
}

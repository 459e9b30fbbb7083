//! The workspace through a git remote every host can reach: the
//! coordinator pushes each task's base under `refs/reprise/<run>/bases/`,
//! a worker fetches it into its own clone and pushes its result commit
//! under `refs/reprise/<run>/results/<task>/<commit>`, and the coordinator
//! makes the commit its accepted result names the user's branch
//! `reprise/<run>/<task>` (created only, never moved), so `diff` and
//! `apply` find it as a local run leaves it. The tree each attempt leaves
//! travels too (`refs/reprise/<run>/trees/<task>/<attempt>`, see
//! `TaskRun::send_tree`), for a host that takes the task over.

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

/// The ref a worker's result commit travels under on the remote: named by
/// the commit, so a partitioned host still running cannot move the one
/// the accepted result names, nor refuse the next holder's.
fn result_ref(run_id: &str, task: &TaskId, commit: &str) -> String {
    format!("refs/reprise/{run_id}/results/{task}/{commit}")
}

/// On the coordinator: the result commit the accepted result names,
/// fetched from the remote and made the user's branch `branch` (created
/// only, never moved: an existing branch of that name on another commit is
/// left as it is, and this fails). A ref on the remote that does not hold
/// the commit it is named by is refused.
pub(crate) fn fetch_result(
    workspace: &Workspace,
    remote: &str,
    (run_id, task): (&str, &TaskId),
    branch: &str,
    commit: &str,
) -> Result<()> {
    let repo = repo_of(workspace, task)?;
    let git = Git::new(repo);
    let fetched = format!("refs/reprise/fetched/{run_id}/{task}");
    let spec = format!("+{}:{fetched}", result_ref(run_id, task, commit));
    git.run(["fetch", "-q", "--no-tags", remote, spec.as_str()])
        .map_err(|err| remote_error(task, "fetch its result", remote, &err))?;
    let held = git.run([
        "rev-parse",
        "--verify",
        "--end-of-options",
        fetched.as_str(),
    ]);
    let _ = git.run(["update-ref", "-d", fetched.as_str()]);
    let held = held.map_err(|err| remote_error(task, "fetch its result", remote, &err))?;
    if held.trim() != commit {
        return Err(EngineError::Sandbox {
            task: task.to_string(),
            detail: format!(
                "the remote {remote} holds {} where the result names {commit}: the result was not taken",
                held.trim()
            ),
        });
    }
    let local = format!("refs/heads/{branch}");
    match git.run([
        "rev-parse",
        "--verify",
        "-q",
        "--end-of-options",
        local.as_str(),
    ]) {
        Ok(existing) if existing.trim() == commit => Ok(()),
        Ok(existing) => Err(EngineError::Sandbox {
            task: task.to_string(),
            detail: format!(
                "the branch {branch} already exists at {}; the result {commit} was not taken: delete or rename that branch and continue the run",
                existing.trim()
            ),
        }),
        Err(_) => {
            git.run(["update-ref", local.as_str(), commit, ""])
                .map_err(|err| remote_error(task, "fetch its result", remote, &err))?;
            Ok(())
        }
    }
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

/// On a worker: pushes the task's result commit to the remote, under the
/// ref its commit names.
pub(crate) fn push_result(
    workspace: &Workspace,
    remote: &str,
    (run_id, task): (&str, &TaskId),
    commit: &str,
) -> Result<()> {
    let repo = repo_of(workspace, task)?;
    let spec = format!("{commit}:{}", result_ref(run_id, task, commit));
    Git::new(repo)
        .run(["push", "-q", "-f", remote, spec.as_str()])
        .map_err(|err| remote_error(task, "push its result", remote, &err))?;
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

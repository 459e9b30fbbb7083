//! Where a task's agent works: its own git worktree when the project is a git
//! repository with a commit (`.reprise/worktrees/<task>`, branch
//! `reprise/<task>`), else the project directory itself.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use reprise_core::plan::{Sandbox, Task};
use reprise_store::state::StateDir;

use crate::error::{EngineError, Result};

/// The directory `task` runs in, created if it is a new worktree.
pub(crate) fn prepare(state: &StateDir, project: &Path, task: &Task) -> Result<PathBuf> {
    if task.sandbox == Sandbox::None {
        return Ok(project.to_path_buf());
    }
    if !git_ok(project, &["rev-parse", "--verify", "--quiet", "HEAD"]) {
        // Not a repository, or one without a commit to branch from.
        return Ok(project.to_path_buf());
    }
    let dir = state.worktree_dir(&task.id);
    if dir.join(".git").exists() {
        // A later run of the same plan continues in the task's worktree.
        return Ok(dir);
    }
    let branch = format!("reprise/{}", task.id);
    let output = Command::new("git")
        .arg("-C")
        .arg(project)
        .args(["worktree", "add", "--quiet", "-B", &branch])
        .arg(&dir)
        .arg("HEAD")
        .stdin(Stdio::null())
        .output()
        .map_err(|err| EngineError::Sandbox {
            task: task.id.to_string(),
            detail: format!("cannot run git: {err}"),
        })?;
    if !output.status.success() {
        return Err(EngineError::Sandbox {
            task: task.id.to_string(),
            detail: String::from_utf8_lossy(&output.stderr)
                .trim()
                .replace('\n', "; "),
        });
    }
    Ok(dir)
}

fn git_ok(dir: &Path, args: &[&str]) -> bool {
    Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

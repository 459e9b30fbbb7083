//! reprise's own record of how a task's worktree hangs together with the
//! repository, and the only way reprise's git reaches a worktree.
//!
//! A linked worktree is found by git through files the agent can write: the
//! worktree's `.git` file, and `commondir` and `gitdir` in its admin
//! directory (`.git/worktrees/<name>/`, writable so the agent can commit).
//! Rewritten, they point git at a config the agent wrote, whose filters,
//! diff drivers and includes would run in reprise's own, uncontained git.
//! So when reprise makes a worktree, before any agent ran in it, it records
//! where the admin directory and the repository are, and what the index
//! was, in the state directory (which no agent or gate can reach); from then
//! on its git in the worktree names those outright (`Git::at`,
//! `Git::linked`) and never reads the worktree's linkage.
//!
//! The agent's own git writes its objects into a directory of its own
//! (`GIT_OBJECT_DIRECTORY`, in the admin directory) with the user's store
//! as a read-only alternate: nothing it writes joins the user's store, and
//! nothing there can be replaced. reprise never reads that directory: a
//! result is a tree reprise hashes from the files itself. Once an attempt
//! and its gates are over, the worktree's git state is settled back to what
//! reprise wrote (`settle`), so no HEAD, index or reflog of it names an
//! object the user's store lacks (the user's `git gc` would stop at it).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use reprise_store::git::{Git, copy_with_mtime};
use reprise_store::state::StateDir;
use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};

/// The one directory of a worktree's admin directory the agent's objects
/// go to.
const QUARANTINE: &str = "reprise-objects";

/// What a worktree's admin directory holds once settled; anything else the
/// agent left there (a `config.worktree`, per-worktree refs, a reflog,
/// rebase state) goes.
const ADMIN_KEEPS: &[&str] = &["gitdir", "commondir", "HEAD", "index", QUARANTINE];

/// How a task's worktree is linked, as reprise made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Linkage {
    /// The worktree's top (`.reprise/worktrees/<run>/<task>`).
    pub(crate) work_tree: PathBuf,
    /// `.git/worktrees/<name>`: its HEAD and index.
    pub(crate) admin: PathBuf,
    /// The repository's git directory.
    pub(crate) common: PathBuf,
    /// The commit its HEAD is settled to: its base, then its result.
    pub(crate) head: String,
}

impl Linkage {
    /// Records the linkage of the worktree just made at `work_tree` (no
    /// agent has run in it) for `repo`, checks its files out at `base`, and
    /// keeps a copy of the index that checkout wrote as reprise's stat cache.
    pub(crate) fn create(
        state: &StateDir,
        repo: &Path,
        work_tree: &Path,
        base: &str,
    ) -> Result<Self> {
        // Read from what `git worktree add` just wrote (no git process):
        // `.git` names `<common>/worktrees/<name>`.
        let link = std::fs::read_to_string(work_tree.join(".git"))
            .map_err(|err| io_error(&work_tree.join(".git"), err))?;
        let admin = link
            .strip_prefix("gitdir: ")
            .map(|admin| PathBuf::from(admin.trim_end()))
            .filter(|admin| admin.is_absolute())
            .ok_or_else(|| sandbox_error(work_tree, format!("unexpected .git file: {link:?}")))?;
        let common = match admin.parent().and_then(Path::parent) {
            Some(common) => common.to_path_buf(),
            None => common_dir(repo)?,
        };
        let linkage = Self {
            work_tree: work_tree.to_path_buf(),
            admin,
            common,
            head: base.to_owned(),
        };
        linkage
            .worktree_git()
            .run(["reset", "--hard", "--quiet"])
            .map_err(|err| sandbox_error(work_tree, err.detail))?;
        std::fs::create_dir_all(linkage.quarantine()).map_err(|err| io_error(work_tree, err))?;
        let record = record_path(state, work_tree)?;
        if let Some(parent) = record.parent() {
            std::fs::create_dir_all(parent).map_err(|err| io_error(parent, err))?;
        }
        copy_with_mtime(&linkage.admin.join("index"), &stat_cache_path(&record));
        linkage.save(state)?;
        Ok(linkage)
    }

    /// The recorded linkage of the worktree at `work_tree`. A worktree made
    /// before reprise kept records is adopted once, if its linkage is still
    /// exactly what `git worktree add` writes for `repo`; `None` when there
    /// is no worktree, or its linkage was changed and nothing recorded it.
    pub(crate) fn of(state: &StateDir, repo: &Path, work_tree: &Path) -> Result<Option<Self>> {
        if let Some(recorded) = Self::recorded(state, work_tree)? {
            return Ok(Some(recorded));
        }
        if !work_tree.exists() {
            return Ok(None);
        }
        let adopted = Self::untouched(repo, work_tree)?;
        if let Some(linkage) = &adopted {
            linkage.save(state)?;
        }
        Ok(adopted)
    }

    /// The recorded linkage of the worktree at `work_tree`, if reprise
    /// recorded one.
    pub(crate) fn recorded(state: &StateDir, work_tree: &Path) -> Result<Option<Self>> {
        let record = record_path(state, work_tree)?;
        match std::fs::read(&record) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|err| {
                sandbox_error(
                    work_tree,
                    format!("{} cannot be read ({err})", record.display()),
                )
            }),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(io_error(&record, err)),
        }
    }

    /// The linkage git's own files give, when they are exactly what `git
    /// worktree add` wrote: `.git` names an admin directory directly under
    /// the repository's `worktrees/`, which names this worktree back.
    fn untouched(repo: &Path, work_tree: &Path) -> Result<Option<Self>> {
        let common = common_dir(repo)?;
        let Ok(link) = std::fs::read_to_string(work_tree.join(".git")) else {
            return Ok(None);
        };
        let Some(admin) = link.strip_prefix("gitdir: ").map(str::trim_end) else {
            return Ok(None);
        };
        let admin = PathBuf::from(admin);
        let under_worktrees = admin.parent() == Some(common.join("worktrees").as_path())
            && matches!(admin.components().next_back(), Some(Component::Normal(_)));
        let back = std::fs::read_to_string(admin.join("gitdir")).unwrap_or_default();
        let names_back = Path::new(back.trim_end()) == work_tree.join(".git");
        let commondir = std::fs::read_to_string(admin.join("commondir")).unwrap_or_default();
        if !under_worktrees || !names_back || commondir.trim_end() != "../.." {
            return Ok(None);
        }
        let head = std::fs::read_to_string(admin.join("HEAD")).unwrap_or_default();
        let head = head.trim_end();
        if head.len() != 40 || !head.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(None);
        }
        Ok(Some(Self {
            work_tree: work_tree.to_path_buf(),
            admin,
            common,
            head: head.to_owned(),
        }))
    }

    fn save(&self, state: &StateDir) -> Result<()> {
        let record = record_path(state, &self.work_tree)?;
        let bytes = serde_json::to_vec(self).expect("a linkage serialises");
        reprise_store::write_atomic(&record, &bytes, 0o600)
            .map_err(|err| sandbox_error(&self.work_tree, err.to_string()))
    }

    /// reprise's git over the worktree's files with the user's repository
    /// (its config, its objects) and no index but one given per command.
    pub(crate) fn repository(&self) -> Git {
        Git::at(&self.common, &self.work_tree)
    }

    /// reprise's git over the worktree as a worktree (its HEAD and index in
    /// the recorded admin directory).
    pub(crate) fn worktree_git(&self) -> Git {
        Git::linked(&self.admin, &self.common, &self.work_tree)
    }

    /// Where the agent's git writes its objects.
    pub(crate) fn quarantine(&self) -> PathBuf {
        self.admin.join(QUARANTINE)
    }

    /// reprise's own copy of the worktree's index: stat data for the files
    /// as reprise last checked out or committed them.
    pub(crate) fn stat_cache(&self, state: &StateDir) -> Result<PathBuf> {
        record_path(state, &self.work_tree).map(|record| stat_cache_path(&record))
    }

    /// What an agent or gate in this worktree may write of the repository:
    /// the admin directory (its HEAD, index and object quarantine). Not the
    /// user's object store, refs, config or hooks.
    pub(crate) fn writable(&self) -> Vec<PathBuf> {
        vec![self.admin.clone()]
    }

    /// The variables that send the agent's git objects to its quarantine,
    /// reading the user's store as an alternate.
    pub(crate) fn agent_env(&self) -> Vec<(String, String)> {
        vec![
            (
                "GIT_OBJECT_DIRECTORY".to_owned(),
                self.quarantine().to_string_lossy().into_owned(),
            ),
            (
                "GIT_ALTERNATE_OBJECT_DIRECTORIES".to_owned(),
                self.common.join("objects").to_string_lossy().into_owned(),
            ),
        ]
    }

    /// Puts the worktree's git state back to what reprise wrote: its `.git`
    /// file, the admin directory's `gitdir` and `commondir`, HEAD at the
    /// settled commit, the index from reprise's copy, and nothing else in
    /// the admin directory. Plain file writes (a new file renamed over the
    /// old name, so a symlink the agent planted is replaced, never
    /// followed); no git runs.
    pub(crate) fn settle(&self, state: &StateDir) -> Result<()> {
        let fail = |path: &Path, err: std::io::Error| io_error(path, err);
        if let Ok(entries) = std::fs::read_dir(&self.admin) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                if ADMIN_KEEPS.iter().any(|keep| name == *keep) {
                    continue;
                }
                remove_entry(&entry.path()).map_err(|err| fail(&entry.path(), err))?;
            }
        }
        let git_link = self.work_tree.join(".git");
        if std::fs::symlink_metadata(&git_link).is_ok_and(|meta| meta.is_dir()) {
            std::fs::remove_dir_all(&git_link).map_err(|err| fail(&git_link, err))?;
        }
        replace_file(
            &self.work_tree,
            ".git",
            format!("gitdir: {}\n", self.admin.display()).as_bytes(),
        )
        .map_err(|err| fail(&git_link, err))?;
        for (name, content) in [
            ("gitdir", format!("{}\n", git_link.display())),
            ("commondir", "../..\n".to_owned()),
            ("HEAD", format!("{}\n", self.head)),
        ] {
            replace_file(&self.admin, name, content.as_bytes())
                .map_err(|err| fail(&self.admin.join(name), err))?;
        }
        let index = self.admin.join("index");
        let scratch = self.admin.join(format!("index-{}", ulid::Ulid::new()));
        if copy_with_mtime(&self.stat_cache(state)?, &scratch) {
            std::fs::rename(&scratch, &index).map_err(|err| fail(&index, err))?;
        } else if std::fs::symlink_metadata(&index).is_ok() {
            remove_entry(&index).map_err(|err| fail(&index, err))?;
        }
        Ok(())
    }

    /// After a result commit: HEAD settles there, with `index` (the index
    /// it was committed from) as reprise's copy and the worktree's own.
    pub(crate) fn advance(&mut self, state: &StateDir, commit: &str, index: &Path) -> Result<()> {
        self.head = commit.to_owned();
        let cache = self.stat_cache(state)?;
        copy_with_mtime(index, &cache);
        self.save(state)?;
        self.settle(state)
    }

    /// Unregisters the worktree (its files already removed but for `.git`)
    /// through git, its linkage first put back so git finds exactly this
    /// entry. Holds no lock: the caller holds the worktree lock, and
    /// forgets the record.
    pub(crate) fn unregister(&self, state: &StateDir) -> Result<bool> {
        self.settle(state)?;
        let git = Git::at(&self.common, &self.work_tree);
        let mut command = git.command();
        command
            .args(["worktree", "remove", "--force", "--force"])
            .arg(&self.work_tree);
        Ok(git.output(command).is_ok())
    }
}

/// Forgets the record of the worktree at `work_tree` (and its run's
/// directory of records, once empty).
pub(crate) fn forget(state: &StateDir, work_tree: &Path) {
    if let Ok(record) = record_path(state, work_tree) {
        let _ = std::fs::remove_file(stat_cache_path(&record));
        let _ = std::fs::remove_file(&record);
        if let Some(parent) = record.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

/// `links/<run>/<task>.json` for `worktrees/<run>/<task>`.
fn record_path(state: &StateDir, work_tree: &Path) -> Result<PathBuf> {
    let relative = work_tree.strip_prefix(state.worktrees_dir()).map_err(|_| {
        sandbox_error(
            work_tree,
            "is not a worktree of this state directory".into(),
        )
    })?;
    let mut record = state.root().join("links").join(relative);
    record.as_mut_os_string().push(".json");
    Ok(record)
}

fn stat_cache_path(record: &Path) -> PathBuf {
    record.with_extension("index")
}

/// The repository's git directory, absolute.
fn common_dir(repo: &Path) -> Result<PathBuf> {
    reprise_store::git::common_dir_of(repo).map_err(|err| sandbox_error(repo, err.detail))
}

/// Writes `bytes` as `dir/name` through a new file renamed over it.
fn replace_file(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let temp = dir.join(format!(".{name}.{}", ulid::Ulid::new()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&temp)?;
    file.write_all(bytes)?;
    drop(file);
    std::fs::rename(&temp, dir.join(name)).inspect_err(|_| {
        let _ = std::fs::remove_file(&temp);
    })
}

/// Removes a file, a symlink (never its target) or a directory tree.
fn remove_entry(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}

fn sandbox_error(path: &Path, detail: String) -> EngineError {
    EngineError::Sandbox {
        task: path.display().to_string(),
        detail,
    }
}

fn io_error(path: &Path, err: std::io::Error) -> EngineError {
    sandbox_error(path, format!("{}: {err}", path.display()))
}

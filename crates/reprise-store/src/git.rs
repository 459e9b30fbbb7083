//! reprise's own git: every command it runs on the user's repository goes
//! through here, with hooks off and without the user's global or system
//! config, so a hook planted in `.git/hooks` never runs inside reprise and a
//! user's `~/.gitconfig` never changes what a result commit holds.
//!
//! Commits reprise makes carry a fixed identity (`reprise`), never the
//! user's, since the user did not write them.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A git command that could not run, or failed, in `dir`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("git in {dir}: {detail}")]
pub struct GitError {
    pub dir: PathBuf,
    pub detail: String,
}

pub type Result<T, E = GitError> = std::result::Result<T, E>;

/// Settings passed as `-c` to every command: no hooks, no signing prompts,
/// no pager, no fsmonitor daemon started on the user's behalf.
const CONFIG: &[&str] = &[
    "core.hooksPath=/dev/null",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "core.fsmonitor=false",
    "core.pager=cat",
    "advice.detachedHead=false",
    "merge.autoStash=false",
];

/// Variables of reprise's own environment that would tell git where a
/// repository, its objects or its config are: never inherited (an agent's
/// environment sets some of them for its own git).
const INHERITED_LOCATION: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_ATTR_SOURCE",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_EXTERNAL_DIFF",
];

/// One repository (or worktree) as reprise's git sees it.
#[derive(Debug, Clone)]
pub struct Git {
    dir: PathBuf,
    /// Where the repository is, when it is not to be found from `dir`.
    explicit: Option<Explicit>,
}

/// A repository named to git outright (`GIT_DIR`, `GIT_COMMON_DIR`,
/// `GIT_WORK_TREE`), so git never reads a worktree's `.git` file or its
/// admin directory's `commondir` to find it: in a task's worktree those are
/// the agent's to rewrite, and following them would let the agent choose
/// the config (filters, drivers, `include.path`) reprise's git runs with.
#[derive(Debug, Clone)]
struct Explicit {
    git_dir: PathBuf,
    common_dir: Option<PathBuf>,
}

impl Git {
    /// The repository git finds from `dir`: for the user's own repository
    /// and reprise's, never for a task's worktree (see `Git::at`).
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            explicit: None,
        }
    }

    /// The repository whose git directory is `git_dir`, with `work_tree` as
    /// its working tree: nothing of `work_tree`'s own `.git` is read.
    pub fn at(git_dir: &Path, work_tree: &Path) -> Self {
        Self {
            dir: work_tree.to_path_buf(),
            explicit: Some(Explicit {
                git_dir: git_dir.to_path_buf(),
                common_dir: None,
            }),
        }
    }

    /// A linked worktree at `work_tree` whose per-worktree state (HEAD,
    /// index) is `admin` and whose repository is `common`, as reprise
    /// recorded them when it made the worktree.
    pub fn linked(admin: &Path, common: &Path, work_tree: &Path) -> Self {
        Self {
            dir: work_tree.to_path_buf(),
            explicit: Some(Explicit {
                git_dir: admin.to_path_buf(),
                common_dir: Some(common.to_path_buf()),
            }),
        }
    }

    /// A `git` command in this directory with reprise's settings.
    pub fn command(&self) -> Command {
        self.command_from(&self.dir)
    }

    /// [`Git::command`] started from `cwd` instead of the work tree, for
    /// plumbing that reads only the repository once the tree is gone
    /// (anything that needs the tree then fails on it, naming it).
    pub fn command_from(&self, cwd: &Path) -> Command {
        let mut command = Command::new("git");
        command.arg("-C").arg(cwd);
        for setting in CONFIG {
            command.arg("-c").arg(setting);
        }
        command
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("GIT_AUTHOR_NAME", "reprise")
            .env("GIT_AUTHOR_EMAIL", "reprise@localhost")
            .env("GIT_COMMITTER_NAME", "reprise")
            .env("GIT_COMMITTER_EMAIL", "reprise@localhost")
            .env("GIT_ATTR_NOSYSTEM", "1")
            .env("LC_ALL", "C")
            .stdin(Stdio::null());
        for name in INHERITED_LOCATION {
            command.env_remove(name);
        }
        if let Some(explicit) = &self.explicit {
            command
                .env("GIT_DIR", &explicit.git_dir)
                .env("GIT_WORK_TREE", &self.dir);
            if let Some(common) = &explicit.common_dir {
                command.env("GIT_COMMON_DIR", common);
            }
        }
        command
    }

    /// Runs `git ARGS` and returns its stdout, trimmed of the final newline;
    /// a non-zero exit is an error carrying git's stderr.
    pub fn run<I, S>(&self, args: I) -> Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = self.command();
        command.args(args);
        let output = self.output(command)?;
        Ok(stdout_line(&output))
    }

    /// Runs a prepared command, turning a failed exit into an error.
    pub fn output(&self, mut command: Command) -> Result<Output> {
        let output = command.output().map_err(|err| GitError {
            dir: self.dir.clone(),
            detail: format!("cannot run git: {err}"),
        })?;
        if !output.status.success() {
            return Err(GitError {
                dir: self.dir.clone(),
                detail: one_line(&output.stderr),
            });
        }
        Ok(output)
    }

    /// Whether `git ARGS` exits 0 (output discarded).
    pub fn succeeds(&self, args: &[&str]) -> bool {
        let mut command = self.command();
        command
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command.status().is_ok_and(|status| status.success())
    }

    /// The commit `rev` names, in full.
    pub fn commit_of(&self, rev: &str) -> Result<String> {
        self.run([
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ])
    }

    /// Whether this is a repository with at least one commit.
    pub fn has_commit(&self) -> bool {
        self.succeeds(&["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
    }

    /// The top of the working tree this directory is in.
    pub fn toplevel(&self) -> Result<PathBuf> {
        self.run(["rev-parse", "--show-toplevel"])
            .map(PathBuf::from)
    }

    /// The repository's own git directory, absolute (for a linked
    /// worktree, the main repository's).
    pub fn common_dir(&self) -> Result<PathBuf> {
        self.run(["rev-parse", "--path-format=absolute", "--git-common-dir"])
            .map(PathBuf::from)
    }

    /// The full name of the branch checked out, if any (`None` when detached).
    pub fn current_branch(&self) -> Option<String> {
        self.run(["symbolic-ref", "--quiet", "HEAD"]).ok()
    }

    /// Whether `name` (a full ref name) exists.
    pub fn ref_exists(&self, name: &str) -> bool {
        self.succeeds(&["show-ref", "--verify", "--quiet", name])
    }

    /// Paths changed between two commits (`--no-renames`, so a rename is a
    /// delete and an add, as a file listing should show it).
    pub fn changed_files(&self, from: &str, to: &str) -> Result<Vec<String>> {
        let out = self.run(["diff", "--name-only", "--no-renames", "-z", from, to])?;
        Ok(split_nul(&out))
    }

    /// Paths with uncommitted changes in the working tree or index, or
    /// untracked and not ignored, from `git status` (which, with optional
    /// locks off, never rewrites the index).
    pub fn dirty_files(&self) -> Result<Vec<String>> {
        let out = self.run(["status", "--porcelain=v1", "-z", "--untracked-files=all"])?;
        let mut files = Vec::new();
        let mut entries = out.split('\0').filter(|entry| !entry.is_empty());
        while let Some(entry) = entries.next() {
            let (status, path) = entry.split_at(entry.len().min(3));
            files.push(path.to_owned());
            if status.starts_with('R') || status.starts_with('C') {
                // A rename or copy is followed by its source path.
                if let Some(source) = entries.next() {
                    files.push(source.to_owned());
                }
            }
        }
        Ok(files)
    }

    /// Writes a tree of the working tree at `worktree` (tracked, untracked
    /// and deleted files, honouring ignore rules) without touching any index
    /// but a temporary one, starting from `base`'s tree.
    ///
    /// The temporary index starts as a copy of the tree's own index when it
    /// has one (its stat data lets `add` skip every unchanged file; the copy
    /// keeps the original's mtime, so git's racy-entry check still sees what
    /// changed in the same instant the index was written), else as `base`.
    pub fn snapshot_tree(&self, base: &str, scratch: &Path) -> Result<String> {
        self.snapshot_index(base, scratch).map(|(tree, _)| tree)
    }

    /// `snapshot_tree`, also handing back the temporary index it wrote:
    /// exactly the tree's entries, with stat data fresh from `add`.
    pub fn snapshot_index(&self, base: &str, scratch: &Path) -> Result<(String, ScratchIndex)> {
        let own = self.own_index();
        self.snapshot_index_seeded(base, scratch, own.as_deref(), false)
    }

    /// `snapshot_index` starting from the index file `seed` (copied with its
    /// mtime; its stat data spares `add` the unchanged files) instead of the
    /// tree's own index; from `base` alone when there is none or it cannot
    /// be copied. A task's worktree is snapshotted from reprise's own copy
    /// of its index: the one in its admin directory is the agent's to write,
    /// and an entry there could name any blob for a file whose stat data it
    /// copied.
    ///
    /// The seed is settled first (`shadow_tree::settle_index`; this git's
    /// directory is the tree's top): entries whose files are exactly as
    /// recorded are taken on their stat data, not read again as racily
    /// clean, which after a checkout of many files in one second is every
    /// file. For that the settled copy is dated a second ahead until `add`
    /// and `write-tree` have read it, so call this only when no process can
    /// write the tree meanwhile (a task's tree once its attempts and gates
    /// are over).
    pub fn snapshot_index_from(
        &self,
        base: &str,
        scratch: &Path,
        seed: Option<&Path>,
    ) -> Result<(String, ScratchIndex)> {
        self.snapshot_index_seeded(base, scratch, seed, true)
    }

    fn snapshot_index_seeded(
        &self,
        base: &str,
        scratch: &Path,
        seed: Option<&Path>,
        settle: bool,
    ) -> Result<(String, ScratchIndex)> {
        let index = ScratchIndex {
            path: scratch.join(format!("index-{}", ulid::Ulid::new())),
        };
        let settled = settle
            && seed.is_some_and(|seed| {
                crate::shadow_tree::settle_index(seed, &self.dir, &index.path).unwrap_or(false)
            });
        let seeded = settled || seed.is_some_and(|seed| copy_with_mtime(seed, &index.path));
        if !seeded {
            let mut read = self.command();
            read.env("GIT_INDEX_FILE", &index.path)
                .args(["read-tree", base]);
            self.output(read)?;
        }
        let mut add = self.command();
        add.env("GIT_INDEX_FILE", &index.path)
            .args(["add", "-A", "--", "."]);
        // `write-tree` writes the index again (with its cache tree), and git
        // reads every racily clean entry's file before it writes an index:
        // the index `add` wrote (its entries just checked) is dated ahead
        // again for it.
        let written = self.output(add).and_then(|_| {
            if settled {
                crate::shadow_tree::date_ahead(&index.path);
            }
            let mut write = self.command();
            write.env("GIT_INDEX_FILE", &index.path).arg("write-tree");
            self.output(write)
        });
        if settled {
            crate::shadow_tree::honest_time(&index.path);
        }
        let tree = stdout_line(&written?);
        Ok((tree, index))
    }

    /// Whether a checkout here writes every file exactly as its blob: no
    /// attributes (in the tree's index or `info/attributes`) that could
    /// filter or convert content, no `core.autocrlf`, and none of the index
    /// features whose state lives outside the index file (split index,
    /// sparse checkout, untracked cache). Then this tree's index, just after
    /// a checkout, is also a true stat cache for any other git directory
    /// tracking the same files.
    pub fn checks_out_verbatim(&self) -> bool {
        let Ok(config) = self.run(["config", "--list"]) else {
            return false;
        };
        let off = |value: &str| matches!(value, "false" | "no" | "off" | "0" | "");
        let converts = config.lines().any(|line| {
            let (key, value) = line.split_once('=').unwrap_or((line, ""));
            let key = key.to_ascii_lowercase();
            let value = value.to_ascii_lowercase();
            key.starts_with("filter.")
                || (matches!(
                    key.as_str(),
                    "core.autocrlf"
                        | "core.splitindex"
                        | "core.sparsecheckout"
                        | "core.untrackedcache"
                        | "feature.manyfiles"
                ) && !off(&value))
        });
        if converts {
            return false;
        }
        let attributes_in_tree = self.run(["ls-files", "-z", "--", ":(glob)**/.gitattributes"]);
        let attributes_file = self.run([
            "rev-parse",
            "--path-format=absolute",
            "--git-path",
            "info/attributes",
        ]);
        matches!(
            (attributes_in_tree, attributes_file),
            (Ok(listed), Ok(file)) if listed.is_empty() && !Path::new(&file).exists()
        )
    }

    /// Where this tree's own index file is, if git can say.
    pub fn own_index(&self) -> Option<PathBuf> {
        self.run(["rev-parse", "--path-format=absolute", "--git-path", "index"])
            .ok()
            .map(PathBuf::from)
    }

    /// A commit of `tree` with `parents` and `message`; no ref moves.
    pub fn commit_tree(&self, tree: &str, parents: &[&str], message: &str) -> Result<String> {
        let mut command = self.command();
        command.args(["commit-tree", tree, "-F", "-"]);
        for parent in parents {
            command.args(["-p", parent]);
        }
        run_with_stdin(self, command, message)
    }

    /// The tree of commit `rev`.
    pub fn tree_of(&self, rev: &str) -> Result<String> {
        self.run(["rev-parse", &format!("{rev}^{{tree}}")])
    }

    /// Merges commits `ours` and `theirs` in memory (`git merge-tree`), never
    /// touching a working tree or index: `Ok(tree)` when clean, else the
    /// conflicted paths.
    pub fn merge_trees(&self, ours: &str, theirs: &str) -> Result<Merged> {
        self.merge_trees_over(None, ours, theirs)
    }

    /// As [`Git::merge_trees`], with `base` as the merge base: what changed
    /// from `base` to `theirs` is carried onto `ours`, and nothing else of
    /// `theirs` (what `base` holds that `ours` does not stays out).
    pub fn merge_trees_from(&self, base: &str, ours: &str, theirs: &str) -> Result<Merged> {
        self.merge_trees_over(Some(base), ours, theirs)
    }

    fn merge_trees_over(&self, base: Option<&str>, ours: &str, theirs: &str) -> Result<Merged> {
        let mut command = self.command();
        command.args([
            "merge-tree",
            "--write-tree",
            "--name-only",
            "--no-messages",
            "-z",
        ]);
        if let Some(base) = base {
            command.arg(format!("--merge-base={base}"));
        }
        command.args([ours, theirs]);
        let output = command.output().map_err(|err| GitError {
            dir: self.dir.clone(),
            detail: format!("cannot run git: {err}"),
        })?;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let mut fields = text.split('\0');
        let tree = fields.next().unwrap_or_default().trim().to_owned();
        match output.status.code() {
            Some(0) => Ok(Merged::Clean(tree)),
            Some(1) => {
                let mut files: Vec<String> = fields
                    .filter(|field| !field.is_empty())
                    .map(str::to_owned)
                    .collect();
                files.sort();
                files.dedup();
                Ok(Merged::Conflict(files))
            }
            _ => Err(GitError {
                dir: self.dir.clone(),
                detail: one_line(&output.stderr),
            }),
        }
    }

    /// Whether `ancestor` is an ancestor of (or equal to) `descendant`.
    pub fn is_ancestor(&self, ancestor: &str, descendant: &str) -> bool {
        self.succeeds(&["merge-base", "--is-ancestor", ancestor, descendant])
    }
}

/// A temporary index in reprise's scratch directory, removed when dropped
/// unless it was made some tree's own.
#[derive(Debug)]
pub struct ScratchIndex {
    path: PathBuf,
}

impl ScratchIndex {
    /// The temporary index file itself.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchIndex {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What an in-memory merge gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merged {
    Clean(String),
    Conflict(Vec<String>),
}

/// Copies the file `from` to `to` with its mtime (git's racy-entry check
/// then still re-reads a file written in the same instant as the index);
/// false when it cannot.
pub fn copy_with_mtime(from: &Path, to: &Path) -> bool {
    let Ok(modified) = std::fs::metadata(from).and_then(|meta| meta.modified()) else {
        return false;
    };
    std::fs::copy(from, to).is_ok()
        && std::fs::File::options()
            .write(true)
            .open(to)
            .and_then(|file| file.set_modified(modified))
            .is_ok()
}

fn run_with_stdin(git: &Git, mut command: Command, input: &str) -> Result<String> {
    use std::io::Write as _;
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().map_err(|err| GitError {
        dir: git.dir.clone(),
        detail: format!("cannot run git: {err}"),
    })?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input.as_bytes());
    }
    let output = child.wait_with_output().map_err(|err| GitError {
        dir: git.dir.clone(),
        detail: format!("git did not finish: {err}"),
    })?;
    if !output.status.success() {
        return Err(GitError {
            dir: git.dir.clone(),
            detail: one_line(&output.stderr),
        });
    }
    Ok(stdout_line(&output))
}

/// The git directory of the repository whose top is `repo`: its `.git`
/// when that is a main repository's own directory (read without starting
/// git), else what git says.
pub fn common_dir_of(repo: &Path) -> Result<PathBuf> {
    let dot_git = repo.join(".git");
    if dot_git.join("objects").is_dir()
        && dot_git.join("HEAD").is_file()
        && !dot_git.join("commondir").exists()
        && let Ok(absolute) = dot_git.canonicalize()
    {
        return Ok(absolute);
    }
    Git::new(repo).common_dir()
}

fn stdout_line(output: &Output) -> String {
    let text = String::from_utf8_lossy(&output.stdout);
    text.strip_suffix('\n').unwrap_or(&text).to_owned()
}

fn split_nul(text: &str) -> Vec<String> {
    text.split('\0')
        .filter(|entry| !entry.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Git's stderr as one line.
fn one_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let joined: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    if joined.is_empty() {
        "git failed without saying why".to_owned()
    } else {
        joined.join("; ")
    }
}

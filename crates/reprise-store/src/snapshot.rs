//! File checkpoints: exact snapshots of a task's tree, and rollback to one.
//!
//! Each tree gets a shadow git directory of its own under
//! `.reprise/snapshots/<run>/<task>/`, with its own index, that shares the
//! project's objects through `objects/info/alternates` when there is a
//! project repository. Nothing here ever reads or writes the user's index,
//! refs, stash or config: every command runs with `GIT_DIR` set to the shadow
//! directory and `GIT_WORK_TREE` to the task's tree.
//!
//! A checkpoint holds every file present (tracked, untracked and ignored
//! alike: `add --force`), symlinks as links, and in its commit message a
//! manifest of what git alone cannot give back: permission bits other than
//! 0644/0755, directories (empty ones included, and their modes), and the
//! files skipped for their size. Because the shadow index keeps git's stat
//! cache, a checkpoint re-reads only files that changed since the last one.
//! The tree and the index are written by reprise (`crate::shadow_tree`)
//! when git would take the tree as it is, and by `git add` and `git
//! write-tree` otherwise (attributes, nested repositories, odd names);
//! a fresh worktree lends its own index as the first stat cache
//! (`adopt_checkout_index`), so the first checkpoint, and a park's restore
//! into a fresh checkout, read and write only what differs from the base.
//!
//! Rollback puts the checkpoint's tree back (`read-tree --reset -u`), removes
//! everything created since (`clean -ffdx`), then restores modes and
//! directories from the manifest. Files skipped by size are left alone, and
//! the restore reports them.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::git::{Git, GitError};

/// Files larger than this are not snapshotted unless a plan says otherwise.
pub use reprise_core::plan::DEFAULT_CHECKPOINT_MAX_FILE_BYTES as DEFAULT_MAX_FILE_BYTES;

/// Format version of a checkpoint's manifest.
const MANIFEST_VERSION: u64 = 1;

/// Why a checkpoint could not be taken or restored.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("no checkpoint {id} in {dir}; `reprise checkpoint list` lists them")]
    Unknown { id: String, dir: PathBuf },
    #[error("checkpoint {id} has a manifest this reprise cannot read ({detail})")]
    BadManifest { id: String, detail: String },
}

pub type Result<T, E = SnapshotError> = std::result::Result<T, E>;

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> SnapshotError + '_ {
    move |source| SnapshotError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What a checkpoint holds, beyond git's tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub v: u64,
    /// A label the caller chose (`attempt 2`, `failed tree`, ...).
    pub label: String,
    /// Files (and symlinks) in the checkpoint, and their bytes.
    pub files: u64,
    pub bytes: u64,
    /// Files left out for their size, with their size then.
    pub skipped: Vec<(String, u64)>,
    /// Permission bits of files that git would not give back (not 0644 or 0755).
    pub modes: BTreeMap<String, u32>,
    /// Every directory, with its permission bits, so empty ones come back.
    pub dirs: BTreeMap<String, u32>,
}

/// One checkpoint: its id (the shadow commit) and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The shadow commit's hash.
    pub id: String,
    /// The git tree of the files.
    pub tree: String,
    pub manifest: Manifest,
}

/// What a restore changed (or, for a dry run, would change).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Changes {
    /// `(letter, path)`, as git names a change in the restore's direction
    /// (from the tree now to the checkpoint): `A` brought back (deleted
    /// since), `D` deleted (created since), `M` given its checkpoint's
    /// content, `T` given its checkpoint's type, `P` given its mode.
    pub files: Vec<(String, String)>,
    /// Files the checkpoint skipped for their size: left as they are.
    pub not_restored: Vec<String>,
}

/// The shadow store of one tree.
#[derive(Debug, Clone)]
pub struct SnapshotStore {
    git_dir: PathBuf,
    tree: PathBuf,
    max_file_bytes: u64,
}

impl SnapshotStore {
    /// Opens (creating if needed) the shadow directory `git_dir` for `tree`.
    /// `objects_from` is a repository whose objects the shadow may share.
    pub fn open(
        git_dir: &Path,
        tree: &Path,
        objects_from: Option<&Path>,
        max_file_bytes: u64,
    ) -> Result<Self> {
        let store = Self {
            git_dir: git_dir.to_path_buf(),
            tree: tree.to_path_buf(),
            max_file_bytes,
        };
        if !git_dir.join("HEAD").is_file() {
            // The shadow's own settings (crate::loose): no ignore rules of
            // its own, no automatic gc while a task runs, links as links.
            let alternate = match objects_from {
                Some(repo) => Some(crate::git::common_dir_of(repo)?.join("objects")),
                None => None,
            };
            crate::loose::init_shadow(git_dir, alternate.as_deref()).map_err(io_at(git_dir))?;
        } else {
            crate::loose::neutral_attributes(git_dir).map_err(io_at(git_dir))?;
        }
        Ok(store)
    }

    /// Removes the index lock a killed process left in the store. Only
    /// for the holder of the task's lock (the one process that writes the
    /// store): any lock it finds is a dead process's, and git would refuse
    /// every checkpoint and rollback of the task until it went.
    pub fn clear_stale_lock(&self) -> Result<bool> {
        let lock = self.git_dir.join("index.lock");
        match fs::remove_file(&lock) {
            Ok(()) => Ok(true),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(err) => Err(io_at(&lock)(err)),
        }
    }

    pub fn git_dir(&self) -> &Path {
        &self.git_dir
    }

    /// The tree the checkpoints cover.
    pub fn tree(&self) -> &Path {
        &self.tree
    }

    /// A git command against the shadow directory and the tree.
    fn git(&self) -> (Git, std::process::Command) {
        let git = Git::at(&self.git_dir, &self.tree);
        // A tree that is gone (a reclaimed worktree) leaves its checkpoints
        // readable: git starts from the store instead.
        let command = if self.tree.is_dir() {
            git.command()
        } else {
            let mut command = git.command_from(&self.git_dir);
            command.env_remove("GIT_WORK_TREE");
            command
        };
        (git, command)
    }

    fn run(&self, args: &[&str]) -> Result<String> {
        let (git, mut command) = self.git();
        command.args(args);
        let output = git.output(command)?;
        let text = String::from_utf8_lossy(&output.stdout);
        Ok(text.strip_suffix('\n').unwrap_or(&text).to_owned())
    }

    /// Pathspecs that keep reprise's own files and the tree's `.git` out.
    fn exclusions(skipped: &[(String, u64)]) -> Vec<String> {
        let mut specs = vec![
            ":(exclude).git".to_owned(),
            ":(exclude,top).reprise".to_owned(),
        ];
        specs.extend(
            skipped
                .iter()
                .map(|(path, _)| format!(":(exclude,literal){path}")),
        );
        specs
    }

    /// Takes the tree's own git index as the shadow's stat cache, when the
    /// tree is a fresh checkout whose files are exactly its index's blobs
    /// (`Git::checks_out_verbatim`): the next checkpoint then re-reads only
    /// what changed since the checkout, and a restore writes only the files
    /// that differ from it. Anything else keeps the shadow's own index;
    /// false then.
    /// `tree` is the git of the checkout and `index` a copy of the index
    /// its checkout wrote, both as reprise holds them (never found through
    /// the tree's own `.git`, which its agent may rewrite).
    pub fn adopt_checkout_index(&self, tree: &Git, index: &Path) -> bool {
        tree.checks_out_verbatim() && self.adopt_verbatim_index(index)
    }

    /// The same, for a caller that has already asked
    /// `Git::checks_out_verbatim` of the checkout.
    pub fn adopt_verbatim_index(&self, index: &Path) -> bool {
        let adopted = crate::git::copy_with_mtime(index, &self.git_dir.join("index"));
        if adopted {
            self.trust_stat_data();
        }
        adopted
    }

    /// Dates the shadow index one second ahead of now, so git trusts the
    /// stat data of every entry in it.
    ///
    /// git built without nanosecond times (Debian's is) takes an entry whose
    /// file changed in the same second its index was written as "racily
    /// clean", and reads that file again on every later command: after a
    /// checkout that took under a second, that is every file, once for the
    /// first checkpoint and once more for a park's restore. An adopted index
    /// was written by the checkout of a tree nothing has touched since (no
    /// agent has run in a tree reprise just made), so its stat data are
    /// true. The date holds for the next command only: it rewrites the index,
    /// and `honest_index_time` puts back the real time if it did not.
    fn trust_stat_data(&self) {
        self.date_index(std::time::SystemTime::now() + std::time::Duration::from_secs(1));
    }

    /// Puts the shadow index's time back to now when it is ahead of it
    /// (`trust_stat_data`), so a file an agent changes later in this same
    /// second is again read by git, not taken on its stat data.
    fn honest_index_time(&self) {
        let now = std::time::SystemTime::now();
        if fs::metadata(self.git_dir.join("index"))
            .and_then(|meta| meta.modified())
            .is_ok_and(|modified| modified > now)
        {
            self.date_index(now);
        }
    }

    /// Sets the shadow index's modification time (a missing index is left
    /// missing).
    fn date_index(&self, time: std::time::SystemTime) {
        let _ = fs::File::options()
            .write(true)
            .open(self.git_dir.join("index"))
            .and_then(|file| file.set_modified(time));
    }

    /// Takes a checkpoint of the tree as it is now.
    pub fn take(&self, label: &str) -> Result<Checkpoint> {
        let checkpoint = self.take_unlisted(label)?;
        // ULIDs sort by time: the refs list the checkpoints oldest first
        // without counting (or reading) the ones before. Two taken in the
        // same millisecond must still sort in the order taken, so they come
        // from one monotonic generator (a plain `Ulid::new` is random within
        // its millisecond, and a list then put them out of order).
        let name = format!("refs/checkpoints/{}", next_checkpoint_name());
        crate::loose::write_ref(&self.git_dir, &name, &checkpoint.id)
            .map_err(io_at(&self.git_dir))?;
        Ok(checkpoint)
    }

    /// As `take`, but not listed among the store's checkpoints (no journal
    /// row records it): a tree only sent elsewhere (`push_to`).
    pub fn take_unlisted(&self, label: &str) -> Result<Checkpoint> {
        let started = std::time::SystemTime::now();
        let survey = survey(&self.tree, self.max_file_bytes)?;
        let tree = self.write_tree(&survey, started);
        self.honest_index_time();
        let tree = tree?;
        let manifest = Manifest {
            v: MANIFEST_VERSION,
            label: label.to_owned(),
            files: survey.files,
            bytes: survey.bytes,
            skipped: survey.skipped,
            modes: survey.modes,
            dirs: survey.dirs,
        };
        let message = serde_json::to_string(&manifest).expect("a manifest serialises");
        // The commit and its ref are written here, as `commit-tree` and
        // `update-ref` would write them, with reprise's identity.
        let seconds = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs());
        let signature = format!("reprise <reprise@localhost> {seconds} +0000");
        let commit =
            format!("tree {tree}\nauthor {signature}\ncommitter {signature}\n\n{message}\n");
        let id = crate::loose::write_object(&self.git_dir, "commit", commit.as_bytes())
            .map_err(io_at(&self.git_dir))?;
        Ok(Checkpoint { id, tree, manifest })
    }

    /// Sends `checkpoint` to the git remote `remote` as `refname` (moved
    /// there whatever it named before): how a fleet worker lets another
    /// host have the tree it left.
    pub fn push_to(&self, checkpoint: &Checkpoint, remote: &str, refname: &str) -> Result<()> {
        let spec = format!("+{}:{refname}", checkpoint.id);
        self.run(&["push", "-q", remote, &spec])?;
        Ok(())
    }

    /// Takes the checkpoint the git remote `remote` holds as `refname` into
    /// this store under the same ref (same id, tree and manifest), for
    /// `restore`; it is no checkpoint of this store's own list. `Ok(None)`
    /// when the remote has no such ref.
    pub fn fetch_from(&self, remote: &str, refname: &str) -> Result<Option<Checkpoint>> {
        let listed = self.run(&["ls-remote", remote, refname])?;
        if listed.trim().is_empty() {
            return Ok(None);
        }
        let spec = format!("+{refname}:{refname}");
        self.run(&["fetch", "-q", "--no-tags", remote, &spec])?;
        let id = self.run(&[
            "rev-parse",
            "--verify",
            "--end-of-options",
            &format!("{refname}^{{commit}}"),
        ])?;
        let tree = self.run(&[
            "rev-parse",
            "--verify",
            "--end-of-options",
            &format!("{id}^{{tree}}"),
        ])?;
        let manifest = self.manifest(&id)?;
        Ok(Some(Checkpoint { id, tree, manifest }))
    }

    /// Sends every checkpoint the store lists to the git remote `remote`,
    /// under `prefix` with their own names: a fleet worker's checkpoints of
    /// a task it parked, for the host that resumes it.
    pub fn push_all(&self, remote: &str, prefix: &str) -> Result<()> {
        let spec = format!("+refs/checkpoints/*:{prefix}/*");
        self.run(&["push", "-q", remote, &spec])?;
        Ok(())
    }

    /// Takes every checkpoint the git remote `remote` holds under `prefix`
    /// (sent by `push_all`) into this store's list, under their own names.
    pub fn fetch_all(&self, remote: &str, prefix: &str) -> Result<()> {
        let spec = format!("+{prefix}/*:refs/checkpoints/*");
        self.run(&["fetch", "-q", "--no-tags", remote, &spec])?;
        Ok(())
    }

    /// Whether `checkpoint`'s commit, read from the store's own objects,
    /// still hashes to its id and names its tree. `None` when the store
    /// holds it in no form read here (git then has to say).
    pub fn commit_intact(&self, checkpoint: &Checkpoint) -> Option<bool> {
        match self.loose_commit(&checkpoint.id) {
            Ok(Some((tree, _))) => Some(tree == checkpoint.tree),
            Ok(None) => None,
            Err(_) => Some(false),
        }
    }

    /// The tree and message of the loose commit `id`, read and hashed
    /// without git; `Ok(None)` when there is no loose object of that name,
    /// an error when there is one but it is not a commit that hashes to `id`.
    fn loose_commit(&self, id: &str) -> std::io::Result<Option<(String, String)>> {
        let Some(body) = crate::loose::read_object(&self.git_dir, id, "commit")? else {
            return Ok(None);
        };
        let malformed = || std::io::Error::new(std::io::ErrorKind::InvalidData, "not a commit");
        let text = String::from_utf8(body).map_err(|_| malformed())?;
        let (head, message) = text.split_once("\n\n").ok_or_else(malformed)?;
        let tree = head
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("tree "))
            .ok_or_else(malformed)?;
        Ok(Some((tree.to_owned(), message.to_owned())))
    }

    /// Brings the shadow index to the tree as it is (every file but those
    /// skipped for their size) and writes its git tree: in-process when
    /// `crate::shadow_tree` can say exactly what git would store, else by
    /// git. `started` is when the checkpoint began.
    fn write_tree(&self, survey: &Survey, started: std::time::SystemTime) -> Result<String> {
        if survey.plain
            && let Ok(Some(tree)) = crate::shadow_tree::write_tree(
                &self.git_dir,
                &self.tree,
                &survey.found,
                b".reprise",
                started,
            )
        {
            return Ok(tree);
        }
        self.write_tree_by_git(&survey.skipped)
    }

    /// `write_tree` by `git add --all --force` and `git write-tree`.
    fn write_tree_by_git(&self, skipped: &[(String, u64)]) -> Result<String> {
        let mut add: Vec<String> = ["add", "--all", "--force", "--", "."]
            .iter()
            .map(|arg| (*arg).to_owned())
            .collect();
        add.extend(Self::exclusions(skipped));
        self.run(&add.iter().map(String::as_str).collect::<Vec<_>>())?;
        if !skipped.is_empty() {
            // A file that grew past the bound leaves the index: its old
            // content must not pass for a snapshot of it.
            let mut remove: Vec<String> = ["rm", "--cached", "--quiet", "--ignore-unmatch", "--"]
                .iter()
                .map(|arg| (*arg).to_owned())
                .collect();
            remove.extend(skipped.iter().map(|(path, _)| format!(":(literal){path}")));
            self.run(&remove.iter().map(String::as_str).collect::<Vec<_>>())?;
        }
        self.run(&["write-tree"])
    }

    /// Every checkpoint of the tree, oldest first.
    pub fn list(&self) -> Result<Vec<Checkpoint>> {
        if !self.git_dir.join("HEAD").is_file() {
            return Ok(Vec::new());
        }
        if let Some(listed) = self.list_loose() {
            return listed;
        }
        let refs = self.run(&[
            "for-each-ref",
            "--sort=refname",
            "--format=%(objectname) %(tree)",
            "refs/checkpoints/",
        ])?;
        refs.lines()
            .filter_map(|line| line.split_once(' '))
            .map(|(id, tree)| {
                Ok(Checkpoint {
                    id: id.to_owned(),
                    tree: tree.to_owned(),
                    manifest: self.manifest(id)?,
                })
            })
            .collect()
    }

    /// The checkpoint whose id starts with `prefix` (at least 7 characters,
    /// or a whole id), if exactly one does.
    pub fn find(&self, prefix: &str) -> Result<Checkpoint> {
        let matches: Vec<Checkpoint> = self
            .list()?
            .into_iter()
            .filter(|checkpoint| prefix.len() >= 7 && checkpoint.id.starts_with(prefix))
            .collect();
        match <[Checkpoint; 1]>::try_from(matches) {
            Ok([one]) => Ok(one),
            Err(_) => Err(SnapshotError::Unknown {
                id: prefix.to_owned(),
                dir: self.git_dir.clone(),
            }),
        }
    }

    /// The checkpoints read straight from the loose refs and objects
    /// reprise writes, without starting git; `None` when any of them is not
    /// there in that form (a store git has packed, a ref it cannot read),
    /// for git to list.
    fn list_loose(&self) -> Option<Result<Vec<Checkpoint>>> {
        if self.git_dir.join("packed-refs").exists() {
            return None;
        }
        let dir = self.git_dir.join("refs/checkpoints");
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Some(Ok(Vec::new())),
            Err(_) => return None,
        };
        let mut names = entries
            .map(|entry| entry.map(|entry| entry.file_name()))
            .collect::<std::io::Result<Vec<_>>>()
            .ok()?;
        names.sort();
        let mut listed = Vec::with_capacity(names.len());
        for name in names {
            let id = fs::read_to_string(dir.join(name)).ok()?.trim().to_owned();
            let (tree, message) = self.loose_commit(&id).ok()??;
            match parse_manifest(&id, &message) {
                Ok(manifest) => listed.push(Checkpoint { id, tree, manifest }),
                Err(err) => return Some(Err(err)),
            }
        }
        Some(Ok(listed))
    }

    fn manifest(&self, id: &str) -> Result<Manifest> {
        let message = self.run(&["log", "-1", "--format=%B", id])?;
        parse_manifest(id, &message)
    }

    /// What restoring `checkpoint` would change, file by file. Changes no
    /// file of the tree and no index but a temporary one.
    pub fn changes(&self, checkpoint: &Checkpoint, scratch: &Path) -> Result<Changes> {
        let survey = survey(&self.tree, u64::MAX)?;
        let index = scratch.join(format!("snapshot-index-{}", ulid::Ulid::new()));
        fs::create_dir_all(scratch).map_err(io_at(scratch))?;
        let shadow_index = self.git_dir.join("index");
        if shadow_index.is_file() {
            fs::copy(&shadow_index, &index).map_err(io_at(&index))?;
        }
        let result = (|| {
            let skipped: Vec<(String, u64)> = checkpoint.manifest.skipped.clone();
            let mut add: Vec<String> = ["add", "--all", "--force", "--", "."]
                .iter()
                .map(|arg| (*arg).to_owned())
                .collect();
            add.extend(Self::exclusions(&skipped));
            let (git, mut command) = self.git();
            command.env("GIT_INDEX_FILE", &index).args(&add);
            git.output(command)?;
            let (git, mut command) = self.git();
            command.env("GIT_INDEX_FILE", &index).arg("write-tree");
            let now = String::from_utf8_lossy(&git.output(command)?.stdout)
                .trim()
                .to_owned();
            let listing = self.run(&[
                "diff-tree",
                "-r",
                "--no-renames",
                "--name-status",
                &now,
                &checkpoint.tree,
            ])?;
            Ok::<_, SnapshotError>(listing)
        })();
        let _ = fs::remove_file(&index);
        let listing = result?;
        let mut files: Vec<(String, String)> = listing
            .lines()
            .filter_map(|line| line.split_once('\t'))
            .map(|(status, path)| {
                // From now to the checkpoint: what the restore does.
                (
                    status.chars().next().unwrap_or('M').to_string(),
                    path.to_owned(),
                )
            })
            .collect();
        let touched: BTreeSet<String> = files.iter().map(|(_, path)| path.clone()).collect();
        for (path, mode) in &survey.modes {
            if !touched.contains(path) && checkpoint.manifest.modes.get(path) != Some(mode) {
                files.push(("P".to_owned(), path.clone()));
            }
        }
        for (path, mode) in &checkpoint.manifest.modes {
            if !touched.contains(path) && !survey.modes.contains_key(path) {
                files.push((format!("P{mode:o}"), path.clone()));
            }
        }
        for dir in checkpoint.manifest.dirs.keys() {
            if !survey.dirs.contains_key(dir) {
                files.push(("A".to_owned(), format!("{dir}/")));
            }
        }
        for dir in survey.dirs.keys() {
            if !checkpoint.manifest.dirs.contains_key(dir) && !dir.is_empty() {
                files.push(("D".to_owned(), format!("{dir}/")));
            }
        }
        files.sort_by(|a, b| a.1.cmp(&b.1));
        files.dedup();
        Ok(Changes {
            files,
            not_restored: checkpoint
                .manifest
                .skipped
                .iter()
                .map(|(path, _)| path.clone())
                .collect(),
        })
    }

    /// What `checkpoint` holds against `base`, a commit of the repository
    /// whose objects the store shares: `(letter, path)` as `git diff
    /// --name-status` gives them, and the patch. Reads only objects: no
    /// file of the tree, and no index.
    pub fn diff_from(
        &self,
        base: &str,
        checkpoint: &Checkpoint,
    ) -> Result<(Vec<(String, String)>, String)> {
        let listing = self.run(&[
            "diff-tree",
            "-r",
            "--no-renames",
            "--name-status",
            base,
            &checkpoint.tree,
        ])?;
        let files = listing
            .lines()
            .filter_map(|line| line.split_once('\t'))
            .map(|(status, path)| (status.to_owned(), path.to_owned()))
            .collect();
        let patch = self.run(&[
            "diff-tree",
            "-r",
            "-p",
            "--no-renames",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            base,
            &checkpoint.tree,
        ])?;
        Ok((files, patch))
    }

    /// Restores the tree to `checkpoint` exactly: bytes, modes, symlinks and
    /// directories; what was created since is deleted. Files the checkpoint
    /// skipped for their size are left as they are.
    pub fn restore(&self, checkpoint: &Checkpoint) -> Result<()> {
        let read = self.run(&["read-tree", "--reset", "-u", &checkpoint.id]);
        self.honest_index_time();
        read?;
        let mut clean: Vec<String> = ["clean", "-ffdxq", "--", "."]
            .iter()
            .map(|arg| (*arg).to_owned())
            .collect();
        clean.extend(Self::exclusions(&checkpoint.manifest.skipped));
        self.run(&clean.iter().map(String::as_str).collect::<Vec<_>>())?;
        settle(&self.tree, checkpoint)
    }

    /// The paths of the files and links `checkpoint` holds, in order.
    pub fn files(&self, checkpoint: &Checkpoint) -> Result<Vec<String>> {
        let listing = self.run(&["ls-tree", "-r", "--name-only", "-z", &checkpoint.tree])?;
        Ok(listing
            .split('\0')
            .filter(|path| !path.is_empty())
            .map(str::to_owned)
            .collect())
    }

    /// Writes `checkpoint` into `dir`, an empty directory elsewhere (the
    /// tree it covered may be gone): bytes, modes, symlinks and directories,
    /// as [`SnapshotStore::restore`] leaves a tree. It reads the checkpoint
    /// through an index of its own under `scratch`, so neither the store's
    /// index nor its tree is touched.
    pub fn restore_into(&self, checkpoint: &Checkpoint, dir: &Path, scratch: &Path) -> Result<()> {
        fs::create_dir_all(scratch).map_err(io_at(scratch))?;
        let index = scratch.join(format!("snapshot-index-{}", ulid::Ulid::new()));
        let elsewhere = Self {
            git_dir: self.git_dir.clone(),
            tree: dir.to_path_buf(),
            max_file_bytes: self.max_file_bytes,
        };
        let (git, mut command) = elsewhere.git();
        command
            .env("GIT_INDEX_FILE", &index)
            .args(["read-tree", "--reset", "-u", &checkpoint.id]);
        let read = git.output(command);
        let _ = fs::remove_file(&index);
        read?;
        settle(dir, checkpoint)
    }
}

/// After git wrote `checkpoint`'s files into `tree`: its directories (empty
/// ones come back), then every permission bit as the checkpoint has it.
fn settle(tree: &Path, checkpoint: &Checkpoint) -> Result<()> {
    // Directories first (empty ones come back), then permission bits.
    for dir in checkpoint.manifest.dirs.keys() {
        let path = tree.join(dir);
        if !path.is_dir() {
            fs::create_dir_all(&path).map_err(io_at(&path))?;
        }
    }
    let now = survey(tree, u64::MAX)?;
    for path in now.modes.keys() {
        if !checkpoint.manifest.modes.contains_key(path) {
            // git gave it 0644 or 0755 by its x bit; the agent's chmod
            // to something else without a content change is undone here.
            let full = tree.join(path);
            let mode = fs::symlink_metadata(&full)
                .map_err(io_at(&full))?
                .permissions()
                .mode();
            let normal = if mode & 0o111 != 0 { 0o755 } else { 0o644 };
            fs::set_permissions(&full, fs::Permissions::from_mode(normal)).map_err(io_at(&full))?;
        }
    }
    for (path, mode) in &checkpoint.manifest.modes {
        let full = tree.join(path);
        if full.symlink_metadata().is_ok_and(|meta| meta.is_file()) {
            fs::set_permissions(&full, fs::Permissions::from_mode(*mode)).map_err(io_at(&full))?;
        }
    }
    for (dir, mode) in checkpoint.manifest.dirs.iter().rev() {
        let path = tree.join(dir);
        fs::set_permissions(&path, fs::Permissions::from_mode(*mode)).map_err(io_at(&path))?;
    }
    Ok(())
}

/// A checkpoint's manifest, from its commit message.
fn parse_manifest(id: &str, message: &str) -> Result<Manifest> {
    let manifest: Manifest =
        serde_json::from_str(message.trim()).map_err(|err| SnapshotError::BadManifest {
            id: id.to_owned(),
            detail: err.to_string(),
        })?;
    if manifest.v != MANIFEST_VERSION {
        return Err(SnapshotError::BadManifest {
            id: id.to_owned(),
            detail: format!("manifest version {}", manifest.v),
        });
    }
    Ok(manifest)
}

/// What a walk of the tree found.
struct Survey {
    files: u64,
    bytes: u64,
    skipped: Vec<(String, u64)>,
    modes: BTreeMap<String, u32>,
    dirs: BTreeMap<String, u32>,
    /// Every file and symlink that goes into a checkpoint, with its stat.
    found: Vec<crate::shadow_tree::Found>,
    /// Whether git would take the tree as it is, so its checkpoint tree
    /// can be built without git: no nested repository, no attributes
    /// file, no name git refuses, nothing but files, links and directories.
    plain: bool,
}

/// Walks `tree` (not `.git`, not a top-level `.reprise`) without following
/// links, noting what git alone would not restore.
fn survey(tree: &Path, max_file_bytes: u64) -> Result<Survey> {
    let mut survey = Survey {
        files: 0,
        bytes: 0,
        skipped: Vec::new(),
        modes: BTreeMap::new(),
        dirs: BTreeMap::new(),
        found: Vec::new(),
        plain: true,
    };
    let mut stack = vec![PathBuf::new()];
    while let Some(relative) = stack.pop() {
        let dir = tree.join(&relative);
        let entries = fs::read_dir(&dir).map_err(io_at(&dir))?;
        for entry in entries {
            let entry = entry.map_err(io_at(&dir))?;
            let name = entry.file_name();
            let top = relative.as_os_str().is_empty();
            if name == ".git" || (top && name == ".reprise") {
                // A `.git` below the top is a nested repository, which git
                // stores as a link to its commit.
                survey.plain &= top;
                continue;
            }
            survey.plain &= crate::shadow_tree::plain_name(name.as_encoded_bytes());
            let path = relative.join(&name);
            let key = path.to_string_lossy().into_owned();
            let meta = entry.metadata().map_err(io_at(&entry.path()))?;
            let mode = meta.permissions().mode() & 0o7777;
            if meta.is_dir() {
                survey.dirs.insert(key, mode);
                stack.push(path);
            } else if meta.is_file() {
                if meta.len() > max_file_bytes {
                    survey.skipped.push((key, meta.len()));
                    continue;
                }
                survey.files += 1;
                survey.bytes += meta.len();
                if mode != 0o644 && mode != 0o755 {
                    survey.modes.insert(key, mode);
                }
                survey.found.push(crate::shadow_tree::Found {
                    path: crate::shadow_tree::index_path(&path),
                    meta,
                });
            } else {
                survey.files += 1;
                survey.bytes += meta.len();
                survey.plain &= meta.file_type().is_symlink();
                survey.found.push(crate::shadow_tree::Found {
                    path: crate::shadow_tree::index_path(&path),
                    meta,
                });
            }
        }
    }
    survey.skipped.sort();
    Ok(survey)
}

/// The next checkpoint ref's name: a ULID later than every one this process
/// made before (a fresh one when the generator is spent in its millisecond).
fn next_checkpoint_name() -> ulid::Ulid {
    static GENERATOR: std::sync::Mutex<ulid::Generator> =
        std::sync::Mutex::new(ulid::Generator::new());
    GENERATOR
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .generate()
        .unwrap_or_else(|_| ulid::Ulid::new())
}

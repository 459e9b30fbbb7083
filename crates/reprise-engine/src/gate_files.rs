//! The files a task's gates are judged by, held as the task's base has them:
//! each `run` gate's program when it is a file of the tree
//! (`reprise_core::plan::gate_script`) and every file its `protect` globs
//! match. The agent may not change them: before the gates run, each is
//! compared with the base's copy and put back, so a gate never runs the
//! agent's copy, and what differed is a corrupting anomaly.
//!
//! The base's copies are read once, before the task's first attempt: from
//! the base commit through reprise's git on the main repository (never in
//! the worktree, whose git linkage the agent can write), or, for a task run
//! in place, from the tree as it was then. They are held in memory, out of
//! every agent's reach.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{Read as _, Write as _};
use std::os::unix::ffi::OsStringExt as _;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;

use reprise_core::outcome as taxonomy;
use reprise_core::plan::{Disclose, Gate, GateCheck, Task, gate_script};
use reprise_core::recovery::{Anomaly, path_allowed};
use reprise_store::git::{Git, GitError};

use crate::error::{EngineError, Result};
use crate::state::{AttemptSummary, Outcome};

/// One protected path as the base has it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    File { executable: bool, bytes: Vec<u8> },
    Symlink { target: Vec<u8> },
}

/// What every gate of a task is judged by, as the base has it.
#[derive(Debug, Clone)]
pub(crate) struct GateFiles {
    /// Each protected path (relative to the tree's top) and its base copy.
    expected: BTreeMap<String, Entry>,
    /// Each gate's program file, when it is one of the base's files.
    scripts: Vec<(String, String)>,
    /// Each gate's `protect` globs.
    globs: Vec<(String, Vec<String>)>,
}

/// Top-level names that are never the tree's files: git's and reprise's.
const NOT_THE_TREE: &[&str] = &[".git", ".reprise"];

impl GateFiles {
    /// The gates' files in `commit` of the repository at `repo`; `subdir` is
    /// the gates' directory relative to the tree's top (`""` at the top).
    /// `None` when no gate has any.
    pub(crate) fn from_commit(
        repo: &Path,
        commit: &str,
        subdir: &str,
        gates: &[Gate],
    ) -> Result<Option<Self>> {
        // A gate names files only by the script it runs or the globs it
        // protects: without either, the base's listing is not read (a
        // 20,000-file tree's costs a process and 20 ms).
        let names_files = gates
            .iter()
            .any(|gate| matches!(gate.check, GateCheck::Run { .. }) || !gate.protect.is_empty());
        if !names_files {
            return Ok(None);
        }
        let git = Git::new(repo);
        let listing = git.output({
            let mut command = git.command();
            command.args(["ls-tree", "-r", "-z", "--full-tree", commit]);
            command
        })?;
        // `<mode> <type> <oid>\t<path>`, NUL-terminated.
        let mut entries: BTreeMap<String, (String, String)> = BTreeMap::new();
        for record in listing.stdout.split(|&byte| byte == 0) {
            let record = String::from_utf8_lossy(record);
            let Some((head, path)) = record.split_once('\t') else {
                continue;
            };
            let mut fields = head.split(' ');
            let (Some(mode), Some("blob"), Some(oid)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            entries.insert(path.to_owned(), (mode.to_owned(), oid.to_owned()));
        }
        let Some(chosen) = Self::choose(subdir, gates, &|path| entries.contains_key(path)) else {
            return Ok(None);
        };
        let (scripts, globs) = chosen;
        let wanted: Vec<(&String, &(String, String))> = entries
            .iter()
            .filter(|(path, _)| {
                scripts.iter().any(|(_, script)| script == *path)
                    || globs.iter().any(|(_, globs)| path_allowed(path, globs))
            })
            .collect();
        let blobs = read_blobs(&git, repo, wanted.iter().map(|(_, (_, oid))| oid.as_str()))?;
        let expected = wanted
            .into_iter()
            .zip(blobs)
            .map(|((path, (mode, _)), bytes)| {
                let entry = if mode == "120000" {
                    Entry::Symlink { target: bytes }
                } else {
                    Entry::File {
                        executable: mode == "100755",
                        bytes,
                    }
                };
                (path.clone(), entry)
            })
            .collect();
        Ok(Some(Self {
            expected,
            scripts,
            globs,
        }))
    }

    /// The gates' files in the tree at `tree` as they are now: a task run
    /// in place has no base commit.
    pub(crate) fn from_tree(tree: &Path, subdir: &str, gates: &[Gate]) -> Result<Option<Self>> {
        let is_file = |path: &str| read_entry(tree, path).is_some();
        let Some((scripts, globs)) = Self::choose(subdir, gates, &is_file) else {
            return Ok(None);
        };
        let mut expected = BTreeMap::new();
        for (_, script) in &scripts {
            if let Some(entry) = read_entry(tree, script) {
                expected.insert(script.clone(), entry);
            }
        }
        let all: Vec<String> = globs.iter().flat_map(|(_, globs)| globs.clone()).collect();
        for path in walk(tree, &all)? {
            if let Some(entry) = read_entry(tree, &path) {
                expected.insert(path, entry);
            }
        }
        Ok(Some(Self {
            expected,
            scripts,
            globs,
        }))
    }

    /// Each gate's program file among `is_file`'s and its globs; `None`
    /// when no gate has either.
    #[expect(clippy::type_complexity)]
    fn choose(
        subdir: &str,
        gates: &[Gate],
        is_file: &dyn Fn(&str) -> bool,
    ) -> Option<(Vec<(String, String)>, Vec<(String, Vec<String>)>)> {
        let in_tree = |path: &str| {
            if subdir.is_empty() {
                path.to_owned()
            } else {
                format!("{subdir}/{path}")
            }
        };
        let mut scripts = Vec::new();
        let mut globs = Vec::new();
        for gate in gates {
            let GateCheck::Run { command, .. } = &gate.check else {
                continue;
            };
            if let Some(script) = gate_script(command, &|path| is_file(&in_tree(path)))
                .map(|path| in_tree(&path))
                .filter(|path| is_file(path))
            {
                scripts.push((gate.name.clone(), script));
            }
            if !gate.protect.is_empty() {
                let relative: Vec<String> = gate
                    .protect
                    .iter()
                    .map(|glob| glob.strip_prefix("./").unwrap_or(glob).to_owned())
                    .collect();
                globs.push((gate.name.clone(), relative));
            }
        }
        (!scripts.is_empty() || !globs.is_empty()).then_some((scripts, globs))
    }

    /// Puts every protected file of the tree at `tree` back as the base has
    /// it, and removes a file added where a glob matches. Returns the paths
    /// that differed, sorted.
    pub(crate) fn restore(&self, tree: &Path) -> Result<Vec<String>> {
        let mut changed = BTreeSet::new();
        for (path, entry) in &self.expected {
            if read_entry(tree, path).as_ref() != Some(entry) {
                write_entry(tree, path, entry)?;
                changed.insert(path.clone());
            }
        }
        let all: Vec<String> = self
            .globs
            .iter()
            .flat_map(|(_, globs)| globs.clone())
            .collect();
        for path in walk(tree, &all)? {
            if !self.expected.contains_key(&path) {
                remove(&tree.join(&path))?;
                changed.insert(path);
            }
        }
        Ok(changed.into_iter().collect())
    }

    /// The gates whose files are among `paths`, in plan order.
    pub(crate) fn gates_of(&self, paths: &[String]) -> Vec<String> {
        let mut gates: Vec<String> = Vec::new();
        let owners = self
            .scripts
            .iter()
            .filter(|(_, script)| paths.contains(script))
            .map(|(gate, _)| gate)
            .chain(
                self.globs
                    .iter()
                    .filter(|(_, globs)| paths.iter().any(|path| path_allowed(path, globs)))
                    .map(|(gate, _)| gate),
            );
        for gate in owners {
            if !gates.contains(gate) {
                gates.push(gate.clone());
            }
        }
        gates
    }

    /// The anomaly of a change to `paths` (none when it is empty).
    pub(crate) fn anomaly(&self, paths: &[String]) -> Option<Anomaly> {
        (!paths.is_empty()).then(|| Anomaly::ProtectedFileChanged {
            gates: self.gates_of(paths),
            paths: paths.to_vec(),
        })
    }
}

/// The verdicts of `gates`, whose files the agent changed (`paths`), do not
/// count: each is failed, its output saying why, and an attempt that had
/// passed is judged failed on them. The gates ran on the base's copy, so
/// their output still tells the agent what the work lacks.
pub(crate) fn void_verdicts(
    task: &Task,
    gates: &[String],
    paths: &[String],
    summary: &mut AttemptSummary,
    classified: &mut taxonomy::AttemptOutcome,
) {
    let note = format!(
        "reprise: the agent changed {}, which this gate is judged by; it ran on the task's base copy and its verdict does not count: leave the gates' own files as they are\n",
        paths.join(", ")
    );
    let mut voided = Vec::new();
    for verdict in summary
        .gates
        .iter_mut()
        .filter(|verdict| gates.contains(&verdict.name))
    {
        verdict.output = format!("{note}{}", verdict.output);
        if verdict.passed {
            verdict.passed = false;
            voided.push(taxonomy::Verdict::GateRejected {
                gate: verdict.name.clone(),
                exit_code: verdict.exit_code,
                disclose: task
                    .gates
                    .iter()
                    .find(|gate| gate.name == verdict.name)
                    .map_or(Disclose::Verdict, |gate| gate.disclose),
            });
        }
    }
    if voided.is_empty() {
        return;
    }
    match classified {
        taxonomy::AttemptOutcome::Passed => {
            *classified = taxonomy::AttemptOutcome::Judged(voided);
            summary.outcome = Outcome::Judged;
            summary.judged = true;
        }
        taxonomy::AttemptOutcome::Judged(verdicts) => verdicts.extend(voided),
        _ => {}
    }
}

/// The contents of `oids`, in order, through one `git cat-file --batch`.
fn read_blobs<'a>(
    git: &Git,
    repo: &Path,
    oids: impl Iterator<Item = &'a str>,
) -> Result<Vec<Vec<u8>>> {
    let input: String = oids.map(|oid| format!("{oid}\n")).collect();
    if input.is_empty() {
        return Ok(Vec::new());
    }
    let mut command = git.command();
    command
        .args(["cat-file", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let failed = |detail: String| {
        EngineError::Git(GitError {
            dir: repo.to_path_buf(),
            detail,
        })
    };
    let mut child = command
        .spawn()
        .map_err(|err| failed(format!("cannot run git cat-file: {err}")))?;
    let mut stdin = child.stdin.take().expect("piped");
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let mut out = Vec::new();
    child
        .stdout
        .take()
        .expect("piped")
        .read_to_end(&mut out)
        .map_err(|err| failed(format!("cannot read git cat-file: {err}")))?;
    let _ = writer.join();
    let status = child
        .wait()
        .map_err(|err| failed(format!("git cat-file: {err}")))?;
    if !status.success() {
        return Err(failed(format!("git cat-file exited {status}")));
    }
    // `<oid> blob <size>\n<bytes>\n`, one after the other.
    let mut blobs = Vec::new();
    let mut rest = out.as_slice();
    while !rest.is_empty() {
        let end = rest
            .iter()
            .position(|&byte| byte == b'\n')
            .ok_or_else(|| failed("git cat-file: a header without its end".into()))?;
        let header = String::from_utf8_lossy(&rest[..end]).into_owned();
        let size: usize = match header.split(' ').collect::<Vec<_>>()[..] {
            [_, "blob", size] => size
                .parse()
                .map_err(|_| failed(format!("git cat-file: header {header:?}")))?,
            _ => return Err(failed(format!("git cat-file: {header}"))),
        };
        let body = rest
            .get(end + 1..end + 1 + size)
            .ok_or_else(|| failed("git cat-file: a blob cut short".into()))?;
        blobs.push(body.to_vec());
        rest = rest.get(end + 2 + size..).unwrap_or_default();
    }
    Ok(blobs)
}

/// What is at `path` in `tree` now, when every directory on the way is a
/// real directory (not a link) and it is a file or a link.
fn read_entry(tree: &Path, path: &str) -> Option<Entry> {
    let mut dir = tree.to_path_buf();
    let parts: Vec<&str> = path.split('/').collect();
    let (name, parents) = parts.split_last()?;
    for part in parents {
        dir.push(part);
        if !fs::symlink_metadata(&dir).ok()?.file_type().is_dir() {
            return None;
        }
    }
    let full = dir.join(name);
    let metadata = fs::symlink_metadata(&full).ok()?;
    if metadata.file_type().is_symlink() {
        let target = fs::read_link(&full).ok()?;
        return Some(Entry::Symlink {
            target: target.into_os_string().into_encoded_bytes(),
        });
    }
    if !metadata.is_file() {
        return None;
    }
    Some(Entry::File {
        executable: metadata.permissions().mode() & 0o100 != 0,
        bytes: fs::read(&full).ok()?,
    })
}

fn io_error(path: &Path, err: &std::io::Error) -> EngineError {
    EngineError::GateFile {
        path: path.to_path_buf(),
        detail: err.to_string(),
    }
}

/// Removes whatever is at `path` (a file, a link, a directory and all in it).
fn remove(path: &Path) -> Result<()> {
    let Ok(metadata) = fs::symlink_metadata(path) else {
        return Ok(());
    };
    let removed = if metadata.file_type().is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    };
    removed.map_err(|err| io_error(path, &err))
}

/// Writes `entry` at `path` in `tree`, making every directory on the way a
/// real one.
fn write_entry(tree: &Path, path: &str, entry: &Entry) -> Result<()> {
    let parts: Vec<&str> = path.split('/').collect();
    let Some((name, parents)) = parts.split_last() else {
        return Ok(());
    };
    let mut dir = tree.to_path_buf();
    for part in parents {
        dir.push(part);
        match fs::symlink_metadata(&dir) {
            Ok(metadata) if metadata.file_type().is_dir() => continue,
            Ok(_) => remove(&dir)?,
            Err(_) => {}
        }
        fs::create_dir(&dir).map_err(|err| io_error(&dir, &err))?;
    }
    let full = dir.join(name);
    remove(&full)?;
    match entry {
        Entry::File { executable, bytes } => {
            fs::write(&full, bytes).map_err(|err| io_error(&full, &err))?;
            let mode = if *executable { 0o755 } else { 0o644 };
            fs::set_permissions(&full, fs::Permissions::from_mode(mode))
                .map_err(|err| io_error(&full, &err))
        }
        Entry::Symlink { target } => {
            let target = std::ffi::OsString::from_vec(target.clone());
            std::os::unix::fs::symlink(target, &full).map_err(|err| io_error(&full, &err))
        }
    }
}

/// The files and links of `tree` that `globs` match, not following links:
/// each glob is walked from its literal head (`tests` of `tests/**`), or
/// from the top when it starts with a wildcard. A link or file where a
/// glob's head should be a directory counts as a match when the glob
/// could reach under it.
fn walk(tree: &Path, globs: &[String]) -> Result<BTreeSet<String>> {
    let mut found = BTreeSet::new();
    let mut starts: BTreeSet<String> = BTreeSet::new();
    for glob in globs {
        let head: Vec<&str> = glob
            .split('/')
            .take_while(|part| !part.contains(['*', '?']))
            .filter(|part| !part.is_empty() && *part != ".")
            .collect();
        starts.insert(head.join("/"));
    }
    // A head under another one is walked with it.
    let starts: Vec<String> = starts
        .iter()
        .filter(|start| {
            !starts.iter().any(|other| {
                other != *start && (other.is_empty() || start.starts_with(&format!("{other}/")))
            })
        })
        .cloned()
        .collect();
    for start in starts {
        // The way down to a head is real directories, or what stands in
        // for one is a match.
        let mut way = String::new();
        let mut blocked = false;
        for part in start.split('/').filter(|part| !part.is_empty()) {
            if !way.is_empty() {
                way.push('/');
            }
            way.push_str(part);
            if way == start {
                break;
            }
            match fs::symlink_metadata(tree.join(&way)) {
                Ok(metadata) if metadata.file_type().is_dir() => {}
                Ok(_) => {
                    found.insert(way.clone());
                    blocked = true;
                    break;
                }
                Err(_) => {
                    blocked = true;
                    break;
                }
            }
        }
        if blocked {
            continue;
        }
        let mut stack = vec![start];
        while let Some(relative) = stack.pop() {
            if NOT_THE_TREE.contains(&relative.as_str()) {
                continue;
            }
            let full = if relative.is_empty() {
                tree.to_path_buf()
            } else {
                tree.join(&relative)
            };
            let Ok(metadata) = fs::symlink_metadata(&full) else {
                continue;
            };
            if metadata.file_type().is_dir() {
                let entries = fs::read_dir(&full).map_err(|err| io_error(&full, &err))?;
                for entry in entries {
                    let entry = entry.map_err(|err| io_error(&full, &err))?;
                    let name = entry.file_name().to_string_lossy().into_owned();
                    stack.push(if relative.is_empty() {
                        name
                    } else {
                        format!("{relative}/{name}")
                    });
                }
            } else if path_allowed(&relative, globs)
                || globs
                    .iter()
                    .any(|glob| glob.starts_with(&format!("{relative}/")))
            {
                found.insert(relative);
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(name: &str, run: &str, protect: &[&str]) -> Gate {
        Gate {
            name: name.into(),
            check: GateCheck::Run {
                command: run.into(),
                timeout: std::time::Duration::from_secs(1),
            },
            disclose: reprise_core::plan::Disclose::Output,
            criterion: None,
            weight: 1,
            protect: protect.iter().map(|glob| (*glob).to_owned()).collect(),
            network: reprise_core::plan::Network::None,
        }
    }

    /// Gates that name no file (none, or checks that run nothing) need no
    /// listing of the base: nothing is asked of git, even where there is no
    /// repository at all.
    #[test]
    fn gates_that_name_no_file_read_nothing_of_the_base() {
        let nowhere = Path::new("/nonexistent/repository");
        assert!(
            GateFiles::from_commit(nowhere, "HEAD", "", &[])
                .expect("no listing asked for")
                .is_none()
        );
        let error = GateFiles::from_commit(nowhere, "HEAD", "", &[gate("t", "./gate.sh", &[])]);
        assert!(
            error.is_err(),
            "a gate that runs a command needs the listing"
        );
    }

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("tests/data")).unwrap();
        fs::write(dir.path().join("gate.sh"), "test -f out\n").unwrap();
        fs::set_permissions(
            dir.path().join("gate.sh"),
            fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        fs::write(dir.path().join("tests/data/expected"), "42\n").unwrap();
        fs::write(dir.path().join("src.txt"), "work\n").unwrap();
        dir
    }

    #[test]
    fn what_the_agent_changed_of_the_gates_files_is_found_and_put_back() {
        let dir = tree();
        let gates = [
            gate("run", "./gate.sh", &[]),
            gate("data", "cmp out tests/data/expected", &["tests/**"]),
        ];
        let files = GateFiles::from_tree(dir.path(), "", &gates)
            .unwrap()
            .expect("gate files");
        assert!(files.restore(dir.path()).unwrap().is_empty());
        // The agent's work is not the gates' business.
        fs::write(dir.path().join("src.txt"), "changed\n").unwrap();
        fs::write(dir.path().join("out"), "42\n").unwrap();
        assert!(files.restore(dir.path()).unwrap().is_empty());
        // A rewritten gate, a new file under a glob, a directory made a link.
        fs::write(dir.path().join("gate.sh"), "exit 0\n").unwrap();
        fs::write(dir.path().join("tests/conftest.py"), "x\n").unwrap();
        fs::remove_dir_all(dir.path().join("tests/data")).unwrap();
        std::os::unix::fs::symlink("/tmp", dir.path().join("tests/data")).unwrap();
        let changed = files.restore(dir.path()).unwrap();
        assert_eq!(
            changed,
            ["gate.sh", "tests/conftest.py", "tests/data/expected"]
        );
        assert_eq!(files.gates_of(&changed), ["run", "data"]);
        assert_eq!(
            fs::read_to_string(dir.path().join("gate.sh")).unwrap(),
            "test -f out\n"
        );
        let mode = fs::metadata(dir.path().join("gate.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert!(!dir.path().join("tests/conftest.py").exists());
        assert_eq!(
            fs::read_to_string(dir.path().join("tests/data/expected")).unwrap(),
            "42\n"
        );
        assert!(files.restore(dir.path()).unwrap().is_empty());
        // A mode change alone is a change.
        fs::set_permissions(
            dir.path().join("gate.sh"),
            fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        assert_eq!(files.restore(dir.path()).unwrap(), ["gate.sh"]);
        assert_eq!(files.gates_of(&["gate.sh".into()]), ["run"]);
    }

    #[test]
    fn gates_without_files_of_the_tree_have_nothing_to_hold() {
        let dir = tree();
        let gates = [gate("t", "cargo test", &[]), gate("u", "./missing.sh", &[])];
        assert!(
            GateFiles::from_tree(dir.path(), "", &gates)
                .unwrap()
                .is_none()
        );
    }
}

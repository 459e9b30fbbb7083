//! What the gates leave in a task's worktree, taken out again.
//!
//! A gate runs the project's own checks in the tree the agent wrote, and
//! those write too: Python's `__pycache__`, a coverage file, a test
//! report. Left there, what the tree's ignore rules do not hide would be
//! hashed as the agent's work (so a warm retry looks at a changed tree and
//! goes cold, `workspace_hash_mismatch`), committed into the result, and
//! conflict between two tasks that ran the same suite. So the entries the
//! workspace hash covers are listed just before the gates run, and every
//! such entry that appeared while they ran is removed after them, with the
//! directories that held only them. What the ignore rules hide (a build's
//! `target/`, a cache the project ignores) stays, as a cache for the next
//! attempt's gates: it is neither hashed nor committed. What a gate changed
//! of a file that was already there stays too.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use reprise_store::workspace::{WorkspaceError, covered_paths};

/// The entries of a tree the workspace hash covers, as relative paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Listing {
    entries: BTreeSet<PathBuf>,
}

impl Listing {
    /// The covered entries of `tree` now.
    pub(crate) fn of(tree: &Path) -> Result<Self, WorkspaceError> {
        Ok(Self {
            entries: covered_paths(tree)?.into_iter().collect(),
        })
    }

    /// Removes from `tree` every covered entry that is not in this listing,
    /// and each directory that then is empty and held none of it: what
    /// appeared since. The paths removed, relative, in order.
    pub(crate) fn remove_new(&self, tree: &Path) -> Result<Vec<String>, WorkspaceError> {
        let now = Self::of(tree)?;
        let kept_dirs: BTreeSet<&Path> = self
            .entries
            .iter()
            .flat_map(|entry| entry.ancestors().skip(1))
            .collect();
        let mut removed = Vec::new();
        for entry in now.entries.difference(&self.entries) {
            let path = tree.join(entry);
            fs::remove_file(&path).map_err(|source| io_error(&path, source))?;
            removed.push(entry.to_string_lossy().into_owned());
            for dir in entry.ancestors().skip(1) {
                if dir.as_os_str().is_empty() || kept_dirs.contains(dir) {
                    break;
                }
                // Only an empty one: a file the ignore rules hide stays.
                if fs::remove_dir(tree.join(dir)).is_err() {
                    break;
                }
            }
        }
        Ok(removed)
    }
}

fn io_error(path: &Path, source: std::io::Error) -> WorkspaceError {
    WorkspaceError::Read {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::Listing;
    use std::fs;

    #[test]
    fn what_appeared_since_the_listing_goes_unless_the_tree_ignores_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tree = dir.path();
        fs::create_dir_all(tree.join("src")).expect("mkdir");
        fs::write(tree.join("src/app.py"), "x = 1\n").expect("write");
        fs::write(tree.join(".gitignore"), "target/\n").expect("write");
        let before = Listing::of(tree).expect("listing");
        // What the gates leave: a cache directory, a report, a build the
        // project ignores; and a change to a file that was there.
        fs::create_dir_all(tree.join("src/__pycache__/deep")).expect("mkdir");
        fs::write(tree.join("src/__pycache__/app.pyc"), "bytes").expect("write");
        fs::write(tree.join("src/__pycache__/deep/x.pyc"), "bytes").expect("write");
        fs::write(tree.join("report.xml"), "<r/>").expect("write");
        fs::create_dir_all(tree.join("target")).expect("mkdir");
        fs::write(tree.join("target/build.o"), "object").expect("write");
        fs::write(tree.join("src/app.py"), "x = 2\n").expect("write");
        std::os::unix::fs::symlink("/nowhere", tree.join("link")).expect("symlink");
        let removed = before.remove_new(tree).expect("removed");
        assert_eq!(
            removed,
            [
                "link",
                "report.xml",
                "src/__pycache__/app.pyc",
                "src/__pycache__/deep/x.pyc"
            ]
        );
        assert!(!tree.join("src/__pycache__").exists());
        assert!(tree.join("src").is_dir());
        assert!(
            tree.join("target/build.o").exists(),
            "an ignored build is a cache"
        );
        assert_eq!(
            fs::read_to_string(tree.join("src/app.py")).expect("read"),
            "x = 2\n"
        );
        assert_eq!(Listing::of(tree).expect("listing"), before);
    }
}

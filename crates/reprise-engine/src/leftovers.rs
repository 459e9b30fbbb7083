//! What the gates leave in a task's worktree, taken out again.
//!
//! A gate runs the project's own checks in the tree the agent wrote, and
//! those write too: Python's `__pycache__`, a coverage file, a test
//! report. Left there, they would be hashed as the agent's work (so a warm
//! retry looks at a changed tree and goes cold, `workspace_hash_mismatch`),
//! committed into the result, and conflict between two tasks that ran the
//! same suite. So the tree's entries are listed just before the gates run,
//! and every entry that appeared while they ran is removed after them.
//! What a gate changed of a file that was already there stays: only the
//! agent's files, and what it could have meant, are kept.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Every entry of a tree (relative paths, not following links), the
/// tree's own `.git` and reprise's `.reprise` left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Listing {
    entries: BTreeSet<PathBuf>,
}

impl Listing {
    /// The entries of `tree` now.
    pub(crate) fn of(tree: &Path) -> io::Result<Self> {
        let mut entries = BTreeSet::new();
        walk(tree, Path::new(""), &mut entries)?;
        Ok(Self { entries })
    }

    /// Removes from `tree` every entry that is not in this listing (a new
    /// directory with all it holds): what appeared since. The paths
    /// removed, relative, in order.
    pub(crate) fn remove_new(&self, tree: &Path) -> io::Result<Vec<String>> {
        let now = Self::of(tree)?;
        let mut removed: Vec<PathBuf> = Vec::new();
        for entry in now.entries.difference(&self.entries) {
            // Inside a new directory already taken out with it.
            if removed.iter().any(|gone| entry.starts_with(gone)) {
                continue;
            }
            let path = tree.join(entry);
            let meta = fs::symlink_metadata(&path)?;
            if meta.is_dir() {
                fs::remove_dir_all(&path)?;
            } else {
                fs::remove_file(&path)?;
            }
            removed.push(entry.clone());
        }
        Ok(removed
            .iter()
            .map(|path| path.to_string_lossy().into_owned())
            .collect())
    }
}

fn walk(root: &Path, relative: &Path, entries: &mut BTreeSet<PathBuf>) -> io::Result<()> {
    let dir = root.join(relative);
    for entry in fs::read_dir(&dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if relative.as_os_str().is_empty() && (name == ".git" || name == ".reprise") {
            continue;
        }
        let path = relative.join(&name);
        let is_dir = entry.file_type()?.is_dir();
        entries.insert(path.clone());
        if is_dir {
            walk(root, &path, entries)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Listing;
    use std::fs;

    #[test]
    fn what_appeared_since_the_listing_goes_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tree = dir.path();
        fs::create_dir_all(tree.join("src")).expect("mkdir");
        fs::write(tree.join("src/app.py"), "x = 1\n").expect("write");
        fs::create_dir(tree.join(".git")).expect("mkdir");
        let before = Listing::of(tree).expect("listing");
        // What the gates leave: a cache directory, a report, a file in an
        // old directory; and a change to a file that was there.
        fs::create_dir_all(tree.join("src/__pycache__")).expect("mkdir");
        fs::write(tree.join("src/__pycache__/app.pyc"), "bytes").expect("write");
        fs::write(tree.join("report.xml"), "<r/>").expect("write");
        fs::write(tree.join("src/app.py"), "x = 2\n").expect("write");
        fs::write(tree.join(".git/index"), "git's").expect("write");
        std::os::unix::fs::symlink("/nowhere", tree.join("link")).expect("symlink");
        let removed = before.remove_new(tree).expect("removed");
        assert_eq!(removed, ["link", "report.xml", "src/__pycache__"]);
        assert!(!tree.join("src/__pycache__").exists());
        assert_eq!(
            fs::read_to_string(tree.join("src/app.py")).expect("read"),
            "x = 2\n"
        );
        assert!(
            tree.join(".git/index").exists(),
            "the tree's .git is not the gates'"
        );
        assert_eq!(Listing::of(tree).expect("listing"), before);
    }
}

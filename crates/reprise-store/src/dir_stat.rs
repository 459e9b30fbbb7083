//! `lstat` of many files in path order, each through its directory's
//! descriptor.
//!
//! An `lstat` of a full path makes the kernel look up every component of it
//! again; a tree's files are stat'ed in sorted order, so each directory is
//! opened once (`O_PATH`) and its files are stat'ed by name (`fstatat`
//! with `AT_SYMLINK_NOFOLLOW`). What each call answers is what `lstat` of
//! the full path would have at the moment the directory was opened: a
//! directory replaced later in the same walk is a change made while the
//! tree was read, which every reader of the stat data (the stat cache, a
//! settled index) checks again by its own next `lstat`.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, Stat};

/// One walker's open directory.
#[derive(Debug, Default)]
pub(crate) struct DirStat {
    open: Option<(PathBuf, OwnedFd)>,
}

impl DirStat {
    /// `lstat(path)`, through `path`'s directory when it can be opened
    /// (falling back to `lstat` itself, so errors are the same).
    pub(crate) fn lstat(&mut self, path: &Path) -> rustix::io::Result<Stat> {
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return rustix::fs::lstat(path);
        };
        if self.open.as_ref().is_none_or(|(open, _)| open != dir) {
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
            self.open = rustix::fs::open(dir, flags, Mode::empty())
                .ok()
                .map(|descriptor| (dir.to_path_buf(), descriptor));
        }
        match &self.open {
            Some((_, descriptor)) => {
                rustix::fs::statat(descriptor, name, AtFlags::SYMLINK_NOFOLLOW)
            }
            None => rustix::fs::lstat(path),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn same(left: &Stat, right: &Stat) -> bool {
        (
            left.st_dev,
            left.st_ino,
            left.st_mode,
            left.st_size,
            left.st_ctime_nsec,
        ) == (
            right.st_dev,
            right.st_ino,
            right.st_mode,
            right.st_size,
            right.st_ctime_nsec,
        )
    }

    #[test]
    fn each_answer_is_lstat_of_the_full_path() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).expect("dirs");
        std::fs::write(root.join("a/one"), "1").expect("write");
        std::fs::write(root.join("a/b/two"), "22").expect("write");
        symlink("one", root.join("a/link")).expect("symlink");
        let mut stat = DirStat::default();
        for relative in ["a/b/two", "a/link", "a/one", "a/b", "a"] {
            let path = root.join(relative);
            let via_dir = stat.lstat(&path).expect("stat");
            let direct = rustix::fs::lstat(&path).expect("lstat");
            assert!(same(&via_dir, &direct), "{relative}");
        }
        let missing = stat.lstat(&root.join("a/none")).expect_err("missing");
        assert_eq!(missing, rustix::io::Errno::NOENT);
        let under_missing = stat.lstat(&root.join("gone/file")).expect_err("missing");
        assert_eq!(under_missing, rustix::io::Errno::NOENT);
    }
}

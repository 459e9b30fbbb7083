//! Listing a tree: which entries the hash covers, found by a parallel walk
//! that applies the tree's own ignore rules.
//!
//! The walk reads directories, symlink targets and entry types only; regular
//! files are listed unread and hashed afterwards (see `hash`), so the walk's
//! threads never wait on file contents.

use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use ignore::{DirEntry, ParallelVisitor, ParallelVisitorBuilder, WalkBuilder, WalkState};

use super::error::{Result, WorkspaceError, changed_type, read_error};
use super::hash::HashedFile;

pub(super) const TYPE_FILE: u8 = b'f';
pub(super) const TYPE_SYMLINK: u8 = b'l';
const TYPE_FIFO: u8 = b'p';
const TYPE_SOCKET: u8 = b's';
const TYPE_BLOCK_DEVICE: u8 = b'b';
const TYPE_CHAR_DEVICE: u8 = b'c';

/// Entry names left out at every depth, with everything below them.
const EXCLUDED_NAMES: [&str; 2] = [".git", ".reprise"];

/// One entry of the tree.
#[derive(Debug)]
pub(super) struct Entry {
    /// The walker's own path, kept whole to avoid a copy per entry.
    pub(super) path: PathBuf,
    /// Where the path relative to the root starts in `path`.
    relative_start: usize,
    pub(super) content: Content,
}

#[derive(Debug)]
pub(super) enum Content {
    /// A regular file, listed and not yet read.
    Unread,
    /// A regular file, read or taken from the stat cache.
    File(HashedFile),
    /// A regular file that vanished between listing and reading: left out.
    Vanished,
    Symlink {
        target: PathBuf,
    },
    /// A fifo, socket or device, by its type byte.
    Special(u8),
}

impl Entry {
    /// The path relative to the root, as the encoding records it.
    pub(super) fn relative_bytes(&self) -> &[u8] {
        &self.path.as_os_str().as_bytes()[self.relative_start..]
    }
}

/// The relative paths of every entry the hash covers (files, links and
/// special files the tree's own ignore rules keep), sorted: what a result
/// commit takes too.
pub fn covered_paths(root: &Path) -> Result<Vec<PathBuf>> {
    use std::os::unix::ffi::OsStrExt as _;
    Ok(list_entries(root, 1)?
        .iter()
        .map(|entry| PathBuf::from(std::ffi::OsStr::from_bytes(entry.relative_bytes())))
        .collect())
}

/// Lists every entry the hash covers, sorted by relative path bytes.
pub(super) fn list_entries(root: &Path, threads: usize) -> Result<Vec<Entry>> {
    check_root(root)?;
    let walker = build_walker(root, threads)?;
    let shared = Shared {
        root,
        collected: Mutex::new(Vec::new()),
        error: Mutex::new(None),
    };
    walker
        .build_parallel()
        .visit(&mut CollectorBuilder { shared: &shared });

    if let Some(error) = shared
        .error
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
    {
        return Err(error);
    }
    let mut entries: Vec<Entry> = shared
        .collected
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
        .into_iter()
        .flatten()
        .collect();
    entries.sort_unstable_by(|left, right| left.relative_bytes().cmp(right.relative_bytes()));
    Ok(entries)
}

fn check_root(root: &Path) -> Result<()> {
    match fs::metadata(root) {
        Ok(metadata) if metadata.is_dir() => Ok(()),
        Ok(_) => Err(WorkspaceError::RootNotDirectory {
            path: root.to_path_buf(),
        }),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Err(WorkspaceError::RootMissing {
            path: root.to_path_buf(),
        }),
        Err(source) => Err(read_error(root, source)),
    }
}

fn build_walker(root: &Path, threads: usize) -> Result<WalkBuilder> {
    let mut builder = WalkBuilder::new(root);
    // Start from nothing so no rule from the user's configuration or from
    // above the root leaks in, then turn on only the tree's own gitignores.
    builder
        .standard_filters(false)
        .git_ignore(true)
        .require_git(false)
        .follow_links(false)
        .threads(threads)
        .filter_entry(|entry| !EXCLUDED_NAMES.iter().any(|name| entry.file_name() == *name));

    // The walker's own exclude support would follow a worktree's `.git` file
    // to the main repository's exclude file, outside the tree. Added as an
    // explicit ignore file anchored at the root instead, the rules keep git's
    // precedence (below every `.gitignore`) and only ever come from the tree.
    let git_dir = root.join(".git");
    let is_git_dir = fs::symlink_metadata(&git_dir).is_ok_and(|metadata| metadata.is_dir());
    let exclude = git_dir.join("info").join("exclude");
    if is_git_dir && exclude.is_file() {
        builder.current_dir(root);
        if let Some(error) = builder.add_ignore(&exclude) {
            tolerate_walk_error(root, &error)?;
        }
    }
    Ok(builder)
}

/// State the walker threads share.
#[derive(Debug)]
struct Shared<'root> {
    root: &'root Path,
    /// Each finished thread's entries.
    collected: Mutex<Vec<Vec<Entry>>>,
    /// The first failure; the walk stops as soon as it is set.
    error: Mutex<Option<WorkspaceError>>,
}

#[derive(Debug)]
struct CollectorBuilder<'shared> {
    shared: &'shared Shared<'shared>,
}

impl<'shared> ParallelVisitorBuilder<'shared> for CollectorBuilder<'shared> {
    fn build(&mut self) -> Box<dyn ParallelVisitor + 'shared> {
        Box::new(Collector {
            shared: self.shared,
            entries: Vec::new(),
        })
    }
}

/// One walker thread's visitor: keeps its entries to itself until the
/// thread ends, so threads never contend.
#[derive(Debug)]
struct Collector<'shared> {
    shared: &'shared Shared<'shared>,
    entries: Vec<Entry>,
}

impl ParallelVisitor for Collector<'_> {
    fn visit(&mut self, result: Result<DirEntry, ignore::Error>) -> WalkState {
        match self.visit_result(result) {
            Ok(()) => WalkState::Continue,
            Err(error) => {
                let mut first = self
                    .shared
                    .error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                first.get_or_insert(error);
                WalkState::Quit
            }
        }
    }
}

impl Drop for Collector<'_> {
    fn drop(&mut self) {
        let entries = std::mem::take(&mut self.entries);
        self.shared
            .collected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(entries);
    }
}

impl Collector<'_> {
    fn visit_result(&mut self, result: Result<DirEntry, ignore::Error>) -> Result<()> {
        let root = self.shared.root;
        let entry = match result {
            Ok(entry) => entry,
            Err(error) => return tolerate_walk_error(root, &error),
        };
        // Set on a directory whose ignore file could not be read in full.
        if let Some(error) = entry.error() {
            tolerate_walk_error(root, error)?;
        }
        let Some(file_type) = entry.file_type() else {
            return Ok(());
        };
        if entry.depth() == 0 || file_type.is_dir() {
            return Ok(());
        }

        let content = if file_type.is_file() {
            Content::Unread
        } else if file_type.is_symlink() {
            match read_symlink(entry.path())? {
                Some(content) => content,
                None => return Ok(()),
            }
        } else {
            match special_type(file_type) {
                Some(type_byte) => Content::Special(type_byte),
                None => {
                    return Err(WorkspaceError::UnsupportedType {
                        path: entry.into_path(),
                    });
                }
            }
        };

        let path = entry.into_path();
        let relative_len = path
            .strip_prefix(root)
            .map_or(0, |relative| relative.as_os_str().len());
        self.entries.push(Entry {
            relative_start: path.as_os_str().len() - relative_len,
            path,
            content,
        });
        Ok(())
    }
}

/// Reads a symlink's target without following it; `None` if it vanished.
pub(super) fn read_symlink(path: &Path) -> Result<Option<Content>> {
    match fs::read_link(path) {
        Ok(target) => Ok(Some(Content::Symlink { target })),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) if error.kind() == io::ErrorKind::InvalidInput => Err(changed_type(path)),
        Err(error) => Err(read_error(path, error)),
    }
}

fn special_type(file_type: fs::FileType) -> Option<u8> {
    if file_type.is_fifo() {
        Some(TYPE_FIFO)
    } else if file_type.is_socket() {
        Some(TYPE_SOCKET)
    } else if file_type.is_block_device() {
        Some(TYPE_BLOCK_DEVICE)
    } else if file_type.is_char_device() {
        Some(TYPE_CHAR_DEVICE)
    } else {
        None
    }
}

/// Decides whether a walker error can be passed over.
///
/// Passed over: entries that vanished mid-walk, patterns an ignore file cannot
/// express, lines that are not UTF-8 (both dropped by the matcher), and
/// anything about files outside the tree, whose rules are never applied. Any
/// other I/O error fails the hash, naming the path.
fn tolerate_walk_error(root: &Path, error: &ignore::Error) -> Result<()> {
    let Some((path, source)) = find_io_error(error, None) else {
        return Ok(());
    };
    let path = path.unwrap_or(root);
    if !path.starts_with(root) {
        return Ok(());
    }
    match source.kind() {
        io::ErrorKind::NotFound if error.depth() == Some(0) => Err(WorkspaceError::RootMissing {
            path: root.to_path_buf(),
        }),
        io::ErrorKind::NotFound | io::ErrorKind::InvalidData => Ok(()),
        _ => Err(read_error(path, copy_io_error(source))),
    }
}

/// The first I/O error inside a walker error, with the innermost path it was
/// reported against.
fn find_io_error<'error>(
    error: &'error ignore::Error,
    path: Option<&'error Path>,
) -> Option<(Option<&'error Path>, &'error io::Error)> {
    match error {
        ignore::Error::Partial(errors) => {
            errors.iter().find_map(|inner| find_io_error(inner, path))
        }
        ignore::Error::WithLineNumber { err, .. } | ignore::Error::WithDepth { err, .. } => {
            find_io_error(err, path)
        }
        ignore::Error::WithPath { path, err } => find_io_error(err, Some(path)),
        ignore::Error::Io(source) => Some((path, source)),
        _ => None,
    }
}

/// `io::Error` is not `Clone`; keep the OS error code where there is one so
/// the message stays the system's own.
fn copy_io_error(error: &io::Error) -> io::Error {
    match error.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(error.kind(), error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;
    use std::os::unix::net::UnixListener;
    use std::sync::mpsc;
    use std::time::Duration;

    use rustix::fs::{FileType, Mode};

    use super::super::hash_workspace;
    use super::super::test_support::{base_tree, hash, write};
    use super::*;

    #[test]
    fn entries_are_listed_sorted_by_path_bytes_with_files_unread() {
        let dir = base_tree();
        write(dir.path(), "sub/A.txt", b"upper\n");
        write(dir.path(), "sub-dash.txt", b"dash\n");
        let entries = list_entries(dir.path(), 2).expect("list");
        let paths: Vec<&[u8]> = entries.iter().map(Entry::relative_bytes).collect();
        // Plain byte order: '-' (0x2d) sorts before '/' (0x2f), 'A' before 'b'.
        let expected: [&[u8]; 5] = [
            b"a.txt",
            b"link",
            b"sub-dash.txt",
            b"sub/A.txt",
            b"sub/b.txt",
        ];
        assert_eq!(paths, expected);
        assert!(matches!(entries[0].content, Content::Unread));
        assert!(
            matches!(&entries[1].content, Content::Symlink { target } if target == Path::new("a.txt"))
        );
    }

    #[test]
    fn gitignored_entries_are_left_out_and_the_rest_counted() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        write(root, ".gitignore", b"*.log\n!keep.log\nbuild/\n");
        write(root, "sub/.gitignore", b"secret.txt\n");
        write(root, "keep.log", b"kept\n");
        write(root, "src/main.rs", b"fn main() {}\n");
        let before = hash(root);
        assert_eq!(before.files, 4);

        write(root, "debug.log", b"noise\n");
        write(root, "sub/trace.log", b"noise\n");
        write(root, "build/out.bin", b"\x00\x01");
        write(root, "sub/secret.txt", b"hunter2\n");
        write(root, "sub/deeper/secret.txt", b"hunter2\n");
        write(root, ".git/HEAD", b"ref: refs/heads/main\n");
        write(root, ".git/objects/ab/cdef", b"object\n");
        write(root, ".reprise/journal.jsonl", b"{}\n");
        write(root, "sub/.reprise/state", b"{}\n");
        write(root, "sub/.git", b"gitdir: ../.git/modules/sub\n");
        assert_eq!(
            hash(root),
            before,
            "ignored or excluded entries changed the hash"
        );

        let dir_changes: [(&str, &[u8]); 3] = [
            ("keep.log", b"changed\n"),
            (".env", b"TOKEN=1\n"),
            // The nested .gitignore governs its own directory only.
            ("secret.txt", b"top level\n"),
        ];
        let mut previous = before;
        for (relative, content) in dir_changes {
            write(root, relative, content);
            let after = hash(root);
            assert_ne!(
                after.hash, previous.hash,
                "{relative} did not change the hash"
            );
            previous = after;
        }
    }

    #[test]
    fn git_info_exclude_is_honoured_anchored_at_the_root_and_below_gitignore() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        write(root, ".git/info/exclude", b"local.tmp\n*.dat\n/top.tmp\n");
        write(root, ".gitignore", b"!keep.dat\n");
        write(root, "src/lib.rs", b"\n");
        let before = hash(root);

        write(root, "local.tmp", b"x\n");
        write(root, "sub/data.dat", b"x\n");
        write(root, "top.tmp", b"x\n");
        assert_eq!(hash(root), before, "an exclude rule was not applied");

        write(root, "sub/top.tmp", b"x\n");
        let nested = hash(root);
        assert_ne!(
            nested.hash, before.hash,
            "an anchored exclude rule matched below the root"
        );

        write(root, "keep.dat", b"x\n");
        assert_ne!(
            hash(root).hash,
            nested.hash,
            "a .gitignore negation did not outrank exclude"
        );
    }

    #[test]
    fn a_worktree_does_not_take_rules_from_its_main_repository() {
        let outside = tempfile::tempdir().expect("temp dir");
        let main_git = outside.path().join("main/.git");
        write(&main_git, "info/exclude", b"local.tmp\n");
        write(&main_git, "worktrees/task/commondir", b"../..\n");
        let tree = outside.path().join("tree");
        let gitdir_line = format!("gitdir: {}\n", main_git.join("worktrees/task").display());
        write(&tree, ".git", gitdir_line.as_bytes());
        write(&tree, "a.txt", b"a\n");
        let before = hash(&tree);

        write(&tree, "local.tmp", b"x\n");
        assert_ne!(
            hash(&tree).hash,
            before.hash,
            "rules from outside the tree were applied"
        );
    }

    #[test]
    fn rules_and_names_above_the_root_do_not_apply() {
        let outside = tempfile::tempdir().expect("temp dir");
        let outer = outside.path();
        write(outer, ".gitignore", b"*.txt\nworktrees/\n");
        write(outer, ".git/info/exclude", b"*.md\n");
        // A sandbox lives under `.reprise/`; only names below the root are excluded.
        let root = outer.join(".reprise/worktrees/task");
        write(&root, "a.txt", b"a\n");
        write(&root, "b.md", b"b\n");
        let result = hash(&root);
        assert_eq!(result.files, 2);
        assert_eq!(result.bytes, 4);
    }

    #[test]
    fn special_files_are_counted_by_type_and_never_opened() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().to_path_buf();
        write(&root, "a.txt", b"a\n");
        let before = hash(&root);

        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join("pipe"),
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .expect("mkfifo");
        let _listener = UnixListener::bind(root.join("socket")).expect("bind a socket");

        // Opening the fifo for reading would block forever: fail instead of hanging.
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = sender.send(hash_workspace(&root, 2));
        });
        let after = receiver
            .recv_timeout(Duration::from_secs(60))
            .expect("hashing blocked on a fifo")
            .expect("hash the tree");
        assert_eq!(after.files, 3);
        assert_eq!(after.bytes, before.bytes);
        assert_ne!(after.hash, before.hash);
    }

    #[test]
    fn a_missing_root_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let missing = dir.path().join("nowhere");
        let error = hash_workspace(&missing, 1).expect_err("a missing root");
        assert_eq!(
            error.to_string(),
            format!("cannot hash {}: no such directory", missing.display())
        );

        let file = dir.path().join("file");
        fs::write(&file, b"x").expect("write");
        let error = hash_workspace(&file, 1).expect_err("a file root");
        assert_eq!(
            error.to_string(),
            format!("cannot hash {}: not a directory", file.display())
        );
    }

    #[test]
    fn a_symlink_that_vanished_is_skipped_and_a_file_is_a_changed_type() {
        let dir = base_tree();
        let root = dir.path();
        assert!(
            read_symlink(&root.join("gone"))
                .expect("vanished")
                .is_none()
        );
        let error = read_symlink(&root.join("a.txt")).expect_err("not a symlink");
        assert!(
            matches!(error, WorkspaceError::ChangedType { .. }),
            "{error:?}"
        );
        symlink("nowhere", root.join("dangling")).expect("symlink");
        assert!(matches!(
            read_symlink(&root.join("dangling")).expect("read"),
            Some(Content::Symlink { .. })
        ));
    }

    #[test]
    fn an_unparsable_gitignore_pattern_is_dropped_not_fatal() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        write(root, ".gitignore", b"a[\n*.log\n");
        write(root, "a.txt", b"a\n");
        let before = hash(root);
        assert_eq!(before.files, 2);
        write(root, "debug.log", b"noise\n");
        assert_eq!(hash(root), before);
    }
}

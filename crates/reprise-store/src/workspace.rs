//! The workspace hash: one deterministic digest of a directory tree.
//!
//! Retry decisions compare the hash of a task's sandbox before and after an
//! agent attempt, so the hash must change exactly when the files the task
//! works on change, and must not depend on anything but the tree itself.
//!
//! # What is hashed
//!
//! Every entry under the root that the tree's own ignore rules keep:
//!
//! - `.gitignore` files at any depth, with git's semantics (negations, `dir/`
//!   patterns, anchoring; a deeper file overrides a shallower one), applied
//!   whether or not the tree is a git repository;
//! - `ROOT/.git/info/exclude` when `ROOT/.git` is a directory, anchored at the
//!   root and below every `.gitignore`, as in git.
//!
//! Nothing from outside the tree is consulted: not the user's global
//! gitignore, not `.gitignore` files above the root, not `.ignore` files, and
//! not the exclude file of the repository that a worktree's `.git` *file*
//! points to. An ignored path is left out even if git tracks it: the hash
//! reads the tree, never a git index. A pattern that does not parse, or a line
//! that is not UTF-8, is dropped, as the `ignore` crate (ripgrep's matcher)
//! does. Hidden files count. Any entry named `.git` (a repository, or the
//! `.git` file of a worktree or submodule) or `.reprise` (reprise's own state)
//! is left out at every depth with everything below it: both change on their
//! own while a task runs, and neither is the task's work.
//!
//! Entries are regular files, symlinks (never followed) and other
//! non-directory types (fifo, socket, block and character devices), which are
//! recorded by type and never opened. Directories are not entries, so an empty
//! directory changes nothing, as in git. Modification times, owners and every
//! mode bit but "executable" are left out: they change without the content
//! changing.
//!
//! # Encoding (version 1)
//!
//! ```text
//! hash   = SHA-256( "reprise/workspace/v1\n" || record_1 || ... || record_n )
//! record = u64le(len(path)) || path || type || executable || payload
//! ```
//!
//! - `path`: the entry's path relative to the root, as raw unix bytes with `/`
//!   separators and no leading `./`. Records are sorted by these bytes
//!   (plain bytewise order); paths are unique.
//! - `type`: one byte, `f` regular file, `l` symlink, `p` fifo, `s` socket,
//!   `b` block device, `c` character device.
//! - `executable`: one byte, `0x01` for a regular file with any of the `0o111`
//!   mode bits set, otherwise `0x00`.
//! - `payload`: for `f`, the 32-byte SHA-256 of the content (untagged, what
//!   `sha256sum` prints); for `l`, `u64le(len(target)) || target` with the
//!   link's target bytes as `readlink` returns them; nothing for other types.
//!
//! `u64le` is an unsigned 64-bit little-endian integer. The type byte fixes the
//! payload's length, so the stream parses one way only. `files` counts
//! records; `bytes` sums the content bytes of regular files.
//!
//! # Concurrent changes
//!
//! The tree is walked in parallel and file contents are hashed on the walker
//! threads; per-thread results are merged and sorted, so the hash does not
//! depend on thread count or scheduling. An entry that disappears during the
//! walk is left out. A file is read up to the size `fstat` reported when it
//! was opened, as git does (a size of zero is not trusted: such a file is read
//! to its end). An entry that turns into another type between listing and
//! opening is an error: the tree changed under the hash, and the caller should
//! hash again.

use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use ignore::{DirEntry, ParallelVisitor, ParallelVisitorBuilder, WalkBuilder, WalkState};
use reprise_core::digest::Digest;
use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;
use sha2::{Digest as _, Sha256};

/// Domain tag that starts the hashed stream; bump the version with any change
/// to the encoding.
const WORKSPACE_TAG: &[u8] = b"reprise/workspace/v1\n";

const TYPE_FILE: u8 = b'f';
const TYPE_SYMLINK: u8 = b'l';
const TYPE_FIFO: u8 = b'p';
const TYPE_SOCKET: u8 = b's';
const TYPE_BLOCK_DEVICE: u8 = b'b';
const TYPE_CHAR_DEVICE: u8 = b'c';

/// Entry names left out at every depth, with everything below them.
const EXCLUDED_NAMES: [&str; 2] = [".git", ".reprise"];

/// Large enough that big files take few reads; allocated once per thread.
const READ_BUFFER_BYTES: usize = 128 * 1024;

/// The result of hashing a tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkspaceHash {
    /// The digest of the encoded, sorted entries.
    pub hash: Digest,
    /// How many entries were hashed, of every type.
    pub files: u64,
    /// How many content bytes of regular files were hashed.
    pub bytes: u64,
}

/// Why a tree could not be hashed.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("cannot hash {}: no such directory", path.display())]
    RootMissing { path: PathBuf },
    #[error("cannot hash {}: not a directory", path.display())]
    RootNotDirectory { path: PathBuf },
    #[error("cannot read {}: {}", path.display(), describe_io(source))]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot hash {}: it changed type while the tree was being hashed; hash again", path.display())]
    ChangedType { path: PathBuf },
    #[error("cannot hash {}: unsupported file type", path.display())]
    UnsupportedType { path: PathBuf },
}

pub type Result<T, E = WorkspaceError> = std::result::Result<T, E>;

/// Hashes the tree at `root` using `threads` walker threads (0 = pick automatically).
///
/// `root` may be a symlink to a directory; nothing below it is followed.
pub fn hash_workspace(root: &Path, threads: usize) -> Result<WorkspaceHash> {
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
    let collected = shared
        .collected
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    let bytes = collected.iter().map(|batch| batch.bytes).sum();
    let mut entries: Vec<Entry> = collected
        .into_iter()
        .flat_map(|batch| batch.entries)
        .collect();
    entries.sort_unstable_by(|left, right| left.relative_bytes().cmp(right.relative_bytes()));

    let mut hasher = Sha256::new();
    hasher.update(WORKSPACE_TAG);
    for entry in &entries {
        entry.encode(&mut hasher);
    }
    Ok(WorkspaceHash {
        hash: Digest(hasher.finalize().into()),
        files: entries.len() as u64,
        bytes,
    })
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
        Err(source) => Err(WorkspaceError::Read {
            path: root.to_path_buf(),
            source,
        }),
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

/// Everything one walker thread found, handed over when the thread finishes.
#[derive(Debug)]
struct Batch {
    entries: Vec<Entry>,
    bytes: u64,
}

/// State the walker threads share.
#[derive(Debug)]
struct Shared<'root> {
    root: &'root Path,
    collected: Mutex<Vec<Batch>>,
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
            bytes: 0,
            buffer: Vec::new(),
        })
    }
}

/// One walker thread's visitor: hashes what it is given and keeps the
/// records to itself until the thread ends, so threads never contend.
#[derive(Debug)]
struct Collector<'shared> {
    shared: &'shared Shared<'shared>,
    entries: Vec<Entry>,
    bytes: u64,
    /// Reused for every file this thread reads; empty until the first one.
    buffer: Vec<u8>,
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
        let batch = Batch {
            entries: std::mem::take(&mut self.entries),
            bytes: self.bytes,
        };
        self.shared
            .collected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(batch);
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
            if self.buffer.is_empty() {
                self.buffer.resize(READ_BUFFER_BYTES, 0);
            }
            match hash_file(entry.path(), &mut self.buffer)? {
                Some((content, bytes)) => {
                    self.bytes += bytes;
                    content
                }
                None => return Ok(()),
            }
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

/// One hashed entry.
#[derive(Debug)]
struct Entry {
    /// The walker's own path, kept whole to avoid a copy per entry.
    path: PathBuf,
    /// Where the path relative to the root starts in `path`.
    relative_start: usize,
    content: Content,
}

#[derive(Debug)]
enum Content {
    File {
        executable: bool,
        digest: [u8; 32],
    },
    Symlink {
        target: PathBuf,
    },
    /// A fifo, socket or device, by its type byte.
    Special(u8),
}

impl Entry {
    fn relative_bytes(&self) -> &[u8] {
        &self.path.as_os_str().as_bytes()[self.relative_start..]
    }

    fn encode(&self, hasher: &mut Sha256) {
        let path = self.relative_bytes();
        hasher.update((path.len() as u64).to_le_bytes());
        hasher.update(path);
        match &self.content {
            Content::File { executable, digest } => {
                hasher.update([TYPE_FILE, u8::from(*executable)]);
                hasher.update(digest);
            }
            Content::Symlink { target } => {
                let target = target.as_os_str().as_bytes();
                hasher.update([TYPE_SYMLINK, 0]);
                hasher.update((target.len() as u64).to_le_bytes());
                hasher.update(target);
            }
            Content::Special(type_byte) => hasher.update([*type_byte, 0]),
        }
    }
}

/// Hashes a regular file's content; `None` if it vanished first.
fn hash_file(path: &Path, buffer: &mut [u8]) -> Result<Option<(Content, u64)>> {
    // The listing said "regular file", but the entry may have been replaced
    // since: never follow a symlink put in its place, and never block on a
    // fifo or take a terminal as controlling terminal.
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let descriptor = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(descriptor) => descriptor,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP) => return Err(changed_type(path)),
        Err(errno) => return Err(read_error(path, errno.into())),
    };
    let stat = rustix::fs::fstat(&descriptor).map_err(|errno| read_error(path, errno.into()))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(changed_type(path));
    }
    let executable = stat.st_mode & 0o111 != 0;

    // Like git, stop at the size fstat reported instead of spending one more
    // read per file to find the end: a file growing meanwhile is racing the
    // hash either way. A reported size of zero is not trusted (pseudo-files
    // report it), so such a file is read to its end.
    let reported_bytes = u64::try_from(stat.st_size).unwrap_or(0);
    let mut file = fs::File::from(descriptor);
    let mut hasher = Sha256::new();
    let mut bytes = 0u64;
    loop {
        match file.read(buffer) {
            Ok(0) => break,
            Ok(read) => {
                hasher.update(&buffer[..read]);
                bytes += read as u64;
                if reported_bytes != 0 && bytes >= reported_bytes {
                    break;
                }
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(read_error(path, error)),
        }
    }
    let content = Content::File {
        executable,
        digest: hasher.finalize().into(),
    };
    Ok(Some((content, bytes)))
}

/// Reads a symlink's target without following it; `None` if it vanished.
fn read_symlink(path: &Path) -> Result<Option<Content>> {
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

fn read_error(path: &Path, source: io::Error) -> WorkspaceError {
    WorkspaceError::Read {
        path: path.to_path_buf(),
        source,
    }
}

fn changed_type(path: &Path) -> WorkspaceError {
    WorkspaceError::ChangedType {
        path: path.to_path_buf(),
    }
}

/// "Permission denied (os error 13)" -> "permission denied": error messages
/// are one lowercase line.
fn describe_io(error: &io::Error) -> String {
    let text = error.to_string();
    let text = text
        .find(" (os error ")
        .map_or(text.as_str(), |end| &text[..end]);
    let mut characters = text.chars();
    match characters.next() {
        Some(first) => first.to_lowercase().chain(characters).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::os::unix::fs::{PermissionsExt, symlink};
    use std::os::unix::net::UnixListener;
    use std::sync::mpsc;
    use std::time::{Duration, SystemTime};

    use proptest::prelude::*;
    use tempfile::TempDir;

    use super::*;

    fn write(root: &Path, relative: &str, content: &[u8]) {
        let path = root.join(relative);
        fs::create_dir_all(path.parent().expect("a file has a parent")).expect("create parent");
        fs::write(&path, content).expect("write file");
    }

    fn set_mode(root: &Path, relative: &str, mode: u32) {
        fs::set_permissions(root.join(relative), fs::Permissions::from_mode(mode))
            .expect("set mode");
    }

    fn hash(root: &Path) -> WorkspaceHash {
        hash_workspace(root, 2).expect("hash the tree")
    }

    fn base_tree() -> TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        write(root, "a.txt", b"alpha\n");
        write(root, "sub/b.txt", b"beta\n");
        set_mode(root, "a.txt", 0o644);
        set_mode(root, "sub/b.txt", 0o644);
        symlink("a.txt", root.join("link")).expect("symlink");
        dir
    }

    #[test]
    fn hash_is_the_same_across_runs_and_thread_counts() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut expected_bytes = 0u64;
        for index in 0..300 {
            let content = format!("file {index}\n").repeat(index % 13);
            expected_bytes += content.len() as u64;
            let relative = format!("d{}/e{}/f{index}.txt", index % 7, index % 5);
            write(dir.path(), &relative, content.as_bytes());
        }
        let first = hash_workspace(dir.path(), 1).expect("hash");
        assert_eq!(first.files, 300);
        assert_eq!(first.bytes, expected_bytes);
        for threads in [1, 2, 8, 0] {
            for _ in 0..3 {
                let again = hash_workspace(dir.path(), threads).expect("hash");
                assert_eq!(again, first, "with {threads} threads");
            }
        }
    }

    #[test]
    fn every_content_change_changes_the_hash() {
        type Change = fn(&Path);
        let changes: [(&str, Change); 6] = [
            ("content", |root| write(root, "a.txt", b"alpha!\n")),
            ("rename", |root| {
                fs::rename(root.join("sub/b.txt"), root.join("sub/c.txt")).expect("rename");
            }),
            ("new empty file", |root| write(root, "sub/empty", b"")),
            ("chmod +x", |root| set_mode(root, "a.txt", 0o755)),
            ("symlink target", |root| {
                fs::remove_file(root.join("link")).expect("remove link");
                symlink("sub/b.txt", root.join("link")).expect("symlink");
            }),
            ("file becomes symlink", |root| {
                fs::remove_file(root.join("sub/b.txt")).expect("remove file");
                symlink("beta\n", root.join("sub/b.txt")).expect("symlink");
            }),
        ];
        for (name, change) in changes {
            let dir = base_tree();
            let before = hash(dir.path());
            change(dir.path());
            let after = hash(dir.path());
            assert_ne!(before.hash, after.hash, "{name} did not change the hash");
        }
    }

    #[test]
    fn metadata_that_is_not_content_leaves_the_hash_alone() {
        let dir = base_tree();
        let root = dir.path();
        let before = hash(root);
        let file = fs::File::options()
            .write(true)
            .open(root.join("a.txt"))
            .expect("open");
        file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000))
            .expect("set mtime");
        // Mode bits other than executable, and empty directories, are not content.
        set_mode(root, "sub/b.txt", 0o600);
        fs::create_dir_all(root.join("empty/deeper")).expect("create dirs");
        assert_eq!(hash(root), before);
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
    fn read_errors_name_the_path_and_vanished_entries_are_skipped() {
        let dir = base_tree();
        let root = dir.path();
        let mut buffer = vec![0; 16];

        let gone = root.join("gone");
        assert!(hash_file(&gone, &mut buffer).expect("vanished").is_none());
        assert!(read_symlink(&gone).expect("vanished").is_none());

        let under_a_file = root.join("a.txt/inner");
        let error = hash_file(&under_a_file, &mut buffer).expect_err("not a directory");
        assert_eq!(
            error.to_string(),
            format!("cannot read {}: not a directory", under_a_file.display())
        );

        let error = hash_file(&root.join("sub"), &mut buffer).expect_err("a directory");
        assert!(
            matches!(error, WorkspaceError::ChangedType { .. }),
            "{error:?}"
        );
        let error = hash_file(&root.join("link"), &mut buffer).expect_err("a symlink");
        assert!(
            matches!(error, WorkspaceError::ChangedType { .. }),
            "{error:?}"
        );

        // A small buffer still hashes the whole file.
        write(root, "long.txt", &[7; 100]);
        let (content, bytes) = hash_file(&root.join("long.txt"), &mut buffer)
            .expect("hash")
            .expect("present");
        assert_eq!(bytes, 100);
        let Content::File { digest, .. } = content else {
            panic!("expected a file, got {content:?}");
        };
        assert_eq!(digest, <[u8; 32]>::from(Sha256::digest([7; 100])));
    }

    #[test]
    fn io_error_messages_are_one_lowercase_line() {
        let error = WorkspaceError::Read {
            path: PathBuf::from("/x/y"),
            source: io::Error::from_raw_os_error(13),
        };
        assert_eq!(error.to_string(), "cannot read /x/y: permission denied");
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

    /// Pins the encoding. The value was computed independently from the
    /// module documentation with:
    ///
    /// ```python
    /// import hashlib, struct
    /// def u64(n): return struct.pack('<Q', n)
    /// entries = [
    ///     (b"a.txt", b"f", 0, hashlib.sha256(b"hello\n").digest()),
    ///     (b"bin/run.sh", b"f", 1, hashlib.sha256(b"#!/bin/sh\necho hi\n").digest()),
    ///     (b"link", b"l", 0, u64(len(b"a.txt")) + b"a.txt"),
    /// ]
    /// h = hashlib.sha256(b"reprise/workspace/v1\n")
    /// for path, t, x, payload in sorted(entries):
    ///     h.update(u64(len(path)) + path + t + bytes([x]) + payload)
    /// print(h.hexdigest())
    /// ```
    #[test]
    fn golden_hash_of_a_small_tree() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        write(root, "a.txt", b"hello\n");
        write(root, "bin/run.sh", b"#!/bin/sh\necho hi\n");
        set_mode(root, "a.txt", 0o644);
        set_mode(root, "bin/run.sh", 0o755);
        symlink("a.txt", root.join("link")).expect("symlink");
        fs::create_dir(root.join("empty")).expect("empty dir");

        let result = hash(root);
        assert_eq!(
            result.hash.to_hex(),
            "7f21c6358dd22814a4835b898b8dbc299b2fe7d0a2605c35a530ef2a4f412b63"
        );
        assert_eq!(result.files, 3);
        assert_eq!(result.bytes, 6 + 18);
    }

    fn tree_strategy() -> impl Strategy<Value = BTreeMap<String, (Vec<u8>, bool)>> {
        let path = prop::collection::vec("[a-c]{1,2}", 1..4).prop_map(|parts| parts.join("/"));
        let file = (prop::collection::vec(any::<u8>(), 0..64), any::<bool>());
        prop::collection::btree_map(path, file, 1..24)
    }

    fn build(root: &Path, files: &[(&String, &(Vec<u8>, bool))]) {
        for (relative, (content, executable)) in files {
            write(root, relative, content);
            set_mode(root, relative, if *executable { 0o755 } else { 0o644 });
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Directory listing order depends on creation order; the hash must not.
        #[test]
        fn hash_does_not_depend_on_creation_order(tree in tree_strategy()) {
            // A path that is also a prefix directory of another cannot be a file.
            let files: Vec<_> = tree
                .iter()
                .filter(|(path, _)| !tree.keys().any(|other| other.starts_with(&format!("{path}/"))))
                .collect();
            let forward = tempfile::tempdir().expect("temp dir");
            let backward = tempfile::tempdir().expect("temp dir");
            build(forward.path(), &files);
            let mut reversed = files.clone();
            reversed.reverse();
            build(backward.path(), &reversed);

            let one = hash_workspace(forward.path(), 1).expect("hash");
            let other = hash_workspace(backward.path(), 4).expect("hash");
            prop_assert_eq!(one, other);
            prop_assert_eq!(one.files, files.len() as u64);
        }
    }
}

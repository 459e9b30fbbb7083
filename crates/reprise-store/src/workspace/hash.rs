//! Hashing a listed tree: regular files are read (or taken from the stat
//! cache) on worker threads, then the sorted records are encoded into one
//! digest.

use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use reprise_core::digest::Digest;
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use sha2::{Digest as _, Sha256};

use super::error::{Result, changed_type, read_error};
use super::stat_cache::{CacheCursor, CachedFiles, StatKey, Timestamp};
use super::walk::{Content, Entry, TYPE_FILE, TYPE_SYMLINK, list_entries};
use crate::dir_stat::DirStat;

/// Domain tag that starts the hashed stream; bump the version with any change
/// to the encoding.
const WORKSPACE_TAG: &[u8] = b"reprise/workspace/v1\n";

/// Large enough that big files take few reads; allocated once per worker.
const READ_BUFFER_BYTES: usize = 128 * 1024;

/// Entries a worker takes at a time: enough to make the shared queue's lock
/// rare, few enough that the last chunks spread over all workers.
const ENTRIES_PER_CHUNK: usize = 32;

/// The most workers `threads = 0` picks, as the walker does.
const MAX_AUTO_THREADS: usize = 12;

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

/// Hashes the tree at `root` using `threads` walker threads (0 = pick automatically).
///
/// `root` may be a symlink to a directory; nothing below it is followed.
pub fn hash_workspace(root: &Path, threads: usize) -> Result<WorkspaceHash> {
    let entries = hash_entries(root, threads, None)?;
    Ok(digest_entries(&entries))
}

/// A regular file's content digest and where it came from.
#[derive(Debug)]
pub(super) struct HashedFile {
    pub(super) executable: bool,
    pub(super) digest: [u8; 32],
    /// The content bytes hashed; for a reused digest, the recorded size.
    pub(super) bytes: u64,
    pub(super) provenance: Provenance,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Provenance {
    /// Read now and not to be recorded: no cache, or the file is racily
    /// clean, or it changed while it was read.
    Read,
    /// Read now; the cache may record the digest under this stat.
    ReadRecordable(StatKey),
    /// Taken from the cache, whose recorded stat matches this fresh one.
    Reused(StatKey),
}

impl HashedFile {
    /// The stat to record this digest under, if it may be reused later.
    pub(super) fn recordable_stat(&self) -> Option<&StatKey> {
        match &self.provenance {
            Provenance::Read => None,
            Provenance::ReadRecordable(stat) | Provenance::Reused(stat) => Some(stat),
        }
    }
}

/// What the read phase may take from the stat cache, and when it started.
#[derive(Debug, Clone, Copy)]
pub(super) struct CacheView<'cache> {
    pub(super) recorded: &'cache CachedFiles<'cache>,
    /// The file system's time when this hash started (see `stat_cache`);
    /// `None` if it could not be read, and then nothing read now is
    /// recordable.
    pub(super) start: Option<Timestamp>,
}

/// Lists the tree and fills in every regular file's digest; entries stay
/// sorted by relative path.
pub(super) fn hash_entries(
    root: &Path,
    threads: usize,
    cache: Option<CacheView<'_>>,
) -> Result<Vec<Entry>> {
    let mut entries = list_entries(root, threads)?;
    read_files(&mut entries, threads, cache)?;
    Ok(entries)
}

/// Encodes sorted entries into the workspace hash.
pub(super) fn digest_entries(entries: &[Entry]) -> WorkspaceHash {
    let mut hasher = Sha256::new();
    hasher.update(WORKSPACE_TAG);
    let mut files = 0;
    let mut bytes = 0;
    for entry in entries {
        if let Content::File(file) = &entry.content {
            bytes += file.bytes;
        }
        if encode(entry, &mut hasher) {
            files += 1;
        }
    }
    WorkspaceHash {
        hash: Digest(hasher.finalize().into()),
        files,
        bytes,
    }
}

/// Feeds one entry's record to `hasher`; false if the entry has no record
/// (a file that vanished before it was read).
fn encode(entry: &Entry, hasher: &mut Sha256) -> bool {
    let (type_byte, executable) = match &entry.content {
        Content::File(file) => (TYPE_FILE, file.executable),
        Content::Symlink { .. } => (TYPE_SYMLINK, false),
        Content::Special(type_byte) => (*type_byte, false),
        Content::Vanished => return false,
        Content::Unread => {
            debug_assert!(false, "{} was never read", entry.path.display());
            return false;
        }
    };
    let path = entry.relative_bytes();
    hasher.update((path.len() as u64).to_le_bytes());
    hasher.update(path);
    hasher.update([type_byte, u8::from(executable)]);
    match &entry.content {
        Content::File(file) => hasher.update(file.digest),
        Content::Symlink { target } => {
            let target = target.as_os_str().as_bytes();
            hasher.update((target.len() as u64).to_le_bytes());
            hasher.update(target);
        }
        Content::Special(_) | Content::Unread | Content::Vanished => {}
    }
    true
}

/// Reads every unread regular file on `threads` workers, stopping at the
/// first error.
fn read_files(entries: &mut [Entry], threads: usize, cache: Option<CacheView<'_>>) -> Result<()> {
    let workers = worker_count(threads).min(entries.len().div_ceil(ENTRIES_PER_CHUNK));
    let chunks = Mutex::new(entries.chunks_mut(ENTRIES_PER_CHUNK));
    let stop = AtomicBool::new(false);
    let failure = Mutex::new(None);
    let work = || {
        let mut buffer = Vec::new();
        let mut stat = DirStat::default();
        while !stop.load(Ordering::Relaxed) {
            let next = chunks.lock().unwrap_or_else(PoisonError::into_inner).next();
            let Some(chunk) = next else { break };
            let mut recorded = cache
                .zip(chunk.first())
                .map(|(cache, first)| cache.recorded.cursor_from(first.relative_bytes()));
            for entry in chunk {
                let recorded = recorded.as_mut().map(|recorded| (recorded, &mut stat));
                if let Err(error) = read_entry(entry, cache, recorded, &mut buffer) {
                    stop.store(true, Ordering::Relaxed);
                    let mut first = failure.lock().unwrap_or_else(PoisonError::into_inner);
                    first.get_or_insert(error);
                    return;
                }
            }
        }
    };
    if workers <= 1 {
        work();
    } else {
        std::thread::scope(|scope| {
            for _ in 1..workers {
                scope.spawn(work);
            }
            work();
        });
    }
    match failure.into_inner().unwrap_or_else(PoisonError::into_inner) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

fn worker_count(threads: usize) -> usize {
    if threads == 0 {
        std::thread::available_parallelism()
            .map_or(1, |count| count.get())
            .min(MAX_AUTO_THREADS)
    } else {
        threads
    }
}

/// Fills in one entry if it is an unread file; `recorded` is the cache's
/// cursor for this run of entries, present when `cache` is, with the
/// worker's directory for `lstat`.
fn read_entry(
    entry: &mut Entry,
    cache: Option<CacheView<'_>>,
    recorded: Option<(&mut CacheCursor<'_, '_>, &mut DirStat)>,
    buffer: &mut Vec<u8>,
) -> Result<()> {
    if !matches!(entry.content, Content::Unread) {
        return Ok(());
    }
    let hashed = match cache.zip(recorded) {
        None => {
            hash_file(&entry.path, read_buffer(buffer))?.map(|read| read.file(Provenance::Read))
        }
        Some((cache, (recorded, stat))) => read_cached(entry, cache.start, recorded, stat, buffer)?,
    };
    entry.content = hashed.map_or(Content::Vanished, Content::File);
    Ok(())
}

/// The worker's read buffer, allocated on the first file it reads: a warm
/// cache may leave a worker nothing to read.
fn read_buffer(buffer: &mut Vec<u8>) -> &mut [u8] {
    if buffer.is_empty() {
        buffer.resize(READ_BUFFER_BYTES, 0);
    }
    buffer
}

/// Takes a file's digest from the cache when its fresh `lstat` matches the
/// recorded one in every field, and otherwise reads it, deciding whether the
/// digest may be recorded for next time.
fn read_cached(
    entry: &Entry,
    start: Option<Timestamp>,
    recorded: &mut CacheCursor<'_, '_>,
    stat: &mut DirStat,
    buffer: &mut Vec<u8>,
) -> Result<Option<HashedFile>> {
    let path = entry.path.as_path();
    let listed = match stat.lstat(path) {
        Ok(stat) => StatKey::of(&stat),
        Err(Errno::NOENT) => return Ok(None),
        Err(errno) => return Err(read_error(path, errno.into())),
    };
    if !listed.is_regular_file() {
        return Err(changed_type(path));
    }
    if let Some(recorded) = recorded.find(entry.relative_bytes())
        && recorded.stat == listed
    {
        return Ok(Some(HashedFile {
            executable: listed.is_executable(),
            digest: recorded.digest,
            bytes: listed.size,
            provenance: Provenance::Reused(listed),
        }));
    }

    let Some(read) = hash_file(path, read_buffer(buffer))? else {
        return Ok(None);
    };
    let provenance = if is_recordable(&listed, &read, start) {
        Provenance::ReadRecordable(listed)
    } else {
        Provenance::Read
    };
    Ok(Some(read.file(provenance)))
}

/// Whether a digest read now may be recorded under `listed`, the `lstat`
/// taken before the file was opened.
///
/// Only if the file opened is the one `lstat` saw, unchanged (its `fstat`
/// agrees in every field), it was read to exactly that size (a file that
/// reports a size of zero but has content is never trusted), and it is
/// settled: see `StatKey::settled_before` for why a file stat'ed in the same
/// tick as the start is read again next time. Without a start time nothing
/// is recordable.
fn is_recordable(listed: &StatKey, read: &FileRead, start: Option<Timestamp>) -> bool {
    read.opened == *listed
        && read.bytes == listed.size
        && start.is_some_and(|start| listed.settled_before(start))
}

/// A regular file as read now.
#[derive(Debug)]
struct FileRead {
    executable: bool,
    digest: [u8; 32],
    bytes: u64,
    /// The `fstat` of the open file, before it was read.
    opened: StatKey,
}

impl FileRead {
    fn file(self, provenance: Provenance) -> HashedFile {
        HashedFile {
            executable: self.executable,
            digest: self.digest,
            bytes: self.bytes,
            provenance,
        }
    }
}

/// Hashes a regular file's content; `None` if it vanished first.
fn hash_file(path: &Path, buffer: &mut [u8]) -> Result<Option<FileRead>> {
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
    let opened = rustix::fs::fstat(&descriptor)
        .map(|stat| StatKey::of(&stat))
        .map_err(|errno| read_error(path, errno.into()))?;
    if !opened.is_regular_file() {
        return Err(changed_type(path));
    }

    // Like git, stop at the size fstat reported instead of spending one more
    // read per file to find the end: a file growing meanwhile is racing the
    // hash either way. A reported size of zero is not trusted (pseudo-files
    // report it), so such a file is read to its end.
    let reported_bytes = opened.size;
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
    Ok(Some(FileRead {
        executable: opened.is_executable(),
        digest: hasher.finalize().into(),
        bytes,
        opened,
    }))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::os::unix::fs::symlink;
    use std::time::{Duration, SystemTime};

    use proptest::prelude::*;

    use super::super::error::WorkspaceError;
    use super::super::test_support::{base_tree, hash, set_mode, write};
    use super::*;

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
    fn read_errors_name_the_path_and_vanished_entries_are_skipped() {
        let dir = base_tree();
        let root = dir.path();
        let mut buffer = vec![0; 16];

        let gone = root.join("gone");
        assert!(hash_file(&gone, &mut buffer).expect("vanished").is_none());

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
        let read = hash_file(&root.join("long.txt"), &mut buffer)
            .expect("hash")
            .expect("present");
        assert_eq!(read.bytes, 100);
        assert_eq!(read.digest, <[u8; 32]>::from(Sha256::digest([7; 100])));
        let listed = StatKey::of(&rustix::fs::lstat(root.join("long.txt")).expect("lstat"));
        assert_eq!(read.opened, listed);
    }

    #[test]
    fn a_file_that_vanishes_after_listing_is_left_out_and_an_error_stops_the_workers() {
        let dir = base_tree();
        let root = dir.path();
        let mut entries = list_entries(root, 1).expect("list");
        fs::remove_file(root.join("sub/b.txt")).expect("remove");
        read_files(&mut entries, 2, None).expect("read");
        assert!(matches!(entries[2].content, Content::Vanished));
        let result = digest_entries(&entries);
        assert_eq!(result.files, 2);
        assert_eq!(result.bytes, 6);

        let mut entries = list_entries(root, 1).expect("list");
        fs::remove_file(root.join("a.txt")).expect("remove");
        fs::create_dir(root.join("a.txt")).expect("a directory in its place");
        let error = read_files(&mut entries, 2, None).expect_err("changed type");
        assert!(
            matches!(&error, WorkspaceError::ChangedType { path } if path.ends_with("a.txt")),
            "{error:?}"
        );
    }

    #[test]
    fn a_digest_is_recordable_only_for_the_unchanged_settled_file_that_was_listed() {
        let dir = base_tree();
        let path = dir.path().join("a.txt");
        let mut buffer = vec![0; 64];
        let read = hash_file(&path, &mut buffer)
            .expect("hash")
            .expect("present");
        let listed = StatKey::of(&rustix::fs::lstat(&path).expect("lstat"));
        let after = |stat: Timestamp| Timestamp {
            secs: stat.secs + 1,
            nanos: 0,
        };
        let start = Some(after(listed.modified.max(listed.changed)));
        assert!(is_recordable(&listed, &read, start));

        assert!(!is_recordable(&listed, &read, None), "no start time");
        let same_tick = Some(listed.changed.max(listed.modified));
        assert!(!is_recordable(&listed, &read, same_tick), "racily clean");
        let replaced = StatKey {
            ino: listed.ino + 1,
            ..listed
        };
        assert!(
            !is_recordable(&replaced, &read, start),
            "another file was opened"
        );
        let touched = StatKey {
            changed: Timestamp {
                secs: listed.changed.secs - 1,
                ..listed.changed
            },
            ..listed
        };
        assert!(
            !is_recordable(&touched, &read, start),
            "it changed between lstat and open"
        );
        let short = FileRead {
            bytes: read.bytes - 1,
            ..read
        };
        assert!(
            !is_recordable(&listed, &short, start),
            "not read to its size"
        );
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

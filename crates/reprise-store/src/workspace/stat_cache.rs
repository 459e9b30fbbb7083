//! The stat cache: content digests of regular files, keyed by the stat data
//! they were read under, so an unchanged file is `lstat`ed and never opened.
//!
//! The cache is an optimisation only. A cache that is missing, unreadable,
//! for another root, of another version, or damaged in any way is set aside
//! and every file is read; a cache that cannot be written is not written.
//! Neither is ever an error, and neither changes the hash.
//!
//! # File format (version 1)
//!
//! ```text
//! file   = "reprise/stat-cache\n" || u32le(1) || u32le(len(root)) || root
//!          || u64le(count) || entry_1 || ... || entry_count || sha256
//! entry  = u32le(len(path)) || path || u64le(dev) || u64le(ino) || u32le(mode)
//!          || u64le(size) || i64le(mtime_secs) || u32le(mtime_nanos)
//!          || i64le(ctime_secs) || u32le(ctime_nanos) || digest
//! ```
//!
//! - `root`: the canonical absolute path of the tree the cache belongs to.
//! - `path`: relative to the root, exactly as the workspace encoding records
//!   it; entries are sorted by these bytes, strictly increasing, so lookups
//!   merge with the tree's own sorted listing.
//! - `dev` .. `ctime_nanos`: the file's `lstat` when its content was read.
//! - `digest`: the 32-byte SHA-256 of the content, as the workspace record
//!   holds it.
//! - `sha256`: the SHA-256 of every byte before it, so a damaged file is set
//!   aside instead of feeding a wrong digest into the hash.
//!
//! Only regular files whose digests may be reused are stored.
//!
//! # Racily clean files
//!
//! Before anything is `lstat`ed, the file system's own clock is read by
//! touching a marker file beside the cache (`<cache>.start`, kept between
//! runs). A digest is recorded only for a file whose mtime and ctime are both
//! strictly older than that start time; see [`StatKey::settled_before`].

use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{FileType, Mode, OFlags, RawMode, Timespec, Timestamps, UTIME_NOW};
use sha2::{Digest as _, Sha256};

const MAGIC: &[u8] = b"reprise/stat-cache\n";
const VERSION: u32 = 1;
const CHECKSUM_BYTES: usize = 32;
/// An entry's bytes besides its path.
const ENTRY_FIXED_BYTES: usize = 4 + 8 + 8 + 4 + 8 + 8 + 4 + 8 + 4 + 32;
/// Suffix of the marker file whose timestamp is the start of a hash.
const MARKER_SUFFIX: &str = ".start";

/// A file system timestamp; ordered by seconds, then nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Timestamp {
    pub(super) secs: i64,
    pub(super) nanos: u32,
}

impl Timestamp {
    fn new(secs: i64, nanos: i64) -> Self {
        // The kernel keeps nanoseconds below one second; anything else would
        // only ever fail to match.
        Self {
            secs,
            nanos: u32::try_from(nanos).unwrap_or(u32::MAX),
        }
    }

    /// Rounds down to a multiple of two seconds, the coarsest granularity of
    /// any local file system (FAT's mtime), so a time read on one file system
    /// is never later than the same instant stamped on another.
    fn floor_to_even_second(self) -> Self {
        Self {
            secs: self.secs - self.secs.rem_euclid(2),
            nanos: 0,
        }
    }
}

/// The stat data a recorded digest is valid for; every field must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StatKey {
    pub(super) dev: u64,
    pub(super) ino: u64,
    /// The whole `st_mode`: file type and every permission bit.
    pub(super) mode: u32,
    pub(super) size: u64,
    pub(super) modified: Timestamp,
    pub(super) changed: Timestamp,
}

impl StatKey {
    /// The key of an `lstat` or `fstat` result.
    ///
    /// `rustix` rather than `std`: its `lstat` is `newfstatat`, measurably
    /// cheaper than the `statx` std uses, and this runs once per file.
    // The field types differ between architectures (`c_ulong` here, `u64`
    // there); every cast below is lossless on each (a size is never
    // negative).
    #[allow(
        clippy::unnecessary_cast,
        reason = "field types differ between architectures"
    )]
    pub(super) fn of(stat: &rustix::fs::Stat) -> Self {
        Self {
            dev: stat.st_dev as u64,
            ino: stat.st_ino as u64,
            mode: stat.st_mode as u32,
            size: stat.st_size as u64,
            modified: Timestamp::new(stat.st_mtime as i64, stat.st_mtime_nsec as i64),
            changed: Timestamp::new(stat.st_ctime as i64, stat.st_ctime_nsec as i64),
        }
    }

    pub(super) fn is_regular_file(&self) -> bool {
        FileType::from_raw_mode(self.mode as RawMode) == FileType::RegularFile
    }

    pub(super) fn is_executable(&self) -> bool {
        self.mode & 0o111 != 0
    }

    /// Whether a digest read under this stat may be reused by later hashes:
    /// only if mtime and ctime are both strictly older than `start`, the file
    /// system's time before this hash `lstat`ed anything.
    ///
    /// Any write after our `lstat` lands at or after `start`, so it changes
    /// mtime and ctime relative to a recorded stat that was strictly before
    /// `start`, and the next hash reads the file again. A stat in the same
    /// timestamp tick as a write proves nothing: a same-size rewrite later in
    /// that tick leaves every field as it was (the file is "racily clean", as
    /// git calls it), so such a file is read now and read again next time.
    /// ctime is checked as well as mtime because a tool can set mtime back;
    /// ctime it cannot.
    pub(super) fn settled_before(&self, start: Timestamp) -> bool {
        self.modified < start && self.changed < start
    }
}

/// One recorded digest, borrowing its path from the loaded cache bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CachedFile<'bytes> {
    pub(super) path: &'bytes [u8],
    pub(super) stat: StatKey,
    pub(super) digest: [u8; 32],
}

/// The recorded digests of one cache file, sorted by path.
#[derive(Debug, Default)]
pub(super) struct CachedFiles<'bytes> {
    files: Vec<CachedFile<'bytes>>,
}

impl<'bytes> CachedFiles<'bytes> {
    /// A cursor for looking up paths from `first` on, in increasing order.
    pub(super) fn cursor_from(&self, first: &[u8]) -> CacheCursor<'_, 'bytes> {
        let start = self.files.partition_point(|file| file.path < first);
        CacheCursor {
            rest: &self.files[start..],
        }
    }

    pub(super) fn len(&self) -> usize {
        self.files.len()
    }
}

/// Looks up increasing paths by merging with the sorted recorded ones: the
/// tree's entries are sorted too, so a run of lookups costs one binary search
/// and then a step or two each.
#[derive(Debug)]
pub(super) struct CacheCursor<'files, 'bytes> {
    /// The recorded files not yet passed.
    rest: &'files [CachedFile<'bytes>],
}

impl<'files, 'bytes> CacheCursor<'files, 'bytes> {
    /// Finds `path`, which must sort after every path asked before.
    pub(super) fn find(&mut self, path: &[u8]) -> Option<&'files CachedFile<'bytes>> {
        while let Some((first, rest)) = self.rest.split_first() {
            match first.path.cmp(path) {
                std::cmp::Ordering::Less => self.rest = rest,
                std::cmp::Ordering::Equal => {
                    self.rest = rest;
                    return Some(first);
                }
                std::cmp::Ordering::Greater => return None,
            }
        }
        None
    }
}

/// Why a cache file was set aside; each means "read every file".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rejection {
    Missing,
    Unreadable,
    /// It does not start with the cache's magic bytes.
    NotACache,
    /// A version this build does not know, older or newer.
    UnknownVersion(u32),
    /// Too short to hold a header and checksum.
    Truncated,
    /// The trailing checksum does not match: damaged or cut short.
    ChecksumMismatch,
    /// Written for a tree at another path.
    OtherRoot,
    /// The checksum matched but the entries do not parse or are not sorted.
    Malformed,
}

/// Reads a cache file whole.
pub(super) fn read(cache: &Path) -> Result<Vec<u8>, Rejection> {
    fs::read(cache).map_err(|error| match error.kind() {
        io::ErrorKind::NotFound => Rejection::Missing,
        _ => Rejection::Unreadable,
    })
}

/// Parses cache bytes written for the tree at canonical path `root`.
pub(super) fn parse<'bytes>(
    bytes: &'bytes [u8],
    root: &[u8],
) -> Result<CachedFiles<'bytes>, Rejection> {
    let Some(after_magic) = bytes.strip_prefix(MAGIC) else {
        return Err(Rejection::NotACache);
    };
    let mut header = Cursor { rest: after_magic };
    let version = header.u32().ok_or(Rejection::Truncated)?;
    if version != VERSION {
        return Err(Rejection::UnknownVersion(version));
    }
    let Some(body_end) = bytes.len().checked_sub(CHECKSUM_BYTES) else {
        return Err(Rejection::Truncated);
    };
    let body_start = MAGIC.len() + 4;
    if body_end < body_start {
        return Err(Rejection::Truncated);
    }
    if Sha256::digest(&bytes[..body_end])[..] != bytes[body_end..] {
        return Err(Rejection::ChecksumMismatch);
    }

    let mut body = Cursor {
        rest: &bytes[body_start..body_end],
    };
    let recorded_root = body.bytes_u32().ok_or(Rejection::Malformed)?;
    if recorded_root != root {
        return Err(Rejection::OtherRoot);
    }
    let count = body.u64().ok_or(Rejection::Malformed)?;
    // A count the remaining bytes cannot hold is rejected below; never let
    // it size an allocation.
    let capacity = usize::try_from(count)
        .unwrap_or(usize::MAX)
        .min(body.rest.len() / ENTRY_FIXED_BYTES);
    let mut files: Vec<CachedFile<'bytes>> = Vec::with_capacity(capacity);
    for _ in 0..count {
        let file = body.entry().ok_or(Rejection::Malformed)?;
        if files
            .last()
            .is_some_and(|previous| previous.path >= file.path)
        {
            return Err(Rejection::Malformed);
        }
        files.push(file);
    }
    if !body.rest.is_empty() {
        return Err(Rejection::Malformed);
    }
    Ok(CachedFiles { files })
}

/// Reads little-endian fields off the front of a byte slice.
#[derive(Debug)]
struct Cursor<'bytes> {
    rest: &'bytes [u8],
}

impl<'bytes> Cursor<'bytes> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.rest.split_first_chunk::<N>()?;
        self.rest = rest;
        Some(*head)
    }

    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }

    fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_le_bytes)
    }

    fn bytes_u32(&mut self) -> Option<&'bytes [u8]> {
        let len = usize::try_from(self.u32()?).ok()?;
        if len > self.rest.len() {
            return None;
        }
        let (head, rest) = self.rest.split_at(len);
        self.rest = rest;
        Some(head)
    }

    fn timestamp(&mut self) -> Option<Timestamp> {
        Some(Timestamp {
            secs: self.i64()?,
            nanos: self.u32()?,
        })
    }

    fn entry(&mut self) -> Option<CachedFile<'bytes>> {
        let path = self.bytes_u32()?;
        let stat = StatKey {
            dev: self.u64()?,
            ino: self.u64()?,
            mode: self.u32()?,
            size: self.u64()?,
            modified: self.timestamp()?,
            changed: self.timestamp()?,
        };
        let digest = self.take()?;
        Some(CachedFile { path, stat, digest })
    }
}

/// Builds the bytes of a cache file; entries must come in path order.
#[derive(Debug)]
pub(super) struct CacheWriter {
    bytes: Vec<u8>,
    /// Where the entry count sits, filled in by `finish`.
    count_offset: usize,
    count: u64,
}

impl CacheWriter {
    pub(super) fn new(root: &[u8], expected_entries: usize) -> Self {
        let mut bytes = Vec::with_capacity(
            MAGIC.len() + 16 + root.len() + expected_entries * (ENTRY_FIXED_BYTES + 32),
        );
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        push_bytes_u32(&mut bytes, root);
        let count_offset = bytes.len();
        bytes.extend_from_slice(&0u64.to_le_bytes());
        Self {
            bytes,
            count_offset,
            count: 0,
        }
    }

    pub(super) fn push(&mut self, path: &[u8], stat: &StatKey, digest: &[u8; 32]) {
        let bytes = &mut self.bytes;
        push_bytes_u32(bytes, path);
        bytes.extend_from_slice(&stat.dev.to_le_bytes());
        bytes.extend_from_slice(&stat.ino.to_le_bytes());
        bytes.extend_from_slice(&stat.mode.to_le_bytes());
        bytes.extend_from_slice(&stat.size.to_le_bytes());
        for timestamp in [stat.modified, stat.changed] {
            bytes.extend_from_slice(&timestamp.secs.to_le_bytes());
            bytes.extend_from_slice(&timestamp.nanos.to_le_bytes());
        }
        bytes.extend_from_slice(digest);
        self.count += 1;
    }

    pub(super) fn finish(mut self) -> Vec<u8> {
        self.bytes[self.count_offset..self.count_offset + 8]
            .copy_from_slice(&self.count.to_le_bytes());
        let checksum = Sha256::digest(&self.bytes);
        self.bytes.extend_from_slice(&checksum);
        self.bytes
    }
}

/// Paths longer than `u32::MAX` bytes cannot exist on any unix.
fn push_bytes_u32(bytes: &mut Vec<u8>, field: &[u8]) {
    let len = u32::try_from(field.len()).unwrap_or(u32::MAX);
    bytes.extend_from_slice(&len.to_le_bytes());
    bytes.extend_from_slice(field);
}

/// Reads the file system's "now" for a hash of `root` that uses the cache at
/// `cache`, by touching the marker file beside the cache; creates the
/// cache's directory if missing. `None` if the marker cannot be written.
///
/// The file system's clock, not the process's: timestamps are stamped from a
/// coarse clock that lags the precise one, so a file written after a precise
/// `now` was read could still be stamped before it. When the marker is not on
/// the tree's device, the time is rounded down to an even second to cover a
/// coarser granularity there; both must still share this machine's clock
/// (keep the cache on a local file system, ideally the tree's).
pub(super) fn mark_start(cache: &Path, root: &Path) -> Option<Timestamp> {
    let marker = marker_path(cache)?;
    if let Some(parent) = marker.parent() {
        fs::create_dir_all(parent).ok()?;
    }
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let descriptor = rustix::fs::open(&marker, flags, Mode::from_raw_mode(0o644)).ok()?;
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: UTIME_NOW,
    };
    let times = Timestamps {
        last_access: now,
        last_modification: now,
    };
    rustix::fs::futimens(&descriptor, &times).ok()?;
    let marked = StatKey::of(&rustix::fs::fstat(&descriptor).ok()?);
    let start = marked.modified;
    let root_device = StatKey::of(&rustix::fs::stat(root).ok()?).dev;
    if root_device == marked.dev {
        Some(start)
    } else {
        Some(start.floor_to_even_second())
    }
}

fn marker_path(cache: &Path) -> Option<PathBuf> {
    let mut name = cache.file_name()?.to_os_string();
    name.push(MARKER_SUFFIX);
    Some(cache.with_file_name(name))
}

/// Publishes `bytes` at `path`: temp file in the same directory, fsync,
/// rename, directory fsync. The temp file is removed on failure.
pub(super) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let Some(name) = path.file_name() else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    fs::create_dir_all(dir)?;
    // Unique among live writers: the process id, then a per-process count.
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(name);
    temp_name.push(format!(
        ".tmp-{}-{}",
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    ));
    let temp = dir.join(temp_name);
    let result = publish(&temp, path, dir, bytes);
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

fn publish(temp: &Path, path: &Path, dir: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = fs::File::create(temp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    fs::rename(temp, path)?;
    fs::File::open(dir)?.sync_all()
}

/// The canonical root bytes a cache records.
pub(super) fn root_bytes(canonical_root: &Path) -> &[u8] {
    canonical_root.as_os_str().as_bytes()
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{find, write};
    use super::*;

    fn stat(seed: u64) -> StatKey {
        StatKey {
            dev: seed,
            ino: seed + 1,
            mode: 0o100_644,
            size: seed * 10,
            modified: Timestamp {
                secs: 1_700_000_000 + i64::try_from(seed).expect("small"),
                nanos: 5,
            },
            changed: Timestamp {
                secs: -3,
                nanos: 999_999_999,
            },
        }
    }

    fn sample(root: &[u8]) -> Vec<u8> {
        let mut writer = CacheWriter::new(root, 3);
        writer.push(b"a.txt", &stat(1), &[1; 32]);
        writer.push(b"sub/b.txt", &stat(2), &[2; 32]);
        writer.push(b"sub/c", &stat(3), &[3; 32]);
        writer.finish()
    }

    #[test]
    fn a_written_cache_parses_back_to_the_same_entries() {
        let bytes = sample(b"/tree");
        assert_eq!(
            bytes.len(),
            MAGIC.len() + 4 + 4 + 5 + 8 + 3 * ENTRY_FIXED_BYTES + 5 + 9 + 5 + 32
        );
        let files = parse(&bytes, b"/tree").expect("parse");
        assert_eq!(files.len(), 3);
        let found = find(&files, b"sub/b.txt").expect("recorded");
        assert_eq!(
            *found,
            CachedFile {
                path: b"sub/b.txt",
                stat: stat(2),
                digest: [2; 32],
            }
        );
        assert_eq!(find(&files, b"sub/c").expect("recorded").digest, [3; 32]);
        assert!(find(&files, b"sub").is_none());
        assert!(find(&files, b"zzz").is_none());

        let mut cursor = files.cursor_from(b"a");
        assert!(cursor.find(b"a").is_none());
        assert_eq!(cursor.find(b"a.txt").expect("recorded").digest, [1; 32]);
        assert!(cursor.find(b"sub/a").is_none());
        assert_eq!(cursor.find(b"sub/c").expect("recorded").digest, [3; 32]);
        assert!(cursor.find(b"zzz").is_none());
        let mut cursor = files.cursor_from(b"sub/b.txt");
        assert_eq!(cursor.find(b"sub/b.txt").expect("recorded").digest, [2; 32]);

        let empty = CacheWriter::new(b"/tree", 0).finish();
        assert_eq!(parse(&empty, b"/tree").expect("parse").len(), 0);
    }

    /// Pins the layout of one entry, byte by byte, against the module docs.
    #[test]
    fn the_layout_is_the_documented_one() {
        let mut writer = CacheWriter::new(b"/r", 1);
        let key = StatKey {
            dev: 0x0102,
            ino: 0x0304,
            mode: 0o100_755,
            size: 6,
            modified: Timestamp { secs: 7, nanos: 8 },
            changed: Timestamp {
                secs: -9,
                nanos: 10,
            },
        };
        writer.push(b"x", &key, &[0xAA; 32]);
        let bytes = writer.finish();
        let mut expected = Vec::new();
        expected.extend_from_slice(b"reprise/stat-cache\n");
        expected.extend_from_slice(&1u32.to_le_bytes());
        expected.extend_from_slice(&2u32.to_le_bytes());
        expected.extend_from_slice(b"/r");
        expected.extend_from_slice(&1u64.to_le_bytes());
        expected.extend_from_slice(&1u32.to_le_bytes());
        expected.extend_from_slice(b"x");
        expected.extend_from_slice(&0x0102u64.to_le_bytes());
        expected.extend_from_slice(&0x0304u64.to_le_bytes());
        expected.extend_from_slice(&0o100_755u32.to_le_bytes());
        expected.extend_from_slice(&6u64.to_le_bytes());
        expected.extend_from_slice(&7i64.to_le_bytes());
        expected.extend_from_slice(&8u32.to_le_bytes());
        expected.extend_from_slice(&(-9i64).to_le_bytes());
        expected.extend_from_slice(&10u32.to_le_bytes());
        expected.extend_from_slice(&[0xAA; 32]);
        let checksum = Sha256::digest(&expected);
        expected.extend_from_slice(&checksum);
        assert_eq!(bytes, expected);
    }

    #[test]
    fn damaged_foreign_and_unknown_caches_are_rejected() {
        let good = sample(b"/tree");
        let with_checksum = |mut body: Vec<u8>| {
            let checksum = Sha256::digest(&body);
            body.extend_from_slice(&checksum);
            body
        };
        let body = &good[..good.len() - CHECKSUM_BYTES];

        let mut flipped_digest = good.clone();
        let in_last_digest = good.len() - CHECKSUM_BYTES - 1;
        flipped_digest[in_last_digest] ^= 1;
        let mut newer = good.clone();
        newer[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&2u32.to_le_bytes());
        let mut unsorted = CacheWriter::new(b"/tree", 2);
        unsorted.push(b"b", &stat(1), &[1; 32]);
        unsorted.push(b"a", &stat(2), &[2; 32]);
        let mut duplicated = CacheWriter::new(b"/tree", 2);
        duplicated.push(b"a", &stat(1), &[1; 32]);
        duplicated.push(b"a", &stat(2), &[2; 32]);
        let mut overcounted = body.to_vec();
        let count_at = MAGIC.len() + 4 + 4 + 5;
        overcounted[count_at..count_at + 8].copy_from_slice(&4u64.to_le_bytes());
        let mut trailing = body.to_vec();
        trailing.push(0);

        let cases: [(&str, Vec<u8>, Rejection); 12] = [
            ("empty", Vec::new(), Rejection::NotACache),
            (
                "garbage",
                b"{\"not\": \"a cache\"}\n".to_vec(),
                Rejection::NotACache,
            ),
            (
                "cut inside the magic",
                good[..10].to_vec(),
                Rejection::NotACache,
            ),
            (
                "cut inside the version",
                good[..MAGIC.len() + 2].to_vec(),
                Rejection::Truncated,
            ),
            (
                "cut before the checksum ends",
                good[..MAGIC.len() + 20].to_vec(),
                Rejection::Truncated,
            ),
            (
                "cut in half",
                good[..good.len() / 2].to_vec(),
                Rejection::ChecksumMismatch,
            ),
            (
                "a flipped digest bit",
                flipped_digest,
                Rejection::ChecksumMismatch,
            ),
            ("a newer version", newer, Rejection::UnknownVersion(2)),
            ("unsorted", unsorted.finish(), Rejection::Malformed),
            (
                "a duplicate path",
                duplicated.finish(),
                Rejection::Malformed,
            ),
            (
                "a count past the end",
                with_checksum(overcounted),
                Rejection::Malformed,
            ),
            (
                "bytes after the entries",
                with_checksum(trailing),
                Rejection::Malformed,
            ),
        ];
        for (name, bytes, expected) in cases {
            assert_eq!(
                parse(&bytes, b"/tree").map(|files| files.len()),
                Err(expected),
                "{name}"
            );
        }
        assert_eq!(
            parse(&good, b"/other").map(|files| files.len()),
            Err(Rejection::OtherRoot)
        );
        assert_eq!(
            parse(&good, b"/tree/").map(|files| files.len()),
            Err(Rejection::OtherRoot)
        );
    }

    #[test]
    fn only_stats_strictly_older_than_the_start_are_settled() {
        let start = Timestamp {
            secs: 100,
            nanos: 500,
        };
        let at = |secs, nanos| Timestamp { secs, nanos };
        let key = |modified, changed| StatKey {
            modified,
            changed,
            ..stat(1)
        };
        assert!(key(at(100, 499), at(99, 999_999_999)).settled_before(start));
        assert!(
            !key(at(100, 500), at(100, 499)).settled_before(start),
            "mtime in the same tick"
        );
        assert!(
            !key(at(100, 499), at(100, 500)).settled_before(start),
            "ctime in the same tick"
        );
        assert!(
            !key(at(100, 499), at(101, 0)).settled_before(start),
            "ctime after"
        );
        assert!(
            !key(at(200, 0), at(99, 0)).settled_before(start),
            "mtime in the future"
        );
    }

    #[test]
    fn an_even_second_floor_never_rounds_up() {
        let at = |secs, nanos| Timestamp { secs, nanos };
        assert_eq!(at(11, 5).floor_to_even_second(), at(10, 0));
        assert_eq!(at(10, 999_999_999).floor_to_even_second(), at(10, 0));
        assert_eq!(at(-1, 5).floor_to_even_second(), at(-2, 0));
    }

    #[test]
    fn the_start_is_not_before_anything_written_earlier_and_the_marker_is_beside_the_cache() {
        let dir = tempfile::tempdir().expect("temp dir");
        write(dir.path(), "tree/a.txt", b"a\n");
        let written = StatKey::of(&rustix::fs::lstat(dir.path().join("tree/a.txt")).expect("stat"));
        let cache = dir.path().join("state/cache/stat");
        let start = mark_start(&cache, &dir.path().join("tree")).expect("a start time");
        assert!(start >= written.modified && start >= written.changed);
        assert!(dir.path().join("state/cache/stat.start").is_file());
        assert!(!cache.exists(), "marking the start writes no cache");

        let later = mark_start(&cache, &dir.path().join("tree")).expect("a start time");
        assert!(later >= start);
        let blocked = dir.path().join("tree/a.txt/cache");
        assert_eq!(mark_start(&blocked, dir.path()), None);
    }

    #[test]
    fn an_atomic_write_replaces_the_file_and_leaves_no_temp_behind() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("new/dir/cache");
        write_atomic(&path, b"one").expect("write");
        write_atomic(&path, b"two").expect("write");
        assert_eq!(fs::read(&path).expect("read"), b"two");
        let names: Vec<_> = fs::read_dir(dir.path().join("new/dir"))
            .expect("list")
            .map(|entry| entry.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["cache"]);

        // A directory in the way: the write fails and cleans up after itself.
        let blocked = dir.path().join("blocked");
        write(&blocked, "inside", b"x");
        write_atomic(&blocked, b"three").expect_err("a directory in the way");
        let mut names: Vec<_> = fs::read_dir(dir.path())
            .expect("list")
            .map(|entry| entry.expect("entry").file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["blocked", "new"]);
    }
}

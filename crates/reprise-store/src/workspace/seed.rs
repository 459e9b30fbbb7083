//! Seeding the stat cache of a fresh checkout, so its first workspace hash
//! reads no file whose content is already known.
//!
//! A checkout writes each file from a blob and records the file's stat data
//! beside the blob's id in its index. When the checkout wrote every file
//! exactly as its blob (the caller establishes that: no attributes, filters
//! or end-of-line conversion; `Git::checks_out_verbatim`), an entry that is
//! not racily clean says: a file whose `lstat` is exactly these stat data
//! holds this blob (`CheckoutIndex::recorded_clean` has the rule). Its
//! content digest is the blob's, from the state directory's map of blob ids
//! to digests (`blob_digests.rs`), so the entry goes into the stat cache as
//! it is, keyed by the stat data the index recorded, and no file is
//! touched: the hash that follows compares each file's fresh `lstat` with
//! it in every field and reads the file on any difference (a change since
//! the checkout, a field the index truncated, a mode the checkout's umask
//! made otherwise than guessed). Every file whose blob the map does not
//! know, or whose entry is racily clean, is read once here, and its pair
//! added to the map for the next checkout.
//!
//! The stat cache's own rule holds for what is seeded: an entry is recorded
//! only when its mtime and ctime are strictly older than this seed's start
//! (`StatKey::settled_before`).

use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rayon::prelude::*;
use rustix::fs::{Mode, OFlags};
use sha1::Sha1;
use sha2::{Digest as _, Sha256};

use super::blob_digests::{BlobDigests, BlobId};
use super::stat_cache::{self, CacheWriter, StatKey, Timestamp};
use crate::dir_stat::DirStat;
use crate::shadow_tree::{CheckoutIndex, RecordedStat};

/// A fresh checkout, as its maker holds it.
#[derive(Debug, Clone, Copy)]
pub struct Checkout<'a> {
    /// The worktree's top: the index's paths are relative to it.
    pub top: &'a Path,
    /// The index the checkout wrote (or a copy with its modification time).
    pub index: &'a Path,
    /// The state directory's map of blob ids to content digests.
    pub digests: &'a Path,
}

/// What a seed did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeedReport {
    /// Files whose digest came from the map, unread.
    pub known: u64,
    /// Files read now.
    pub read: u64,
    /// Entries written to the stat cache.
    pub recorded: u64,
}

/// Writes the stat cache at `cache` for the tree at `root` (the checkout's
/// top or a directory below it) from `checkout`, when there is no cache
/// there yet; a tree that already has one, or whose index cannot be read,
/// is left alone. Never fails: whatever is not seeded is read by the hash.
///
/// The caller must know that the checkout wrote every file as its blob.
pub fn seed_stat_cache(root: &Path, cache: &Path, checkout: &Checkout<'_>) -> SeedReport {
    if fs::symlink_metadata(cache).is_ok() {
        return SeedReport::default();
    }
    let Some(start) = stat_cache::mark_start(cache, root) else {
        return SeedReport::default();
    };
    let (Ok(top), Ok(root)) = (fs::canonicalize(checkout.top), fs::canonicalize(root)) else {
        return SeedReport::default();
    };
    let Ok(Some(index)) = CheckoutIndex::read(checkout.index) else {
        return SeedReport::default();
    };
    let Some(prefix) = prefix_of(&top, &root) else {
        return SeedReport::default();
    };
    let digests = BlobDigests::load(checkout.digests);
    let below: Vec<(usize, &[u8], &BlobId)> = index
        .entries()
        .enumerate()
        .filter(|(_, (path, _))| path.starts_with(&prefix))
        .map(|(at, (path, id))| (at, path, id))
        .collect();
    let modes = Modes::of(index.file_permissions());
    let seeded: Vec<Option<Seeded>> = below
        .par_iter()
        .map_init(DirStat::default, |stat, &(at, path, id)| {
            if let (Some(digest), Some(recorded)) = (digests.get(id), index.recorded_clean(at)) {
                return Some(Seeded {
                    digest: *digest,
                    read: None,
                    recordable: Some(modes.key(&recorded)).filter(|key| key.settled_before(start)),
                });
            }
            let full = top.join(std::ffi::OsStr::from_bytes(path));
            read_one(stat, &full, start)
        })
        .collect();

    let mut report = SeedReport::default();
    let mut writer = CacheWriter::new(stat_cache::root_bytes(&root), below.len());
    let mut learned = Vec::new();
    for ((_, path, _), seeded) in below.iter().zip(&seeded) {
        let Some(seeded) = seeded else { continue };
        match seeded.read {
            Some(id) => {
                report.read += 1;
                if digests.get(&id).is_none() {
                    learned.push((id, seeded.digest));
                }
            }
            None => report.known += 1,
        }
        if let Some(stat) = &seeded.recordable {
            writer.push(&path[prefix.len()..], stat, &seeded.digest);
            report.recorded += 1;
        }
    }
    if report.recorded > 0 {
        let _ = stat_cache::write_atomic(cache, &writer.finish());
    }
    // Rewritten only when something was learned, then with this tree's
    // blobs alone: the map never holds more than one tree's.
    if !learned.is_empty() {
        digests
            .kept(&learned, index.entries().map(|(_, id)| id))
            .store(checkout.digests);
    }
    report
}

/// The index path prefix of `root` under `top` (empty, or ending in `/`).
fn prefix_of(top: &Path, root: &Path) -> Option<Vec<u8>> {
    let relative = root.strip_prefix(top).ok()?.as_os_str().as_bytes();
    let mut prefix = relative.to_vec();
    if !prefix.is_empty() {
        prefix.push(b'/');
    }
    Some(prefix)
}

/// One file's digest, and how it was had.
#[derive(Debug)]
struct Seeded {
    digest: [u8; 32],
    /// The blob id of the bytes read, when the file was read now.
    read: Option<BlobId>,
    /// The stat to record the digest under, if the stat cache may.
    recordable: Option<StatKey>,
}

/// The `st_mode` a checkout gives its files: git creates them as it
/// created the index, 0666 (0777 for an executable) less the umask.
#[derive(Debug, Clone, Copy)]
struct Modes {
    regular: u32,
    executable: u32,
}

impl Modes {
    fn of(index_permissions: u32) -> Self {
        const REGULAR: u32 = 0o100000;
        Self {
            regular: REGULAR | index_permissions,
            executable: REGULAR | index_permissions | ((index_permissions & 0o444) >> 2),
        }
    }

    /// The full stat data a file has if it is still as `recorded`.
    fn key(&self, recorded: &RecordedStat) -> StatKey {
        let time = |(secs, nanos): (u32, u32)| Timestamp {
            secs: i64::from(secs),
            nanos,
        };
        StatKey {
            dev: u64::from(recorded.dev),
            ino: u64::from(recorded.ino),
            mode: if recorded.executable {
                self.executable
            } else {
                self.regular
            },
            size: u64::from(recorded.size),
            modified: time(recorded.modified),
            changed: time(recorded.changed),
        }
    }
}

/// The file at `full`, read now. `None` for what is not a regular file, or
/// cannot be read: the hash sees to it.
fn read_one(stat: &mut DirStat, full: &Path, start: Timestamp) -> Option<Seeded> {
    let listed = StatKey::of(&stat.lstat(full).ok()?);
    if !listed.is_regular_file() {
        return None;
    }
    let read = read_both(full).ok()?;
    let whole = read.opened == listed && read.bytes == listed.size;
    Some(Seeded {
        digest: read.digest,
        read: whole.then_some(read.id),
        recordable: Some(listed).filter(|listed| whole && listed.settled_before(start)),
    })
}

/// A file read whole: its SHA-256, its git blob id, and the `fstat` it was
/// read under.
#[derive(Debug)]
struct ReadBoth {
    digest: [u8; 32],
    id: BlobId,
    bytes: u64,
    opened: StatKey,
}

fn read_both(path: &Path) -> io::Result<ReadBoth> {
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let descriptor = rustix::fs::open(path, flags, Mode::empty())?;
    let opened = StatKey::of(&rustix::fs::fstat(&descriptor)?);
    if !opened.is_regular_file() {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    // The blob's header names its size, so the file is read whole first.
    let mut content = Vec::with_capacity(usize::try_from(opened.size).unwrap_or(0));
    fs::File::from(descriptor).read_to_end(&mut content)?;
    let mut blob = Sha1::new();
    blob.update(format!("blob {}\0", content.len()).as_bytes());
    blob.update(&content);
    Ok(ReadBoth {
        digest: Sha256::digest(&content).into(),
        id: blob.finalize().into(),
        bytes: content.len() as u64,
        opened,
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::process::Command;
    use std::time::{Duration, SystemTime};

    use super::super::cached::{CacheReport, CacheWrite, hash_cached_at};
    use super::super::hash_workspace;
    use super::super::test_support::write;
    use super::*;

    /// A repository whose files were committed and then checked out again
    /// (its index a checkout's), with the stat cache and map outside it.
    struct Repo {
        _dir: tempfile::TempDir,
        top: PathBuf,
        index: PathBuf,
        cache: PathBuf,
        digests: PathBuf,
    }

    fn git(top: &Path, args: &[&str]) {
        let status = Command::new("git")
            .current_dir(top)
            .args(["-c", "user.name=t", "-c", "user.email=t@localhost"])
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .status()
            .expect("git runs");
        assert!(status.success(), "git {args:?}");
    }

    fn repo(files: usize) -> Repo {
        let dir = tempfile::tempdir().expect("temp dir");
        let top = dir.path().join("tree");
        for index in 0..files {
            let content = format!("file {index}\n").repeat(index % 5 + 1);
            write(
                &top,
                &format!("d{}/f{index}.txt", index % 4),
                content.as_bytes(),
            );
        }
        write(&top, "empty", b"");
        git(&top, &["init", "-q"]);
        git(&top, &["add", "-A"]);
        git(&top, &["commit", "-qm", "files"]);
        // A checkout of its own: every file written again from its blob.
        for entry in fs::read_dir(&top).expect("list") {
            let path = entry.expect("entry").path();
            if path.file_name() != Some(".git".as_ref()) {
                let _ = fs::remove_dir_all(&path).or_else(|_| fs::remove_file(&path));
            }
        }
        git(&top, &["checkout", "-q", "--", "."]);
        // The index is written in the tick of the last files it records,
        // which makes them racily clean; a checkout of a real tree takes
        // many ticks, and leaves only its last few so.
        let index = top.join(".git/index");
        let written = fs::metadata(&index)
            .expect("index")
            .modified()
            .expect("mtime");
        while SystemTime::now() <= written + Duration::from_millis(50) {
            std::thread::sleep(Duration::from_millis(5));
        }
        set_mtime(&index, SystemTime::now());
        let cache = dir.path().join("state/cache/workspace/tree.bin");
        let digests = dir.path().join("state/cache/blob-digests.bin");
        Repo {
            _dir: dir,
            index,
            top,
            cache,
            digests,
        }
    }

    impl Repo {
        fn checkout(&self) -> Checkout<'_> {
            Checkout {
                top: &self.top,
                index: &self.index,
                digests: &self.digests,
            }
        }

        /// Waits until the file system's clock has passed everything
        /// written so far, as it has by the time a task's tree is hashed.
        fn settle(&self) {
            let probe = self.cache.with_file_name("probe");
            let first = stat_cache::mark_start(&probe, &self.top).expect("a start");
            while stat_cache::mark_start(&probe, &self.top).expect("a start") <= first {
                std::thread::sleep(Duration::from_millis(1));
            }
        }

        /// The workspace hash of the tree with its stat cache, checked
        /// against the uncached hash; what the cache gave it.
        fn hash(&self) -> CacheReport {
            let start = stat_cache::mark_start(&self.cache, &self.top);
            let run = hash_cached_at(&self.top, 2, &self.cache, start).expect("hash");
            assert_eq!(
                run.hash,
                hash_workspace(&self.top, 2).expect("hash"),
                "the seeded cache gave another hash: {:?}",
                run.report
            );
            run.report
        }

        fn forget_cache(&self) {
            fs::remove_file(&self.cache).expect("a cache to remove");
        }
    }

    fn set_mtime(path: &Path, time: SystemTime) {
        fs::File::options()
            .write(true)
            .open(path)
            .expect("open")
            .set_modified(time)
            .expect("utimensat");
    }

    #[test]
    fn a_second_checkout_of_the_same_blobs_is_seeded_without_reading() {
        let repo = repo(40);
        repo.settle();
        let first = seed_stat_cache(&repo.top, &repo.cache, &repo.checkout());
        assert_eq!(
            first,
            SeedReport {
                known: 0,
                read: 41,
                recorded: 41
            }
        );
        let hashed = repo.hash();
        assert_eq!((hashed.reused, hashed.read), (41, 0));
        assert_eq!(hashed.write, CacheWrite::Unchanged);

        repo.forget_cache();
        let second = seed_stat_cache(&repo.top, &repo.cache, &repo.checkout());
        assert_eq!(
            second,
            SeedReport {
                known: 41,
                read: 0,
                recorded: 41
            }
        );
        let hashed = repo.hash();
        assert_eq!((hashed.reused, hashed.read), (41, 0));
    }

    /// The map's pairs are the files' own: each blob id is git's for the
    /// bytes, each digest their SHA-256.
    #[test]
    fn the_map_pairs_each_blob_id_with_its_content_digest() {
        let repo = repo(6);
        repo.settle();
        seed_stat_cache(&repo.top, &repo.cache, &repo.checkout());
        let map = BlobDigests::load(&repo.digests);
        let index = CheckoutIndex::read(&repo.index)
            .expect("read")
            .expect("index");
        let mut checked = 0;
        for (path, id) in index.entries() {
            let content = fs::read(repo.top.join(std::ffi::OsStr::from_bytes(path))).expect("read");
            let digest: [u8; 32] = Sha256::digest(&content).into();
            assert_eq!(
                map.get(id),
                Some(&digest),
                "{}",
                String::from_utf8_lossy(path)
            );
            checked += 1;
        }
        assert_eq!((checked, map.len()), (7, 7));
    }

    /// The seed is a claim of the index about the file; a file changed since
    /// the checkout (same size, mtime put back: only ctime and the content
    /// say so) is read by the hash, never given its entry's blob's digest.
    #[test]
    fn a_file_changed_after_the_checkout_is_read_not_seeded() {
        let repo = repo(20);
        repo.settle();
        seed_stat_cache(&repo.top, &repo.cache, &repo.checkout());
        repo.forget_cache();

        let changed = repo.top.join("d1/f1.txt");
        let modified = fs::metadata(&changed)
            .expect("stat")
            .modified()
            .expect("mtime");
        let mut after = fs::read(&changed).expect("read");
        after[0] ^= 0x20;
        fs::write(&changed, &after).expect("rewrite");
        set_mtime(&changed, modified);
        repo.settle();

        // The seed takes the index's word for the file's stat data; the
        // hash finds them changed and reads the file.
        seed_stat_cache(&repo.top, &repo.cache, &repo.checkout());
        let hashed = repo.hash();
        assert_eq!((hashed.reused, hashed.read), (20, 1));
    }

    /// An entry recorded in the tick its index was written is racily clean:
    /// a same-size rewrite then would keep every stat field. Its file is
    /// read, whatever the map says.
    #[test]
    fn racily_clean_entries_are_read() {
        let repo = repo(10);
        repo.settle();
        seed_stat_cache(&repo.top, &repo.cache, &repo.checkout());
        repo.forget_cache();

        // Date the index back to the oldest file's time: every entry is then
        // as late as its index, or later.
        let oldest = index_files(&repo)
            .iter()
            .map(|path| fs::metadata(path).expect("stat").modified().expect("mtime"))
            .min()
            .expect("files");
        set_mtime(&repo.index, oldest);
        let seeded = seed_stat_cache(&repo.top, &repo.cache, &repo.checkout());
        assert_eq!((seeded.known, seeded.read), (0, 11));
    }

    #[test]
    fn a_subdirectory_is_seeded_with_its_own_paths() {
        let repo = repo(12);
        repo.settle();
        let root = repo.top.join("d2");
        let seeded = seed_stat_cache(&root, &repo.cache, &repo.checkout());
        assert_eq!(seeded.recorded, 3);
        let start = stat_cache::mark_start(&repo.cache, &root);
        let run = hash_cached_at(&root, 1, &repo.cache, start).expect("hash");
        assert_eq!(run.hash, hash_workspace(&root, 1).expect("hash"));
        assert_eq!((run.report.reused, run.report.read), (3, 0));
    }

    #[test]
    fn an_existing_cache_is_left_alone() {
        let repo = repo(5);
        repo.settle();
        repo.hash();
        let before = fs::read(&repo.cache).expect("cache");
        let seeded = seed_stat_cache(&repo.top, &repo.cache, &repo.checkout());
        assert_eq!(seeded, SeedReport::default());
        assert_eq!(fs::read(&repo.cache).expect("cache"), before);
    }

    fn index_files(repo: &Repo) -> Vec<PathBuf> {
        let index = CheckoutIndex::read(&repo.index)
            .expect("read")
            .expect("index");
        index
            .entries()
            .map(|(path, _)| repo.top.join(std::ffi::OsStr::from_bytes(path)))
            .collect()
    }
}

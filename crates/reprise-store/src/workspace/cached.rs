//! The workspace hash with a stat cache: an unchanged file costs one `lstat`.
//!
//! The result is always the one `hash_workspace` gives for the same tree; the
//! cache only decides which files need reading. See `stat_cache` for the file
//! format and the racily-clean rule.

use std::fs;
use std::path::Path;

use super::error::Result;
use super::hash::{CacheView, Provenance, WorkspaceHash, digest_entries, hash_entries};
use super::stat_cache::{self, CacheWriter, CachedFiles, Rejection, Timestamp};
use super::walk::{Content, Entry};

/// Hashes `root` like `hash_workspace`, reusing content digests recorded in the
/// cache file at `cache` for files whose stat data has not changed, and
/// rewriting the cache (atomically) when anything was (re)hashed.
///
/// The cache never makes this fail and never changes the result: a missing,
/// damaged or foreign cache is ignored, and one that cannot be written is
/// left alone. Keep `cache` on a local file system, ideally the tree's, and
/// out of the hashed entries (under `.reprise/` is both).
pub fn hash_workspace_cached(root: &Path, threads: usize, cache: &Path) -> Result<WorkspaceHash> {
    let start = stat_cache::mark_start(cache, root);
    hash_cached_at(root, threads, cache, start).map(|run| run.hash)
}

/// One cached hash and what it did with the cache.
#[derive(Debug)]
pub(super) struct CachedRun {
    pub(super) hash: WorkspaceHash,
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "the public API returns the hash alone; tests read this"
        )
    )]
    pub(super) report: CacheReport,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CacheReport {
    /// Why the cache file was set aside, if it was.
    pub(super) rejected: Option<Rejection>,
    /// Regular files whose digest came from the cache.
    pub(super) reused: u64,
    /// Regular files read now.
    pub(super) read: u64,
    /// Entries in the cache as it stands after this hash.
    pub(super) recorded: u64,
    pub(super) write: CacheWrite,
}

#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CacheWrite {
    /// Every digest came from the cache and it holds exactly the tree's files.
    Unchanged,
    /// Left alone: without a start time (or a canonical root) nothing read
    /// now is recordable.
    Skipped,
    Written,
    /// Writing failed; the hash stands, and the next run reads those files again.
    Failed,
}

/// Below this many entries last time, a tree is walked on one thread: the
/// parallel walker's idle workers wait for each other in 1 ms sleeps, which
/// costs a small tree more than its whole walk (measured per attempt by
/// `scripts/bench-engine`).
const SMALL_TREE_ENTRIES: usize = 2_000;

/// The walker threads for a tree whose cache recorded `recorded` entries
/// (`None`: no usable cache, so the tree's size is unknown).
fn walker_threads(threads: usize, recorded: Option<usize>) -> usize {
    match recorded {
        Some(count) if threads == 0 && count < SMALL_TREE_ENTRIES => 1,
        _ => threads,
    }
}

/// The cached hash with the start time passed in: the seam tests use to
/// place the start in the same tick as a file's last change.
pub(super) fn hash_cached_at(
    root: &Path,
    threads: usize,
    cache: &Path,
    start: Option<Timestamp>,
) -> Result<CachedRun> {
    let Ok(canonical_root) = fs::canonicalize(root) else {
        // The walk reports what is wrong with the root; if nothing is, the
        // tree is hashed without the cache, which needs a canonical root.
        let entries = hash_entries(root, threads, None)?;
        let read = entries.iter().filter(|entry| is_file(entry)).count() as u64;
        return Ok(CachedRun {
            hash: digest_entries(&entries),
            report: CacheReport {
                rejected: Some(Rejection::Unreadable),
                reused: 0,
                read,
                recorded: 0,
                write: CacheWrite::Skipped,
            },
        });
    };
    let root_bytes = stat_cache::root_bytes(&canonical_root);
    let bytes = stat_cache::read(cache);
    let parsed = match &bytes {
        Ok(bytes) => stat_cache::parse(bytes, root_bytes),
        Err(rejection) => Err(*rejection),
    };
    let (recorded, rejected) = match parsed {
        Ok(files) => (files, None),
        Err(rejection) => (CachedFiles::default(), Some(rejection)),
    };

    let view = CacheView {
        recorded: &recorded,
        start,
    };
    let threads = walker_threads(threads, rejected.is_none().then_some(recorded.len()));
    let entries = hash_entries(root, threads, Some(view))?;
    let hash = digest_entries(&entries);

    let tally = Tally::of(&entries);
    let write = match plan_write(start, rejected, recorded.len(), &tally) {
        WritePlan::Keep(outcome) => outcome,
        WritePlan::Write => {
            let bytes = encode_cache(root_bytes, &entries, tally.recordable);
            // The cache is an optimisation: a failed write leaves the hash
            // correct and the next run reading those files again.
            match stat_cache::write_atomic(cache, &bytes) {
                Ok(()) => CacheWrite::Written,
                Err(_) => CacheWrite::Failed,
            }
        }
    };
    let recorded_after = match write {
        CacheWrite::Written => tally.recordable,
        CacheWrite::Unchanged | CacheWrite::Skipped | CacheWrite::Failed => recorded.len() as u64,
    };
    Ok(CachedRun {
        hash,
        report: CacheReport {
            rejected,
            reused: tally.reused,
            read: tally.read,
            recorded: recorded_after,
            write,
        },
    })
}

fn is_file(entry: &Entry) -> bool {
    matches!(entry.content, Content::File(_))
}

/// How the regular files of one hash got their digests.
#[derive(Debug, Default)]
struct Tally {
    reused: u64,
    read: u64,
    /// Files read now whose digests may be recorded.
    fresh: u64,
    /// Every file the cache would hold: reused or fresh.
    recordable: u64,
}

impl Tally {
    fn of(entries: &[Entry]) -> Self {
        let mut tally = Self::default();
        for entry in entries {
            let Content::File(file) = &entry.content else {
                continue;
            };
            match file.provenance {
                Provenance::Reused(_) => tally.reused += 1,
                Provenance::ReadRecordable(_) => {
                    tally.read += 1;
                    tally.fresh += 1;
                }
                Provenance::Read => tally.read += 1,
            }
        }
        tally.recordable = tally.reused + tally.fresh;
        tally
    }
}

#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WritePlan {
    Keep(CacheWrite),
    Write,
}

/// Writes only when the cache would hold something other than it does: a
/// new digest, a file gone, or a file whose recorded stat no longer matches
/// (each of those is a file not reused). An unchanged tree costs no write.
fn plan_write(
    start: Option<Timestamp>,
    rejected: Option<Rejection>,
    loaded: usize,
    tally: &Tally,
) -> WritePlan {
    if start.is_none() {
        return WritePlan::Keep(CacheWrite::Skipped);
    }
    // Reused paths are distinct recorded paths, so equal counts mean every
    // recorded entry was reused.
    if rejected.is_none() && tally.fresh == 0 && tally.reused == loaded as u64 {
        return WritePlan::Keep(CacheWrite::Unchanged);
    }
    WritePlan::Write
}

fn encode_cache(root: &[u8], entries: &[Entry], recordable: u64) -> Vec<u8> {
    let mut writer = CacheWriter::new(root, usize::try_from(recordable).unwrap_or(0));
    for entry in entries {
        if let Content::File(file) = &entry.content
            && let Some(stat) = file.recordable_stat()
        {
            writer.push(entry.relative_bytes(), stat, &file.digest);
        }
    }
    writer.finish()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, symlink};
    use std::time::{Duration, SystemTime};

    use super::super::hash_workspace;
    use super::super::stat_cache::StatKey;
    use super::super::test_support::{find, set_mode, write};
    use super::*;

    /// A tree and a cache file outside it.
    struct Setup {
        _dir: tempfile::TempDir,
        root: std::path::PathBuf,
        cache: std::path::PathBuf,
    }

    fn setup(files: usize) -> Setup {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("tree");
        for index in 0..files {
            let content = format!("file {index}\n").repeat(index % 7 + 1);
            write(
                &root,
                &format!("d{}/f{index}.txt", index % 9),
                content.as_bytes(),
            );
        }
        symlink("d0/f0.txt", root.join("link")).expect("symlink");
        write(&root, ".gitignore", b"*.log\n");
        write(&root, "ignored.log", b"noise\n");
        let cache = dir.path().join("state/cache/workspace-stat");
        Setup {
            _dir: dir,
            root,
            cache,
        }
    }

    /// Waits until the file system's clock has moved past everything written
    /// so far, so the next hash finds every file settled, as an agent's tree
    /// is by the time it is hashed again.
    fn settle(cache: &Path, root: &Path) {
        let probe = cache.with_file_name("settle-probe");
        let first = stat_cache::mark_start(&probe, root).expect("a start time");
        while stat_cache::mark_start(&probe, root).expect("a start time") <= first {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn run(setup: &Setup) -> CachedRun {
        let start = stat_cache::mark_start(&setup.cache, &setup.root);
        assert!(start.is_some(), "the marker could not be written");
        let run = hash_cached_at(&setup.root, 2, &setup.cache, start).expect("cached hash");
        let uncached = hash_workspace(&setup.root, 2).expect("hash");
        assert_eq!(
            run.hash, uncached,
            "the cached hash differs: {:?}",
            run.report
        );
        run
    }

    fn report(
        rejected: Option<Rejection>,
        reused: u64,
        read: u64,
        recorded: u64,
        write: CacheWrite,
    ) -> CacheReport {
        CacheReport {
            rejected,
            reused,
            read,
            recorded,
            write,
        }
    }

    fn mtime(path: &Path) -> SystemTime {
        fs::symlink_metadata(path)
            .expect("stat")
            .modified()
            .expect("mtime")
    }

    fn set_mtime(path: &Path, time: SystemTime) {
        fs::File::options()
            .write(true)
            .open(path)
            .expect("open")
            .set_modified(time)
            .expect("utimensat");
    }

    /// Rewrites `relative` with content of the same size and puts its mtime
    /// back: only ctime (and the content) tell it changed.
    fn rewrite_keeping_size_and_mtime(root: &Path, relative: &str) {
        let path = root.join(relative);
        let before = fs::read(&path).expect("read");
        let modified = mtime(&path);
        let mut after = before.clone();
        after[0] ^= 0x20;
        fs::write(&path, &after).expect("rewrite");
        set_mtime(&path, modified);
        let metadata = fs::symlink_metadata(&path).expect("stat");
        assert_eq!(metadata.modified().expect("mtime"), modified);
        assert_eq!(metadata.len(), before.len() as u64);
    }

    #[test]
    fn the_cached_hash_equals_the_uncached_one_cold_warm_and_after_every_change() {
        let setup = setup(300);
        let root = setup.root.as_path();
        settle(&setup.cache, root);
        let cold = run(&setup);
        assert_eq!(cold.hash.files, 302);
        assert_eq!(
            cold.report,
            report(Some(Rejection::Missing), 0, 301, 301, CacheWrite::Written)
        );
        let warm = run(&setup);
        assert_eq!(warm.hash, cold.hash);
        assert_eq!(
            warm.report,
            report(None, 301, 0, 301, CacheWrite::Unchanged)
        );

        type Change = fn(&Path);
        // Each change, with the files it leaves to read, reuse and record,
        // and whether the cache must be written.
        let changes: [(&str, Change, u64, u64, u64, CacheWrite); 7] = [
            (
                "same size, mtime put back",
                |root| rewrite_keeping_size_and_mtime(root, "d1/f1.txt"),
                1,
                300,
                301,
                CacheWrite::Written,
            ),
            (
                "append",
                |root| {
                    let mut file = fs::File::options()
                        .append(true)
                        .open(root.join("d2/f2.txt"))
                        .expect("open");
                    std::io::Write::write_all(&mut file, b"more\n").expect("append");
                },
                1,
                300,
                301,
                CacheWrite::Written,
            ),
            (
                "delete",
                |root| fs::remove_file(root.join("d3/f3.txt")).expect("delete"),
                0,
                300,
                300,
                CacheWrite::Written,
            ),
            (
                "new file",
                |root| write(root, "d4/new.txt", b"new\n"),
                1,
                300,
                301,
                CacheWrite::Written,
            ),
            (
                "chmod +x",
                |root| set_mode(root, "d5/f5.txt", 0o755),
                1,
                300,
                301,
                CacheWrite::Written,
            ),
            (
                "rename",
                |root| {
                    fs::rename(root.join("d6/f6.txt"), root.join("d6/renamed.txt"))
                        .expect("rename");
                },
                1,
                300,
                301,
                CacheWrite::Written,
            ),
            (
                "symlink retarget",
                |root| {
                    fs::remove_file(root.join("link")).expect("remove link");
                    symlink("d7/f7.txt", root.join("link")).expect("symlink");
                },
                0,
                301,
                301,
                CacheWrite::Unchanged,
            ),
        ];
        let mut previous = warm.hash;
        for (name, change, read, reused, recorded, write) in changes {
            change(root);
            settle(&setup.cache, root);
            let changed = run(&setup);
            assert_ne!(
                changed.hash.hash, previous.hash,
                "{name} did not change the hash"
            );
            assert_eq!(
                changed.report,
                report(None, reused, read, recorded, write),
                "{name}"
            );
            let again = run(&setup);
            assert_eq!(again.hash, changed.hash, "{name}");
            assert_eq!(
                again.report,
                report(None, recorded, 0, recorded, CacheWrite::Unchanged),
                "{name}: the second run after the change"
            );
            previous = changed.hash;
        }
    }

    #[test]
    fn the_public_entry_point_writes_the_cache_and_agrees_with_the_uncached_hash() {
        let setup = setup(40);
        let first = hash_workspace_cached(&setup.root, 0, &setup.cache).expect("hash");
        assert_eq!(first, hash_workspace(&setup.root, 0).expect("hash"));
        let bytes = fs::read(&setup.cache).expect("the cache was written");
        let canonical = fs::canonicalize(&setup.root).expect("canonical");
        stat_cache::parse(&bytes, stat_cache::root_bytes(&canonical))
            .expect("a cache for this root");
        assert!(setup.cache.with_file_name("workspace-stat.start").is_file());

        rewrite_keeping_size_and_mtime(&setup.root, "d0/f0.txt");
        let second = hash_workspace_cached(&setup.root, 1, &setup.cache).expect("hash");
        assert_ne!(second.hash, first.hash);
        assert_eq!(second, hash_workspace(&setup.root, 1).expect("hash"));
    }

    /// The hazard the racily-clean rule guards against: a file rewritten with
    /// the same size in the same timestamp tick as the hash that recorded it
    /// keeps every stat field. Stamping that physically is left to luck, so
    /// the start is placed in the file's own tick instead: the file must not
    /// be recorded, and a same-size rewrite must then be seen.
    #[test]
    fn a_file_changed_in_the_same_tick_as_the_start_is_not_recorded() {
        let setup = setup(20);
        let root = setup.root.as_path();
        settle(&setup.cache, root);
        write(root, "racy.txt", b"before\n");
        let racy = StatKey::of(&rustix::fs::lstat(root.join("racy.txt")).expect("stat"));
        let same_tick = racy.modified.max(racy.changed);

        let first = hash_cached_at(root, 2, &setup.cache, Some(same_tick)).expect("hash");
        assert_eq!(first.hash, hash_workspace(root, 2).expect("hash"));
        assert_eq!(
            first.report,
            report(Some(Rejection::Missing), 0, 22, 21, CacheWrite::Written)
        );
        let bytes = fs::read(&setup.cache).expect("cache");
        let canonical = fs::canonicalize(root).expect("canonical");
        let recorded =
            stat_cache::parse(&bytes, stat_cache::root_bytes(&canonical)).expect("parse");
        assert!(
            find(&recorded, b"racy.txt").is_none(),
            "a racily clean file was recorded"
        );
        assert!(find(&recorded, b"d0/f0.txt").is_some());

        rewrite_keeping_size_and_mtime(root, "racy.txt");
        settle(&setup.cache, root);
        let second = run(&setup);
        assert_ne!(second.hash.hash, first.hash.hash);
        assert_eq!(second.report, report(None, 21, 1, 22, CacheWrite::Written));
    }

    #[test]
    fn a_file_stamped_in_the_future_is_read_every_time() {
        let setup = setup(20);
        let root = setup.root.as_path();
        let future = SystemTime::now() + Duration::from_secs(3600);
        set_mtime(&root.join("d2/f2.txt"), future);
        settle(&setup.cache, root);

        let first = run(&setup);
        assert_eq!(first.report.recorded, 20);
        let second = run(&setup);
        assert_eq!(
            second.report,
            report(None, 20, 1, 20, CacheWrite::Unchanged),
            "a file not strictly older than the start was reused"
        );
        rewrite_keeping_size_and_mtime(root, "d2/f2.txt");
        assert_eq!(mtime(&root.join("d2/f2.txt")), future);
        let third = run(&setup);
        assert_ne!(third.hash.hash, second.hash.hash);
    }

    #[test]
    fn without_a_start_time_recorded_digests_are_used_but_none_are_added() {
        let setup = setup(20);
        let root = setup.root.as_path();
        settle(&setup.cache, root);
        let first = run(&setup);
        assert_eq!(first.report.recorded, 21);
        write(root, "d0/new.txt", b"new\n");
        let blind = hash_cached_at(root, 2, &setup.cache, None).expect("hash");
        assert_eq!(blind.hash, hash_workspace(root, 2).expect("hash"));
        assert_eq!(blind.report, report(None, 21, 1, 21, CacheWrite::Skipped));
    }

    #[test]
    fn damaged_foreign_and_unknown_caches_are_ignored_and_replaced() {
        let setup = setup(30);
        let root = setup.root.as_path();
        settle(&setup.cache, root);
        let first = run(&setup);
        assert_eq!(first.report.recorded, 31);
        let good = fs::read(&setup.cache).expect("cache");

        // The same files at another root: the right paths, the wrong tree.
        let elsewhere = setup.root.with_file_name("copy");
        for entry in hash_entries(root, 1, None).expect("list") {
            let relative = std::str::from_utf8(entry.relative_bytes()).expect("utf-8");
            if let Content::File(_) = entry.content {
                write(&elsewhere, relative, &fs::read(&entry.path).expect("read"));
            }
        }
        let mut flipped = good.clone();
        let last_digest_byte = good.len() - 33;
        flipped[last_digest_byte] ^= 1;
        let mut newer = good.clone();
        newer[19..23].copy_from_slice(&2u32.to_le_bytes());

        let cases: [(&str, Vec<u8>, Rejection); 5] = [
            (
                "garbage",
                b"not a cache at all\n".to_vec(),
                Rejection::NotACache,
            ),
            (
                "truncated",
                good[..good.len() * 2 / 3].to_vec(),
                Rejection::ChecksumMismatch,
            ),
            ("a flipped digest bit", flipped, Rejection::ChecksumMismatch),
            ("another version", newer, Rejection::UnknownVersion(2)),
            ("empty", Vec::new(), Rejection::NotACache),
        ];
        for (name, bytes, rejection) in cases {
            fs::write(&setup.cache, &bytes).expect("damage the cache");
            let damaged = run(&setup);
            assert_eq!(damaged.hash, first.hash, "{name}");
            assert_eq!(
                damaged.report,
                report(Some(rejection), 0, 31, 31, CacheWrite::Written),
                "{name}"
            );
            assert_eq!(
                fs::read(&setup.cache).expect("cache"),
                good,
                "{name}: not rebuilt"
            );
        }

        let foreign = Setup {
            _dir: tempfile::tempdir().expect("temp dir"),
            root: elsewhere,
            cache: setup.cache.clone(),
        };
        let moved = run(&foreign);
        assert_eq!(moved.report.rejected, Some(Rejection::OtherRoot));
        assert_eq!(moved.report.reused, 0);
    }

    #[test]
    fn an_unchanged_tree_does_not_rewrite_the_cache() {
        let setup = setup(50);
        settle(&setup.cache, &setup.root);
        let first = run(&setup);
        assert_eq!(first.report.write, CacheWrite::Written);
        let before = fs::metadata(&setup.cache).expect("stat");
        settle(&setup.cache, &setup.root);
        let second = run(&setup);
        assert_eq!(second.report.write, CacheWrite::Unchanged);
        let after = fs::metadata(&setup.cache).expect("stat");
        let identity = |metadata: &fs::Metadata| {
            (
                metadata.ino(),
                metadata.mtime(),
                metadata.mtime_nsec(),
                metadata.ctime(),
                metadata.ctime_nsec(),
            )
        };
        assert_eq!(
            identity(&after),
            identity(&before),
            "the cache was rewritten"
        );
    }

    #[test]
    fn an_unwritable_cache_still_gives_the_right_hash() {
        let setup = setup(20);
        let expected = hash_workspace(&setup.root, 2).expect("hash");

        // No directory can be made for the cache: no marker, no start time.
        let under_a_file = setup.root.join("d0/f0.txt/cache");
        let hashed = hash_workspace_cached(&setup.root, 2, &under_a_file).expect("hash");
        assert_eq!(hashed, expected);
        let run = hash_cached_at(&setup.root, 2, &under_a_file, None).expect("hash");
        assert_eq!(run.report.write, CacheWrite::Skipped);

        // The marker can be written, the cache cannot: a directory is in the way.
        let blocked = setup.cache.clone();
        write(&blocked, "inside", b"x");
        settle(&setup.cache, &setup.root);
        let start = stat_cache::mark_start(&blocked, &setup.root);
        let run = hash_cached_at(&setup.root, 2, &blocked, start).expect("hash");
        assert_eq!(run.hash, expected);
        assert_eq!(
            run.report,
            report(Some(Rejection::Unreadable), 0, 21, 0, CacheWrite::Failed)
        );
        assert_eq!(
            hash_workspace_cached(&setup.root, 2, &blocked).expect("hash"),
            expected
        );
        let leftovers: Vec<_> = fs::read_dir(blocked.parent().expect("parent"))
            .expect("list")
            .map(|entry| entry.expect("entry").file_name())
            .filter(|name| name.to_string_lossy().contains(".tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn a_missing_root_is_the_same_error_as_uncached() {
        let dir = tempfile::tempdir().expect("temp dir");
        let missing = dir.path().join("nowhere");
        let error = hash_workspace_cached(&missing, 1, &dir.path().join("cache"))
            .expect_err("a missing root");
        assert_eq!(
            error.to_string(),
            format!("cannot hash {}: no such directory", missing.display())
        );
    }
}

//! One appender and one reader for every chained file (journals, spines, the
//! audit chain).
//!
//! An append takes an exclusive `flock`, writes the whole line with one
//! `write` on an `O_APPEND` descriptor and `fdatasync`s before it returns, so
//! a crash can tear at most the final line. The head `(seq, digest)` is cached
//! with the file length it was read at: an append costs O(1) in the length of
//! the chain, and a change of length (another writer) makes it re-read only the
//! last line. A failed write is undone by truncating back; a failed sync
//! poisons the handle, because whether the row reached the disk is unknown.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use reprise_core::chain::{ChainFormat, CheckedRow, LineCheck, check_line};
use reprise_core::digest::AuditKey;
use reprise_core::record::{EncodedRow, Head};
use reprise_core::verify::{ChainReport, ChainVerifier};
use rustix::fs::{FlockOperation, flock};

use crate::error::{IoContext, Result, StoreError};
use crate::fsutil::{create_dir_all_durable, refuse_symlink, sync_dir};
use crate::io::{IoSeam, RealIo};

/// Bytes read per chunk when verifying.
const READ_CHUNK: usize = 8 << 20;
/// Bytes read per step when looking backwards for the last line.
const TAIL_STEP: u64 = 64 << 10;

/// An open chained file that rows can be appended to.
#[derive(Debug)]
pub struct ChainFile {
    path: PathBuf,
    format: ChainFormat,
    /// The task every journal row must name (for the torn-tail message too).
    task: Option<String>,
    key: Option<AuditKey>,
    file: File,
    io: Arc<dyn IoSeam>,
    /// The head and the file length it was read at.
    cached: Option<(u64, Option<Head>)>,
    poisoned: bool,
    /// What the file should look like if only this handle wrote since `mark`.
    expected: Option<Fingerprint>,
    /// Something other than this handle changed the file since `mark`.
    foreign_change: bool,
    /// Something other than this handle changed the file since the first
    /// `mark`: unlike `foreign_change`, a later `mark` does not clear it.
    foreign_seen: bool,
}

/// The identity and timestamps of a file as `stat` reports them by path. A
/// file that is replaced, truncated, rewritten or appended to changes at least
/// one of these; ctime cannot be set back by a user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Fingerprint {
    fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// The file's size in bytes.
    pub fn size(&self) -> u64 {
        self.len
    }
}

/// Holds the exclusive lock on a chained file until dropped.
pub(crate) struct LockGuard<'a>(&'a File);

impl<'a> LockGuard<'a> {
    pub(crate) fn take(file: &'a File, path: &Path) -> Result<Self> {
        flock(file, FlockOperation::LockExclusive)
            .map_err(std::io::Error::from)
            .at(path)?;
        Ok(Self(file))
    }
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        // Closing the descriptor would release it too; unlocking now lets
        // other writers in as soon as the append is durable.
        let _ = flock(self.0, FlockOperation::Unlock);
    }
}

impl ChainFile {
    /// Opens (creating if needed) the chained file at `path`.
    pub fn open(
        path: &Path,
        format: ChainFormat,
        task: Option<&str>,
        key: Option<AuditKey>,
        io: Arc<dyn IoSeam>,
    ) -> Result<Self> {
        let dir = path.parent().expect("chained files live in a directory");
        create_dir_all_durable(dir, 0o755)?;
        let existed = path.exists();
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o644)
            .custom_flags(
                (rustix::fs::OFlags::CLOEXEC | rustix::fs::OFlags::NOFOLLOW).bits() as i32,
            )
            .open(path)
            .map_err(|err| refuse_symlink(err, path))?;
        if !existed {
            sync_dir(dir)?;
        }
        Ok(Self {
            path: path.to_path_buf(),
            format,
            task: task.map(str::to_owned),
            key,
            file,
            io,
            cached: None,
            poisoned: false,
            expected: None,
            foreign_change: false,
            foreign_seen: false,
        })
    }

    /// Opens with the real operating system behind it.
    pub fn open_real(
        path: &Path,
        format: ChainFormat,
        task: Option<&str>,
        key: Option<AuditKey>,
    ) -> Result<Self> {
        Self::open(path, format, task, key, Arc::new(RealIo))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn stat_path(&self) -> Result<Fingerprint> {
        Ok(Fingerprint::of(
            &std::fs::metadata(&self.path).at(&self.path)?,
        ))
    }

    /// Notes the file as it is now; `only_own_appends_since_mark` then tells
    /// whether anything but this handle's appends changed it since.
    pub fn mark(&mut self) -> Result<Fingerprint> {
        let now = self.stat_path()?;
        if self.foreign_change || self.expected.is_some_and(|expected| expected != now) {
            self.foreign_seen = true;
        }
        self.expected = Some(now);
        self.foreign_change = false;
        Ok(now)
    }

    /// True when every change to the file since `mark` was an append by this
    /// handle, so rows verified before the mark need not be read again.
    pub fn only_own_appends_since_mark(&self) -> Result<bool> {
        Ok(!self.foreign_change
            && self.expected.is_some()
            && self.expected == Some(self.stat_path()?))
    }

    /// True when anything but this handle's own appends changed the file at
    /// any time since its first `mark`, whatever was verified in between: a
    /// journal written behind the engine's back is not sealed as its own.
    pub fn foreign_writes_seen(&self) -> Result<bool> {
        Ok(self.foreign_seen || self.expected.is_some() && !self.only_own_appends_since_mark()?)
    }

    /// If the file at `path` is no longer the one this handle has open (it
    /// was replaced, say by an editor's rename), opens the one on disk: the
    /// journal is the file at its path, not an unlinked inode.
    fn follow_replacement(&mut self) -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        let ours = self.file.metadata().at(&self.path)?;
        let on_disk = match std::fs::metadata(&self.path) {
            Ok(meta) => meta,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                self.foreign_change = true;
                self.foreign_seen = true;
                return self.reopen();
            }
            Err(err) => return Err(err).at(&self.path),
        };
        if (ours.dev(), ours.ino()) != (on_disk.dev(), on_disk.ino()) {
            self.foreign_change = true;
            self.foreign_seen = true;
            self.reopen()?;
        }
        Ok(())
    }

    fn reopen(&mut self) -> Result<()> {
        self.file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o644)
            .custom_flags(
                (rustix::fs::OFlags::CLOEXEC | rustix::fs::OFlags::NOFOLLOW).bits() as i32,
            )
            .open(&self.path)
            .map_err(|err| refuse_symlink(err, &self.path))?;
        self.cached = None;
        Ok(())
    }

    /// Appends the row `encode` builds on top of the current head, durably.
    /// Returns the new head once the row is on disk.
    pub fn append(
        &mut self,
        encode: impl FnOnce(Option<Head>) -> Result<EncodedRow>,
    ) -> Result<Head> {
        self.append_then(encode, |_| Ok(()))
    }

    /// As [`append`](Self::append), then runs `after` with the new head while
    /// the lock is still held (the audit chain replaces its witness there, so
    /// witnesses are written in the order of the rows they name).
    pub fn append_then(
        &mut self,
        encode: impl FnOnce(Option<Head>) -> Result<EncodedRow>,
        after: impl FnOnce(Head) -> Result<()>,
    ) -> Result<Head> {
        if self.poisoned {
            return Err(StoreError::Poisoned {
                path: self.path.clone(),
            });
        }
        self.follow_replacement()?;
        let _lock = LockGuard::take(&self.file, &self.path)?;
        let before = Fingerprint::of(&self.file.metadata().at(&self.path)?);
        if self.expected.is_some_and(|expected| expected != before) {
            self.foreign_change = true;
            self.foreign_seen = true;
        }
        let len = before.len;
        let head = match self.cached {
            Some((cached_len, head)) if cached_len == len => head,
            _ => self.read_head(len)?,
        };
        let row = encode(head)?;
        let written = match self.io.write(&self.file, &row.line) {
            Ok(written) if written == row.line.len() => written,
            outcome => {
                // Nothing was acknowledged: take the partial line back out so
                // the next append does not build on a torn tail. If even that
                // fails, the tail stays torn and `replay repair` removes it.
                self.cached = None;
                if self.io.set_len(&self.file, len).is_err() {
                    self.poisoned = true;
                }
                let source = match outcome {
                    Err(err) => err,
                    Ok(_) => std::io::Error::new(std::io::ErrorKind::WriteZero, "short write"),
                };
                return Err(source).at(&self.path);
            }
        };
        if let Err(err) = self.io.sync_data(&self.file) {
            // After a failed fsync the kernel may have dropped the dirty pages
            // and cleared the error: never retry and acknowledge.
            self.poisoned = true;
            self.cached = None;
            return Err(err).at(&self.path);
        }
        self.cached = Some((len + written as u64, Some(row.head)));
        if self.expected.is_some() {
            self.expected = Some(Fingerprint::of(&self.file.metadata().at(&self.path)?));
        }
        after(row.head)?;
        Ok(row.head)
    }

    /// The head an append would build on now (the cached one if the file did
    /// not change length); refuses a torn or damaged end, as an append would.
    pub fn head(&mut self) -> Result<Option<Head>> {
        self.follow_replacement()?;
        let _lock = LockGuard::take(&self.file, &self.path)?;
        let len = self.file.metadata().at(&self.path)?.len();
        match self.cached {
            Some((cached_len, head)) if cached_len == len => Ok(head),
            _ => {
                let head = self.read_head(len)?;
                self.cached = Some((len, head));
                Ok(head)
            }
        }
    }

    /// Reads the last line to find the head; refuses a torn or damaged end.
    fn read_head(&self, len: u64) -> Result<Option<Head>> {
        if len == 0 {
            return Ok(None);
        }
        let torn = || StoreError::TornTail {
            path: self.path.clone(),
            task: repair_target(self.format, self.task.as_deref()),
        };
        let mut last_byte = [0u8; 1];
        self.file
            .read_exact_at(&mut last_byte, len - 1)
            .at(&self.path)?;
        if last_byte[0] != b'\n' {
            return Err(torn());
        }
        // Walk back from the final newline to the one before it.
        let mut start = len - 1;
        let mut line: Vec<u8> = Vec::new();
        while start > 0 {
            let step = TAIL_STEP.min(start);
            let mut chunk = vec![0u8; step as usize];
            self.file
                .read_exact_at(&mut chunk, start - step)
                .at(&self.path)?;
            start -= step;
            let found = memchr::memrchr(b'\n', &chunk);
            if let Some(newline) = found {
                chunk.drain(..=newline);
            }
            chunk.extend_from_slice(&line);
            line = chunk;
            if found.is_some() {
                break;
            }
        }
        let line = line.as_slice();
        match check_line(self.format, self.key.as_ref(), line) {
            LineCheck::Row(row) if row.digest_ok && row.decision_ok => Ok(Some(Head {
                seq: row.seq,
                digest: row.digest,
            })),
            LineCheck::NotObject if line.last() == Some(&0) => Err(torn()),
            _ => Err(StoreError::DamagedTail {
                path: self.path.clone(),
            }),
        }
    }
}

/// What to name in `reprise replay repair TARGET` for a chained file.
pub(crate) fn repair_target(format: ChainFormat, task: Option<&str>) -> String {
    match (format, task) {
        (ChainFormat::Audit, _) => "audit".to_owned(),
        (ChainFormat::Ledger, _) => "ledger".to_owned(),
        (_, Some(task)) => task.to_owned(),
        (_, None) => "TASK".to_owned(),
    }
}

/// Reads the chained file at `path` through the verifier, in chunks, calling
/// `observe` on each row of the verified prefix.
pub fn read_chain(
    path: &Path,
    format: ChainFormat,
    key: Option<&AuditKey>,
    task: Option<&str>,
    watch: &[u64],
    observe: impl FnMut(&CheckedRow<'_>, &[u8]),
) -> Result<ChainReport> {
    let mut verifier = ChainVerifier::new(format, key, task);
    for &seq in watch {
        verifier.watch(seq);
    }
    Ok(read_chain_from(path, 0, verifier, observe)?.0)
}

/// Feeds the file from byte `offset` (the start of a line) through
/// `verifier`. Returns the report and the offset just past the last whole
/// line read, where a later incremental read may start.
pub fn read_chain_from(
    path: &Path,
    offset: u64,
    mut verifier: ChainVerifier<'_>,
    mut observe: impl FnMut(&CheckedRow<'_>, &[u8]),
) -> Result<(ChainReport, u64)> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|err| refuse_symlink(err, path))?;
    file.seek(SeekFrom::Start(offset)).at(path)?;
    let mut consumed = offset;
    let mut buffer: Vec<u8> = Vec::with_capacity(READ_CHUNK * 2);
    loop {
        // `read_to_end` fills spare capacity without zeroing it first.
        let read = (&mut file)
            .take(READ_CHUNK as u64)
            .read_to_end(&mut buffer)
            .at(path)?;
        if read == 0 {
            break;
        }
        if let Some(last) = memchr::memrchr(b'\n', &buffer) {
            verifier.feed_observed(&buffer[..=last], &mut observe);
            buffer.drain(..=last);
            consumed += last as u64 + 1;
        }
    }
    Ok((verifier.finish(&buffer), consumed))
}

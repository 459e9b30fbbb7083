//! A checkpoint's git tree built without starting git: what `git add --all
//! --force` into the shadow index and `git write-tree` would store, for the
//! trees where reprise can say exactly what git would do.
//!
//! The shadow index is read as git's stat cache (index format 2 or 3, the
//! formats of gitformat-index(5) this git writes by default): a file whose
//! stat data are those of its entry, and which is not racily clean, keeps its
//! entry's blob; every other file is read and hashed. Blobs and trees are
//! written as loose objects (`crate::loose`), then the index is written
//! again, as format 2, through `index.lock` as git writes it, so every later
//! git command (a rollback's `read-tree`, a fallback `add`) reads it as its
//! own. A tree or an index this module does not read (attributes that could
//! convert content, a nested repository, a name git refuses, an index of
//! another format or with an extension git requires readers to know) is left
//! to git: `Ok(None)`.
//!
//! Racy entries follow git's rule: an entry whose file changed in the same
//! second its index was written (or later) is read again. The index written
//! here also marks every entry whose file changed after the checkpoint
//! began (less the file clock's coarseness) as changed (size 0, as git
//! "smudges" racily clean entries): an edit made while the checkpoint read
//! the tree, within the same second and of the same size, is then read by
//! the next command, git's or reprise's, where git's own `add` would leave
//! it to chance.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use rayon::prelude::*;
use sha1::{Digest, Sha1};

use crate::dir_stat::DirStat;

/// The id of the empty blob: a zero-size entry naming any other blob was
/// smudged, and is read again.
const EMPTY_BLOB: [u8; 20] = [
    0xe6, 0x9d, 0xe2, 0x9b, 0xb2, 0xd1, 0xd6, 0x43, 0x4b, 0x8b, 0x29, 0xae, 0x77, 0x5a, 0xd8, 0xc2,
    0xe4, 0x8c, 0x53, 0x91,
];

/// Index entry flag bits this module does not handle: assume-valid and
/// extended (intent-to-add, skip-worktree). The stage bits are checked
/// apart.
const FLAG_ASSUME_VALID: u16 = 0x8000;
const FLAG_EXTENDED: u16 = 0x4000;
const FLAG_STAGE: u16 = 0x3000;
const NAME_MASK: u16 = 0x0fff;

/// How far a file's time may lag the clock read just before it changed:
/// the kernel stamps files from a clock that ticks every few milliseconds.
const FILE_CLOCK_LAG: std::time::Duration = std::time::Duration::from_millis(20);

/// One file (or symlink) of the tree, as the walk found it.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    /// The path from the tree's top, `/`-separated, as bytes.
    pub path: Vec<u8>,
    pub meta: fs::Metadata,
}

/// The stat data git keeps per entry, each truncated to 32 bits as the
/// index stores them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    ctime_secs: u32,
    ctime_nanos: u32,
    mtime_secs: u32,
    mtime_nanos: u32,
    dev: u32,
    ino: u32,
    mode: u32,
    uid: u32,
    gid: u32,
    size: u32,
}

impl Stat {
    fn of(meta: &fs::Metadata) -> Self {
        Self {
            ctime_secs: meta.ctime() as u32,
            ctime_nanos: meta.ctime_nsec() as u32,
            mtime_secs: meta.mtime() as u32,
            mtime_nanos: meta.mtime_nsec() as u32,
            dev: meta.dev() as u32,
            ino: meta.ino() as u32,
            mode: git_mode(meta),
            uid: meta.uid(),
            gid: meta.gid(),
            size: meta.size() as u32,
        }
    }

    /// The same from a raw `lstat` (as `rustix` gives it). The casts
    /// truncate to the index's 32 bits, as git does.
    #[allow(
        clippy::unnecessary_cast,
        reason = "field types differ between architectures"
    )]
    fn of_lstat(stat: &rustix::fs::Stat) -> Self {
        let mode = stat.st_mode as u32;
        let git_mode = match mode & 0o170000 {
            0o120000 => 0o120000,
            0o100000 if mode & 0o100 != 0 => 0o100755,
            0o100000 => 0o100644,
            // Neither a file nor a link: never an entry's.
            other => other,
        };
        Self {
            ctime_secs: stat.st_ctime as u32,
            ctime_nanos: stat.st_ctime_nsec as u32,
            mtime_secs: stat.st_mtime as u32,
            mtime_nanos: stat.st_mtime_nsec as u32,
            dev: stat.st_dev as u32,
            ino: stat.st_ino as u32,
            mode: git_mode,
            uid: stat.st_uid as u32,
            gid: stat.st_gid as u32,
            size: stat.st_size as u32,
        }
    }

    /// Whether a file whose stat data are `now` is unchanged since this
    /// entry: git's comparison (device numbers aside), nanoseconds included.
    fn matches(&self, now: &Self) -> bool {
        Self {
            dev: now.dev,
            ..*self
        } == *now
    }
}

/// One entry of an index.
#[derive(Debug, Clone)]
struct Entry {
    path: Vec<u8>,
    stat: Stat,
    id: [u8; 20],
}

/// The mode git records for a file: a link, or a regular file executable
/// or not by its owner's x bit (`core.filemode`).
fn git_mode(meta: &fs::Metadata) -> u32 {
    if meta.file_type().is_symlink() {
        0o120000
    } else if meta.mode() & 0o100 != 0 {
        0o100755
    } else {
        0o100644
    }
}

/// Whether a name in the tree is one git would take from a walk without
/// ceremony: not a `.git` in any spelling git guards against (a nested
/// repository, or a name its path checks refuse), not an attributes file
/// (whose rules could make git convert what it stores), not a
/// `.gitmodules`.
pub(crate) fn plain_name(name: &[u8]) -> bool {
    let lower = name.to_ascii_lowercase();
    let trimmed = {
        let mut end = lower.len();
        while end > 0 && matches!(lower[end - 1], b' ' | b'.') {
            end -= 1;
        }
        &lower[..end]
    };
    !(trimmed == b".git"
        || lower.starts_with(b"git~")
        || lower.starts_with(b".gitattributes")
        || lower.starts_with(b".gitmodules"))
}

/// The path of `relative` (a path under the tree) as index bytes.
pub(crate) fn index_path(relative: &Path) -> Vec<u8> {
    relative.as_os_str().as_bytes().to_vec()
}

/// Builds the tree of `found` (every file of the tree that goes into the
/// checkpoint) in the shadow at `git_dir`, rewrites its index to match, and
/// returns the tree's id; `Ok(None)` when the shadow's index is in a form
/// read only by git, which is left untouched then. Entries of the old index
/// under `kept_prefix` (reprise's own directory, outside the walk and
/// outside git's pathspec alike) are kept as they are, as `git add` keeps
/// index entries its pathspec excludes. `started` is when the checkpoint
/// began.
pub(crate) fn write_tree(
    git_dir: &Path,
    tree: &Path,
    found: &[Found],
    kept_prefix: &[u8],
    started: SystemTime,
) -> io::Result<Option<String>> {
    let index_path = git_dir.join("index");
    let Some((old, index_secs)) = read_index(&index_path)? else {
        return Ok(None);
    };
    let old: HashMap<&[u8], &Entry> = old
        .iter()
        .map(|entry| (entry.path.as_slice(), entry))
        .collect();
    // File times come from the kernel's coarse clock, which can lag the
    // clock `started` was read from by a tick.
    let started = started
        .checked_sub(FILE_CLOCK_LAG)
        .and_then(|time| time.duration_since(UNIX_EPOCH).ok())
        .map_or((0, 0), |since| (since.as_secs(), since.subsec_nanos()));
    let mut entries: Vec<Entry> = found
        .par_iter()
        .map(|file| -> io::Result<Entry> {
            let stat = Stat::of(&file.meta);
            let known = old.get(file.path.as_slice()).filter(|entry| {
                entry.stat.matches(&stat)
                    && i64::from(entry.stat.mtime_secs) < index_secs
                    && (entry.stat.size != 0 || entry.id == EMPTY_BLOB)
            });
            let id = match known {
                Some(entry) => entry.id,
                None => {
                    let full = tree.join(Path::new(std::ffi::OsStr::from_bytes(&file.path)));
                    let body = if file.meta.file_type().is_symlink() {
                        fs::read_link(&full)?.into_os_string().into_vec()
                    } else {
                        fs::read(&full)?
                    };
                    let hex = crate::loose::write_object(git_dir, "blob", &body)?;
                    decode_id(&hex)?
                }
            };
            Ok(Entry {
                path: file.path.clone(),
                stat,
                id,
            })
        })
        .collect::<io::Result<_>>()?;
    entries.extend(
        old.values()
            .filter(|entry| under(&entry.path, kept_prefix))
            .map(|entry| (*entry).clone()),
    );
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    entries.dedup_by(|a, b| a.path == b.path);
    let root = write_trees(git_dir, &entries, 0)?;
    write_index(&index_path, &entries, started)?;
    Ok(Some(hex::encode(root)))
}

/// Writes to `to` a copy of the index at `index` (a stat cache of the
/// tree `tree`) in which every entry whose file's stat data are not exactly
/// the recorded ones, to the nanosecond, change time and inode included, is
/// marked changed (size 0, as git smudges a racily clean entry); false,
/// writing nothing, when the index is in a form not read here.
///
/// git built without nanosecond times reads again every entry written in
/// the same second as its index: after a checkout, every file. The copy is
/// dated one second ahead of now, so git takes the entries left as they
/// are on their stat data, even those of files written in this second,
/// which is sound because a change to a file after its entry was recorded
/// sets its change time later than recorded (no process can set a change
/// time back), and so smudges its entry here; a change after this check
/// would not be seen, so nothing may write the tree until the command that
/// reads the copy has, after which `honest_time` puts its real time back.
pub(crate) fn settle_index(index: &Path, tree: &Path, to: &Path) -> io::Result<bool> {
    let Some((mut entries, _)) = read_index(index)? else {
        return Ok(false);
    };
    entries
        .par_iter_mut()
        .for_each_init(DirStat::default, |stat, entry| {
            let full = tree.join(Path::new(std::ffi::OsStr::from_bytes(&entry.path)));
            let same = stat
                .lstat(&full)
                .is_ok_and(|now| entry.stat.matches(&Stat::of_lstat(&now)));
            if !same {
                entry.stat.size = 0;
            }
        });
    let started = SystemTime::now()
        .checked_sub(FILE_CLOCK_LAG)
        .and_then(|time| time.duration_since(UNIX_EPOCH).ok())
        .map_or((0, 0), |since| (since.as_secs(), since.subsec_nanos()));
    let _ = fs::remove_file(to);
    write_index(to, &entries, started)?;
    File::options()
        .write(true)
        .open(to)?
        .set_modified(SystemTime::now() + std::time::Duration::from_secs(1))?;
    Ok(true)
}

/// Dates the index at `path` one second ahead of now, as `settle_index`
/// does, for an index git has just written from entries it checked (a
/// failure leaves it as it is: git then reads the racy entries again).
pub(crate) fn date_ahead(path: &Path) {
    let _ = File::options()
        .write(true)
        .open(path)
        .and_then(|file| file.set_modified(SystemTime::now() + std::time::Duration::from_secs(1)));
}

/// Puts the modification time of the index at `path` back to now when it
/// is ahead of it (`settle_index`), so a file changed later in this same
/// second is again read by git, not taken on its stat data.
pub(crate) fn honest_time(path: &Path) {
    let now = SystemTime::now();
    if fs::metadata(path)
        .and_then(|meta| meta.modified())
        .is_ok_and(|modified| modified > now)
    {
        let _ = File::options()
            .write(true)
            .open(path)
            .and_then(|file| file.set_modified(now));
    }
}

/// A checkout's index as a claim about its files: each entry names the blob
/// its file was written from, with the stat data the file had then.
#[derive(Debug)]
pub(crate) struct CheckoutIndex {
    entries: Vec<Entry>,
    /// When the index was written, to the nanosecond.
    written: (i64, u32),
    permissions: u32,
}

impl CheckoutIndex {
    /// The index at `path`; `None` when there is none or it is in a form
    /// read only by git.
    pub(crate) fn read(path: &Path) -> io::Result<Option<Self>> {
        let mut file = match File::open(path) {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(err),
        };
        let meta = file.metadata()?;
        let written = (meta.mtime(), meta.mtime_nsec() as u32);
        let permissions = meta.mode() & 0o777;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(parse_index(&bytes).map(|entries| Self {
            entries,
            written,
            permissions,
        }))
    }

    /// The entries' paths (from the tree's top, sorted) and blob ids.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&[u8], &[u8; 20])> {
        self.entries
            .iter()
            .map(|entry| (entry.path.as_slice(), &entry.id))
    }

    /// The stat data entry `at` recorded for its file, when they show the
    /// file held the entry's blob: a regular file's, recorded strictly
    /// before the index was written (not racily clean: a same-size rewrite
    /// in the tick the entry was recorded in would leave every field as it
    /// was), and not smudged (size 0 for a blob that is not empty). A file
    /// whose `lstat` is still exactly these, to the nanosecond, change time
    /// and inode included, holds the blob still: a change made after the
    /// entry was recorded sets the change time later, and no process can set
    /// a change time back.
    pub(crate) fn recorded_clean(&self, at: usize) -> Option<RecordedStat> {
        let entry = self.entries.get(at)?;
        let stat = &entry.stat;
        let before_index = |secs: u32, nanos: u32| (i64::from(secs), nanos) < self.written;
        let clean = matches!(stat.mode, 0o100644 | 0o100755)
            && before_index(stat.mtime_secs, stat.mtime_nanos)
            && before_index(stat.ctime_secs, stat.ctime_nanos)
            && (stat.size != 0 || entry.id == EMPTY_BLOB);
        clean.then_some(RecordedStat {
            dev: stat.dev,
            ino: stat.ino,
            executable: stat.mode == 0o100755,
            size: stat.size,
            modified: (stat.mtime_secs, stat.mtime_nanos),
            changed: (stat.ctime_secs, stat.ctime_nanos),
        })
    }

    /// The permission bits of the index file, which git creates as it
    /// creates the files of a checkout (0666 less the umask).
    pub(crate) fn file_permissions(&self) -> u32 {
        self.permissions
    }
}

/// What an index entry recorded of its file, as the index holds it (each
/// field its low 32 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordedStat {
    pub(crate) dev: u32,
    pub(crate) ino: u32,
    pub(crate) executable: bool,
    pub(crate) size: u32,
    pub(crate) modified: (u32, u32),
    pub(crate) changed: (u32, u32),
}

/// Whether `path` is `prefix` or lies under it.
fn under(path: &[u8], prefix: &[u8]) -> bool {
    !prefix.is_empty()
        && path.starts_with(prefix)
        && (path.len() == prefix.len() || path[prefix.len()] == b'/')
}

fn decode_id(hex: &str) -> io::Result<[u8; 20]> {
    let mut id = [0; 20];
    hex::decode_to_slice(hex, &mut id)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not an object id"))?;
    Ok(id)
}

/// The tree object of `entries[..]` below `prefix_len` bytes of their
/// paths (all sharing that prefix), its subtrees written first. The
/// entries are sorted by path, which is git's tree order too: a directory
/// sorts as its name with a `/` after it.
fn write_trees(git_dir: &Path, entries: &[Entry], prefix_len: usize) -> io::Result<[u8; 20]> {
    let mut body = Vec::new();
    let mut at = 0;
    while at < entries.len() {
        let rest = &entries[at].path[prefix_len..];
        match memchr::memchr(b'/', rest) {
            Some(slash) => {
                let name = &rest[..slash];
                let end = at
                    + entries[at..]
                        .iter()
                        .take_while(|entry| {
                            let rest = &entry.path[prefix_len..];
                            rest.len() > slash && rest[slash] == b'/' && &rest[..slash] == name
                        })
                        .count();
                let id = write_trees(git_dir, &entries[at..end], prefix_len + slash + 1)?;
                body.extend_from_slice(b"40000 ");
                body.extend_from_slice(name);
                body.push(0);
                body.extend_from_slice(&id);
                at = end;
            }
            None => {
                let entry = &entries[at];
                body.extend_from_slice(format!("{:o} ", entry.stat.mode).as_bytes());
                body.extend_from_slice(rest);
                body.push(0);
                body.extend_from_slice(&entry.id);
                at += 1;
            }
        }
    }
    decode_id(&crate::loose::write_object(git_dir, "tree", &body)?)
}

/// The entries of the index at `path` and its modification time in whole
/// seconds (git's racy-entry clock); an empty index when there is none;
/// `None` when it is in a form read only by git.
fn read_index(path: &Path) -> io::Result<Option<(Vec<Entry>, i64)>> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Some((Vec::new(), 0))),
        Err(err) => return Err(err),
    };
    let modified = file.metadata()?.mtime();
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(parse_index(&bytes).map(|entries| (entries, modified)))
}

fn parse_index(bytes: &[u8]) -> Option<Vec<Entry>> {
    let (body, checksum) = bytes.split_at_checked(bytes.len().checked_sub(20)?)?;
    // `index.skipHash` writes a zero checksum; any other must be the body's.
    if checksum.iter().any(|&byte| byte != 0) && Sha1::digest(body).as_slice() != checksum {
        return None;
    }
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(body.get(at..at + 4)?.try_into().ok()?))
    };
    if body.get(..4)? != b"DIRC" || !matches!(word(4)?, 2 | 3) {
        return None;
    }
    let count = word(8)? as usize;
    let mut entries = Vec::with_capacity(count.min(1 << 20));
    let mut at = 12;
    for _ in 0..count {
        let field = |index: usize| word(at + 4 * index);
        let stat = Stat {
            ctime_secs: field(0)?,
            ctime_nanos: field(1)?,
            mtime_secs: field(2)?,
            mtime_nanos: field(3)?,
            dev: field(4)?,
            ino: field(5)?,
            mode: field(6)?,
            uid: field(7)?,
            gid: field(8)?,
            size: field(9)?,
        };
        let id: [u8; 20] = body.get(at + 40..at + 60)?.try_into().ok()?;
        let flags = u16::from_be_bytes(body.get(at + 60..at + 62)?.try_into().ok()?);
        if flags & (FLAG_ASSUME_VALID | FLAG_EXTENDED | FLAG_STAGE) != 0
            || !matches!(stat.mode, 0o100644 | 0o100755 | 0o120000)
        {
            return None;
        }
        let name_at = at + 62;
        let length = memchr::memchr(0, body.get(name_at..)?)?;
        if (flags & NAME_MASK) as usize != length.min(NAME_MASK as usize) {
            return None;
        }
        entries.push(Entry {
            path: body[name_at..name_at + length].to_vec(),
            stat,
            id,
        });
        at += (62 + length + 8) & !7;
    }
    // Extensions: an optional one (its name starts with a capital) may be
    // dropped; any other changes what the entries mean.
    while at < body.len() {
        let name = body.get(at..at + 4)?;
        if !name[0].is_ascii_uppercase() {
            return None;
        }
        at += 8 + word(at + 4)? as usize;
    }
    (at == body.len()).then_some(entries)
}

/// Writes `entries` (sorted by path) as the index at `path`, format 2,
/// through `index.lock` renamed into place as git does (a git holding the
/// lock makes this fail, not interleave). An entry whose file changed at
/// `started` (seconds, nanoseconds) or later is written smudged (size 0),
/// so the next reader reads it again.
fn write_index(path: &Path, entries: &[Entry], started: (u64, u32)) -> io::Result<()> {
    let mut bytes = Vec::with_capacity(12 + entries.len() * 80);
    bytes.extend_from_slice(b"DIRC");
    bytes.extend_from_slice(&2u32.to_be_bytes());
    bytes.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    for entry in entries {
        let start = bytes.len();
        let stat = &entry.stat;
        let size = if (u64::from(stat.mtime_secs), stat.mtime_nanos) >= started {
            0
        } else {
            stat.size
        };
        for word in [
            stat.ctime_secs,
            stat.ctime_nanos,
            stat.mtime_secs,
            stat.mtime_nanos,
            stat.dev,
            stat.ino,
            stat.mode,
            stat.uid,
            stat.gid,
            size,
        ] {
            bytes.extend_from_slice(&word.to_be_bytes());
        }
        bytes.extend_from_slice(&entry.id);
        let flags = entry.path.len().min(NAME_MASK as usize) as u16;
        bytes.extend_from_slice(&flags.to_be_bytes());
        bytes.extend_from_slice(&entry.path);
        let length = (62 + entry.path.len() + 8) & !7;
        bytes.resize(start + length, 0);
    }
    let checksum = Sha1::digest(&bytes);
    bytes.extend_from_slice(&checksum);
    let mut lock = path.as_os_str().to_owned();
    lock.push(".lock");
    let lock = std::path::PathBuf::from(lock);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&lock)?;
    let written = file
        .write_all(&bytes)
        .and_then(|()| fs::rename(&lock, path));
    if written.is_err() {
        let _ = fs::remove_file(&lock);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_git_guards_or_converts_by_are_not_plain() {
        for name in [
            ".git",
            ".GIT",
            ".git.",
            ".git ",
            "git~1",
            ".gitattributes",
            ".GitModules",
        ] {
            assert!(!plain_name(name.as_bytes()), "{name}");
        }
        for name in [".gitignore", ".github", "a.git", "git", "main.rs", "x~"] {
            assert!(plain_name(name.as_bytes()), "{name}");
        }
    }

    /// The settled copy is dated a second ahead, so git without nanosecond
    /// times takes its entries on their stat data even when their files
    /// were written in this very second; `honest_time` puts the real time
    /// back. An entry whose file changed is smudged either way.
    #[test]
    fn a_settled_index_is_dated_ahead_until_its_time_is_put_back() {
        let dir = tempfile::tempdir().expect("temp dir");
        let tree = dir.path().join("tree");
        fs::create_dir(&tree).expect("tree");
        // Written a while ago: an entry whose file changed while the copy
        // was settled would be smudged whatever its stat data.
        let earlier = SystemTime::now() - std::time::Duration::from_secs(10);
        for (name, content) in [("a.txt", "one\n"), ("b.txt", "two\n")] {
            fs::write(tree.join(name), content).expect("write");
            File::options()
                .write(true)
                .open(tree.join(name))
                .and_then(|file| file.set_modified(earlier))
                .expect("date the file");
        }
        for args in [&["init", "-q"][..], &["add", "-A"]] {
            let status = std::process::Command::new("git")
                .current_dir(&tree)
                .args(args)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .status()
                .expect("git");
            assert!(status.success());
        }
        fs::write(tree.join("b.txt"), "changed\n").expect("rewrite");
        let copy = dir.path().join("settled");
        assert!(settle_index(&tree.join(".git/index"), &tree, &copy).expect("settle"));
        let modified = || {
            fs::metadata(&copy)
                .expect("stat")
                .modified()
                .expect("mtime")
        };
        assert!(modified() > SystemTime::now(), "not dated ahead of now");
        let (entries, _) = read_index(&copy).expect("read").expect("an index");
        let sizes: Vec<u32> = entries.iter().map(|entry| entry.stat.size).collect();
        assert_eq!(sizes, [4, 0], "the changed file's entry is not smudged");

        honest_time(&copy);
        assert!(modified() <= SystemTime::now());
        date_ahead(&copy);
        assert!(modified() > SystemTime::now(), "not dated ahead again");
        honest_time(&copy);
        assert!(modified() <= SystemTime::now());
    }

    #[test]
    fn a_prefix_covers_itself_and_what_is_under_it_only() {
        assert!(under(b".reprise", b".reprise"));
        assert!(under(b".reprise/x", b".reprise"));
        assert!(!under(b".reprisex", b".reprise"));
        assert!(!under(b"a/.reprise", b".reprise"));
        assert!(!under(b".reprise", b""));
    }
}

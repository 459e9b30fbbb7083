//! The few pieces of a git directory reprise writes without running git:
//! a fresh shadow repository's skeleton, a loose object, a loose ref. Each
//! is a documented on-disk format (gitrepository-layout(5)), written whole
//! through a new file renamed into place, so a reader never sees half of
//! one. A checkpoint starts no git process when the shadow tree builder builds
//! its tree, and two (`add`, `write-tree`) when git must: git's start-up is
//! most of a small checkpoint's cost.

use std::cell::RefCell;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use flate2::{Compress, Compression, FlushCompress, Status};
use sha1::{Digest, Sha1};

/// The settings of a shadow repository: a working tree named by
/// `GIT_WORK_TREE`, links stored as links, no line-ending conversion, no
/// automatic gc while a task runs, permission bits kept.
const SHADOW_CONFIG: &str = "[core]\n\
    \trepositoryformatversion = 0\n\
    \tbare = false\n\
    \tfilemode = true\n\
    \tsymlinks = true\n\
    \tautocrlf = false\n\
    \tlogallrefupdates = false\n\
    [gc]\n\
    \tauto = 0\n";

/// Lays out a new shadow repository at `git_dir`, sharing the objects of
/// `alternate` (an objects directory) when given. `HEAD` is written last: a
/// directory without it is an unfinished one, laid out again.
pub(crate) fn init_shadow(git_dir: &Path, alternate: Option<&Path>) -> io::Result<()> {
    for dir in ["objects/info", "objects/pack", "refs/heads", "refs/tags"] {
        fs::create_dir_all(git_dir.join(dir))?;
    }
    replace(git_dir, Path::new("config"), SHADOW_CONFIG.as_bytes())?;
    if let Some(objects) = alternate {
        let mut line = objects.as_os_str().as_encoded_bytes().to_vec();
        line.push(b'\n');
        replace(git_dir, Path::new("objects/info/alternates"), &line)?;
    }
    neutral_attributes(git_dir)?;
    replace(git_dir, Path::new("HEAD"), b"ref: refs/heads/main\n")
}

/// Attributes that switch off every content conversion git would apply
/// between the tree and the store (line endings, `$Id$`, filters,
/// encodings), in `info/attributes`, which wins over any `.gitattributes`
/// in the tree: a checkpoint holds the tree's bytes exactly, whatever an
/// agent wrote into its `.gitattributes`.
const NEUTRAL_ATTRIBUTES: &[u8] = b"* -text -crlf !eol -ident -filter -working-tree-encoding\n";

/// Writes [`NEUTRAL_ATTRIBUTES`] into the shadow at `git_dir` unless they
/// are there (a shadow laid out before they were).
pub(crate) fn neutral_attributes(git_dir: &Path) -> io::Result<()> {
    let path = git_dir.join("info/attributes");
    if fs::read(&path).is_ok_and(|held| held == NEUTRAL_ATTRIBUTES) {
        return Ok(());
    }
    fs::create_dir_all(git_dir.join("info"))?;
    replace(git_dir, Path::new("info/attributes"), NEUTRAL_ATTRIBUTES)
}

/// Stores `body` as a loose object of `kind` (`commit`, `blob`, ...) and
/// returns its id, git's SHA-1 of the framed object.
pub(crate) fn write_object(git_dir: &Path, kind: &str, body: &[u8]) -> io::Result<String> {
    let header = format!("{kind} {}\0", body.len());
    let mut hasher = Sha1::new();
    hasher.update(header.as_bytes());
    hasher.update(body);
    let id = hex::encode(hasher.finalize());
    let relative = Path::new("objects").join(&id[..2]).join(&id[2..]);
    if git_dir.join(&relative).is_file() {
        return Ok(id);
    }
    let framed = deflate(header.as_bytes(), body)?;
    fs::create_dir_all(git_dir.join("objects").join(&id[..2]))?;
    // Read-only, as git leaves its objects.
    replace_with_mode(git_dir, &relative, &framed, 0o444)?;
    Ok(id)
}

thread_local! {
    /// One zlib compressor per thread, reset for each object: a new one
    /// allocates and zeroes some 200 KiB of tables, which cost more than
    /// compressing a small object.
    static DEFLATE: RefCell<Compress> = RefCell::new(Compress::new(Compression::fast(), true));
}

/// `header` and `body` as one zlib stream, git's loose-object framing.
fn deflate(header: &[u8], body: &[u8]) -> io::Result<Vec<u8>> {
    DEFLATE.with_borrow_mut(|compress| {
        compress.reset();
        let mut framed = Vec::with_capacity(header.len() + body.len() / 2 + 64);
        for (mut input, flush) in [(header, FlushCompress::None), (body, FlushCompress::Finish)] {
            loop {
                if framed.capacity() - framed.len() < 64 {
                    framed.reserve(framed.capacity().max(256));
                }
                let before = compress.total_in();
                let status = compress
                    .compress_vec(input, &mut framed, flush)
                    .map_err(io::Error::other)?;
                let taken = usize::try_from(compress.total_in() - before).unwrap_or(input.len());
                input = &input[taken..];
                match flush {
                    FlushCompress::Finish if status == Status::StreamEnd => break,
                    FlushCompress::None if input.is_empty() => break,
                    _ => {}
                }
            }
        }
        Ok(framed)
    })
}

/// The body of the loose object `id` when it is one of `kind` whose bytes
/// hash to `id`; `Ok(None)` when no loose object has that name (it may be
/// packed); `Err` when the file is there but is not that object.
pub(crate) fn read_object(git_dir: &Path, id: &str, kind: &str) -> io::Result<Option<Vec<u8>>> {
    if id.len() != 40 || !id.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not an object id",
        ));
    }
    let path = git_dir.join("objects").join(&id[..2]).join(&id[2..]);
    let framed = match fs::read(&path) {
        Ok(framed) => framed,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err),
    };
    let mut inflated = Vec::new();
    flate2::read::ZlibDecoder::new(framed.as_slice()).read_to_end(&mut inflated)?;
    let bad =
        |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("object {id}: {what}"));
    if hex::encode(Sha1::digest(&inflated)) != id.to_ascii_lowercase() {
        return Err(bad("its bytes hash to another id"));
    }
    let header = format!("{kind} ");
    let nul = inflated
        .iter()
        .position(|&byte| byte == 0)
        .ok_or_else(|| bad("no header"))?;
    let (head, body) = inflated.split_at(nul);
    let length: usize = head
        .strip_prefix(header.as_bytes())
        .and_then(|length| std::str::from_utf8(length).ok())
        .and_then(|length| length.parse().ok())
        .ok_or_else(|| bad("not of the kind expected"))?;
    let body = &body[1..];
    if body.len() != length {
        return Err(bad("its length is not the one its header says"));
    }
    Ok(Some(body.to_vec()))
}

/// Points the loose ref `name` (`refs/...`) at `id`.
pub(crate) fn write_ref(git_dir: &Path, name: &str, id: &str) -> io::Result<()> {
    let relative = Path::new(name);
    if let Some(parent) = relative.parent() {
        fs::create_dir_all(git_dir.join(parent))?;
    }
    replace(git_dir, relative, format!("{id}\n").as_bytes())
}

/// Writes `bytes` as `dir/relative` through a new file beside it, renamed
/// over it.
fn replace(dir: &Path, relative: &Path, bytes: &[u8]) -> io::Result<()> {
    replace_with_mode(dir, relative, bytes, 0o644)
}

fn replace_with_mode(dir: &Path, relative: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let target = dir.join(relative);
    let parent = target.parent().unwrap_or(dir);
    let temp = parent.join(format!(".tmp-{}", ulid::Ulid::new()));
    let written = (|| {
        let mut file: File = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temp)?;
        file.write_all(bytes)?;
        fs::rename(&temp, &target)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let output = Command::new("git")
            .env("GIT_DIR", dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .args(args)
            .output()
            .unwrap();
        assert!(output.status.success(), "git {args:?}: {output:?}");
        String::from_utf8(output.stdout).unwrap()
    }

    #[test]
    fn git_reads_what_is_written_here_as_its_own() {
        let temp = tempfile::tempdir().unwrap();
        let shadow = temp.path().join("shadow");
        init_shadow(&shadow, None).unwrap();
        let tree = git(&shadow, &["mktree"]).trim().to_owned();
        let body = format!(
            "tree {tree}\nauthor reprise <reprise@localhost> 1700000000 +0000\n\
             committer reprise <reprise@localhost> 1700000000 +0000\n\n{{\"v\":1}}\n"
        );
        let id = write_object(&shadow, "commit", body.as_bytes()).unwrap();
        // git hashes the same bytes to the same id, and reads the object back.
        let hashed = Command::new("git")
            .env("GIT_DIR", &shadow)
            .args(["hash-object", "-t", "commit", "--stdin"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                child.stdin.take().unwrap().write_all(body.as_bytes())?;
                child.wait_with_output()
            })
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&hashed.stdout).trim(), id);
        assert_eq!(git(&shadow, &["cat-file", "-p", &id]), body);
        write_ref(&shadow, "refs/checkpoints/01ABC", &id).unwrap();
        assert_eq!(
            git(&shadow, &["for-each-ref", "--format=%(objectname) %(tree)"]).trim(),
            format!("{id} {tree}")
        );
        git(&shadow, &["fsck", "--strict", "--no-dangling"]);
        assert_eq!(
            read_object(&shadow, &id, "commit").unwrap().unwrap(),
            body.as_bytes()
        );
        assert!(read_object(&shadow, &id, "blob").is_err());
        assert!(
            read_object(&shadow, &"0".repeat(40), "commit")
                .unwrap()
                .is_none()
        );
        // Writing it again is a no-op that names the same object.
        assert_eq!(
            write_object(&shadow, "commit", body.as_bytes()).unwrap(),
            id
        );
    }

    #[test]
    fn objects_of_every_size_come_back_through_the_reused_compressor() {
        let temp = tempfile::tempdir().unwrap();
        let shadow = temp.path().join("shadow");
        init_shadow(&shadow, None).unwrap();
        // Incompressible bytes (a byte-mixing sequence) larger than any
        // first guess at the output's size, then an empty blob, then text.
        let mut state: u32 = 1;
        let noise: Vec<u8> = (0..3_000_000)
            .map(|_| {
                state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                (state >> 16) as u8
            })
            .collect();
        for body in [noise.as_slice(), b"", b"text\n".as_slice()] {
            let id = write_object(&shadow, "blob", body).unwrap();
            assert_eq!(read_object(&shadow, &id, "blob").unwrap().unwrap(), body);
            let size = git(&shadow, &["cat-file", "-s", &id]);
            assert_eq!(size.trim(), body.len().to_string());
        }
        assert_eq!(
            write_object(&shadow, "blob", b"").unwrap(),
            "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
        );
    }
}

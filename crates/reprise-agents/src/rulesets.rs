//! Landlock rulesets built once by the driver and handed to each supervisor.
//!
//! Landlock only grants, so hiding the state directory and the key means a
//! rule for every sibling along the way down to each of them: a hundred
//! rules or more, four system calls each, for every contained process.
//! Every process started with the same rules (each gate of an attempt, a
//! retry's agent when its rules have not changed) can share one ruleset:
//! the driver builds it the first time ([`prepare`]) and keeps it while the
//! directories the build read and the trees it names are unchanged.
//!
//! It reaches the supervisor with no extra process, thread or wait: the
//! supervisor's stdin is one end of a socket pair, on which the driver
//! sends, right after the spawn, the ruleset and the stdin meant for the
//! program ([`Handover`]); the supervisor takes both before anything else
//! ([`receive`]). A ruleset's descriptor is a capability to *add* rules, so
//! it must never reach a program: it arrives close-on-exec, and the
//! program's stdin replaces the socket.

use std::collections::{HashMap, VecDeque};
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};

use crate::supervise::{SandboxRules, build_sandbox};

/// How many prepared rulesets the driver keeps (each holds a descriptor);
/// the oldest goes first.
const KEPT: usize = 64;

/// The driver's end of a supervisor's stdin, and the ruleset to send on it.
#[derive(Debug)]
pub struct Handover {
    socket: UnixStream,
    /// `None` when the ruleset could not be prepared: the supervisor then
    /// builds it itself, and says what fails.
    ruleset: Option<Arc<OwnedFd>>,
}

/// What the first byte of a handover says follows it.
const WITH_RULESET: u8 = 1;
const WITHOUT_RULESET: u8 = 0;

/// How long the driver waits for the listeners a supervisor binds in its
/// attempt's network namespace (a few milliseconds are usual).
const LISTENERS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl Handover {
    /// Prepares the ruleset for `rules` and makes `command` (a supervisor's)
    /// take its stdin from the socket the handover is sent on. `None` only
    /// when no socket could be made.
    pub(crate) fn attach(rules: &SandboxRules, command: &mut Command) -> Option<Self> {
        let ruleset = prepare(rules).ok();
        let (socket, theirs) = UnixStream::pair().ok()?;
        command.stdin(Stdio::from(OwnedFd::from(theirs)));
        Some(Self { socket, ruleset })
    }

    /// Sends the ruleset (when one was prepared) and `stdin`, the program's
    /// stdin, to the spawned supervisor. The socket's buffer holds them:
    /// this never waits.
    pub fn send(&self, stdin: OwnedFd) -> io::Result<()> {
        let (tag, fds) = match &self.ruleset {
            Some(ruleset) => (WITH_RULESET, vec![ruleset.as_fd(), stdin.as_fd()]),
            None => (WITHOUT_RULESET, vec![stdin.as_fd()]),
        };
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(io::Error::other("the handover does not fit its buffer"));
        }
        sendmsg(
            &self.socket,
            &[IoSlice::new(&[tag])],
            &mut control,
            SendFlags::empty(),
        )?;
        Ok(())
    }

    /// The `count` listeners the supervisor bound in the attempt's network
    /// namespace, in the order asked (`None` for one it could not bind).
    /// Empty when the supervisor ended before it sent them (it says why).
    pub(crate) fn receive_listeners(&self, count: usize) -> io::Result<Vec<Option<OwnedFd>>> {
        self.socket.set_read_timeout(Some(LISTENERS_TIMEOUT))?;
        let mut tags = vec![0u8; count];
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(count))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let received = recvmsg(
            &self.socket,
            &mut [IoSliceMut::new(&mut tags)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )?;
        let mut fds = control
            .drain()
            .filter_map(|message| match message {
                RecvAncillaryMessage::ScmRights(fds) => Some(fds),
                _ => None,
            })
            .flatten();
        if received.bytes == 0 {
            return Ok(Vec::new());
        }
        if received.bytes != count {
            return Err(io::Error::other(
                "the supervisor sent a short list of listeners",
            ));
        }
        let listeners: Vec<Option<OwnedFd>> = tags
            .iter()
            .map(|tag| if *tag == 1 { fds.next() } else { None })
            .collect();
        Ok(listeners)
    }
}

/// In the supervisor: the ruleset (when the driver prepared one) and the
/// program's stdin, from the socket that is this process's stdin. Both
/// close-on-exec.
pub(crate) fn receive() -> io::Result<(Option<OwnedFd>, OwnedFd)> {
    let stdin = io::stdin();
    let mut tag = [0u8; 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let received = recvmsg(
        stdin.as_fd(),
        &mut [IoSliceMut::new(&mut tag)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds: Vec<OwnedFd> = control
        .drain()
        .filter_map(|message| match message {
            RecvAncillaryMessage::ScmRights(fds) => Some(fds),
            _ => None,
        })
        .flatten()
        .collect();
    let handed = || io::Error::other("the driver handed over nothing on stdin");
    if received.bytes != 1 {
        return Err(handed());
    }
    match (tag[0], fds.len()) {
        (WITH_RULESET, 2) => {
            let program_stdin = fds.pop().ok_or_else(handed)?;
            Ok((fds.pop(), program_stdin))
        }
        (WITHOUT_RULESET, 1) => Ok((None, fds.pop().ok_or_else(handed)?)),
        _ => Err(handed()),
    }
}

/// In the supervisor: sends the driver the listeners bound in the
/// attempt's network namespace, on the socket that is this process's stdin
/// (one byte each: whether its descriptor follows).
pub(crate) fn send_listeners(listeners: &[Option<OwnedFd>]) -> io::Result<()> {
    let stdin = io::stdin();
    let tags: Vec<u8> = listeners.iter().map(|fd| u8::from(fd.is_some())).collect();
    let fds: Vec<_> = listeners.iter().flatten().map(AsFd::as_fd).collect();
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len().max(1)))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other("the listeners do not fit their buffer"));
    }
    sendmsg(
        stdin.as_fd(),
        &[IoSlice::new(&tags)],
        &mut control,
        SendFlags::empty(),
    )?;
    Ok(())
}

/// The ruleset for `rules`, kept from before while what it was built from
/// is unchanged, else built now. `Err` says why there is none.
pub(crate) fn prepare(rules: &SandboxRules) -> Result<Arc<OwnedFd>, String> {
    static KEPT_RULESETS: Mutex<Option<Kept>> = Mutex::new(None);
    let mut kept = KEPT_RULESETS.lock().map_err(|_| "poisoned".to_owned())?;
    let kept = kept.get_or_insert_with(Kept::default);
    if let Some(prepared) = kept.by_rules.get(rules) {
        if prepared.stamps == stamps_of(rules, &prepared.watched) {
            return Ok(Arc::clone(&prepared.fd));
        }
        kept.forget(rules);
    }
    let sandbox = build_sandbox(rules)?;
    let watched = sandbox.walked.clone();
    let fd: Option<OwnedFd> = sandbox.ruleset.into();
    let fd = Arc::new(fd.ok_or("this kernel has no Landlock")?);
    let stamps = stamps_of(rules, &watched);
    kept.keep(
        rules.clone(),
        Prepared {
            fd: Arc::clone(&fd),
            watched,
            stamps,
        },
    );
    Ok(fd)
}

#[derive(Default)]
struct Kept {
    by_rules: HashMap<SandboxRules, Prepared>,
    /// Oldest first.
    order: VecDeque<SandboxRules>,
}

struct Prepared {
    fd: Arc<OwnedFd>,
    /// The directories the build read.
    watched: Vec<PathBuf>,
    /// What `stamps_of` said when it was built.
    stamps: Vec<Option<Stamp>>,
}

impl Kept {
    fn keep(&mut self, rules: SandboxRules, prepared: Prepared) {
        while self.order.len() >= KEPT {
            match self.order.pop_front() {
                Some(oldest) => {
                    self.by_rules.remove(&oldest);
                }
                None => break,
            }
        }
        self.order.push_back(rules.clone());
        self.by_rules.insert(rules, prepared);
    }

    fn forget(&mut self, rules: &SandboxRules) {
        self.by_rules.remove(rules);
        self.order.retain(|kept| kept != rules);
    }
}

/// What a path was when a ruleset was built: the inode a rule holds and,
/// for a directory the build read, when its entries last changed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    /// Only for the directories the build read.
    mtime: Option<(i64, i64)>,
}

/// The stamps a prepared ruleset is kept by: every directory its build
/// read (an entry added, removed or renamed changes the rules), and each
/// tree the rules name, as itself and as what it leads to (a tree made
/// again is another inode, which its rule does not hold; a hidden tree that
/// appears must be cut out). What the process writes inside a writable
/// tree changes none of them.
fn stamps_of(rules: &SandboxRules, watched: &[PathBuf]) -> Vec<Option<Stamp>> {
    let named = rules
        .writable
        .iter()
        .chain(&rules.granted)
        .chain(&rules.hidden);
    let mut stamps = Vec::with_capacity(watched.len() + 2 * rules.writable.len() + 8);
    for path in watched {
        stamps.push(std::fs::symlink_metadata(path).ok().map(|meta| Stamp {
            mtime: Some((meta.mtime(), meta.mtime_nsec())),
            ..stamp(&meta)
        }));
    }
    for path in named {
        stamps.push(
            std::fs::symlink_metadata(path)
                .ok()
                .map(|meta| stamp(&meta)),
        );
        stamps.push(std::fs::metadata(path).ok().map(|meta| stamp(&meta)));
    }
    stamps
}

fn stamp(meta: &std::fs::Metadata) -> Stamp {
    Stamp {
        dev: meta.dev(),
        ino: meta.ino(),
        mtime: None,
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::path::Path;

    use super::*;

    /// Set in a re-run of this test binary that plays the supervisor: the
    /// secret file to try.
    const CHILD: &str = "REPRISE_TEST_RULESET_CHILD";

    fn rules_in(base: &Path) -> SandboxRules {
        for dir in ["project/.reprise", "project/work", "key"] {
            fs::create_dir_all(base.join(dir)).expect("mkdir");
        }
        fs::write(base.join("project/.reprise/secret"), "s").expect("write");
        SandboxRules {
            writable: vec![base.join("project/work")],
            granted: Vec::new(),
            hidden: vec![base.join("project/.reprise"), base.join("key")],
            writable_shm: false,
            connect_ports: None,
            hidden_by_mounts: false,
        }
    }

    /// In a re-run: takes the handover as a supervisor does, says what it
    /// got, enforces the ruleset and tries the secret.
    #[test]
    #[expect(
        clippy::print_stdout,
        reason = "the re-run tells the test what it got on its stdout"
    )]
    fn supervisor_side() {
        let Ok(secret) = std::env::var(CHILD) else {
            return;
        };
        let (ruleset, stdin) = receive().expect("handed over");
        let ruleset = ruleset.expect("a ruleset");
        for (name, fd) in [("ruleset", &ruleset), ("stdin", &stdin)] {
            let link = fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("link");
            let flags = rustix::io::fcntl_getfd(fd).expect("flags");
            println!(
                "{name} {} cloexec={}",
                link.display(),
                flags.contains(rustix::io::FdFlags::CLOEXEC)
            );
        }
        let mut text = String::new();
        fs::File::from(stdin)
            .read_to_string(&mut text)
            .expect("read stdin");
        println!("said {text}");
        rustix::thread::set_no_new_privs(true).expect("no new privileges");
        #[expect(unsafe_code)]
        // SAFETY: a plain system call on a descriptor owned here.
        let done =
            unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0) };
        assert_eq!(done, 0, "restrict_self");
        match fs::read_to_string(secret) {
            Ok(_) => println!("secret READ"),
            Err(err) => println!("secret {:?}", err.kind()),
        }
    }

    #[test]
    fn a_supervisor_takes_the_ruleset_and_the_program_s_stdin_from_its_own() {
        if std::env::var(CHILD).is_ok() {
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let rules = rules_in(dir.path());
        let mut command = Command::new(std::env::current_exe().expect("exe"));
        command
            .args(["--exact", "rulesets::tests::supervisor_side", "--nocapture"])
            .env(CHILD, dir.path().join("project/.reprise/secret"))
            .stdout(Stdio::piped());
        let handover = Handover::attach(&rules, &mut command).expect("a ruleset");
        let child = command.spawn().expect("spawn");
        let (read, write) =
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe");
        handover.send(read).expect("sent");
        fs::File::from(write)
            .write_all(b"the prompt")
            .expect("write");
        let said =
            String::from_utf8(child.wait_with_output().expect("wait").stdout).expect("utf-8");
        assert!(
            said.contains("ruleset anon_inode:[landlock-ruleset] cloexec=true"),
            "{said}"
        );
        assert!(said.contains("stdin pipe:"), "{said}");
        assert!(said.contains("cloexec=true"), "{said}");
        assert!(said.contains("said the prompt"), "{said}");
        assert!(said.contains("secret PermissionDenied"), "{said}");
    }

    #[test]
    fn a_prepared_ruleset_is_kept_until_what_it_was_built_from_changes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rules = rules_in(dir.path());
        let first = prepare(&rules).expect("prepared");
        assert!(Arc::ptr_eq(&prepare(&rules).expect("again"), &first));
        // Writing inside a writable tree changes nothing.
        fs::write(dir.path().join("project/work/file"), "w").expect("write");
        assert!(Arc::ptr_eq(&prepare(&rules).expect("again"), &first));
        // A new entry beside a hidden tree must be granted: built again.
        fs::write(dir.path().join("project/new"), "n").expect("write");
        let second = prepare(&rules).expect("rebuilt");
        assert!(!Arc::ptr_eq(&second, &first));
        // A writable tree made again is another inode: built again.
        fs::remove_dir_all(dir.path().join("project/work")).expect("rm");
        fs::create_dir(dir.path().join("project/work")).expect("mkdir");
        let third = prepare(&rules).expect("rebuilt");
        assert!(!Arc::ptr_eq(&third, &second));
        // A hidden tree that did not exist, then does: built again.
        let mut later = rules;
        later.hidden.push(dir.path().join("later"));
        let before = prepare(&later).expect("prepared");
        fs::create_dir(dir.path().join("later")).expect("mkdir");
        assert!(!Arc::ptr_eq(&prepare(&later).expect("rebuilt"), &before));
    }
}

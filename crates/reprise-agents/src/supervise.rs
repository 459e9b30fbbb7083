//! Supervision and containment of every agent and gate process.
//!
//! The agent is the untrusted party: it runs commands a model chose, as the
//! same user as reprise. So no child is started directly. The driver starts
//! a small per-attempt *supervisor* (`reprise-supervisor __supervise`, a
//! binary installed beside `reprise` that holds only this module's code),
//! which
//!
//! - takes a parent-death signal (SIGTERM) from the driver's thread, so a
//!   `kill -9` of reprise still ends the attempt (the signal fires when the
//!   spawning *thread* exits: the driver's thread lives until the attempt is
//!   reaped, so that is the same moment);
//! - makes itself a child subreaper, so everything the agent starts, a
//!   `setsid` daemon included, stays its descendant, and kills all of it when
//!   the agent exits or when it is told to stop (SIGTERM, SIGINT, SIGHUP);
//! - builds the Landlock ruleset and starts the program, whose child side
//!   (between fork and exec) takes a parent-death signal (SIGKILL) from the
//!   supervisor and enforces the ruleset on itself. The ruleset also scopes
//!   signals, so the contained agent cannot signal its supervisor or
//!   reprise.
//!
//! The one unsafe block of the crate is that fork-to-exec step
//! ([`contain_child`]): a `pre_exec` closure, sound here because the
//! supervisor is single-threaded and the closure makes system calls only.
//! It replaced a second exec of this binary that did the same from a fresh
//! process, for a cheaper spawn (`scripts/bench-containment` measures it).
//!
//! The driver records each supervisor's pid (its process group id) and start
//! time under the state directory before it waits on it; the next reprise
//! command that opens the state directory stops what a dead run left
//! ([`reap_leftovers`]), checking the start time so a reused pid is never
//! signalled.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
};
use rustix::io::Errno;
use rustix::process::{
    Pid, Signal, WaitOptions, getpid, getppid, kill_process, kill_process_group,
    set_child_subreaper, set_parent_process_death_signal, waitpid,
};
use serde::{Deserialize, Serialize};

use crate::namespaces::NamespaceSpec;
pub use crate::network::{Reach, Walls};

pub use crate::rulesets::Handover;

/// The binary, installed beside `reprise`, that runs the two hops.
pub const SUPERVISOR_BINARY: &str = "reprise-supervisor";
/// The subcommand of the supervisor binary that supervises one attempt
/// (the lineage check recognises a supervisor by it).
pub const SUPERVISE_COMMAND: &str = "__supervise";
/// The record format under the state directory's supervision directory.
const RECORD_VERSION: u64 = 1;
/// How long the supervisor lets its descendants end on SIGTERM before
/// SIGKILL; shorter than the driver's own grace, so the supervisor always
/// finishes its sweep first.
const SUPERVISOR_GRACE: Duration = Duration::from_millis(1000);
/// Bound on the final sweep (a fork bomb must not keep the supervisor alive).
const SWEEP_LIMIT: Duration = Duration::from_secs(10);
/// The Landlock ABI the rules are written for: filesystem rights of ABI 5
/// and signal scoping of ABI 6. Older kernels get what they support.
const LANDLOCK_ABI: ABI = ABI::V6;

/// How the driver starts an attempt's process, decided by the engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Supervision {
    /// The supervisor binary (`reprise-supervisor`): it runs both hops.
    pub supervisor: PathBuf,
    /// The filesystem sandbox; `None` when containment is off (or the kernel
    /// has no Landlock: the run warned once).
    pub sandbox: Option<SandboxRules>,
    /// Where each supervisor is recorded while it runs, so a later command
    /// can stop what a dead run left; `None` records nothing.
    pub records: Option<PathBuf>,
    /// Whether children get a parent-death signal (tests turn it off to show
    /// that the records alone still clean up).
    pub parent_death: bool,
    /// The walls beyond the file system: namespaces of the attempt's own
    /// and what it may connect to (`crate::network`). Only with a sandbox.
    #[serde(default)]
    pub walls: Walls,
}

/// What a contained process may touch. Everything not hidden stays
/// readable; only `writable` (and a few device files) may be written.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SandboxRules {
    /// Trees reprise gives the process to read and write: the worktree,
    /// the attempt's `TMPDIR`, the CLI's config home. A writable tree inside
    /// a hidden one stays writable.
    pub writable: Vec<PathBuf>,
    /// Trees the plan gives it to read and write (the absolute entries of
    /// the task's `allowed_paths`): each is granted as what it opens to when
    /// the sandbox is built, and one that then is, holds or lies inside a
    /// hidden tree fails the sandbox (a symlink made after the plan was
    /// checked, say by an earlier agent that could write there).
    #[serde(default)]
    pub granted: Vec<PathBuf>,
    /// Trees the process may neither read nor write: the state directory
    /// and the audit key's directory.
    pub hidden: Vec<PathBuf>,
    /// Whether `/dev/shm` is writable too (the plan's `writable_shm`):
    /// shared memory outlives the attempt, a channel between tasks and
    /// runs, so it is not unless the plan says so.
    #[serde(default)]
    pub writable_shm: bool,
    /// The only TCP ports the process may connect to (Landlock's network
    /// rules, where the attempt has no network namespace of its own);
    /// `None` leaves connections alone.
    #[serde(default)]
    pub connect_ports: Option<Vec<u16>>,
    /// Whether `hidden` is covered by the program's own mount namespace
    /// (`crate::namespaces`) rather than left out of the rules: then `/`
    /// itself is readable to the rules, which also grants the program's
    /// private `/proc` (a rule on any tree below `/` does not reach a mount
    /// stacked on `/proc`). `hidden` still bars allowed paths and devices.
    #[serde(default)]
    pub hidden_by_mounts: bool,
}

/// Device files every program expects to open for writing.
const WRITABLE_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// Shared memory: writable only when the plan grants it (`writable_shm`).
const SHARED_MEMORY: &str = "/dev/shm";

/// Why a supervisor or containment hop could not do its job.
#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    #[error("bad arguments to the hidden {0} subcommand; it is for reprise's own use")]
    Usage(&'static str),
    #[error("the process that started this attempt is gone; nothing was run")]
    ParentGone,
    #[error("cannot start the contained program: {0}")]
    Spawn(io::Error),
    #[error("cannot record the supervisor under the state directory: {0}")]
    Record(io::Error),
    #[error("cannot apply the Landlock sandbox: {0}")]
    Landlock(String),
    #[error("cannot give the program namespaces of its own: {0}")]
    Namespaces(io::Error),
    #[error("cannot run '{program}': {source}")]
    Exec { program: String, source: io::Error },
}

/// Whether this kernel enforces Landlock.
pub fn landlock_available() -> bool {
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V1))
        .and_then(Ruleset::create)
        .is_ok()
}

/// Whether this kernel holds Landlock's TCP rules (ABI 4): the network's
/// wall where an attempt cannot have a network namespace of its own.
pub fn landlock_network_available() -> bool {
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessNet::ConnectTcp)
        .and_then(Ruleset::create)
        .is_ok()
}

/// The subcommand of the supervisor binary that a namespace probe runs as
/// its program ([`namespaces_available`]).
pub const PROBE_COMMAND: &str = "__probe";

/// Whether `supervisor` can give a program namespaces of its own here: a
/// user, PID and network namespace with its loopback up, and a private
/// `/proc` (some kernels and containers refuse unprivileged user
/// namespaces, or a fresh `/proc`). Tried once, by running the supervisor
/// on itself as [`probe_main`] the way an attempt's program is run.
pub fn namespaces_available(supervisor: &Path) -> bool {
    let spec = Spec {
        v: 1,
        parent: getpid().as_raw_nonzero().get(),
        parent_death: true,
        sandbox: None,
        records: None,
        handoff: false,
        namespaces: Some(NamespaceSpec {
            network: Some(Vec::new()),
            ..NamespaceSpec::default()
        }),
    };
    let Ok(spec) = serde_json::to_string(&spec) else {
        return false;
    };
    Command::new(supervisor)
        .args([SUPERVISE_COMMAND, spec.as_str(), "--"])
        .arg(supervisor)
        .arg(PROBE_COMMAND)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .status()
        .is_ok_and(|status| status.success())
}

/// The namespace probe's program: exits 0 when it is the first process of
/// its own PID namespace and its `/proc` says so.
pub fn probe_main() -> i32 {
    let own_proc = fs::read_link("/proc/self").is_ok_and(|link| link == Path::new("1"));
    if std::process::id() == 1 && own_proc {
        0
    } else {
        1
    }
}

/// Makes the calling process a child subreaper: orphans among its
/// descendants are reparented to it rather than to init.
pub fn become_subreaper() -> io::Result<()> {
    set_child_subreaper(Some(getpid())).map_err(io::Error::from)
}

/// What the supervisor is given after its subcommand name.
#[derive(Debug, Serialize, Deserialize)]
struct Spec {
    v: u64,
    /// The pid that started the supervisor, to notice it died before the
    /// death signal was set.
    parent: i32,
    parent_death: bool,
    sandbox: Option<SandboxRules>,
    /// Where the supervisor records itself before it starts the program,
    /// so a dead reprise never leaves an unrecorded program behind.
    #[serde(default)]
    records: Option<PathBuf>,
    /// Whether the supervisor's stdin is the socket on which the driver
    /// hands over the sandbox's ruleset, built once for every process with
    /// the same rules, and the program's stdin (`crate::rulesets`);
    /// otherwise the supervisor builds the ruleset itself.
    #[serde(default)]
    handoff: bool,
    /// Namespaces of the program's own (`crate::namespaces`).
    #[serde(default)]
    namespaces: Option<NamespaceSpec>,
}

/// The command that runs `program args` through `supervision`'s
/// supervisor, with the sandbox's ruleset prepared for it when it has one
/// (built once for every process with the same rules; the supervisor builds
/// its own when there is none). With a [`Handover`], the command's stdin is
/// taken: set no other, and once it is spawned send the handover the stdin
/// meant for the program.
pub fn supervised_command(
    supervision: &Supervision,
    program: &Path,
    args: &[String],
) -> (Command, Option<Handover>) {
    supervised_in(supervision, None, program, args)
}

/// [`supervised_command`] with `supervision`'s walls as an attempt gets
/// them, for a program whose environment names no model endpoint and whose
/// network needs no listener (what `scripts/bench-containment` measures).
pub fn supervised_walled(
    supervision: &Supervision,
    program: &Path,
    args: &[String],
) -> (Command, Option<Handover>) {
    let (supervision, namespaces, _) =
        crate::process::walls_for(supervision, crate::network::Provider::Any, args, &[]);
    supervised_in(&supervision, namespaces, program, args)
}

/// [`supervised_command`] with the program in namespaces of its own, as
/// `namespaces` says (the driver resolved what its network listens on).
pub(crate) fn supervised_in(
    supervision: &Supervision,
    namespaces: Option<NamespaceSpec>,
    program: &Path,
    args: &[String],
) -> (Command, Option<Handover>) {
    let mut command = Command::new(&supervision.supervisor);
    let handover = supervision
        .sandbox
        .as_ref()
        .and_then(|rules| Handover::attach(rules, &mut command));
    command.args(supervisor_args(
        supervision,
        handover.is_some(),
        namespaces,
        program,
        args,
    ));
    (command, handover)
}

/// The argv (after the program) that runs `program args` under `supervision`.
pub(crate) fn supervisor_args(
    supervision: &Supervision,
    handoff: bool,
    namespaces: Option<NamespaceSpec>,
    program: &Path,
    args: &[String],
) -> Vec<OsString> {
    let spec = Spec {
        v: 1,
        parent: getpid().as_raw_nonzero().get(),
        parent_death: supervision.parent_death,
        sandbox: supervision.sandbox.clone(),
        records: supervision.records.clone(),
        handoff,
        namespaces,
    };
    let mut argv: Vec<OsString> = vec![
        SUPERVISE_COMMAND.into(),
        serde_json::to_string(&spec)
            .unwrap_or_else(|_| "{}".to_owned())
            .into(),
        "--".into(),
        program.as_os_str().to_owned(),
    ];
    argv.extend(args.iter().map(OsString::from));
    argv
}

/// Splits `SPEC -- PROGRAM ARGS...`.
fn split_args(
    args: &[OsString],
    command: &'static str,
) -> Result<(String, OsString, Vec<OsString>), SuperviseError> {
    let usage = || SuperviseError::Usage(command);
    let [spec, dashes, program, rest @ ..] = args else {
        return Err(usage());
    };
    if dashes != "--" {
        return Err(usage());
    }
    let spec = spec.to_str().ok_or_else(usage)?.to_owned();
    Ok((spec, program.clone(), rest.to_vec()))
}

/// `reprise __supervise SPEC -- PROGRAM ARGS...`: runs the program through
/// the containment hop, then kills and reaps every descendant. Returns the
/// exit code to exit with: the program's, or 128 + the signal that ended it
/// (or that stopped the supervisor).
pub fn supervise_main(args: &[OsString]) -> Result<i32, SuperviseError> {
    let (spec, program, rest) = split_args(args, SUPERVISE_COMMAND)?;
    let spec: Spec =
        serde_json::from_str(&spec).map_err(|_| SuperviseError::Usage(SUPERVISE_COMMAND))?;
    if spec.v != 1 {
        return Err(SuperviseError::Usage(SUPERVISE_COMMAND));
    }
    if spec.parent_death {
        let _ = set_parent_process_death_signal(Some(Signal::TERM));
    }
    if getppid().map(|pid| pid.as_raw_nonzero().get()) != Some(spec.parent) {
        return Err(SuperviseError::ParentGone);
    }
    let _ = become_subreaper();
    let me = getpid();
    if let Some(records) = &spec.records {
        // Recorded before anything runs: a reprise killed from here on
        // leaves a record the next command reaps by.
        record_started(records, me, spec.parent).map_err(SuperviseError::Record)?;
    }
    // A stop signal and a child's exit both wake one poll below through a
    // socket pair (the self-pipe trick), so the supervisor needs no thread
    // of its own; the stop signal's number is kept in `stop`.
    let (wake, waker) = UnixStream::pair().map_err(SuperviseError::Spawn)?;
    wake.set_nonblocking(true).map_err(SuperviseError::Spawn)?;
    let stop = Arc::new(AtomicUsize::new(0));
    let register = |signal: i32, stops: bool| -> io::Result<()> {
        if stops {
            signal_hook::flag::register_usize(signal, Arc::clone(&stop), signal as usize)?;
        }
        signal_hook::low_level::pipe::register(signal, waker.try_clone()?)?;
        Ok(())
    };
    for (signal, stops) in [
        (signal_hook::consts::SIGCHLD, false),
        (signal_hook::consts::SIGTERM, true),
        (signal_hook::consts::SIGINT, true),
        (signal_hook::consts::SIGHUP, true),
    ] {
        register(signal, stops).map_err(SuperviseError::Spawn)?;
    }
    // The ruleset the driver prepared for these rules, or else one built
    // here, before the fork (it allocates and opens files); the child only
    // enforces it on itself before its exec.
    let mut command = Command::new(&program);
    command.args(&rest);
    let handed = match &spec.sandbox {
        Some(_) if spec.handoff => {
            let (ruleset, stdin) = crate::rulesets::receive().map_err(SuperviseError::Spawn)?;
            command.stdin(stdin);
            ruleset
        }
        _ => None,
    };
    // The namespaces before the ruleset is built: the listeners go to the
    // driver while the program starts.
    let namespaced = match &spec.namespaces {
        Some(namespaces) => {
            let listeners =
                crate::namespaces::enter(namespaces).map_err(SuperviseError::Namespaces)?;
            if !listeners.is_empty() {
                if !spec.handoff {
                    return Err(SuperviseError::Namespaces(io::Error::other(
                        "no socket to hand the network's listeners over on",
                    )));
                }
                crate::rulesets::send_listeners(&listeners).map_err(SuperviseError::Namespaces)?;
            }
            // The program cannot tell its parent by getppid() once it is the
            // first process of its PID namespace: a pidfd of this supervisor
            // tells whether it is still there.
            Some(
                rustix::process::pidfd_open(me, rustix::process::PidfdFlags::empty())
                    .map_err(|err| SuperviseError::Namespaces(err.into()))?,
            )
        }
        None => None,
    };
    let (ruleset, opened) = match (&spec.sandbox, handed) {
        (Some(_), Some(ruleset)) => (Some(Enforce::Handed(ruleset)), Vec::new()),
        (Some(rules), None) => {
            let sandbox = build_sandbox(rules).map_err(SuperviseError::Landlock)?;
            (Some(Enforce::Built(sandbox.ruleset)), sandbox.opened)
        }
        (None, _) => (None, Vec::new()),
    };
    contain_child(&mut command, me, spec.parent_death, ruleset, namespaced);
    let child = command
        .spawn()
        .map_err(|source| match Errno::from_io_error(&source) {
            Some(Errno::NOTRECOVERABLE) => SuperviseError::Landlock(
                "the kernel refused to enforce the ruleset on the program".to_owned(),
            ),
            Some(Errno::SRCH) => SuperviseError::ParentGone,
            Some(Errno::NOLINK) => SuperviseError::Namespaces(io::Error::other(
                "the kernel refused a private /proc for the program",
            )),
            _ => SuperviseError::Exec {
                program: program.to_string_lossy().into_owned(),
                source,
            },
        })?;
    let child_pid = Pid::from_child(&child);
    drop(child);
    // The program has started: the rules' descriptors have done their part.
    drop(opened);

    // Reap what has exited until the program has; on a stop signal, SIGTERM
    // to the whole tree and SIGKILL after the grace period. The program's
    // death ends the loop and the sweep does the rest.
    let mut status: Option<i32> = None;
    let mut stopped_by = 0;
    let mut kill_at: Option<Instant> = None;
    loop {
        if let ReapResult::Gone = reap_ready(child_pid, &mut status) {
            break;
        }
        if status.is_some() {
            break;
        }
        if stopped_by == 0 {
            stopped_by = stop.load(Ordering::SeqCst);
            if stopped_by != 0 {
                signal_tree(me, Signal::TERM);
                kill_at = Some(Instant::now() + SUPERVISOR_GRACE);
            }
        }
        if let Some(at) = kill_at
            && Instant::now() >= at
        {
            signal_tree(me, Signal::KILL);
            kill_at = None;
        }
        let timeout = kill_at.and_then(|at| {
            rustix::event::Timespec::try_from(at.saturating_duration_since(Instant::now())).ok()
        });
        let mut fds = [rustix::event::PollFd::new(
            &wake,
            rustix::event::PollFlags::IN,
        )];
        let _ = rustix::event::poll(&mut fds, timeout.as_ref());
        // Empty the socket: the wake-ups are noted, the loop looks afresh.
        let mut buffer = [0u8; 64];
        while (&wake).read(&mut buffer).is_ok_and(|read| read > 0) {}
    }
    sweep(me, child_pid, &mut status);
    let signal = match stopped_by {
        0 => stop.load(Ordering::SeqCst),
        first => first,
    };
    // Stopped by a signal: the supervisor reports that signal, as the
    // program itself would have.
    Ok(match (status, signal) {
        (_, signal) if signal != 0 => 128 + signal as i32,
        (Some(code), _) => code,
        (None, _) => 128 + Signal::KILL.as_raw(),
    })
}

enum ReapResult {
    /// Children remain.
    Pending,
    /// No children at all.
    Gone,
}

/// The exit code, or 128 + the signal that ended the process.
fn exit_code_of(status: rustix::process::WaitStatus) -> i32 {
    status
        .exit_status()
        .or_else(|| status.terminating_signal().map(|sig| 128 + sig))
        .unwrap_or(-1)
}

/// Reaps every child that has exited, keeping the program's status.
fn reap_ready(program: Pid, status: &mut Option<i32>) -> ReapResult {
    loop {
        match waitpid(None, WaitOptions::NOHANG) {
            Ok(Some((pid, wait_status))) => {
                if pid == program {
                    *status = Some(exit_code_of(wait_status));
                }
            }
            Ok(None) => return ReapResult::Pending,
            Err(_) => return ReapResult::Gone,
        }
    }
}

/// Kills every descendant of `root` until none is left, reaping as it goes.
fn sweep(root: Pid, program: Pid, status: &mut Option<i32>) {
    let give_up = Instant::now() + SWEEP_LIMIT;
    while Instant::now() < give_up {
        signal_tree(root, Signal::KILL);
        if let ReapResult::Gone = reap_ready(program, status) {
            return;
        }
        thread::sleep(Duration::from_millis(1));
    }
}

/// Sends `signal` to every descendant of `root`.
fn signal_tree(root: Pid, signal: Signal) {
    for pid in descendants(root) {
        if let Some(pid) = Pid::from_raw(pid) {
            let _ = kill_process(pid, signal);
        }
    }
}

/// Every process below `root` in the process tree.
///
/// Read from each process's `/proc/<pid>/task/<tid>/children`, so the walk
/// costs as much as the tree below `root` is large: the supervisor's final
/// sweep, with the program gone and nothing left, reads two short files
/// instead of every process's `stat` on the machine. Like the walk of all
/// of `/proc` it falls back to (on a kernel without those files), it is a
/// snapshot that a process forking or exiting meanwhile can outrun: the
/// sweep repeats until the supervisor has no child left.
pub fn descendants(root: Pid) -> Vec<i32> {
    if !children_files() {
        return descendants_from_every_stat(root);
    }
    let mut found = Vec::new();
    let mut queue = vec![root.as_raw_nonzero().get()];
    let mut seen = BTreeSet::new();
    while let Some(next) = queue.pop() {
        for child in children_of(next) {
            if seen.insert(child) {
                found.push(child);
                queue.push(child);
            }
        }
    }
    found
}

/// Whether this kernel lists each thread's children in `/proc`.
fn children_files() -> bool {
    static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PRESENT.get_or_init(|| Path::new("/proc/thread-self/children").exists())
}

/// The children of every thread of `pid`; none when it is gone.
fn children_of(pid: i32) -> Vec<i32> {
    let mut children = Vec::new();
    let Ok(threads) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return children;
    };
    for thread in threads.flatten() {
        if let Ok(list) = fs::read_to_string(thread.path().join("children")) {
            children.extend(
                list.split_ascii_whitespace()
                    .filter_map(|child| child.parse::<i32>().ok()),
            );
        }
    }
    children
}

/// Every process below `root`, from the parent named in the `stat` of
/// every process in `/proc`.
fn descendants_from_every_stat(root: Pid) -> Vec<i32> {
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(stat) = read_stat(pid) {
            children.entry(stat.ppid).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut queue = vec![root.as_raw_nonzero().get()];
    let mut seen = BTreeSet::new();
    while let Some(next) = queue.pop() {
        for &child in children.get(&next).map(Vec::as_slice).unwrap_or(&[]) {
            if seen.insert(child) {
                found.push(child);
                queue.push(child);
            }
        }
    }
    found
}

/// The fields of `/proc/<pid>/stat` supervision needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub(crate) ppid: i32,
    /// Clock ticks after boot at which the process started.
    pub(crate) start_time: u64,
}

pub(crate) fn read_stat(pid: i32) -> Option<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parses `/proc/<pid>/stat`; the command name may hold spaces and
/// parentheses, so fields are counted after the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); ppid is field 4, starttime field 22.
    Some(Stat {
        ppid: fields.get(1)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// A ruleset the program's child side enforces on itself.
enum Enforce {
    /// Built by this supervisor.
    Built(landlock::RulesetCreated),
    /// Prepared by the driver and handed over (`crate::rulesets`).
    Handed(std::os::fd::OwnedFd),
}

/// Has the child `command` starts take a parent-death signal (SIGKILL)
/// from the supervisor, check the supervisor is still its parent, mount its
/// private `/proc` when it is in namespaces of its own (`namespaced` holds
/// the supervisor's pidfd then), and enforce `sandbox` on itself, all
/// between its fork and its exec. A spawn that fails in this step reports
/// `NOTRECOVERABLE` (the ruleset was refused), `SRCH` (the supervisor is
/// gone) or `NOLINK` (no private `/proc`): errors `execve` never gives.
#[expect(unsafe_code)]
fn contain_child(
    command: &mut Command,
    supervisor: Pid,
    parent_death: bool,
    sandbox: Option<Enforce>,
    namespaced: Option<std::os::fd::OwnedFd>,
) {
    let mut sandbox = sandbox;
    let step = move || -> io::Result<()> {
        if parent_death {
            set_parent_process_death_signal(Some(Signal::KILL))?;
        }
        match &namespaced {
            // The first process of a PID namespace has no parent it can
            // name: the supervisor's pidfd turns readable once it is gone.
            Some(pidfd) => {
                let mut fds = [rustix::event::PollFd::new(
                    pidfd,
                    rustix::event::PollFlags::IN,
                )];
                let now = rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                if rustix::event::poll(&mut fds, Some(&now)) != Ok(0) {
                    return Err(Errno::SRCH.into());
                }
                if crate::namespaces::private_proc().is_err() {
                    return Err(Errno::NOLINK.into());
                }
            }
            None => {
                if getppid() != Some(supervisor) {
                    return Err(Errno::SRCH.into());
                }
            }
        }
        let enforced = match sandbox.take() {
            None => true,
            Some(Enforce::Built(ruleset)) => ruleset.restrict_self().is_ok(),
            Some(Enforce::Handed(ruleset)) => {
                rustix::thread::set_no_new_privs(true)?;
                // SAFETY: a plain system call on a descriptor this closure
                // owns; it neither allocates nor touches memory.
                let done = unsafe {
                    libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0)
                };
                done == 0
            }
        };
        if !enforced {
            return Err(Errno::NOTRECOVERABLE.into());
        }
        Ok(())
    };
    // SAFETY: `pre_exec` runs `step` in the forked child, where only
    // async-signal-safe work is sound if the parent had other threads. The
    // supervisor has none (it waits through a socket pair and signal
    // handlers, see `supervise_main`), and `step` makes system calls only:
    // prctl(PR_SET_PDEATHSIG), getppid or a poll of the supervisor's pidfd,
    // unshare(CLONE_NEWNS) and two mounts on C string literals (the
    // private /proc), prctl(PR_SET_NO_NEW_PRIVS) and
    // landlock_restrict_self on the ruleset built before the fork or handed
    // over by the driver; on success it neither allocates nor takes a lock
    // (dropping the taken ruleset closes a descriptor). Its errors are plain
    // errnos. This replaced a second exec of the supervisor binary (a
    // `__contain` hop) that did the same from a fresh process: the measured
    // need is the spawn's cost (`scripts/bench-containment`).
    unsafe {
        command.pre_exec(step);
    }
}

/// A Landlock ruleset ready to be enforced, and the descriptors its rules
/// were added through.
pub(crate) struct Sandbox {
    pub(crate) ruleset: landlock::RulesetCreated,
    /// One `O_PATH` descriptor per rule. The kernel holds what each rule
    /// names by itself once the rule is added, so these only need closing;
    /// they are closed after the program has started (`Sandbox::opened`),
    /// off the path to its exec: a close per rule was a tenth of the spawn.
    opened: Vec<PathFd>,
    /// The directories read to cut the hidden trees out: a change to any
    /// of them can change the rules (`crate::rulesets` watches them).
    pub(crate) walked: Vec<PathBuf>,
}

/// Builds the Landlock ruleset for `rules` and lets it go: what one build
/// costs (`scripts/bench-containment` reports it beside the spawns).
pub fn build_ruleset(rules: &SandboxRules) -> Result<(), String> {
    build_sandbox(rules).map(drop)
}

/// Builds the Landlock ruleset for `rules`, ready to be enforced: every
/// tree not hidden is readable, the writable ones writable. Nothing is
/// enforced yet.
pub(crate) fn build_sandbox(rules: &SandboxRules) -> Result<Sandbox, String> {
    let read = AccessFs::from_read(LANDLOCK_ABI);
    let all = AccessFs::from_all(LANDLOCK_ABI);
    let mut ruleset = Ruleset::default()
        .handle_access(all)
        .and_then(|ruleset| ruleset.scope(Scope::Signal | Scope::AbstractUnixSocket))
        .map_err(|err| err.to_string())?;
    if rules.connect_ports.is_some() {
        ruleset = ruleset
            .handle_access(AccessNet::ConnectTcp)
            .map_err(|err| err.to_string())?;
    }
    let mut ruleset = ruleset.create().map_err(|err| err.to_string())?;
    for &port in rules.connect_ports.iter().flatten() {
        ruleset = ruleset
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(|err| err.to_string())?;
    }
    let hidden: Vec<PathBuf> = rules
        .hidden
        .iter()
        .filter_map(|path| path.canonicalize().ok())
        .collect();
    let (roots, walked) = if rules.hidden_by_mounts {
        (vec![PathBuf::from("/")], BTreeSet::new())
    } else {
        granted_roots(Path::new("/"), &hidden)
    };
    let mut sandbox = Sandbox {
        ruleset,
        opened: Vec::with_capacity(roots.len() + 16),
        walked: walked.into_iter().collect(),
    };
    for path in roots {
        sandbox.grant(&path, read)?;
    }
    // The device files reprise grants for convenience, and `/dev/shm` when
    // the plan grants it: it may hold the project, the state or the key,
    // and then it is not granted (it stays readable, less what is hidden),
    // or the agent could write the main checkout or the chains.
    let shared_memory = rules.writable_shm.then_some(SHARED_MEMORY);
    let devices = WRITABLE_DEVICES
        .iter()
        .copied()
        .chain(shared_memory)
        .map(PathBuf::from)
        .filter(|device| {
            let real = device.canonicalize().unwrap_or_else(|_| device.clone());
            !hidden.iter().any(|secret| secret.starts_with(&real))
        });
    for path in rules.writable.iter().cloned().chain(devices) {
        sandbox.grant(&path, all)?;
    }
    for path in &rules.granted {
        sandbox.grant_allowed(path, &hidden, all)?;
    }
    Ok(sandbox)
}

impl Sandbox {
    /// Grants `access` beneath `path`. A rule the kernel refuses for a
    /// special file (a pipe or socket behind `/dev/stdin`, say: Landlock
    /// holds rules only for files of a real filesystem) is left out, and
    /// stays unreachable by path: leaving out a grant can only take access
    /// away, and the program's stderr is its own, so nothing is printed
    /// about it. A refused directory or regular file fails the sandbox.
    fn grant(&mut self, path: &Path, access: landlock::BitFlags<AccessFs>) -> Result<(), String> {
        let Ok(fd) = PathFd::new(path) else {
            return Ok(());
        };
        self.grant_opened(fd, path, access)
    }

    /// Grants `access` beneath what the plan's `path` opens to now, unless
    /// that is, holds or lies inside a hidden tree: the rule is for the
    /// opened file itself, so a symlink swapped in afterwards changes
    /// nothing.
    fn grant_allowed(
        &mut self,
        path: &Path,
        hidden: &[PathBuf],
        access: landlock::BitFlags<AccessFs>,
    ) -> Result<(), String> {
        let Ok(fd) = PathFd::new(path) else {
            return Ok(());
        };
        let opened = fs::read_link(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd()))
            .map_err(|err| format!("{}: cannot tell what it opens to: {err}", path.display()))?;
        if hidden
            .iter()
            .any(|secret| opened.starts_with(secret) || secret.starts_with(&opened))
        {
            return Err(format!(
                "the allowed path {} leads to {}, which is or holds reprise's state or the audit key; nothing was run: take it out of the task's allowed_paths",
                path.display(),
                opened.display()
            ));
        }
        self.grant_opened(fd, path, access)
    }

    /// Grants `access` beneath `fd`, opened from `path`, as [`Sandbox::grant`]
    /// says, and keeps `fd` open until the program has started.
    fn grant_opened(
        &mut self,
        fd: PathFd,
        path: &Path,
        access: landlock::BitFlags<AccessFs>,
    ) -> Result<(), String> {
        match (&mut self.ruleset).add_rule(PathBeneath::new(&fd, access)) {
            Ok(_) => {
                self.opened.push(fd);
                Ok(())
            }
            Err(err) => match fs::metadata(path) {
                Ok(meta) if !meta.is_dir() && !meta.is_file() => Ok(()),
                _ => Err(format!("{}: {err}", path.display())),
            },
        }
    }
}

/// The trees that together grant `top` except `hidden` (canonical paths):
/// Landlock only grants, so a hidden tree inside `top` is cut out by
/// granting each sibling along the way down to it instead of `top` itself.
/// Nothing when `top` is itself inside a hidden tree. Also the
/// directories the walk read.
fn granted_roots(top: &Path, hidden: &[PathBuf]) -> (Vec<PathBuf>, BTreeSet<PathBuf>) {
    let real = top.canonicalize().unwrap_or_else(|_| top.to_path_buf());
    let mut walked = BTreeSet::new();
    if hidden.iter().any(|secret| real.starts_with(secret)) {
        return (Vec::new(), walked);
    }
    if !hidden.iter().any(|secret| secret.starts_with(&real)) {
        return (vec![top.to_path_buf()], walked);
    }
    let mut roots = Vec::new();
    walk_granted(&real, hidden, &mut walked, &mut roots);
    (roots, walked)
}

fn walk_granted(
    dir: &Path,
    hidden: &[PathBuf],
    walked: &mut BTreeSet<PathBuf>,
    roots: &mut Vec<PathBuf>,
) {
    if !walked.insert(dir.to_path_buf()) {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        // A symlink is judged by where it leads; anything else is already
        // canonical, as `dir` is.
        let is_link = entry.file_type().is_ok_and(|kind| kind.is_symlink());
        let real = if is_link {
            path.canonicalize().unwrap_or_else(|_| path.clone())
        } else {
            path.clone()
        };
        if hidden.iter().any(|secret| real.starts_with(secret)) {
            continue;
        }
        if hidden.iter().any(|secret| secret.starts_with(&real)) {
            walk_granted(&real, hidden, walked, roots);
            continue;
        }
        roots.push(real);
    }
}

/// One running supervisor as recorded on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    v: u64,
    /// The supervisor's pid, which is also its process group id.
    pid: i32,
    start_time: u64,
    /// The reprise that started it, and when that one started: while it
    /// lives, the supervisor is its business and no one else's.
    owner_pid: i32,
    owner_start_time: u64,
    boot_id: String,
}

fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|id| id.trim().to_owned())
        .unwrap_or_default()
}

fn record_path(dir: &Path, pid: i32) -> PathBuf {
    dir.join(format!("{pid}.json"))
}

/// Records a started supervisor durably; the record is what lets a later
/// command stop it if this process dies.
/// Records the supervisor `pid`, started by the reprise `owner_pid`.
pub(crate) fn record_started(dir: &Path, pid: Pid, owner_pid: i32) -> io::Result<()> {
    let pid = pid.as_raw_nonzero().get();
    let start_time = read_stat(pid)
        .map(|stat| stat.start_time)
        .ok_or_else(|| io::Error::other(format!("process {pid} has no readable stat")))?;
    let owner_start_time = read_stat(owner_pid).map_or(0, |stat| stat.start_time);
    let record = Record {
        v: RECORD_VERSION,
        pid,
        start_time,
        owner_pid,
        owner_start_time,
        boot_id: boot_id(),
    };
    fs::create_dir_all(dir)?;
    let bytes = serde_json::to_vec(&record).map_err(io::Error::other)?;
    reprise_store::write_atomic(&record_path(dir, pid), &bytes, 0o600).map_err(io::Error::other)
}

/// Drops the record of a supervisor that has been reaped.
pub(crate) fn record_finished(dir: &Path, pid: Pid) {
    let _ = fs::remove_file(record_path(dir, pid.as_raw_nonzero().get()));
}

/// Stops every supervisor recorded in `dir` that is still the process that
/// was recorded (same boot, same start time) and kills what is left in its
/// process group; drops every record. Returns the pids it signalled.
///
/// Records whose reprise is still alive are left alone.
pub fn reap_leftovers(dir: &Path) -> Vec<i32> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let boot = boot_id();
    let mut stopped = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|ext| ext != "json") {
            continue;
        }
        let record: Option<Record> = fs::read(&path)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        if let Some(record) = &record
            && record.v == RECORD_VERSION
            && record.boot_id == boot
            && read_stat(record.owner_pid)
                .is_some_and(|owner| owner.start_time == record.owner_start_time)
        {
            // Its reprise is alive and will reap it.
            continue;
        }
        if let Some(record) = record
            && record.v == RECORD_VERSION
            && record.boot_id == boot
            && let Some(pid) = Pid::from_raw(record.pid)
        {
            match read_stat(record.pid) {
                Some(stat) if stat.start_time == record.start_time => {
                    // The supervisor itself: it kills its whole tree on SIGTERM.
                    let _ = kill_process(pid, Signal::TERM);
                    let give_up = Instant::now() + SUPERVISOR_GRACE * 2;
                    while Instant::now() < give_up
                        && read_stat(record.pid)
                            .is_some_and(|now| now.start_time == stat.start_time)
                    {
                        thread::sleep(Duration::from_millis(10));
                    }
                    let _ = kill_process_group(pid, Signal::KILL);
                    stopped.push(record.pid);
                }
                // Gone: nothing else can take its group id while members
                // of the group live, so what is left there is ours.
                None => {
                    if kill_process_group(pid, Signal::KILL).is_ok() {
                        stopped.push(record.pid);
                    }
                }
                // The pid now names another process: never touched.
                Some(_) => {}
            }
        }
        let _ = fs::remove_file(&path);
    }
    stopped
}

/// Kills and reaps every child of this process. For the end of a run, when
/// reprise has no child of its own left: what remains was adopted (as the
/// subreaper) from a supervisor that died before its sweep.
pub fn reap_adopted() {
    let me = getpid();
    let give_up = Instant::now() + SWEEP_LIMIT;
    while Instant::now() < give_up {
        signal_tree(me, Signal::KILL);
        match waitpid(None, WaitOptions::NOHANG) {
            Ok(Some(_)) => continue,
            Ok(None) => thread::sleep(Duration::from_millis(1)),
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let stat =
            "42 (a (weird) name) S 7 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10";
        assert_eq!(
            parse_stat(stat),
            Some(Stat {
                ppid: 7,
                start_time: 123456
            })
        );
        assert_eq!(parse_stat("garbage"), None);
        let own = read_stat(getpid().as_raw_nonzero().get()).expect("own stat");
        assert_eq!(
            Some(own.ppid),
            getppid().map(|pid| pid.as_raw_nonzero().get())
        );
    }

    /// The walk of the children files finds the same tree as the walk of
    /// every process's `stat`: a shell, its two children, and a grandchild
    /// below one of them.
    #[test]
    fn descendants_from_children_files_match_those_from_every_stat() {
        assert!(children_files(), "this kernel lists no children in /proc");
        let mut shell = Command::new("sh")
            .args(["-c", "sleep 60 & sh -c 'sleep 60 & wait' & wait"])
            .spawn()
            .expect("sh");
        let root = Pid::from_child(&shell);
        let give_up = Instant::now() + Duration::from_secs(10);
        while descendants_from_every_stat(root).len() < 3 && Instant::now() < give_up {
            thread::sleep(Duration::from_millis(5));
        }
        let sorted = |mut pids: Vec<i32>| {
            pids.sort_unstable();
            pids
        };
        let from_stat = sorted(descendants_from_every_stat(root));
        let from_children = sorted(descendants(root));
        signal_tree(root, Signal::KILL);
        let _ = shell.kill();
        let _ = shell.wait();
        assert_eq!(from_stat.len(), 3, "{from_stat:?}");
        assert_eq!(from_children, from_stat);
    }

    #[test]
    fn readable_roots_leave_out_hidden_trees_and_keep_their_siblings() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path().canonicalize().expect("canonical");
        for sub in [
            "project/.reprise/tasks",
            "project/src",
            "home/.local/state/reprise",
        ] {
            fs::create_dir_all(base.join(sub)).expect("mkdir");
        }
        fs::write(base.join("project/README"), "r").expect("write");
        std::os::unix::fs::symlink(base.join("project/.reprise"), base.join("project/link"))
            .expect("symlink");
        let hidden = vec![
            base.join("project/.reprise"),
            base.join("home/.local/state/reprise"),
        ];
        let (roots, walked) = granted_roots(Path::new("/"), &hidden);
        assert!(walked.contains(&base.join("project")), "{walked:?}");
        assert!(roots.contains(&base.join("project/src")), "{roots:?}");
        assert!(roots.contains(&base.join("project/README")));
        assert!(roots.contains(&PathBuf::from("/usr")) || !Path::new("/usr").exists());
        for root in &roots {
            for secret in &hidden {
                assert!(!root.starts_with(secret), "{root:?} exposes {secret:?}");
                assert!(!secret.starts_with(root), "{root:?} contains {secret:?}");
            }
        }
    }

    #[test]
    fn supervisor_arguments_round_trip() {
        let supervision = Supervision {
            supervisor: PathBuf::from("/bin/reprise"),
            sandbox: Some(SandboxRules {
                writable: vec![PathBuf::from("/w")],
                granted: vec![PathBuf::from("/g")],
                hidden: vec![PathBuf::from("/s")],
                writable_shm: true,
                connect_ports: Some(vec![443]),
                hidden_by_mounts: false,
            }),
            records: None,
            parent_death: true,
            walls: Walls::default(),
        };
        let namespaces = NamespaceSpec {
            network: Some(vec!["127.0.0.1:3128".parse().expect("an address")]),
            hidden: vec![PathBuf::from("/s")],
            shown: vec![PathBuf::from("/s/w")],
        };
        let argv = supervisor_args(
            &supervision,
            false,
            Some(namespaces.clone()),
            Path::new("sh"),
            &["-c".into(), "x".into()],
        );
        assert_eq!(argv[0], SUPERVISE_COMMAND);
        let (spec, program, rest) = split_args(&argv[1..], SUPERVISE_COMMAND).expect("split");
        let spec: Spec = serde_json::from_str(&spec).expect("spec");
        assert_eq!(spec.sandbox, supervision.sandbox);
        assert_eq!(spec.namespaces, Some(namespaces));
        assert!(spec.parent_death);
        assert_eq!(program, "sh");
        assert_eq!(rest, [OsString::from("-c"), OsString::from("x")]);
        assert!(matches!(
            split_args(&argv[1..2], SUPERVISE_COMMAND),
            Err(SuperviseError::Usage(_))
        ));
    }

    /// Rewrites every record in `dir` as if its owner had died.
    fn orphan_records(dir: &Path) {
        for entry in fs::read_dir(dir).expect("dir").flatten() {
            let mut record: Record =
                serde_json::from_slice(&fs::read(entry.path()).expect("read")).expect("record");
            record.owner_pid = i32::MAX;
            fs::write(entry.path(), serde_json::to_vec(&record).expect("json")).expect("write");
        }
    }

    #[test]
    fn leftovers_are_killed_only_when_the_start_time_matches() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut alive = Command::new("sleep")
            .arg("60")
            .process_group(0)
            .spawn()
            .expect("sleep");
        let pid = Pid::from_child(&alive);
        record_started(dir.path(), pid, getpid().as_raw_nonzero().get()).expect("record");
        // While this process (the owner) lives, nothing is touched.
        assert_eq!(reap_leftovers(dir.path()), Vec::<i32>::new());
        orphan_records(dir.path());
        // A record of the same pid with another start time is a reused pid.
        let mut other = Command::new("sleep")
            .arg("60")
            .process_group(0)
            .spawn()
            .expect("sleep");
        let other_pid = other.id() as i32;
        let forged = Record {
            v: RECORD_VERSION,
            pid: other_pid,
            start_time: 1,
            owner_pid: i32::MAX,
            owner_start_time: 0,
            boot_id: boot_id(),
        };
        fs::write(
            record_path(dir.path(), other_pid),
            serde_json::to_vec(&forged).expect("json"),
        )
        .expect("write");
        let stopped = reap_leftovers(dir.path());
        assert_eq!(stopped, [pid.as_raw_nonzero().get()]);
        let status = alive.wait().expect("wait");
        assert!(!status.success());
        assert_eq!(
            other.try_wait().expect("try_wait"),
            None,
            "a reused pid was killed"
        );
        let _ = other.kill();
        let _ = other.wait();
        assert_eq!(fs::read_dir(dir.path()).expect("dir").count(), 0);
    }
}

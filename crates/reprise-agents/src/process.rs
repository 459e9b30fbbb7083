//! The process driver every CLI adapter shares: binary resolution, the
//! cached `--version` probe, and running one invocation with a wall-clock
//! timeout and a cancel token.
//!
//! A child runs in its own process group so that on timeout or cancel the
//! whole group (the agent and anything it started) gets SIGTERM, then SIGKILL
//! after a grace period. The leader is watched with `waitid(WNOWAIT)`, which
//! leaves it a zombie: its pid, and so the group id, cannot be reused before
//! the final SIGKILL to the group, and only then is it reaped. Every path
//! through `run_process` reaps the child.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::process::{
    Pid, PidfdFlags, Signal, WaitId, WaitIdOptions, kill_process_group, pidfd_open, waitid,
};

use crate::namespaces::NamespaceSpec;
use crate::network::{Provider, Routes};
use crate::outcome::{
    AttemptOutcome, AttemptReport, InfraKind, ParkSignal, Parsed, Streams, enforce_budget, infra,
};
use crate::park::{Clock, last_words, settle_usage_limit};
use crate::proxy::Proxy;
use crate::request::{AttemptRequest, CancelToken, Watch};
use crate::supervise::{Handover, Supervision, record_finished, supervised_in};

/// How much of each output stream is kept; the rest is counted, not stored.
pub(crate) const OUTPUT_CAP_BYTES: usize = 16 << 20;
/// How often the driver looks at the child, the clock and the cancel token.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// The first pause while waiting for a child; doubled up to `POLL_INTERVAL`.
const FIRST_POLL: Duration = Duration::from_micros(100);
/// Time between SIGTERM and SIGKILL to the group.
const TERM_GRACE: Duration = Duration::from_secs(2);
/// How long output is still drained after the child is reaped, in case a
/// process that left the group holds the pipes open.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// Bound on `<bin> --version`.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an interrupted conversation gets to wind down (its prompt
/// answered as cancelled) before the group is signalled, and how long a
/// child whose conversation is over gets to exit on its closed stdin.
const TALK_GRACE: Duration = Duration::from_secs(2);

/// What the child reads on stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stdin {
    /// `/dev/null`: some CLIs wait forever on an open stdin.
    Null,
    /// This text, written on a pipe that is then closed.
    Text(String),
    /// A pipe kept open for a conversation ([`Talk`]): its write end is
    /// the conversation's.
    Open,
}

/// What hears a child's stdout as it is read.
pub(crate) type Listener = Box<dyn FnMut(&[u8]) + Send>;

/// A conversation with the child over its stdio (an ACP agent): the driver
/// still spawns, watches, bounds and reaps it, and keeps its output.
pub(crate) struct Talk {
    /// Every piece of stdout as it is read, kept or not.
    pub(crate) heard: Listener,
    /// Talks to the child through its stdin, on a thread of its own, and
    /// returns when the conversation is over: the driver then closes the
    /// child's stdin and ends its group. It also returns once the child's
    /// stdout is closed (the child gone).
    pub(crate) converse: Box<dyn FnOnce(std::fs::File) + Send>,
    /// Asks the agent to stop what it does (ACP's `session/cancel`): called
    /// once, before a group that is stopped early (timeout, cancel, a
    /// watch's bound) is signalled.
    pub(crate) interrupt: Box<dyn Fn() + Send>,
}

impl std::fmt::Debug for Talk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Talk")
    }
}

/// One process to run: what a pure invocation builder produces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Invocation {
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<String>,
    /// Added to what the child inherits (the allow-list of `env.rs`);
    /// later entries win.
    pub(crate) env: Vec<(String, String)>,
    /// The prefixes of the agent CLI's own variables it inherits besides
    /// the allow-list (`env::cli_prefixes`); none for a command or a gate.
    pub(crate) cli_prefixes: &'static [&'static str],
    /// Whose endpoints the network policy's `model` means for it.
    pub(crate) provider: Provider,
    pub(crate) stdin: Stdin,
    /// The argument that ends with the prompt, elided in logged argv.
    pub(crate) prompt_arg: Option<usize>,
    /// The session the attempt runs in, when known before it starts.
    pub(crate) session_id: Option<String>,
}

impl Invocation {
    /// Program and arguments with the prompt replaced by `<prompt>`.
    pub(crate) fn logged_argv(&self, prompt: &str) -> Vec<String> {
        let mut argv = Vec::with_capacity(self.args.len() + 1);
        argv.push(self.program.to_string_lossy().into_owned());
        for (index, arg) in self.args.iter().enumerate() {
            match arg.strip_suffix(prompt) {
                Some(head) if self.prompt_arg == Some(index) => {
                    argv.push(format!("{head}<prompt>"));
                }
                _ => argv.push(arg.clone()),
            }
        }
        argv
    }
}

/// Why the driver stopped watching the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Exited,
    TimedOut,
    Cancelled,
    /// More output than `Watch::max_output_bytes`.
    OutputLimit,
    /// No output for `Watch::idle_timeout`.
    Idle,
    /// No output for `Watch::park_when_idle`: waiting on someone.
    ParkIdle,
    /// The conversation with the child ([`Talk`]) is over; its group was
    /// ended.
    Talked,
}

/// A reaped child and what it printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finished {
    pub(crate) end: End,
    /// The exit code, or 128 + the signal that ended it (the shell's
    /// convention); -1 if the status could not be read.
    pub(crate) exit_code: i32,
    /// At most `OUTPUT_CAP_BYTES` of stdout.
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    /// Bytes the child wrote, kept or not.
    pub(crate) stdout_bytes: u64,
    pub(crate) stderr_bytes: u64,
    pub(crate) elapsed: Duration,
}

/// Runs `invocation` in `cwd` until it exits, `timeout` passes or `cancel`
/// fires; the child and its process group are always gone on return.
///
/// Errors only when the process could not be spawned.
pub(crate) fn run_process(
    invocation: &Invocation,
    cwd: &Path,
    timeout: Duration,
    cancel: &CancelToken,
    supervision: Option<&Supervision>,
    watch: Watch,
) -> io::Result<Finished> {
    run_child(invocation, cwd, timeout, cancel, supervision, watch, None)
}

/// [`run_process`] with a conversation over the child's stdio (its
/// invocation's stdin is [`Stdin::Open`]): the child runs until the
/// conversation is over, it exits, or the attempt is stopped (the
/// conversation interrupted first); always reaped.
pub(crate) fn run_talking(
    invocation: &Invocation,
    cwd: &Path,
    timeout: Duration,
    cancel: &CancelToken,
    supervision: Option<&Supervision>,
    watch: Watch,
    talk: Talk,
) -> io::Result<Finished> {
    run_child(
        invocation,
        cwd,
        timeout,
        cancel,
        supervision,
        watch,
        Some(talk),
    )
}

fn run_child(
    invocation: &Invocation,
    cwd: &Path,
    timeout: Duration,
    cancel: &CancelToken,
    supervision: Option<&Supervision>,
    watch: Watch,
    talk: Option<Talk>,
) -> io::Result<Finished> {
    let started = Instant::now();
    let (mut command, handover, routes) = command_for(invocation, cwd, supervision)?;
    let mut child = command.spawn()?;
    let pid = Pid::from_child(&child);
    let mut prompt_pipe = None;
    // Lives as long as the attempt: the way out of its network namespace.
    let mut _proxy = None;
    if let Some(handover) = handover {
        let handed = hand_over(&handover, &invocation.stdin).and_then(|pipe| {
            prompt_pipe = pipe;
            serve_routes(&handover, routes)
        });
        match handed {
            Ok(proxy) => _proxy = proxy,
            Err(err) => {
                let _ = kill_process_group(pid, Signal::KILL);
                let _ = child.wait();
                return Err(err);
            }
        }
    }
    // The supervisor records itself before it starts the program (one
    // that cannot does not start it); the record goes once it is reaped.
    let records = supervision.and_then(|supervision| supervision.records.as_deref());

    // Written on its own thread: a child that does not read stdin must not
    // block the driver. The thread ends when the pipe's reader is gone.
    let pipe = child
        .stdin
        .take()
        .map(|stdin| std::fs::File::from(OwnedFd::from(stdin)))
        .or(prompt_pipe);
    let pipe = match (pipe, &invocation.stdin) {
        (Some(mut pipe), Stdin::Text(text)) => {
            let text = text.clone();
            thread::spawn(move || {
                let _ = pipe.write_all(text.as_bytes());
            });
            None
        }
        (pipe, _) => pipe,
    };
    let (heard, conversation) = match (talk, pipe) {
        (Some(talk), Some(pipe)) => {
            let over = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (ended, ended_wait) = mpsc::channel();
            let converse = talk.converse;
            let done = Arc::clone(&over);
            thread::spawn(move || {
                converse(pipe);
                done.store(true, std::sync::atomic::Ordering::SeqCst);
                let _ = ended.send(());
            });
            (Some(talk.heard), Some((over, ended_wait, talk.interrupt)))
        }
        _ => (None, None),
    };
    let (done_sender, done) = mpsc::channel();
    let tee = |name: &str| watch.live_log.as_ref().map(|dir| dir.join(name));
    let stdout = Capture::start(
        child.stdout.take(),
        done_sender.clone(),
        tee("agent.stdout"),
        heard,
    );
    let stderr = Capture::start(child.stderr.take(), done_sender, tee("agent.stderr"), None);

    let deadline = started.checked_add(timeout);
    let over = conversation.as_ref().map(|(over, _, _)| over.as_ref());
    let end = watch_child(
        pid,
        deadline,
        cancel,
        &watch,
        started,
        (&stdout, &stderr),
        over,
    );
    if let Some((over, _, interrupt)) = &conversation
        && !matches!(end, End::Exited | End::Talked)
    {
        // Asked to stop before it is signalled: an agent that answers
        // winds its turn down and says so.
        interrupt();
        let wind_down = Instant::now() + TALK_GRACE;
        while !over.load(std::sync::atomic::Ordering::SeqCst)
            && !leader_exited(pid)
            && Instant::now() < wind_down
        {
            thread::sleep(POLL_INTERVAL);
        }
    }
    let exit_code = end_group(&mut child, pid, end);
    if let Some(records) = records {
        record_finished(records, pid);
    }
    let elapsed = started.elapsed();

    let drain_over = Instant::now() + DRAIN_GRACE;
    for _ in 0..2 {
        if done
            .recv_timeout(drain_over.saturating_duration_since(Instant::now()))
            .is_err()
        {
            break;
        }
    }
    // Its stdout closed, the conversation ends; its record is whole once
    // it has.
    if let Some((_, ended, _)) = &conversation {
        let _ = ended.recv_timeout(drain_over.saturating_duration_since(Instant::now()));
    }
    let (stdout, stdout_bytes) = stdout.take();
    let (stderr, stderr_bytes) = stderr.take();
    Ok(Finished {
        end,
        exit_code,
        stdout,
        stderr,
        stdout_bytes,
        stderr_bytes,
        elapsed,
    })
}

/// Sends a spawned supervisor its ruleset and the program's stdin: the
/// read end of a pipe for a prompt (its write end returned, to write the
/// prompt into), else `/dev/null`.
fn hand_over(handover: &Handover, stdin: &Stdin) -> io::Result<Option<std::fs::File>> {
    match stdin {
        Stdin::Null => {
            handover.send(std::fs::File::open("/dev/null")?.into())?;
            Ok(None)
        }
        Stdin::Text(_) | Stdin::Open => {
            let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
            handover.send(read)?;
            Ok(Some(write.into()))
        }
    }
}

/// Takes the listeners the supervisor bound in the attempt's network
/// namespace for `routes` and serves them, when there are any: the proxy
/// to keep while the attempt runs. None when the supervisor ended before
/// it sent them (it says why on its stderr).
fn serve_routes(handover: &Handover, routes: Option<Routes>) -> io::Result<Option<Proxy>> {
    let Some(routes) = routes.filter(|routes| !routes.routes.is_empty()) else {
        return Ok(None);
    };
    let listeners = handover.receive_listeners(routes.routes.len())?;
    if listeners.is_empty() {
        return Ok(None);
    }
    let served = listeners
        .into_iter()
        .zip(routes.routes)
        .filter_map(|(listener, (_, route))| listener.map(|fd| (fd, route)))
        .collect();
    Proxy::start(served).map(Some)
}

/// The environment `invocation`'s child gets: the allow-list of reprise's
/// own, then the invocation's variables (later entries win).
fn child_env(invocation: &Invocation) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> =
        crate::env::inherited(std::env::vars_os(), invocation.cli_prefixes);
    env.extend(
        invocation
            .env
            .iter()
            .map(|(key, value)| (OsString::from(key), OsString::from(value))),
    );
    env
}

/// What `supervision`'s walls come to for `invocation`, whose child's
/// environment is `env`: the supervision to start it under (with
/// Landlock's TCP rules where it has no namespaces), its namespaces, and
/// the routes out of its network namespace.
pub(crate) fn walls_for(
    supervision: &Supervision,
    provider: Provider,
    args: &[String],
    env: &[(OsString, OsString)],
) -> (Supervision, Option<NamespaceSpec>, Option<Routes>) {
    let mut supervision = supervision.clone();
    if supervision.sandbox.is_none() {
        return (supervision, None, None);
    }
    let allowed = supervision.walls.network.as_ref().map(|reach| {
        let readable: Vec<(String, String)> = env
            .iter()
            .filter_map(|(key, value)| Some((key.to_str()?.to_owned(), value.to_str()?.to_owned())))
            .collect();
        crate::network::allowed(reach, provider, &readable, args)
    });
    if !supervision.walls.namespaces {
        if let (Some(rules), Some(allowed)) = (supervision.sandbox.as_mut(), &allowed) {
            rules.connect_ports = Some(crate::network::tcp_ports(allowed));
        }
        return (supervision, None, None);
    }
    let routes = allowed.map(|allowed| Routes::for_endpoints(&allowed));
    let mut namespaces = NamespaceSpec {
        network: routes.as_ref().map(Routes::listeners),
        ..NamespaceSpec::default()
    };
    if let Some(rules) = supervision.sandbox.as_mut() {
        rules.hidden_by_mounts = true;
        namespaces.hidden = rules.hidden.clone();
        namespaces.shown = rules
            .writable
            .iter()
            .chain(&rules.granted)
            .cloned()
            .collect();
    }
    (supervision, Some(namespaces), routes)
}

/// The command that runs `invocation` in `cwd`, in its own process group,
/// under the supervisor when there is one, the handover the spawned
/// supervisor is to be sent (its stdin), and the routes out of its network
/// namespace when it has one.
fn command_for(
    invocation: &Invocation,
    cwd: &Path,
    supervision: Option<&Supervision>,
) -> io::Result<(Command, Option<Handover>, Option<Routes>)> {
    let env = child_env(invocation);
    let mut routes = None;
    let (mut command, handover) = match supervision {
        Some(supervision) => {
            // The supervisor would only fail later, inside the attempt: a
            // program that cannot be found is a spawn error, as it is without it.
            let path_var = child_path_var(&invocation.env);
            if find_executable(&invocation.program, cwd, path_var.as_deref()).is_none() {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "'{}' is not an executable file",
                        invocation.program.display()
                    ),
                ));
            }
            let (supervision, namespaces, routed) =
                walls_for(supervision, invocation.provider, &invocation.args, &env);
            routes = routed;
            supervised_in(
                &supervision,
                namespaces,
                &invocation.program,
                &invocation.args,
            )
        }
        None => {
            let mut command = Command::new(&invocation.program);
            command.args(&invocation.args);
            (command, None)
        }
    };
    // The child starts from an allow-list of reprise's environment, not
    // the whole of it: nothing of reprise's own configuration (the audit
    // key's path least of all) nor a secret the user exported reaches it.
    // What is meant for it is in `invocation.env`.
    let proxy_env = routes.as_ref().map(Routes::proxy_env).unwrap_or_default();
    command
        .env_clear()
        .envs(env)
        // Where a proxy is the way out, the child is pointed at it whatever
        // the plan or the user's environment said.
        .envs(proxy_env)
        .current_dir(cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // With a handover the supervisor's stdin is its socket, and the
    // program's stdin travels on it.
    if handover.is_none() {
        command.stdin(match invocation.stdin {
            Stdin::Null => Stdio::null(),
            Stdin::Text(_) | Stdin::Open => Stdio::piped(),
        });
    }
    Ok((command, handover, routes))
}

/// Watches the child led by `pid` until it exits, `cancel` fires, the
/// `deadline` passes or `watch`'s output bounds are passed: why it stopped.
fn watch_child(
    pid: Pid,
    deadline: Option<Instant>,
    cancel: &CancelToken,
    watch: &Watch,
    started: Instant,
    (stdout, stderr): (&Capture, &Capture),
    conversation_over: Option<&std::sync::atomic::AtomicBool>,
) -> End {
    // The leader's exit wakes the wait below at once through its pidfd; the
    // checks of cancellation, the deadline and the output run between
    // waits, fast at first and backing off to POLL_INTERVAL, so a long
    // agent costs one wakeup per interval. Without a pidfd (an old kernel)
    // the waits are plain sleeps and an exit is seen at the next check.
    let exit_fd = pidfd_open(pid, PidfdFlags::empty()).ok();
    let pause_for = |pause: Duration| match &exit_fd {
        Some(fd) => {
            let timeout = Timespec::try_from(pause).ok();
            let mut fds = [PollFd::new(fd, PollFlags::IN)];
            let _ = poll(&mut fds, timeout.as_ref());
        }
        None => thread::sleep(pause),
    };
    let mut pause = FIRST_POLL;
    loop {
        if leader_exited(pid) {
            return End::Exited;
        }
        if conversation_over.is_some_and(|over| over.load(std::sync::atomic::Ordering::SeqCst)) {
            return End::Talked;
        }
        if cancel.is_cancelled() {
            return End::Cancelled;
        }
        let now = Instant::now();
        if let Some(end) = watched(watch, started, now, stdout, stderr) {
            return end;
        }
        match deadline {
            Some(deadline) if now >= deadline => return End::TimedOut,
            Some(deadline) => pause_for((deadline - now).min(pause)),
            None => pause_for(pause),
        }
        pause = (pause * 2).min(POLL_INTERVAL);
    }
}

/// Ends the child's process group (SIGTERM first, unless the leader has
/// exited; SIGKILL after the grace) and reaps the leader: its exit code, or
/// 128 + the signal that ended it, or -1 if the status could not be read.
fn end_group(child: &mut std::process::Child, pid: Pid, end: End) -> i32 {
    if end == End::Talked {
        // Its stdin is closed: a child that exits on that is let go.
        let grace_over = Instant::now() + TALK_GRACE;
        while !leader_exited(pid) && Instant::now() < grace_over {
            thread::sleep(POLL_INTERVAL);
        }
    }
    if end != End::Exited && !leader_exited(pid) {
        let _ = kill_process_group(pid, Signal::TERM);
        let grace_over = Instant::now() + TERM_GRACE;
        while !leader_exited(pid) && Instant::now() < grace_over {
            thread::sleep(POLL_INTERVAL);
        }
    }
    // The leader is a zombie here (or about to be killed), so the group id is
    // still ours: nothing the agent left behind in its group survives.
    let _ = kill_process_group(pid, Signal::KILL);
    match child.wait() {
        Ok(status) => status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
        Err(_) => -1,
    }
}

/// Whether the output bounds of `watch` are passed.
fn watched(
    watch: &Watch,
    started: Instant,
    now: Instant,
    stdout: &Capture,
    stderr: &Capture,
) -> Option<End> {
    if watch.max_output_bytes.is_none()
        && watch.idle_timeout.is_none()
        && watch.park_when_idle.is_none()
    {
        return None;
    }
    let (out_bytes, out_last) = stdout.progress();
    let (err_bytes, err_last) = stderr.progress();
    if let Some(max) = watch.max_output_bytes
        && out_bytes + err_bytes > max
    {
        return Some(End::OutputLimit);
    }
    let last = [Some(started), out_last, err_last]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(started);
    let quiet = now.saturating_duration_since(last);
    // The shorter bound acts; on a tie, the park (it loses nothing).
    match (watch.park_when_idle, watch.idle_timeout) {
        (Some(park), idle) if quiet >= park && idle.is_none_or(|idle| park <= idle) => {
            Some(End::ParkIdle)
        }
        (_, Some(idle)) if quiet >= idle => Some(End::Idle),
        _ => None,
    }
}

/// Whether the child has exited, without reaping it.
fn leader_exited(pid: Pid) -> bool {
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    match waitid(WaitId::Pid(pid), options) {
        Ok(status) => status.is_some(),
        // Not our child any more (cannot happen unless someone else reaped
        // it): stop watching rather than spin.
        Err(_) => true,
    }
}

/// One output stream, drained on its own thread into a capped buffer.
#[derive(Debug)]
struct Capture {
    shared: Arc<Mutex<Captured>>,
}

#[derive(Debug, Default)]
struct Captured {
    kept: Vec<u8>,
    total: u64,
    /// When the latest bytes arrived.
    last: Option<Instant>,
}

impl Capture {
    /// Drains `pipe`, keeping up to `OUTPUT_CAP_BYTES`; with `tee`, also
    /// appends what it keeps to that file as it arrives (mode 0600), so the
    /// output can be followed while the process runs.
    fn start(
        pipe: Option<impl Read + Send + 'static>,
        done: Sender<()>,
        tee: Option<PathBuf>,
        mut heard: Option<Listener>,
    ) -> Self {
        let shared = Arc::new(Mutex::new(Captured::default()));
        let Some(mut pipe) = pipe else {
            let _ = done.send(());
            return Self { shared };
        };
        let writer = Arc::clone(&shared);
        thread::spawn(move || {
            let mut buffer = vec![0u8; 64 * 1024];
            let mut tee = tee.and_then(|path| {
                use std::os::unix::fs::OpenOptionsExt;
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .mode(0o600)
                    .open(path)
                    .ok()
            });
            loop {
                match pipe.read(&mut buffer) {
                    Ok(0) => break,
                    Ok(read) => {
                        if let Some(heard) = heard.as_mut() {
                            heard(&buffer[..read]);
                        }
                        let mut captured = writer.lock().unwrap_or_else(PoisonError::into_inner);
                        captured.total += read as u64;
                        captured.last = Some(Instant::now());
                        let room = OUTPUT_CAP_BYTES.saturating_sub(captured.kept.len());
                        captured.kept.extend_from_slice(&buffer[..read.min(room)]);
                        if let Some(file) = tee.as_mut() {
                            let _ = file.write_all(&buffer[..read.min(room)]);
                        }
                    }
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            // The listener hears the end of the stream.
            drop(heard);
            let _ = done.send(());
        });
        Self { shared }
    }

    /// Bytes read so far, and when the latest came.
    fn progress(&self) -> (u64, Option<Instant>) {
        let captured = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        (captured.total, captured.last)
    }

    fn take(&self) -> (Vec<u8>, u64) {
        let mut captured = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        (std::mem::take(&mut captured.kept), captured.total)
    }
}

/// Finds `candidate` as the child would: a path with a slash is taken as is
/// (relative to `cwd`), a bare name is looked up on `path_var`. Only an
/// existing executable file counts.
pub(crate) fn find_executable(
    candidate: &Path,
    cwd: &Path,
    path_var: Option<&OsStr>,
) -> Option<PathBuf> {
    if candidate.as_os_str().is_empty() {
        return None;
    }
    if candidate.components().count() > 1 || candidate.is_absolute() {
        let path = cwd.join(candidate);
        return is_executable_file(&path).then_some(path);
    }
    std::env::split_paths(path_var?)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(candidate))
        .find(|path| is_executable_file(path))
}

fn is_executable_file(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// The `PATH` the child will see: the request's own, else the inherited one.
pub(crate) fn child_path_var(extra_env: &[(String, String)]) -> Option<OsString> {
    extra_env
        .iter()
        .rev()
        .find(|(key, _)| key == "PATH")
        .map(|(_, value)| OsString::from(value))
        .or_else(|| std::env::var_os("PATH"))
}

/// Which binary an agent CLI adapter runs and how the user overrides it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CliSpec {
    /// Adapter name, also the binary's default name on `PATH`.
    pub(crate) name: &'static str,
    /// The environment variable that overrides the binary.
    pub(crate) bin_env: &'static str,
}

/// Resolves the binary: the plan's `bin`, else `$<bin_env>`, else the bare
/// name on `PATH`. The error is the one-line detail naming what is missing
/// and how to fix it.
pub(crate) fn resolve_cli_binary(
    spec: CliSpec,
    bin: Option<&Path>,
    env_value: Option<OsString>,
    cwd: &Path,
    path_var: Option<&OsStr>,
) -> Result<PathBuf, String> {
    let name = spec.name;
    let env_var = spec.bin_env;
    if let Some(bin) = bin {
        return find_executable(bin, cwd, path_var).ok_or_else(|| {
            format!(
                "{name} binary '{}' (the plan's bin) is not an executable file; fix the plan's bin key",
                bin.display()
            )
        });
    }
    if let Some(value) = env_value.filter(|value| !value.is_empty()) {
        let candidate = PathBuf::from(value);
        return find_executable(&candidate, cwd, path_var).ok_or_else(|| {
            format!(
                "{name} binary '{}' from {env_var} is not an executable file; fix or unset {env_var}",
                candidate.display()
            )
        });
    }
    find_executable(Path::new(name), cwd, path_var).ok_or_else(|| {
        format!("{name} binary '{name}' is not on PATH; install it or set {env_var} to its path")
    })
}

/// `<bin> --version`, probed once per binary and remembered.
///
/// Keyed by the resolved program because a plan may point tasks of one
/// adapter at different binaries. Tasks that start together ask at once:
/// the first probes while the others wait on that binary's slot, so a run
/// asks each binary once. A probe cut short by cancellation is not
/// remembered; the next asker probes again.
#[derive(Debug, Default)]
pub(crate) struct VersionCache {
    slots: Mutex<HashMap<PathBuf, Arc<VersionSlot>>>,
}

/// One binary's answer: `None` until probed, then what it printed (if anything).
type VersionSlot = Mutex<Option<Option<String>>>;

impl VersionCache {
    pub(crate) fn version(
        &self,
        program: &Path,
        env: &[(String, String)],
        cwd: &Path,
        cancel: &CancelToken,
        supervision: Option<&Supervision>,
    ) -> Option<String> {
        let slot = Arc::clone(
            self.slots
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(program.to_path_buf())
                .or_default(),
        );
        let mut known = slot.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(version) = known.as_ref() {
            return version.clone();
        }
        let probed = probe_version(program, env, cwd, cancel, supervision);
        if !cancel.is_cancelled() {
            *known = Some(probed.clone());
        }
        probed
    }
}

fn probe_version(
    program: &Path,
    env: &[(String, String)],
    cwd: &Path,
    cancel: &CancelToken,
    supervision: Option<&Supervision>,
) -> Option<String> {
    let invocation = Invocation {
        cli_prefixes: &[],
        provider: crate::network::Provider::Any,
        program: program.to_path_buf(),
        args: vec!["--version".into()],
        env: env.to_vec(),
        stdin: Stdin::Null,
        prompt_arg: None,
        session_id: None,
    };
    let finished = run_process(
        &invocation,
        cwd,
        VERSION_TIMEOUT,
        cancel,
        supervision,
        Watch::default(),
    )
    .ok()?;
    if finished.end != End::Exited || finished.exit_code != 0 {
        return None;
    }
    String::from_utf8_lossy(&finished.stdout)
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .map(|line| crate::outcome::one_line(line, 200))
}

/// Checks made before anything is spawned: a cancelled run starts nothing,
/// and a missing working directory is named rather than reported as a
/// confusing spawn error.
pub(crate) fn preflight(request: &AttemptRequest, cancel: &CancelToken) -> Option<AttemptOutcome> {
    if cancel.is_cancelled() {
        return Some(infra(
            InfraKind::Cancelled,
            "cancelled before the attempt started",
        ));
    }
    if !request.cwd.is_dir() {
        return Some(infra(
            InfraKind::SpawnFailed,
            format!(
                "working directory '{}' does not exist; recreate the sandbox",
                request.cwd.display()
            ),
        ));
    }
    None
}

/// Human form of a timeout for details (`200ms`, `600s`).
pub(crate) fn describe_duration(duration: Duration) -> String {
    if duration.subsec_nanos() == 0 {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}ms", duration.as_millis())
    }
}

/// Runs one attempt of an agent CLI: resolve the binary, probe its version,
/// run the invocation, parse what it printed. Shared by `claude`, `codex` and
/// `gemini`, which differ only in their pure builder and parser.
pub(crate) fn run_cli(
    spec: CliSpec,
    versions: &VersionCache,
    request: &AttemptRequest,
    cancel: &CancelToken,
    build: impl Fn(&AttemptRequest, PathBuf) -> Invocation,
    parse: impl Fn(i32, &str, &str) -> Parsed,
) -> AttemptReport {
    let path_var = child_path_var(&request.env);
    let resolved = resolve_cli_binary(
        spec,
        request.bin.as_deref(),
        std::env::var_os(spec.bin_env),
        &request.cwd,
        path_var.as_deref(),
    );
    let program = match &resolved {
        Ok(program) => program.clone(),
        Err(_) => request
            .bin
            .clone()
            .unwrap_or_else(|| PathBuf::from(spec.name)),
    };
    let mut invocation = build(request, program);
    invocation.cli_prefixes = crate::env::cli_prefixes(spec.name);
    invocation.provider = Provider::of_cli(spec.name);
    let mut report = AttemptReport {
        outcome: infra(InfraKind::SpawnFailed, "not started"),
        session_id: invocation.session_id.clone(),
        cost_micro_usd: None,
        session_model: None,
        adapter: spec.name,
        cli_version: None,
        cwd: request.cwd.clone(),
        config_home: request.config_home.clone(),
        argv: invocation.logged_argv(&request.prompt),
        elapsed: Duration::ZERO,
        streams: Default::default(),
        park: None,
    };
    if let Err(detail) = resolved {
        report.outcome = infra(InfraKind::MissingBinary, detail);
        return report;
    }
    if let Some(outcome) = preflight(request, cancel) {
        report.outcome = outcome;
        return report;
    }
    let supervision = request.supervision.as_ref();
    report.cli_version = versions.version(
        &invocation.program,
        &invocation.env,
        &request.cwd,
        cancel,
        supervision,
    );
    let finished = match run_process(
        &invocation,
        &request.cwd,
        request.timeout,
        cancel,
        supervision,
        request.watch.clone(),
    ) {
        Ok(finished) => finished,
        Err(error) => {
            report.outcome = infra(
                InfraKind::SpawnFailed,
                format!(
                    "could not start {} ('{}'): {error}",
                    spec.name,
                    invocation.program.display()
                ),
            );
            return report;
        }
    };
    read_finished(&mut report, spec.name, request, &finished, parse);
    report
}

/// What a finished CLI process comes to, written into `report`: what its
/// output says, and the outcome the way it ended calls for.
fn read_finished(
    report: &mut AttemptReport,
    name: &'static str,
    request: &AttemptRequest,
    finished: &Finished,
    parse: impl Fn(i32, &str, &str) -> Parsed,
) {
    report.elapsed = finished.elapsed;
    report.streams = Streams::kept(&finished.stdout, &finished.stderr);
    let stdout = String::from_utf8_lossy(&finished.stdout);
    let stderr = String::from_utf8_lossy(&finished.stderr);
    // Parsed even after a timeout: a partial transcript still names the
    // session and what was spent.
    let parsed = settle_usage_limit(
        parse(finished.exit_code, &stdout, &stderr),
        &Clock::system(),
    );
    if parsed.session_id.is_some() {
        report.session_id = parsed.session_id;
    }
    report.cost_micro_usd = parsed.cost_micro_usd;
    report.session_model = parsed.session_model;
    if finished.end == End::Exited {
        report.park = parsed.park;
    }
    report.outcome = match finished.end {
        End::Exited | End::Talked => enforce_budget(
            parsed.outcome,
            parsed.cost_micro_usd,
            request.budget_micro_usd,
        ),
        End::ParkIdle => {
            let (outcome, park) = park_idle(name, &request.watch, &stdout, &stderr);
            report.park = Some(park);
            outcome
        }
        End::TimedOut => infra(
            InfraKind::Timeout,
            format!(
                "{name} did not finish within {}; its process group was killed",
                describe_duration(request.timeout)
            ),
        ),
        End::Cancelled => infra(
            InfraKind::Cancelled,
            format!("cancelled; the {name} process group was killed"),
        ),
        End::OutputLimit | End::Idle => watch_outcome(finished.end, name, &request.watch),
    };
}

/// An attempt stopped by `park_when_idle`: `awaiting_permission`, and the
/// question it printed last.
pub(crate) fn park_idle(
    name: &str,
    watch: &Watch,
    stdout: &str,
    stderr: &str,
) -> (AttemptOutcome, ParkSignal) {
    let quiet = describe_duration(watch.park_when_idle.unwrap_or_default());
    let question = last_words(stdout, stderr);
    let detail = format!(
        "{name} printed nothing for {quiet} (park_when_idle): taken to wait on a permission or an answer; its process group was killed"
    );
    let question = if question.is_empty() {
        format!("{name} printed nothing before it went quiet for {quiet}")
    } else {
        question
    };
    (
        infra(InfraKind::AwaitingPermission, detail),
        ParkSignal::Approval { question },
    )
}

/// The outcome of an attempt the watch stopped: what bound it passed.
pub(crate) fn watch_outcome(end: End, name: &str, watch: &Watch) -> AttemptOutcome {
    match end {
        End::OutputLimit => infra(
            InfraKind::OutputLimit,
            format!(
                "{name} printed more than {} bytes (max_output_bytes); its process group was killed",
                watch.max_output_bytes.unwrap_or(0)
            ),
        ),
        _ => infra(
            InfraKind::IdleTimeout,
            format!(
                "{name} printed nothing for {} (idle_timeout); its process group was killed",
                describe_duration(watch.idle_timeout.unwrap_or_default())
            ),
        ),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Whether `pid` names a live process (a zombie is not live).
    pub(crate) fn process_is_live(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => {
                let state = stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.trim_start().chars().next());
                !matches!(state, Some('Z' | 'X') | None)
            }
            Err(_) => false,
        }
    }

    /// Waits (boundedly) for a killed process that is not our child to die;
    /// its new parent reaps it on its own schedule.
    pub(crate) fn eventually_dead(pid: u32) -> bool {
        let give_up = Instant::now() + Duration::from_secs(10);
        while Instant::now() < give_up {
            if !process_is_live(pid) {
                return true;
            }
            thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn shell(script: &str, stdin: Stdin) -> Invocation {
        Invocation {
            cli_prefixes: &[],
            provider: crate::network::Provider::Any,
            program: PathBuf::from("/bin/sh"),
            args: vec!["-c".into(), script.into()],
            env: vec![("REPRISE_TEST_VAR".into(), "from-env".into())],
            stdin,
            prompt_arg: None,
            session_id: None,
        }
    }

    fn run_shell(script: &str, timeout: Duration) -> Finished {
        run_process(
            &shell(script, Stdin::Null),
            Path::new("/"),
            timeout,
            &CancelToken::new(),
            None,
            Watch::default(),
        )
        .expect("spawn /bin/sh")
    }

    fn pids(stdout: &[u8]) -> Vec<u32> {
        String::from_utf8_lossy(stdout)
            .split_whitespace()
            .map(|word| word.parse().expect("a pid"))
            .collect()
    }

    #[test]
    fn a_fast_child_is_captured() {
        let finished = run_shell(
            "echo out; echo err >&2; echo \"$REPRISE_TEST_VAR\"; pwd",
            Duration::from_secs(30),
        );
        assert_eq!(finished.end, End::Exited);
        assert_eq!(finished.exit_code, 0);
        assert_eq!(finished.stdout, b"out\nfrom-env\n/\n");
        assert_eq!(finished.stderr, b"err\n");
        assert_eq!(finished.stdout_bytes, 15);
    }

    #[test]
    fn exit_codes_and_signals_are_reported() {
        assert_eq!(run_shell("exit 3", Duration::from_secs(30)).exit_code, 3);
        assert_eq!(
            run_shell("kill -9 $$", Duration::from_secs(30)).exit_code,
            128 + 9
        );
    }

    #[test]
    fn a_timed_out_child_is_killed_and_reaped() {
        let finished = run_shell("echo $$; exec sleep 60", Duration::from_millis(200));
        assert_eq!(finished.end, End::TimedOut);
        assert!(finished.elapsed < Duration::from_secs(30), "{finished:?}");
        let [pid] = pids(&finished.stdout)[..] else {
            panic!("expected one pid: {finished:?}")
        };
        // Reaped, not a zombie: the pid is gone altogether.
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "child {pid} still exists"
        );
    }

    #[test]
    fn the_whole_group_is_killed_on_timeout() {
        let finished = run_shell("sleep 60 & echo $!; sleep 60", Duration::from_millis(300));
        assert_eq!(finished.end, End::TimedOut);
        let [grandchild] = pids(&finished.stdout)[..] else {
            panic!("expected one pid: {finished:?}")
        };
        assert!(
            eventually_dead(grandchild),
            "grandchild {grandchild} survived"
        );
    }

    #[test]
    fn leftovers_in_the_group_are_killed_when_the_leader_exits() {
        let finished = run_shell("sleep 60 & echo $!", Duration::from_secs(30));
        assert_eq!(finished.end, End::Exited);
        let [grandchild] = pids(&finished.stdout)[..] else {
            panic!("expected one pid: {finished:?}")
        };
        assert!(
            eventually_dead(grandchild),
            "grandchild {grandchild} survived"
        );
    }

    #[test]
    fn a_child_that_ignores_sigterm_gets_sigkill() {
        let finished = run_shell(
            "trap '' TERM; echo $$; sleep 60; sleep 60",
            Duration::from_millis(200),
        );
        assert_eq!(finished.end, End::TimedOut);
        assert_eq!(finished.exit_code, 128 + 9);
        let [pid] = pids(&finished.stdout)[..] else {
            panic!("expected one pid: {finished:?}")
        };
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn cancel_stops_a_running_child() {
        let cancel = CancelToken::new();
        let canceller = {
            let cancel = cancel.clone();
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(200));
                cancel.cancel();
            })
        };
        let finished = run_process(
            &shell("echo $$; exec sleep 60", Stdin::Null),
            Path::new("/"),
            Duration::from_secs(120),
            &cancel,
            None,
            Watch::default(),
        )
        .expect("spawn");
        canceller.join().expect("canceller");
        assert_eq!(finished.end, End::Cancelled);
        assert!(finished.elapsed < Duration::from_secs(30));
        let [pid] = pids(&finished.stdout)[..] else {
            panic!("expected one pid: {finished:?}")
        };
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn stdin_text_reaches_the_child_and_null_stdin_is_empty() {
        let finished = run_process(
            &shell("cat", Stdin::Text("hello\nworld".into())),
            Path::new("/"),
            Duration::from_secs(30),
            &CancelToken::new(),
            None,
            Watch::default(),
        )
        .expect("spawn");
        assert_eq!(finished.stdout, b"hello\nworld");
        let finished = run_shell("cat; echo end", Duration::from_secs(30));
        assert_eq!(finished.stdout, b"end\n");
    }

    #[test]
    fn a_child_that_never_reads_stdin_does_not_block_the_driver() {
        let big = "x".repeat(1 << 20);
        let finished = run_process(
            &shell("echo done", Stdin::Text(big)),
            Path::new("/"),
            Duration::from_secs(30),
            &CancelToken::new(),
            None,
            Watch::default(),
        )
        .expect("spawn");
        assert_eq!(finished.end, End::Exited);
        assert_eq!(finished.stdout, b"done\n");
    }

    fn run_watched(script: &str, watch: Watch) -> Finished {
        run_process(
            &shell(script, Stdin::Null),
            Path::new("/"),
            Duration::from_secs(60),
            &CancelToken::new(),
            None,
            watch,
        )
        .expect("spawn /bin/sh")
    }

    #[test]
    fn a_child_past_its_output_bound_is_stopped_and_its_group_killed() {
        let watch = Watch {
            max_output_bytes: Some(64 * 1024),
            ..Watch::default()
        };
        let finished = run_watched("sleep 30 & echo $$ $!; yes flood", watch);
        assert_eq!(finished.end, End::OutputLimit);
        assert!(finished.stdout_bytes > 64 * 1024);
        let first_line = finished.stdout.split(|byte| *byte == b'\n').next().unwrap();
        let started = pids(first_line);
        assert_eq!(started.len(), 2);
        for pid in started {
            assert!(eventually_dead(pid), "{pid} survived");
        }
    }

    #[test]
    fn a_silent_child_is_stopped_after_the_idle_bound_and_a_talking_one_is_not() {
        let watch = Watch {
            max_output_bytes: None,
            idle_timeout: Some(Duration::from_millis(300)),
            ..Watch::default()
        };
        let silent = run_watched("echo started; exec sleep 30", watch.clone());
        assert_eq!(silent.end, End::Idle);
        assert_eq!(silent.stdout, b"started\n");
        // Output every 50 ms for a second keeps it going past the bound.
        let talking = run_watched(
            "i=0; while [ $i -lt 20 ]; do echo $i; sleep 0.05; i=$((i+1)); done",
            watch,
        );
        assert_eq!(talking.end, End::Exited);
        assert_eq!(talking.exit_code, 0);
    }

    #[test]
    fn a_child_silent_past_park_when_idle_is_stopped_to_be_parked_with_its_question() {
        let watch = Watch {
            park_when_idle: Some(Duration::from_millis(300)),
            ..Watch::default()
        };
        let silent = run_watched(
            "echo $$; sleep 30 & echo $!; echo 'Allow Bash(make deploy)? [y/N]' >&2; wait",
            watch.clone(),
        );
        assert_eq!(silent.end, End::ParkIdle);
        let started = pids(&silent.stdout);
        assert_eq!(started.len(), 2, "{silent:?}");
        for pid in started {
            assert!(eventually_dead(pid), "{pid} survived");
        }
        let stdout = String::from_utf8_lossy(&silent.stdout);
        let stderr = String::from_utf8_lossy(&silent.stderr);
        let (outcome, park) = park_idle("claude", &watch, &stdout, &stderr);
        let AttemptOutcome::Infra { kind, detail } = outcome else {
            panic!("not infra")
        };
        assert_eq!(kind, InfraKind::AwaitingPermission);
        assert!(detail.contains("park_when_idle"), "{detail}");
        let ParkSignal::Approval { question } = park else {
            panic!("not an approval park")
        };
        assert!(
            question.ends_with("Allow Bash(make deploy)? [y/N]"),
            "{question}"
        );
        // Output every 50 ms for a second keeps it going past the bound.
        let talking = run_watched(
            "i=0; while [ $i -lt 20 ]; do echo $i; sleep 0.05; i=$((i+1)); done",
            watch,
        );
        assert_eq!(talking.end, End::Exited);
        assert_eq!(talking.exit_code, 0);
    }

    #[test]
    fn of_idle_timeout_and_park_when_idle_the_shorter_acts() {
        let ms = Duration::from_millis;
        let both = |park: u64, idle: u64| Watch {
            park_when_idle: Some(ms(park)),
            idle_timeout: Some(ms(idle)),
            ..Watch::default()
        };
        assert_eq!(
            run_watched("exec sleep 30", both(200, 20_000)).end,
            End::ParkIdle
        );
        assert_eq!(
            run_watched("exec sleep 30", both(20_000, 200)).end,
            End::Idle
        );
        // Unset, nothing changes: the idle bound alone acts.
        let idle_only = Watch {
            idle_timeout: Some(ms(200)),
            ..Watch::default()
        };
        assert_eq!(run_watched("exec sleep 30", idle_only).end, End::Idle);
    }

    #[test]
    fn a_silent_agent_past_park_when_idle_is_reported_awaiting_permission() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = dir.path().join("claude");
        std::fs::write(
            &bin,
            "#!/bin/sh\n[ \"$1\" = --version ] && { echo '2.1.197 (Claude Code)'; exit 0; }\necho 'May I delete build/? (y/n)'\nexec sleep 30\n",
        )
        .expect("write");
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let request = AttemptRequest {
            bin: Some(bin),
            watch: Watch {
                park_when_idle: Some(Duration::from_millis(300)),
                ..Watch::default()
            },
            ..crate::request::tests::request(
                crate::request::SessionMode::New { session_id: None },
                dir.path(),
            )
        };
        let report = crate::request::Adapter::run(
            &crate::ClaudeAdapter::new(),
            &request,
            &CancelToken::new(),
        );
        crate::request::tests::assert_awaits_approval(&report, "May I delete build/? (y/n)");
    }

    #[test]
    fn output_beyond_the_cap_is_counted_not_kept() {
        let finished = run_shell(
            "head -c 17825792 /dev/zero; echo tail >&2",
            Duration::from_secs(60),
        );
        assert_eq!(finished.stdout.len(), OUTPUT_CAP_BYTES);
        assert_eq!(finished.stdout_bytes, 17_825_792);
        assert_eq!(finished.stderr, b"tail\n");
    }

    #[test]
    fn spawning_a_missing_program_is_an_error() {
        let invocation = Invocation {
            cli_prefixes: &[],
            provider: crate::network::Provider::Any,
            program: PathBuf::from("/nonexistent/agent"),
            ..shell("", Stdin::Null)
        };
        assert!(
            run_process(
                &invocation,
                Path::new("/"),
                Duration::from_secs(5),
                &CancelToken::new(),
                None,
                Watch::default(),
            )
            .is_err()
        );
    }

    #[test]
    fn binaries_resolve_by_override_then_env_then_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let make = |name: &str, mode: u32| {
            let path = dir.path().join(name);
            std::fs::write(&path, "#!/bin/sh\n").expect("write");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
            path
        };
        let on_path = make("claude", 0o755);
        let other = make("other-claude", 0o755);
        let not_executable = make("plain", 0o644);
        let path_var = OsString::from(format!("/nonexistent:{}", dir.path().display()));
        let spec = CliSpec {
            name: "claude",
            bin_env: "REPRISE_CLAUDE_BIN",
        };
        let resolve = |bin: Option<&Path>, env: Option<&str>| {
            resolve_cli_binary(
                spec,
                bin,
                env.map(OsString::from),
                dir.path(),
                Some(&path_var),
            )
        };
        assert_eq!(resolve(None, None), Ok(on_path.clone()));
        assert_eq!(resolve(None, Some("")), Ok(on_path));
        assert_eq!(
            resolve(None, Some(other.to_str().unwrap())),
            Ok(other.clone())
        );
        assert_eq!(
            resolve(Some(&other), Some("/nonexistent")),
            Ok(other.clone())
        );
        assert_eq!(
            resolve(Some(Path::new("./other-claude")), None),
            Ok(dir.path().join("./other-claude"))
        );
        assert_eq!(
            resolve(Some(&not_executable), None),
            Err(format!(
                "claude binary '{}' (the plan's bin) is not an executable file; fix the plan's bin key",
                not_executable.display()
            ))
        );
        assert_eq!(
            resolve(None, Some("/nonexistent/claude")),
            Err("claude binary '/nonexistent/claude' from REPRISE_CLAUDE_BIN is not an executable file; fix or unset REPRISE_CLAUDE_BIN".into())
        );
        assert_eq!(
            resolve_cli_binary(spec, None, None, dir.path(), Some(OsStr::new("/nonexistent"))),
            Err("claude binary 'claude' is not on PATH; install it or set REPRISE_CLAUDE_BIN to its path".into())
        );
        // A directory named like the binary is not a binary.
        assert_eq!(
            find_executable(Path::new("sub"), dir.path(), Some(dir.path().as_os_str())),
            None
        );
    }

    #[test]
    fn logged_argv_elides_only_the_prompt_argument() {
        let invocation = Invocation {
            cli_prefixes: &[],
            provider: crate::network::Provider::Any,
            program: PathBuf::from("gemini"),
            args: vec!["json".into(), "--prompt=json".into()],
            env: Vec::new(),
            stdin: Stdin::Null,
            prompt_arg: Some(1),
            session_id: None,
        };
        assert_eq!(
            invocation.logged_argv("json"),
            ["gemini", "json", "--prompt=<prompt>"]
        );
    }

    #[test]
    fn versions_are_probed_once_per_binary() {
        let dir = tempfile::tempdir().expect("tempdir");
        let counter = dir.path().join("count");
        let bin = dir.path().join("fake");
        std::fs::write(
            &bin,
            format!(
                "#!/bin/sh\necho probe >> '{}'\necho '  fake 1.2.3'\necho more\n",
                counter.display()
            ),
        )
        .expect("write");
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let cache = VersionCache::default();
        let cancel = CancelToken::new();
        for _ in 0..3 {
            assert_eq!(
                cache.version(&bin, &[], dir.path(), &cancel, None),
                Some("fake 1.2.3".into())
            );
        }
        assert_eq!(std::fs::read_to_string(&counter).expect("count"), "probe\n");
        assert_eq!(
            cache.version(Path::new("/bin/false"), &[], dir.path(), &cancel, None),
            None
        );
    }
}

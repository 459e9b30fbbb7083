//! The live run's control socket: `runs/<run>/control.sock`, a Unix socket
//! of mode 0600. `reprise task suspend` asks the run that owns the task over
//! it, because only that process owns the agent's process group, its journal
//! and its seat. One JSON line in, one out.
//!
//! Only the user's own commands may steer a run. Every agent and gate runs
//! as the same user, and Landlock does not mediate `connect(2)` to a
//! pathname socket, so a contained agent can reach every run's socket (it
//! finds them in `/proc/net/unix`). So each connection is admitted on the
//! kernel's word about its peer (`SO_PEERCRED`): the run's own uid, and a
//! process whose line of parents reaches the run's own without passing the
//! supervisor of an attempt ([`reprise_agents::lineage`]). Anything else,
//! or a peer whose line cannot be followed, is refused before its request
//! is read, and the run warns once per attempt that tried. Who asked (pid,
//! uid, command line) goes with each request into the rows it leads to.
//!
//! Requests: `{"v":1,"op":"suspend","task":T,"wake":{...},"reason":R}` and
//! `{"v":1,"op":"ping"}`. Replies: `{"ok":true,...}` or
//! `{"ok":false,"error":"..."}`.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use reprise_agents::Lineage;
use reprise_store::suspension::{ParkCause, Requester, Wake};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::events::Event;
pub use crate::messages::ControlOp;
pub(crate) use crate::messages::{ControlRequest, Message};
use crate::park::ParkRequest;

/// The version of the socket's requests and replies.
pub const CONTROL_VERSION: u64 = 1;

/// How long a client waits for the run to answer (a park waits for the
/// agent to be stopped and the worktree snapshotted).
const ANSWER_WITHIN: Duration = Duration::from_secs(120);

/// How long, and how much of it, a refused peer's request is read for.
const REFUSED_DRAIN: Duration = Duration::from_millis(200);
const REFUSED_DRAIN_BYTES: u64 = 64 * 1024;

/// How much of a requester's command line is kept.
const COMMAND_KEEP_BYTES: usize = 1024;

/// Where a run's control socket is.
pub fn socket_path(state: &reprise_store::state::StateDir, run_id: &str) -> PathBuf {
    state.runs_dir().join(run_id).join("control.sock")
}

#[derive(Debug, Deserialize)]
struct Envelope {
    v: u64,
    #[serde(flatten)]
    op: ControlOp,
}

impl ControlOp {
    /// The park a suspend request asks for.
    pub(crate) fn park_request(
        wake: &Wake,
        reason: &Option<String>,
        requester: &Requester,
    ) -> ParkRequest {
        ParkRequest {
            wake: wake.clone(),
            cause: ParkCause::Request,
            reason: reason.clone(),
            question: None,
            requested_by: Some(requester.clone()),
        }
    }
}

/// `pid`, as a requester: its uid is this process's own (a direct park is
/// made by the command itself).
pub fn requester_of(pid: u32) -> Requester {
    Requester {
        pid,
        uid: rustix::process::geteuid().as_raw(),
        command: reprise_agents::lineage::command_line(
            i32::try_from(pid).unwrap_or(0),
            COMMAND_KEEP_BYTES,
        ),
    }
}

/// The listening side, served on its own thread until the run ends.
pub(crate) struct ControlServer {
    listener: UnixListener,
    path: PathBuf,
}

impl ControlServer {
    /// Binds the run's socket, mode 0600. A socket file left by a dead run
    /// is replaced.
    pub(crate) fn bind(path: &Path) -> std::io::Result<Self> {
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    format!("{} is served by a live run", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let listener = UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
        Ok(Self {
            listener,
            path: path.to_path_buf(),
        })
    }

    /// Answers connections until `stop`, forwarding each request to the
    /// coordinator.
    pub(crate) fn serve(&self, to_coordinator: &mpsc::Sender<Message>, stop: &AtomicBool) {
        let mut warned = BTreeSet::new();
        while !stop.load(Ordering::SeqCst) {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    let accepted_at = reprise_agents::lineage::boot_ticks_now();
                    let _ = answer(stream, to_coordinator, accepted_at, &mut warned);
                }
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Why a peer may not steer the run.
#[derive(Debug)]
enum Refusal {
    /// Another user's process.
    OtherUser,
    /// A process inside a supervised attempt (an agent, a gate, what they
    /// started), or one whose place in the tree cannot be established.
    Attempt {
        pid: i32,
        /// The attempt's supervisor, when known: the run warns once per
        /// supervisor.
        supervisor: Option<i32>,
        detail: String,
    },
}

impl Refusal {
    fn message(&self) -> String {
        match self {
            Self::OtherUser => {
                "refused: the control socket answers only its run's own user".to_owned()
            }
            Self::Attempt { pid, detail, .. } => format!(
                "refused: process {pid} {detail}; only the user's own reprise commands steer a run"
            ),
        }
    }
}

/// The peer of `stream`, when it may steer the run: the run's own user,
/// from outside every supervised attempt. `accepted_at` bounds the peer's
/// start time (see [`reprise_agents::lineage::lineage`]).
fn admit(
    stream: &UnixStream,
    accepted_at: Option<u64>,
) -> std::io::Result<Result<Requester, Refusal>> {
    let cred = rustix::net::sockopt::socket_peercred(stream)?;
    let uid = cred.uid.as_raw();
    if uid != rustix::process::geteuid().as_raw() {
        return Ok(Err(Refusal::OtherUser));
    }
    let pid = cred.pid.as_raw_nonzero().get();
    let me = rustix::process::getpid().as_raw_nonzero().get();
    Ok(
        match reprise_agents::lineage::lineage(pid, me, accepted_at) {
            Lineage::Outside => Ok(Requester {
                pid: u32::try_from(pid).unwrap_or(0),
                uid,
                command: reprise_agents::lineage::command_line(pid, COMMAND_KEEP_BYTES),
            }),
            Lineage::InsideAttempt { supervisor } => Err(Refusal::Attempt {
                pid,
                supervisor: Some(supervisor),
                detail: format!("runs inside a supervised attempt (supervisor {supervisor})"),
            }),
            Lineage::Unknown { reason } => Err(Refusal::Attempt {
                pid,
                supervisor: None,
                detail: format!("cannot be placed outside every supervised attempt ({reason})"),
            }),
        },
    )
}

fn answer(
    stream: UnixStream,
    to_coordinator: &mpsc::Sender<Message>,
    accepted_at: Option<u64>,
    warned: &mut BTreeSet<Option<i32>>,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut writer = stream.try_clone()?;
    let admitted = admit(&stream, accepted_at)?;
    let refused = admitted.is_err();
    let reply = match admitted {
        Ok(requester) => forward(&stream, to_coordinator, requester)?,
        Err(refusal) => {
            if let Refusal::Attempt { supervisor, .. } = &refusal
                && warned.insert(*supervisor)
            {
                let _ = to_coordinator.send(Message::Event(Event::Warning {
                    task: None,
                    message: format!("control socket: {}", refusal.message()),
                }));
            }
            refusal_reply(refusal.message())
        }
    };
    writeln!(writer, "{reply}")?;
    writer.flush()?;
    if refused {
        // The refused request was never read: take it off the socket for a
        // moment, so the peer's write does not meet a closed socket (EPIPE)
        // before it reads the refusal, and a peer that sends nothing holds
        // the socket no longer than that.
        stream.set_read_timeout(Some(REFUSED_DRAIN))?;
        let mut request = Vec::new();
        let _ = BufReader::new((&stream).take(REFUSED_DRAIN_BYTES)).read_until(b'\n', &mut request);
    }
    Ok(())
}

/// Reads an admitted peer's request and hands it to the coordinator; its
/// answer.
fn forward(
    stream: &UnixStream,
    to_coordinator: &mpsc::Sender<Message>,
    requester: Requester,
) -> std::io::Result<Value> {
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line)?;
    Ok(match serde_json::from_str::<Envelope>(&line) {
        Ok(envelope) if envelope.v == CONTROL_VERSION => {
            let (reply, answer) = mpsc::channel();
            let sent = to_coordinator.send(Message::Control(ControlRequest {
                op: envelope.op,
                reply,
                requester,
            }));
            match sent
                .ok()
                .and_then(|()| answer.recv_timeout(ANSWER_WITHIN).ok())
            {
                Some(value) => value,
                None => refusal_reply("the run did not answer (it may be ending)"),
            }
        }
        Ok(envelope) => refusal_reply(format!(
            "control request version {} is not {CONTROL_VERSION}; use the reprise that started the run",
            envelope.v
        )),
        Err(err) => refusal_reply(format!("not a control request: {err}")),
    })
}

/// A request's refusal: `{"ok": false, "error": ...}`.
#[derive(Serialize)]
struct Refused {
    ok: bool,
    error: String,
}

pub(crate) fn refusal_reply(error: impl Into<String>) -> Value {
    serde_json::to_value(Refused {
        ok: false,
        error: error.into(),
    })
    .expect("a refusal serialises")
}

/// Sends one request to a live run and returns its answer.
pub fn ask(socket: &Path, op: &ControlOp) -> std::io::Result<Value> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(ANSWER_WITHIN + Duration::from_secs(5)))?;
    let mut request = serde_json::to_value(op).map_err(std::io::Error::other)?;
    if let Some(object) = request.as_object_mut() {
        object.insert("v".into(), Value::from(CONTROL_VERSION));
    }
    writeln!(stream, "{request}")?;
    stream.flush()?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line)?;
    serde_json::from_str(&line).map_err(std::io::Error::other)
}

//! The live run's control socket: `runs/<run>/control.sock`, a Unix socket
//! of mode 0600 that only the run's own user may talk to (its peer's uid is
//! checked on every connection). `reprise task suspend` asks the run that
//! owns the task over it, because only that process owns the agent's
//! process group, its journal and its seat. One JSON line in, one out.
//!
//! Requests: `{"v":1,"op":"suspend","task":T,"wake":{...},"reason":R}` and
//! `{"v":1,"op":"ping"}`. Replies: `{"ok":true,...}` or
//! `{"ok":false,"error":"..."}`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use reprise_core::TaskId;
use reprise_store::suspension::{ParkCause, Wake};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::events::Message;
use crate::park::ParkRequest;

/// The version of the socket's requests and replies.
pub const CONTROL_VERSION: u64 = 1;

/// How long a client waits for the run to answer (a park waits for the
/// agent to be stopped and the worktree snapshotted).
const ANSWER_WITHIN: Duration = Duration::from_secs(120);

/// Where a run's control socket is.
pub fn socket_path(state: &reprise_store::state::StateDir, run_id: &str) -> PathBuf {
    state.runs_dir().join(run_id).join("control.sock")
}

/// A request over the socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ControlOp {
    Ping,
    Suspend {
        task: TaskId,
        wake: Wake,
        reason: Option<String>,
    },
    Resume {
        task: TaskId,
        /// `warm`, `fork` or `cold`; the policy's when absent.
        mode: Option<String>,
        receipt: Option<reprise_core::digest::Digest>,
    },
    /// Halt the running agent at once, keeping sandbox, seat and
    /// reservation; past `upgrade_after_ms` the pause becomes a park.
    Pause {
        task: TaskId,
        upgrade_after_ms: Option<u64>,
    },
    Unpause {
        task: TaskId,
    },
}

#[derive(Debug, Deserialize)]
struct Envelope {
    v: u64,
    #[serde(flatten)]
    op: ControlOp,
}

/// A request the coordinator answers, with where the answer goes.
#[derive(Debug)]
pub(crate) struct ControlRequest {
    pub(crate) op: ControlOp,
    pub(crate) reply: mpsc::Sender<Value>,
}

impl ControlOp {
    /// The park a suspend request asks for.
    pub(crate) fn park_request(wake: &Wake, reason: &Option<String>) -> ParkRequest {
        ParkRequest {
            wake: wake.clone(),
            cause: ParkCause::Request,
            reason: reason.clone(),
            question: None,
        }
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
        while !stop.load(Ordering::SeqCst) {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    let _ = answer(stream, to_coordinator);
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

/// The uid of the process at the other end of `stream`.
fn peer_uid(stream: &UnixStream) -> std::io::Result<u32> {
    let cred = rustix::net::sockopt::socket_peercred(stream)?;
    Ok(cred.uid.as_raw())
}

fn answer(stream: UnixStream, to_coordinator: &mpsc::Sender<Message>) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut writer = stream.try_clone()?;
    let reply = if peer_uid(&stream)? != rustix::process::geteuid().as_raw() {
        json!({"ok": false, "error": "refused: the control socket answers only its run's own user"})
    } else {
        let mut line = String::new();
        BufReader::new(&stream).read_line(&mut line)?;
        match serde_json::from_str::<Envelope>(&line) {
            Ok(envelope) if envelope.v == CONTROL_VERSION => {
                let (reply, answer) = mpsc::channel();
                let sent = to_coordinator.send(Message::Control(ControlRequest {
                    op: envelope.op,
                    reply,
                }));
                match sent
                    .ok()
                    .and_then(|()| answer.recv_timeout(ANSWER_WITHIN).ok())
                {
                    Some(value) => value,
                    None => {
                        json!({"ok": false, "error": "the run did not answer (it may be ending)"})
                    }
                }
            }
            Ok(envelope) => json!({"ok": false, "error": format!(
                "control request version {} is not {CONTROL_VERSION}; use the reprise that started the run", envelope.v)}),
            Err(err) => json!({"ok": false, "error": format!("not a control request: {err}")}),
        }
    };
    writeln!(writer, "{reply}")?;
    writer.flush()
}

/// Sends one request to a live run and returns its answer.
pub fn ask(socket: &Path, op: &ControlOp) -> std::io::Result<Value> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(ANSWER_WITHIN + Duration::from_secs(5)))?;
    let mut request = serde_json::to_value(op).map_err(std::io::Error::other)?;
    if let Some(object) = request.as_object_mut() {
        object.insert("v".into(), json!(CONTROL_VERSION));
    }
    writeln!(stream, "{request}")?;
    stream.flush()?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line)?;
    serde_json::from_str(&line).map_err(std::io::Error::other)
}

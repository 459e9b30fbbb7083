//! The seam between the append path and the operating system.
//!
//! Every write, data sync and truncation of a chained file goes through an
//! `IoSeam`, so tests can make the Nth call fail, write short, or report a
//! full disk, and then check that no acknowledged row was lost.

use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::sync::Mutex;

/// The operations an append performs on a chained file.
pub trait IoSeam: Send + Sync + fmt::Debug {
    /// One `write` call; may write fewer bytes than asked.
    fn write(&self, file: &File, bytes: &[u8]) -> io::Result<usize>;
    /// `fdatasync`.
    fn sync_data(&self, file: &File) -> io::Result<()>;
    /// `ftruncate`.
    fn set_len(&self, file: &File, len: u64) -> io::Result<()>;
}

/// The real operating system.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealIo;

impl IoSeam for RealIo {
    fn write(&self, mut file: &File, bytes: &[u8]) -> io::Result<usize> {
        file.write(bytes)
    }

    fn sync_data(&self, file: &File) -> io::Result<()> {
        file.sync_data()
    }

    fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        file.set_len(len)
    }
}

/// Which call a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Write,
    SyncData,
    SetLen,
}

/// What happens at the faulty call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The call fails with this OS error (e.g. `libc` ENOSPC = 28, EIO = 5).
    Errno(i32),
    /// A write stores only this many bytes and reports success.
    Short(usize),
    /// A write stores this many bytes, then the call fails with the error.
    ShortThenErrno(usize, i32),
}

/// A seam that injects one fault at the Nth call of an operation (counting
/// from 0) and behaves like `RealIo` otherwise.
#[derive(Debug)]
pub struct FaultyIo {
    plan: Vec<(Operation, u64, Fault)>,
    calls: Mutex<[u64; 3]>,
}

impl FaultyIo {
    pub fn new(plan: Vec<(Operation, u64, Fault)>) -> Self {
        Self {
            plan,
            calls: Mutex::new([0; 3]),
        }
    }

    fn fault_for(&self, operation: Operation) -> Option<Fault> {
        let mut calls = self.calls.lock().expect("fault counter lock");
        let slot = operation as usize;
        let call = calls[slot];
        calls[slot] += 1;
        self.plan
            .iter()
            .find(|(op, at, _)| *op == operation && *at == call)
            .map(|(_, _, fault)| *fault)
    }
}

impl IoSeam for FaultyIo {
    fn write(&self, file: &File, bytes: &[u8]) -> io::Result<usize> {
        match self.fault_for(Operation::Write) {
            None => RealIo.write(file, bytes),
            Some(Fault::Errno(errno)) => Err(io::Error::from_raw_os_error(errno)),
            Some(Fault::Short(len)) => RealIo.write(file, &bytes[..len.min(bytes.len())]),
            Some(Fault::ShortThenErrno(len, errno)) => {
                RealIo.write(file, &bytes[..len.min(bytes.len())])?;
                Err(io::Error::from_raw_os_error(errno))
            }
        }
    }

    fn sync_data(&self, file: &File) -> io::Result<()> {
        match self.fault_for(Operation::SyncData) {
            None => RealIo.sync_data(file),
            Some(Fault::Errno(errno) | Fault::ShortThenErrno(_, errno)) => {
                Err(io::Error::from_raw_os_error(errno))
            }
            Some(Fault::Short(_)) => RealIo.sync_data(file),
        }
    }

    fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        match self.fault_for(Operation::SetLen) {
            None | Some(Fault::Short(_)) => RealIo.set_len(file, len),
            Some(Fault::Errno(errno) | Fault::ShortThenErrno(_, errno)) => {
                Err(io::Error::from_raw_os_error(errno))
            }
        }
    }
}

/// The environment variable that names a crash point (debug builds only).
pub const CRASH_ENV: &str = "REPRISE_TEST_CRASH_AT";

/// A named step of a task's life where a test may have the process killed
/// outright, as `kill -9` would at that moment: `TASK/STEP`, or
/// `TASK/STEP#N` for its Nth time in the process (from 1). The steps are
/// every journal row's kind (once the row is durable), `ledger.<to>` (once
/// the ledger holds the task's move to `<to>`), and the engine's own:
/// `worktree.added` (git registered the worktree, nothing checked out),
/// `worktree.linked` (its linkage recorded and files checked out, before
/// `task.started`), `result.branch` (the result branch made, before
/// `task.result`) and `journal.sealed` (the audit chain sealed the journal,
/// before the ledger hears the end). Read only in debug builds: a release
/// build never looks at the variable.
#[expect(clippy::print_stderr)]
pub fn crash_point(task: &str, step: &str) {
    if !cfg!(debug_assertions) {
        return;
    }
    static WANTED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let Some(wanted) = WANTED.get_or_init(|| std::env::var(CRASH_ENV).ok()) else {
        return;
    };
    let (point, nth) = match wanted.rsplit_once('#') {
        Some((point, nth)) => (point, nth.parse::<u32>().unwrap_or(1)),
        None => (wanted.as_str(), 1),
    };
    if point.split_once('/') != Some((task, step)) {
        return;
    }
    static SEEN: Mutex<u32> = Mutex::new(0);
    let mut seen = SEEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    *seen += 1;
    if *seen == nth {
        eprintln!("reprise: test crash at {task}/{step}");
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
}

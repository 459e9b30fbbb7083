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

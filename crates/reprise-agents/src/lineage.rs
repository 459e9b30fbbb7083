//! Where a process stands in the process tree: inside a supervised attempt
//! (below a `reprise __supervise`) or outside every one.
//!
//! An agent or a gate runs as the same user as reprise, so a uid check
//! cannot tell it from the user. Its place in the tree can: every process
//! of an attempt, a `setsid` daemon included, stays a descendant of its
//! supervisor (a child subreaper), and a contained process cannot signal
//! that supervisor away (Landlock's signal scoping) nor trace it. The live
//! run's control socket asks this of every peer and answers only one whose
//! line of parents reaches its own without passing a supervisor.

use std::collections::BTreeSet;
use std::fs;

use crate::supervise::{SUPERVISE_COMMAND, read_stat};

/// A bound on the walk up the tree (a real line is a few dozen long).
const MAX_DEPTH: usize = 4096;

/// Where a process stands relative to the supervised attempts.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lineage {
    /// Its line of parents meets the given process's own line without
    /// passing a supervisor.
    Outside,
    /// The supervisor (its pid) of an attempt lies on its line.
    InsideAttempt { supervisor: i32 },
    /// The line could not be followed to the end; a caller treats this as
    /// inside (it fails closed).
    Unknown { reason: String },
}

/// Where `peer` stands, as seen from `meeting` (the process that asks,
/// usually the run itself): the walk goes up from `peer` and stops at the
/// first process that is `meeting` or one of its ancestors. A supervisor met
/// before that makes it [`Lineage::InsideAttempt`]; so a reprise run inside
/// an attempt (reprise's own tests as a gate) still answers the commands
/// started beside it, but never those of an attempt below it.
///
/// `started_by` (clock ticks after boot, as `/proc/<pid>/stat` counts) is
/// the latest start time `peer` may have: a peer that exited after it
/// connected leaves its pid free, and a process started later under that
/// pid is not the one that asked.
pub fn lineage(peer: i32, meeting: i32, started_by: Option<u64>) -> Lineage {
    let unknown = |reason: String| Lineage::Unknown { reason };
    if peer <= 0 {
        return unknown(format!(
            "pid {peer} (a process in another pid namespace, or none)"
        ));
    }
    let ancestors = line_of(meeting);
    let mut current = peer;
    for _ in 0..MAX_DEPTH {
        let Some(stat) = read_stat(current) else {
            return unknown(format!("process {current} is gone or unreadable"));
        };
        if current == peer
            && let Some(started_by) = started_by
            && stat.start_time > started_by
        {
            return unknown(format!(
                "process {peer} started after the connection: its pid was reused"
            ));
        }
        if ancestors.contains(&(current, stat.start_time)) {
            return Lineage::Outside;
        }
        match is_supervisor(current) {
            Some(true) => {
                return Lineage::InsideAttempt {
                    supervisor: current,
                };
            }
            Some(false) => {}
            None => return unknown(format!("process {current} is gone or unreadable")),
        }
        if stat.ppid <= 0 {
            return unknown(format!(
                "the parents of process {peer} never meet those of process {meeting}"
            ));
        }
        current = stat.ppid;
    }
    unknown(format!("the parents of process {peer} go on too long"))
}

/// `pid` and its ancestors, each with its start time (so a pid reused by
/// another process does not match).
fn line_of(pid: i32) -> BTreeSet<(i32, u64)> {
    let mut line = BTreeSet::new();
    let mut current = pid;
    for _ in 0..MAX_DEPTH {
        let Some(stat) = read_stat(current) else {
            break;
        };
        line.insert((current, stat.start_time));
        if stat.ppid <= 0 {
            break;
        }
        current = stat.ppid;
    }
    line
}

/// Whether `pid` runs `reprise __supervise`; `None` when it cannot be read.
fn is_supervisor(pid: i32) -> Option<bool> {
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        cmdline
            .split(|&byte| byte == 0)
            .nth(1)
            .is_some_and(|arg| arg == SUPERVISE_COMMAND.as_bytes()),
    )
}

/// Now, in the clock ticks after boot that `/proc/<pid>/stat` counts start
/// times in; `None` when the clock cannot be read.
pub fn boot_ticks_now() -> Option<u64> {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    let per_second = rustix::param::clock_ticks_per_second();
    let seconds = u64::try_from(now.tv_sec).ok()?;
    let nanos = u64::try_from(now.tv_nsec).ok()?;
    Some(seconds * per_second + nanos * per_second / 1_000_000_000)
}

/// The command line of `pid`, its arguments joined by spaces, at most
/// `max_bytes` long; empty when it cannot be read.
pub fn command_line(pid: i32, max_bytes: usize) -> String {
    let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return String::new();
    };
    let mut text = cmdline
        .split(|&byte| byte == 0)
        .filter(|arg| !arg.is_empty())
        .map(String::from_utf8_lossy)
        .collect::<Vec<_>>()
        .join(" ");
    if text.len() > max_bytes {
        let mut end = max_bytes;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::process::{getpid, getppid};

    fn me() -> i32 {
        getpid().as_raw_nonzero().get()
    }

    #[test]
    fn a_process_meets_its_own_line_and_its_parent_meets_it_too() {
        assert_eq!(lineage(me(), me(), boot_ticks_now()), Lineage::Outside);
        let parent = getppid().unwrap().as_raw_nonzero().get();
        assert_eq!(lineage(parent, me(), boot_ticks_now()), Lineage::Outside);
    }

    #[test]
    fn a_child_outside_any_supervisor_is_outside() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        let found = lineage(pid, me(), boot_ticks_now());
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(found, Lineage::Outside);
    }

    #[test]
    fn a_child_below_a_supervisor_is_inside() {
        // A stand-in supervisor: `sh __supervise` (a script of that name)
        // has the supervisor's second argument, and starts the peer.
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(SUPERVISE_COMMAND), "sleep 30 & wait\n").unwrap();
        let mut supervisor = std::process::Command::new("sh")
            .arg(SUPERVISE_COMMAND)
            .current_dir(dir.path())
            .spawn()
            .unwrap();
        let supervisor_pid = i32::try_from(supervisor.id()).unwrap();
        let pid = rustix::process::Pid::from_raw(supervisor_pid).unwrap();
        let mut peer = None;
        // The peer once it runs `sleep`: until its exec, the forked
        // subshell still reads as `sh __supervise`, a supervisor itself.
        let runs_sleep = |pid: &i32| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| cmdline.starts_with(b"sleep\0"))
        };
        for _ in 0..500 {
            peer = crate::supervise::descendants(pid)
                .into_iter()
                .find(runs_sleep);
            if peer.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let found = peer.map(|peer| lineage(peer, me(), boot_ticks_now()));
        let supervisor_itself = lineage(supervisor_pid, me(), boot_ticks_now());
        if let Some(peer) = peer.and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process(peer, rustix::process::Signal::KILL);
        }
        supervisor.kill().unwrap();
        supervisor.wait().unwrap();
        let inside = Lineage::InsideAttempt {
            supervisor: supervisor_pid,
        };
        assert_eq!(found, Some(inside.clone()));
        assert_eq!(supervisor_itself, inside);
    }

    #[test]
    fn a_pid_started_after_the_connection_or_gone_is_unknown() {
        assert!(matches!(
            lineage(me(), me(), Some(0)),
            Lineage::Unknown { .. }
        ));
        assert!(matches!(lineage(0, me(), None), Lineage::Unknown { .. }));
        assert!(matches!(
            lineage(i32::MAX, me(), None),
            Lineage::Unknown { .. }
        ));
    }

    #[test]
    fn command_lines_are_joined_and_bounded() {
        let line = command_line(me(), 4096);
        assert!(!line.is_empty());
        assert!(command_line(me(), 3).len() <= 3);
        assert_eq!(command_line(i32::MAX, 10), "");
    }
}

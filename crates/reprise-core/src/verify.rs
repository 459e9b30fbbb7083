//! Verification over bytes already read: the tolerant reader's view of a
//! chained file, the first row where the chain breaks, coverage, and identity
//! against the seals in the audit chain.
//!
//! The verifier is fed whole lines in chunks (the store reads; this module
//! only looks). Rows within a chunk are checked in parallel, because each
//! row's digest depends only on its own bytes; the links between rows are then
//! walked in order.

use std::collections::BTreeMap;

use rayon::prelude::*;
use serde::Serialize;

use crate::chain::{ChainFormat, CheckedRow, LineCheck, Reason, check_line};
use crate::digest::{AuditKey, Digest};
use crate::record::Head;
use crate::scan::same_text;

/// Below this many lines a chunk is checked on the calling thread.
const PARALLEL_MIN_LINES: usize = 4096;

/// Where and why a chain first fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// Zero-based line index of the bad row.
    pub row: u64,
    pub reason: Reason,
}

/// Whether every line of the file was a whole row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Coverage {
    Complete,
    Partial,
}

/// Whether the journal matches the seals the audit chain holds for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Identity {
    /// Every seal names a row the journal holds, with the same hash.
    Verified,
    /// A seal names a row the journal lacks or holds with another hash.
    Mismatched,
    /// No seal exists yet (a live or parked task): nothing to compare.
    Unverifiable,
}

/// The result of reading a chained file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChainReport {
    /// Whole rows the tolerant reader kept.
    pub rows: u64,
    /// The last row of the verified prefix.
    pub head: Option<Head>,
    /// The first row at which the chain breaks, if any.
    pub fault: Option<Fault>,
    /// Line indices the tolerant reader discarded.
    pub discarded_lines: Vec<u64>,
    /// Index of a final line cut short by a crash (repairable).
    pub torn_tail: Option<u64>,
    /// Digests of the watched rows, where the verified prefix holds them.
    pub watched: BTreeMap<u64, Option<Digest>>,
}

impl ChainReport {
    pub fn coverage(&self) -> Coverage {
        if self.discarded_lines.is_empty() {
            Coverage::Complete
        } else {
            Coverage::Partial
        }
    }

    /// The first problem to show a reader: a chain fault, else a torn tail.
    pub fn first_problem(&self) -> Option<Fault> {
        self.fault.or(self.torn_tail.map(|row| Fault {
            row,
            reason: Reason::TornTail,
        }))
    }
}

/// A discarded line whose fate depends on whether anything follows it.
#[derive(Debug, Clone, Copy)]
struct Pending {
    index: u64,
    zero_filled: bool,
}

/// Streams a chained file's lines through the per-row check and the links.
#[derive(Debug)]
pub struct ChainVerifier<'k> {
    format: ChainFormat,
    key: Option<&'k AuditKey>,
    task_id: Option<String>,
    next_line: u64,
    report: ChainReport,
    pending: Option<Pending>,
}

impl<'k> ChainVerifier<'k> {
    /// A verifier for `format`. Audit chains need `key`; journals may name the
    /// task every row must belong to.
    pub fn new(format: ChainFormat, key: Option<&'k AuditKey>, task_id: Option<&str>) -> Self {
        Self {
            format,
            key,
            task_id: task_id.map(str::to_owned),
            next_line: 0,
            report: ChainReport {
                rows: 0,
                head: None,
                fault: None,
                discarded_lines: Vec::new(),
                torn_tail: None,
                watched: BTreeMap::new(),
            },
            pending: None,
        }
    }

    /// A verifier that carries on after `rows` whole rows already verified up
    /// to `head`: the next line must be row `head.seq + 1` linking to it.
    /// Only sound when nothing but appends happened since that verification.
    pub fn resume(
        format: ChainFormat,
        key: Option<&'k AuditKey>,
        task_id: Option<&str>,
        head: Head,
        rows: u64,
    ) -> Self {
        let mut verifier = Self::new(format, key, task_id);
        verifier.report.head = Some(head);
        verifier.report.rows = rows;
        verifier.next_line = rows;
        verifier
    }

    /// Asks the verifier to record the digest of the row with `seq`.
    pub fn watch(&mut self, seq: u64) {
        self.report.watched.insert(seq, None);
    }

    /// Feeds whole lines, each ending in `\n`.
    pub fn feed(&mut self, lines: &[u8]) {
        self.feed_observed(lines, |_, _| {});
    }

    /// Feeds whole lines and calls `observe` with every row of the verified
    /// prefix, in order, with the line it came from.
    pub fn feed_observed(&mut self, lines: &[u8], mut observe: impl FnMut(&CheckedRow<'_>, &[u8])) {
        debug_assert!(lines.is_empty() || lines.ends_with(b"\n"));
        let mut slices = Vec::new();
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', lines) {
            slices.push(&lines[start..end]);
            start = end + 1;
        }
        let (format, key) = (self.format, self.key);
        // On one thread (a process pinned to one core) the rows are checked
        // as they are linked: collecting the checks first would only copy
        // each row's facts through memory once more.
        if slices.len() < PARALLEL_MIN_LINES || rayon::current_num_threads() == 1 {
            for line in slices {
                let check = check_line(format, key, line);
                self.push(line, check, &mut observe);
            }
            return;
        }
        let checks: Vec<LineCheck<'_>> = slices
            .par_iter()
            .with_min_len(1024)
            .map(|line| check_line(format, key, line))
            .collect();
        for (line, check) in slices.iter().zip(checks) {
            self.push(line, check, &mut observe);
        }
    }

    fn push(
        &mut self,
        line: &[u8],
        check: LineCheck<'_>,
        observe: &mut impl FnMut(&CheckedRow<'_>, &[u8]),
    ) {
        let index = self.next_line;
        self.next_line += 1;
        if let Some(pending) = self.pending.take() {
            // Something follows a discarded line: it was not a torn tail.
            self.fail(pending.index, Reason::MalformedRow);
        }
        let row = match check {
            LineCheck::NotObject => {
                self.report.discarded_lines.push(index);
                self.pending = Some(Pending {
                    index,
                    zero_filled: line.last() == Some(&0),
                });
                return;
            }
            LineCheck::Fault(reason) => {
                self.report.rows += 1;
                self.fail(index, reason);
                return;
            }
            LineCheck::Row(row) => row,
        };
        self.report.rows += 1;
        if self.report.fault.is_some() {
            return;
        }
        let (expected_seq, expected_prev) = match self.report.head {
            Some(head) => (head.seq + 1, head.digest),
            None => (0, Digest::ZERO),
        };
        let reason = if row.seq != expected_seq {
            Some(Reason::SeqGap)
        } else if row.prev != expected_prev {
            Some(Reason::PrevLinkBreak)
        } else if !row.digest_ok {
            Some(Reason::DigestMismatch)
        } else if !row.decision_ok {
            Some(Reason::DecisionHashMismatch)
        } else if let (Some(expected), Some(found)) = (&self.task_id, &row.task_id)
            && !same_text(expected, found)
        {
            Some(Reason::ForeignTask)
        } else {
            None
        };
        if let Some(reason) = reason {
            self.fail(index, reason);
            return;
        }
        self.report.head = Some(Head {
            seq: row.seq,
            digest: row.digest,
        });
        if let Some(slot) = self.report.watched.get_mut(&row.seq) {
            *slot = Some(row.digest);
        }
        observe(&row, line);
    }

    fn fail(&mut self, row: u64, reason: Reason) {
        if self.report.fault.is_none() {
            self.report.fault = Some(Fault { row, reason });
        }
    }

    /// Ends the file. `tail` is whatever followed the last newline.
    pub fn finish(mut self, tail: &[u8]) -> ChainReport {
        if !tail.is_empty() {
            let index = self.next_line;
            if let Some(pending) = self.pending.take() {
                self.fail(pending.index, Reason::MalformedRow);
            }
            self.report.discarded_lines.push(index);
            self.report.torn_tail = Some(index);
        } else if let Some(pending) = self.pending.take() {
            if pending.zero_filled {
                self.report.torn_tail = Some(pending.index);
            } else {
                self.fail(pending.index, Reason::MalformedRow);
            }
        }
        self.report
    }
}

/// Splits `bytes` into whole lines and the unterminated tail.
pub fn split_tail(bytes: &[u8]) -> (&[u8], &[u8]) {
    match memchr::memrchr(b'\n', bytes) {
        Some(last) => bytes.split_at(last + 1),
        None => (&[], bytes),
    }
}

/// Verifies a whole chained file held in memory.
pub fn verify_bytes(
    format: ChainFormat,
    key: Option<&AuditKey>,
    task_id: Option<&str>,
    bytes: &[u8],
) -> ChainReport {
    let mut verifier = ChainVerifier::new(format, key, task_id);
    let (lines, tail) = split_tail(bytes);
    verifier.feed(lines);
    verifier.finish(tail)
}

/// Identity of a journal against its seals: each seal `(seq, event_hash)`
/// must name a row of the verified prefix with that hash.
pub fn identity(seals: &[Head], watched: &BTreeMap<u64, Option<Digest>>) -> Identity {
    if seals.is_empty() {
        return Identity::Unverifiable;
    }
    let all_match = seals
        .iter()
        .all(|seal| watched.get(&seal.seq).copied().flatten() == Some(seal.digest));
    if all_match {
        Identity::Verified
    } else {
        Identity::Mismatched
    }
}

//! The record types of the state directory and their canonical encodings.
//!
//! Encoding builds the row without its digest, hashes (or MACs) its JCS bytes
//! under the format's domain tag, then writes the whole row as JCS. Decoding
//! for display goes through serde; verification never does (see `chain`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::TaskId;
use crate::canonical::{EncodeError, to_canonical_vec};
use crate::chain::FORMAT_VERSION;
use crate::digest::{
    AUDIT_TAG, AuditKey, DECISION_TAG, Digest, JOURNAL_TAG, SPINE_TAG, tagged_hmac, tagged_sha256,
};

/// Audit row kind that seals a task journal's head.
pub const SEAL_KIND: &str = "journal.seal";

/// The last row of a chain: its sequence number and digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    pub seq: u64,
    pub digest: Digest,
}

/// A row ready to append: its line (JCS bytes and a newline) and new head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedRow {
    pub line: Vec<u8>,
    pub head: Head,
}

/// The link a new row continues from: `None` for the first row.
fn next_link(previous: Option<Head>) -> (u64, Digest) {
    match previous {
        Some(head) => (head.seq + 1, head.digest),
        None => (0, Digest::ZERO),
    }
}

fn finish(
    mut row: Map<String, Value>,
    digest_key: &str,
    digest: Digest,
    seq: u64,
) -> Result<EncodedRow, EncodeError> {
    row.insert(digest_key.into(), Value::String(digest.to_hex()));
    let mut line = to_canonical_vec(&row)?;
    line.push(b'\n');
    Ok(EncodedRow {
        line,
        head: Head { seq, digest },
    })
}

/// Encodes the next task journal row after `previous`.
pub fn encode_journal_row(
    previous: Option<Head>,
    task_id: &TaskId,
    kind: &str,
    at: &str,
    body: &Value,
) -> Result<EncodedRow, EncodeError> {
    let (seq, prev_hash) = next_link(previous);
    let mut row = Map::new();
    row.insert("v".into(), FORMAT_VERSION.into());
    row.insert("seq".into(), seq.into());
    row.insert("kind".into(), kind.into());
    row.insert("task_id".into(), task_id.as_str().into());
    row.insert("at".into(), at.into());
    row.insert("body".into(), body.clone());
    row.insert("prev_hash".into(), prev_hash.to_hex().into());
    let digest = tagged_sha256(JOURNAL_TAG, &[&to_canonical_vec(&row)?]);
    finish(row, "event_hash", digest, seq)
}

/// Encodes the next audit row after `previous`, keyed by `key`.
pub fn encode_audit_row(
    previous: Option<Head>,
    key: &AuditKey,
    kind: &str,
    at: &str,
    body: &Value,
) -> Result<EncodedRow, EncodeError> {
    let (seq, prev_mac) = next_link(previous);
    let mut row = Map::new();
    row.insert("v".into(), FORMAT_VERSION.into());
    row.insert("seq".into(), seq.into());
    row.insert("kind".into(), kind.into());
    row.insert("at".into(), at.into());
    row.insert("body".into(), body.clone());
    row.insert("prev_mac".into(), prev_mac.to_hex().into());
    let mac = tagged_hmac(key, AUDIT_TAG, &[&to_canonical_vec(&row)?]);
    finish(row, "mac", mac, seq)
}

/// The hash that names a decision: SHA-256 over its canonical bytes.
pub fn decision_hash(decision: &Value) -> Result<Digest, EncodeError> {
    Ok(tagged_sha256(DECISION_TAG, &[&to_canonical_vec(decision)?]))
}

/// Encodes the next spine row after `previous`. `sealed_at` is the `seq` of
/// the journal row that recorded the decision, so identical decisions seal to
/// identical bytes whatever the wall clock said.
pub fn encode_spine_row(
    previous: Option<Head>,
    kind: &str,
    decision: &Value,
    sealed_at: u64,
) -> Result<EncodedRow, EncodeError> {
    let (seq, prev_hash) = next_link(previous);
    let mut row = Map::new();
    row.insert("v".into(), FORMAT_VERSION.into());
    row.insert("seq".into(), seq.into());
    row.insert("kind".into(), kind.into());
    row.insert("decision".into(), decision.clone());
    row.insert(
        "decision_hash".into(),
        decision_hash(decision)?.to_hex().into(),
    );
    row.insert("sealed_at".into(), sealed_at.into());
    row.insert("prev_hash".into(), prev_hash.to_hex().into());
    let digest = tagged_sha256(SPINE_TAG, &[&to_canonical_vec(&row)?]);
    finish(row, "entry_hash", digest, seq)
}

/// A task journal row as read back for display.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JournalRow {
    pub v: u64,
    pub seq: u64,
    pub kind: String,
    pub task_id: String,
    pub at: String,
    pub body: Value,
    pub prev_hash: Digest,
    pub event_hash: Digest,
}

/// An audit row as read back for display.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditRow {
    pub v: u64,
    pub seq: u64,
    pub kind: String,
    pub at: String,
    pub body: Value,
    pub prev_mac: Digest,
    pub mac: Digest,
}

/// A spine row as read back for display.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpineRow {
    pub v: u64,
    pub seq: u64,
    pub kind: String,
    pub decision: Value,
    pub decision_hash: Digest,
    pub sealed_at: u64,
    pub prev_hash: Digest,
    pub entry_hash: Digest,
}

/// The body of a `journal.seal` audit row: a task journal's head at a
/// terminal state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SealBody {
    pub task_id: TaskId,
    pub seq: u64,
    pub event_hash: Digest,
}

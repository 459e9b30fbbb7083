//! The record types of the state directory and their canonical encodings.
//!
//! Encoding builds the row without its digest, hashes (or MACs) its JCS bytes
//! under the format's domain tag, then writes the whole row as JCS. Decoding
//! for display goes through serde; verification never does (see `chain`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::TaskId;
use crate::canonical::{
    EncodeError, MAX_SAFE_INTEGER, assemble_object, to_canonical_vec, value_to_canonical_vec,
};
use crate::chain::FORMAT_VERSION;
use crate::digest::{
    AUDIT_TAG, AuditKey, DECISION_TAG, Digest, JOURNAL_TAG, LEDGER_TAG, SPINE_TAG, tagged_hmac,
    tagged_sha256,
};

/// Audit row kind that seals a task journal's head.
pub const SEAL_KIND: &str = crate::row_kind::Kind::JournalSeal.as_str();

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

fn quoted(text: &str) -> Result<Vec<u8>, EncodeError> {
    to_canonical_vec(text)
}

fn quoted_hex(digest: Digest) -> Vec<u8> {
    format!("\"{}\"", digest.to_hex()).into_bytes()
}

/// Hashes the row without its digest member, then writes the row with it.
/// `members` are in JCS order and `digest_key` goes at `digest_index`.
fn seal_row(
    members: &mut Vec<(&str, Vec<u8>)>,
    digest_key: &'static str,
    digest_index: usize,
    digest: impl FnOnce(&[u8]) -> Digest,
    seq: u64,
) -> EncodedRow {
    let view = |members: &[(&str, Vec<u8>)]| -> Vec<u8> {
        let borrowed: Vec<(&str, &[u8])> = members
            .iter()
            .map(|(key, value)| (*key, value.as_slice()))
            .collect();
        assemble_object(&borrowed)
    };
    let digest = digest(&view(members));
    members.insert(digest_index, (digest_key, quoted_hex(digest)));
    let mut line = view(members);
    line.push(b'\n');
    EncodedRow {
        line,
        head: Head { seq, digest },
    }
}

/// A row member: its key and its value's canonical bytes.
type Member = (&'static str, Vec<u8>);

/// The members every event row (journal, ledger, audit) starts with, in JCS
/// order: `at, body, kind, <prev_key>, seq`; the caller adds the rest.
fn event_members(
    previous: Option<Head>,
    prev_key: &'static str,
    kind: &str,
    at: &str,
    body: &Value,
) -> Result<(u64, Vec<Member>), EncodeError> {
    let (seq, prev) = next_link(previous);
    check_safe(seq, "$.seq")?;
    Ok((
        seq,
        vec![
            ("at", quoted(at)?),
            ("body", value_to_canonical_vec(body, "$.body")?),
            ("kind", quoted(kind)?),
            (prev_key, quoted_hex(prev)),
            ("seq", seq.to_string().into_bytes()),
        ],
    ))
}

fn version_member() -> Member {
    ("v", FORMAT_VERSION.to_string().into_bytes())
}

/// Encodes the next task journal row after `previous`.
pub fn encode_journal_row(
    previous: Option<Head>,
    task_id: &TaskId,
    kind: &str,
    at: &str,
    body: &Value,
) -> Result<EncodedRow, EncodeError> {
    let (seq, mut members) = event_members(previous, "prev_hash", kind, at, body)?;
    members.push(("task_id", quoted(task_id.as_str())?));
    members.push(version_member());
    Ok(seal_row(
        &mut members,
        "event_hash",
        2,
        |bytes| tagged_sha256(JOURNAL_TAG, &[bytes]),
        seq,
    ))
}

/// Encodes the next ledger row (a task state transition) after `previous`.
pub fn encode_ledger_row(
    previous: Option<Head>,
    kind: &str,
    at: &str,
    body: &Value,
) -> Result<EncodedRow, EncodeError> {
    let (seq, mut members) = event_members(previous, "prev_hash", kind, at, body)?;
    members.push(version_member());
    Ok(seal_row(
        &mut members,
        "event_hash",
        2,
        |bytes| tagged_sha256(LEDGER_TAG, &[bytes]),
        seq,
    ))
}

/// Encodes the next audit row after `previous`, keyed by `key`.
pub fn encode_audit_row(
    previous: Option<Head>,
    key: &AuditKey,
    kind: &str,
    at: &str,
    body: &Value,
) -> Result<EncodedRow, EncodeError> {
    let (seq, mut members) = event_members(previous, "prev_mac", kind, at, body)?;
    members.push(version_member());
    Ok(seal_row(
        &mut members,
        "mac",
        3,
        |bytes| tagged_hmac(key, AUDIT_TAG, &[bytes]),
        seq,
    ))
}

/// The hash that names a decision: SHA-256 over its canonical bytes.
pub fn decision_hash(decision: &Value) -> Result<Digest, EncodeError> {
    Ok(tagged_sha256(
        DECISION_TAG,
        &[&value_to_canonical_vec(decision, "$")?],
    ))
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
    let decision_bytes = value_to_canonical_vec(decision, "$.decision")?;
    let decision_hash = tagged_sha256(DECISION_TAG, &[&decision_bytes]);
    let mut members = vec![
        ("decision", decision_bytes),
        ("decision_hash", quoted_hex(decision_hash)),
        ("kind", quoted(kind)?),
        ("prev_hash", quoted_hex(prev_hash)),
        ("sealed_at", sealed_at.to_string().into_bytes()),
        ("seq", seq.to_string().into_bytes()),
        ("v", FORMAT_VERSION.to_string().into_bytes()),
    ];
    check_safe(seq, "$.seq")?;
    check_safe(sealed_at, "$.sealed_at")?;
    Ok(seal_row(
        &mut members,
        "entry_hash",
        2,
        |bytes| tagged_sha256(SPINE_TAG, &[bytes]),
        seq,
    ))
}

fn check_safe(value: u64, path: &str) -> Result<(), EncodeError> {
    if value <= MAX_SAFE_INTEGER {
        Ok(())
    } else {
        Err(EncodeError::UnsafeInteger {
            path: path.to_owned(),
            value: value.to_string(),
        })
    }
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

/// A ledger row as read back for display.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerRow {
    pub v: u64,
    pub seq: u64,
    pub kind: String,
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
    /// The plan the task belongs to. Seals written before task ids were per
    /// plan (layout 1) have none; a migration row says which plan they meant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<crate::PlanId>,
    pub task_id: TaskId,
    pub seq: u64,
    pub event_hash: Digest,
}

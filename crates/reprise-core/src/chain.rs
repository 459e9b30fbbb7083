//! The three chained line formats and the check of one stored line.
//!
//! A journal, a spine and the audit chain are files of canonical JSON lines in
//! which each row carries its sequence number, the digest of the row before it
//! and its own digest. They differ in their schema, their domain tag, and in
//! whether the digest is a plain hash or an HMAC. `check_line` is the per-row
//! half of verification: it needs only the line (and the audit key), so rows
//! can be checked in parallel; the linking half is in `verify`.

use std::borrow::Cow;
use std::ops::Range;

use crate::digest::{
    AUDIT_TAG, AuditKey, DECISION_TAG, Digest, JOURNAL_TAG, LEDGER_TAG, SPINE_TAG, tagged_hmac,
    tagged_sha256,
};
use crate::scan::{Member, ValueKind, same_text, scan_members};

/// The current version of every chained format.
pub const FORMAT_VERSION: u64 = 1;

/// Which chained format a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainFormat {
    /// `tasks/<task>/journal.jsonl`: `{at, body, event_hash, kind, prev_hash, seq, task_id, v}`.
    Journal,
    /// `tasks/<task>/spine.jsonl`: `{decision, decision_hash, entry_hash, kind, prev_hash, sealed_at, seq, v}`.
    Spine,
    /// `audit/audit.jsonl`: `{at, body, kind, mac, prev_mac, seq, v}`.
    Audit,
    /// `ledger.jsonl`: task state transitions, `{at, body, event_hash, kind, prev_hash, seq, v}`.
    Ledger,
}

#[derive(Clone, Copy)]
enum FieldType {
    Text,
    Digest,
    Unsigned,
    Any,
}

impl ChainFormat {
    /// The member that holds the row's own digest.
    pub fn digest_key(self) -> &'static str {
        match self {
            Self::Journal | Self::Ledger => "event_hash",
            Self::Spine => "entry_hash",
            Self::Audit => "mac",
        }
    }

    /// The member that holds the previous row's digest.
    pub fn prev_key(self) -> &'static str {
        match self {
            Self::Journal | Self::Spine | Self::Ledger => "prev_hash",
            Self::Audit => "prev_mac",
        }
    }

    fn schema(self) -> &'static [(&'static str, FieldType)] {
        use FieldType::*;
        match self {
            Self::Journal => &[
                ("at", Text),
                ("body", Any),
                ("event_hash", Digest),
                ("kind", Text),
                ("prev_hash", Digest),
                ("seq", Unsigned),
                ("task_id", Text),
                ("v", Unsigned),
            ],
            Self::Ledger => &[
                ("at", Text),
                ("body", Any),
                ("event_hash", Digest),
                ("kind", Text),
                ("prev_hash", Digest),
                ("seq", Unsigned),
                ("v", Unsigned),
            ],
            Self::Spine => &[
                ("decision", Any),
                ("decision_hash", Digest),
                ("entry_hash", Digest),
                ("kind", Text),
                ("prev_hash", Digest),
                ("sealed_at", Unsigned),
                ("seq", Unsigned),
                ("v", Unsigned),
            ],
            Self::Audit => &[
                ("at", Text),
                ("body", Any),
                ("kind", Text),
                ("mac", Digest),
                ("prev_mac", Digest),
                ("seq", Unsigned),
                ("v", Unsigned),
            ],
        }
    }

    /// The stable name of a verification failure in this format.
    pub fn reason_name(self, reason: Reason) -> &'static str {
        match (reason, self) {
            (Reason::MalformedRow, _) => "malformed_row",
            (Reason::NotCanonical, _) => "not_canonical",
            (Reason::UnsupportedVersion, _) => "unsupported_version",
            (Reason::SeqGap, _) => "seq_gap",
            (Reason::PrevLinkBreak, Self::Audit) => "prev_mac_break",
            (Reason::PrevLinkBreak, _) => "prev_hash_break",
            (Reason::DigestMismatch, Self::Journal | Self::Ledger) => "event_hash_mismatch",
            (Reason::DigestMismatch, Self::Spine) => "entry_hash_mismatch",
            (Reason::DigestMismatch, Self::Audit) => "mac_mismatch",
            (Reason::DecisionHashMismatch, _) => "decision_hash_mismatch",
            (Reason::ForeignTask, _) => "foreign_task",
            (Reason::TornTail, _) => "torn_tail",
        }
    }
}

/// Where the members `check_line` reads sit in a format's schema order:
/// looked up once per format here, not by name for every row.
#[derive(Debug, Clone, Copy)]
struct Slots {
    digest: usize,
    prev: usize,
    seq: usize,
    kind: usize,
    /// `body`, or a spine's `decision`.
    payload: usize,
    task_id: Option<usize>,
    decision_hash: Option<usize>,
}

impl ChainFormat {
    fn slots(self) -> Slots {
        match self {
            Self::Journal => Slots {
                digest: 2,
                prev: 4,
                seq: 5,
                kind: 3,
                payload: 1,
                task_id: Some(6),
                decision_hash: None,
            },
            Self::Ledger => Slots {
                digest: 2,
                prev: 4,
                seq: 5,
                kind: 3,
                payload: 1,
                task_id: None,
                decision_hash: None,
            },
            Self::Spine => Slots {
                digest: 2,
                prev: 4,
                seq: 6,
                kind: 3,
                payload: 0,
                task_id: None,
                decision_hash: Some(1),
            },
            Self::Audit => Slots {
                digest: 3,
                prev: 4,
                seq: 5,
                kind: 2,
                payload: 1,
                task_id: None,
                decision_hash: None,
            },
        }
    }
}

/// The most members a schema has.
const MAX_MEMBERS: usize = 8;

/// Why a row, or the chain at a row, does not verify. Checked in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Not a whole JSON object, or a member is missing, unknown, repeated or
    /// of the wrong type.
    MalformedRow,
    /// Well-formed, but not its own canonical encoding.
    NotCanonical,
    /// A format version this build does not read.
    UnsupportedVersion,
    /// `seq` is not one more than the previous row's.
    SeqGap,
    /// The previous-digest member does not name the previous row.
    PrevLinkBreak,
    /// The row's own digest (hash or MAC) does not match its bytes.
    DigestMismatch,
    /// A spine row's `decision_hash` does not match its decision.
    DecisionHashMismatch,
    /// A journal row names another task.
    ForeignTask,
    /// The final line was cut short by a crash (not a chain failure).
    TornTail,
}

/// What the per-row check learned from one line.
#[derive(Debug, Clone)]
pub enum LineCheck<'a> {
    /// Not one whole JSON object: the tolerant reader discards it.
    NotObject,
    /// A JSON object that breaks the format before any linking is checked.
    Fault(Reason),
    /// A well-formed, canonical row of the current version.
    Row(CheckedRow<'a>),
}

/// The linking facts of one row, with the results of its self-checks.
#[derive(Debug, Clone)]
pub struct CheckedRow<'a> {
    pub seq: u64,
    pub prev: Digest,
    pub digest: Digest,
    /// The stored digest matches the one computed over the stored bytes.
    pub digest_ok: bool,
    /// For spine rows, the stored `decision_hash` matches the decision.
    pub decision_ok: bool,
    pub kind: Cow<'a, str>,
    pub task_id: Option<Cow<'a, str>>,
    /// Span of `body` (journal, audit) or `decision` (spine) in the line.
    pub payload: Range<usize>,
}

/// Checks one stored line (without its newline) of `format`.
///
/// The digest is recomputed over the stored bytes with the digest member cut
/// out: because the line is canonical JCS, those bytes are exactly the JCS of
/// the row without its digest, so nothing is re-encoded.
pub fn check_line<'a>(
    format: ChainFormat,
    key: Option<&AuditKey>,
    line: &'a [u8],
) -> LineCheck<'a> {
    let mut fields = SchemaMatch::new(format);
    let Some(canonical) = scan_members(line, &mut |member| fields.place(member)) else {
        return LineCheck::NotObject;
    };
    let Some(fields) = fields.finish() else {
        return LineCheck::Fault(Reason::MalformedRow);
    };
    let slots = format.slots();
    let member = |slot: usize| {
        fields[slot]
            .as_ref()
            .expect("the schema matched every slot")
    };
    // The schema checked each digest's length; its digits are read here,
    // once, and a bad one makes the row malformed as a missing one does.
    let digest_member = member(slots.digest);
    let decision_hash = match format {
        ChainFormat::Spine => digest_of(member(slots.decision_hash.expect("a spine row has one"))),
        ChainFormat::Journal | ChainFormat::Audit | ChainFormat::Ledger => Some(Digest::ZERO),
    };
    let (Some(digest), Some(prev), Some(decision_hash)) = (
        digest_of(digest_member),
        digest_of(member(slots.prev)),
        decision_hash,
    ) else {
        return LineCheck::Fault(Reason::MalformedRow);
    };
    if !canonical {
        return LineCheck::Fault(Reason::NotCanonical);
    }
    let version = unsigned(member(format.schema().len() - 1));
    if version != FORMAT_VERSION {
        return LineCheck::Fault(Reason::UnsupportedVersion);
    }
    // The digest member is never first, so a comma precedes its key.
    let cut_start = digest_member.key_start - 1;
    let cut_end = digest_member.value.end;
    let parts: [&[u8]; 2] = [&line[..cut_start], &line[cut_end..]];
    let computed = match format {
        ChainFormat::Journal => tagged_sha256(JOURNAL_TAG, &parts),
        ChainFormat::Ledger => tagged_sha256(LEDGER_TAG, &parts),
        ChainFormat::Spine => tagged_sha256(SPINE_TAG, &parts),
        ChainFormat::Audit => match key {
            Some(key) => tagged_hmac(key, AUDIT_TAG, &parts),
            None => Digest::ZERO,
        },
    };
    let digest_ok = key.is_some() || format != ChainFormat::Audit;
    let payload = match format {
        ChainFormat::Spine => member(slots.payload).value.clone(),
        ChainFormat::Journal | ChainFormat::Audit | ChainFormat::Ledger => {
            member(slots.payload).value.clone()
        }
    };
    let decision_ok = match format {
        ChainFormat::Spine => {
            tagged_sha256(DECISION_TAG, &[&line[payload.clone()]]) == decision_hash
        }
        ChainFormat::Journal | ChainFormat::Audit | ChainFormat::Ledger => true,
    };
    LineCheck::Row(CheckedRow {
        seq: unsigned(member(slots.seq)),
        prev,
        digest,
        digest_ok: digest_ok && computed == digest,
        decision_ok,
        kind: text(member(slots.kind)),
        task_id: match format {
            ChainFormat::Journal => {
                Some(text(member(slots.task_id.expect("a journal row has one"))))
            }
            ChainFormat::Spine | ChainFormat::Audit | ChainFormat::Ledger => None,
        },
        payload,
    })
}

/// The members of a row placed by the schema as the scanner reads them.
/// Order in the line is not checked here: a misordered line is well-formed
/// but not canonical.
struct SchemaMatch<'a> {
    schema: &'static [(&'static str, FieldType)],
    slots: [Option<Member<'a>>; MAX_MEMBERS],
    /// Members read, placed or not.
    count: usize,
    /// A member was unknown, repeated or of the wrong type.
    misfit: bool,
}

impl<'a> SchemaMatch<'a> {
    fn new(format: ChainFormat) -> Self {
        Self {
            schema: format.schema(),
            slots: [const { None }; MAX_MEMBERS],
            count: 0,
            misfit: false,
        }
    }

    fn place(&mut self, member: Member<'a>) {
        let position = self.count;
        self.count += 1;
        if self.misfit {
            return;
        }
        let schema = self.schema;
        // A canonical line holds the members in schema order: try that first.
        let index = if schema
            .get(position)
            .is_some_and(|(name, _)| same_text(name, &member.key))
        {
            position
        } else if let Some(index) = schema
            .iter()
            .position(|(name, _)| same_text(name, &member.key))
        {
            index
        } else {
            self.misfit = true;
            return;
        };
        let fits = match (schema[index].1, &member.kind) {
            (FieldType::Any, _) => true,
            (FieldType::Text, ValueKind::Str(_)) => true,
            (FieldType::Digest, ValueKind::Str(text)) => text.len() == 64,
            (FieldType::Unsigned, ValueKind::Unsigned(_)) => true,
            _ => false,
        };
        if !fits || self.slots[index].is_some() {
            self.misfit = true;
            return;
        }
        self.slots[index] = Some(member);
    }

    /// The members by schema slot, or `None` when one is missing, unknown,
    /// repeated or of the wrong type.
    fn finish(self) -> Option<[Option<Member<'a>>; MAX_MEMBERS]> {
        // Every member was placed once and there are as many as the schema
        // has: each of its slots is filled.
        (!self.misfit && self.count == self.schema.len()).then_some(self.slots)
    }
}

fn unsigned(member: &Member<'_>) -> u64 {
    match member.kind {
        ValueKind::Unsigned(value) => value,
        _ => unreachable!("schema checked the type"),
    }
}

fn text<'a>(member: &Member<'a>) -> Cow<'a, str> {
    match &member.kind {
        ValueKind::Str(text) => text.clone(),
        _ => unreachable!("schema checked the type"),
    }
}

/// The digest a member's hex spells, `None` for a bad digit.
fn digest_of(member: &Member<'_>) -> Option<Digest> {
    match &member.kind {
        ValueKind::Str(text) => Digest::from_hex(text.as_bytes()),
        _ => unreachable!("schema checked the type"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each slot names the member its name says, in every format, and no
    /// schema outgrows the slots' array.
    #[test]
    fn the_slots_are_where_the_schema_puts_their_members() {
        for format in [
            ChainFormat::Journal,
            ChainFormat::Ledger,
            ChainFormat::Spine,
            ChainFormat::Audit,
        ] {
            let schema = format.schema();
            assert!(schema.len() <= MAX_MEMBERS);
            let name = |slot: usize| schema[slot].0;
            let slots = format.slots();
            assert_eq!(name(slots.digest), format.digest_key());
            assert_eq!(name(slots.prev), format.prev_key());
            assert_eq!(name(slots.seq), "seq");
            assert_eq!(name(slots.kind), "kind");
            assert_eq!(schema[schema.len() - 1].0, "v");
            let payload = if format == ChainFormat::Spine {
                "decision"
            } else {
                "body"
            };
            assert_eq!(name(slots.payload), payload);
            assert_eq!(
                slots.task_id.map(name),
                (format == ChainFormat::Journal).then_some("task_id")
            );
            assert_eq!(
                slots.decision_hash.map(name),
                (format == ChainFormat::Spine).then_some("decision_hash")
            );
        }
    }
}

//! The witness: a small record kept beside the audit key, outside the state
//! directory, that remembers how far the audit chain (and the sealed ledger)
//! had got.
//!
//! The audit chain's MACs catch any change to a row, but not rows removed
//! from the end, a whole file deleted, or an older copy put back: each of
//! those leaves a chain that verifies. The witness holds the state
//! directory's id (minted by `init` and bound into the `state.init` row) and
//! the chain's head, MAC'd with the key, so a chain shorter than its witness,
//! a different history at the witnessed row, or another project's state
//! directory is a failure with its own reason. This module encodes, checks
//! and compares; the store reads and writes the file.
//!
//! What it does not cover: someone holding the key (they can re-sign
//! anything), or someone who can write the key's directory and puts back an
//! older witness together with an older chain.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::canonical::{EncodeError, to_canonical_vec, value_to_canonical_vec};
use crate::digest::{AuditKey, Digest, WITNESS_TAG, tagged_hmac};
use crate::record::Head;

/// Audit row kind that opens every chain, binding the state directory's id.
pub const STATE_INIT_KIND: &str = crate::row_kind::Kind::StateInit.as_str();
/// Audit row kind of a witness adopted for a chain that had none (a state
/// directory made before witnesses, or moved): it carries the state id when
/// the chain's first row has none, and marks where the witness starts
/// vouching.
pub const STATE_ADOPT_KIND: &str = crate::row_kind::Kind::StateAdopt.as_str();
/// Audit row kind that seals the ledger's head.
pub const LEDGER_SEAL_KIND: &str = crate::row_kind::Kind::LedgerSeal.as_str();
/// Version of the witness file format.
pub const WITNESS_VERSION: u64 = 1;

/// What the witness remembers of one state directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Witness {
    pub v: u64,
    /// The id `init` minted, as the `state.init` row holds it.
    pub state_id: String,
    /// The state directory's path when the witness was written (for messages).
    pub state_dir: String,
    /// The audit chain's head after the last append.
    pub audit: Head,
    /// The ledger's head as last sealed into the audit chain.
    pub ledger: Option<Head>,
}

/// The body of a `state.init` audit row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateInitBody {
    pub layout: u64,
    pub state_id: String,
}

/// The body of a `ledger.seal` audit row: the ledger's verified head.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerSealBody {
    pub seq: u64,
    pub event_hash: Digest,
}

/// Why a witness file could not be read as one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WitnessFault {
    #[error("not a witness record")]
    Malformed,
    #[error("witness version {0} is newer than this reprise reads")]
    UnsupportedVersion(u64),
    #[error("its mac does not verify with this key")]
    MacMismatch,
}

/// The witness's bytes: its JCS form with `mac` over the rest, and a newline.
pub fn encode_witness(key: &AuditKey, witness: &Witness) -> Result<Vec<u8>, EncodeError> {
    let unsigned = to_canonical_vec(witness)?;
    let mac = tagged_hmac(key, WITNESS_TAG, &[&unsigned]);
    let mut value = serde_json::to_value(witness).expect("a witness is a JSON object");
    value["mac"] = Value::String(mac.to_hex());
    let mut bytes = value_to_canonical_vec(&value, "$")?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Reads witness bytes back, checking the version and the mac.
pub fn decode_witness(key: &AuditKey, bytes: &[u8]) -> Result<Witness, WitnessFault> {
    let mut value: Value = serde_json::from_slice(bytes).map_err(|_| WitnessFault::Malformed)?;
    let object = value.as_object_mut().ok_or(WitnessFault::Malformed)?;
    let mac = object
        .remove("mac")
        .and_then(|mac| {
            mac.as_str()
                .and_then(|hex| Digest::from_hex(hex.as_bytes()))
        })
        .ok_or(WitnessFault::Malformed)?;
    if let Some(version) = object.get("v").and_then(Value::as_u64)
        && version != WITNESS_VERSION
    {
        return Err(WitnessFault::UnsupportedVersion(version));
    }
    let witness: Witness = serde_json::from_value(value).map_err(|_| WitnessFault::Malformed)?;
    let unsigned = to_canonical_vec(&witness).map_err(|_| WitnessFault::Malformed)?;
    if tagged_hmac(key, WITNESS_TAG, &[&unsigned]) != mac {
        return Err(WitnessFault::MacMismatch);
    }
    Ok(witness)
}

/// Why an audit chain does not agree with its witness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WitnessReason {
    /// The chain is gone or empty while the witness says it had rows.
    AuditMissing,
    /// The chain ends before the witnessed head: rows were cut from its end,
    /// or an older copy was put back (the witness cannot tell the two apart).
    AuditTruncated,
    /// The chain holds another row where the witnessed head was: a different
    /// history (an older copy that went on, or a chain swapped in).
    AuditRolledBack,
    /// The chain's `state.init` names another state directory.
    ForeignStateDir,
    /// The chain has rows but there is no witness for it.
    WitnessMissing,
    /// The witness does not verify with the key (the wrong key, or tampering).
    WitnessInvalid,
}

impl WitnessReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AuditMissing => "audit_missing",
            Self::AuditTruncated => "audit_truncated",
            Self::AuditRolledBack => "audit_rolled_back",
            Self::ForeignStateDir => "foreign_state_dir",
            Self::WitnessMissing => "witness_missing",
            Self::WitnessInvalid => "witness_invalid",
        }
    }

    /// One sentence for a person.
    pub fn explain(self) -> &'static str {
        match self {
            Self::AuditMissing => {
                "the audit chain is missing or empty, but its witness says it had rows"
            }
            Self::AuditTruncated => {
                "the audit chain ends before the head its witness recorded: rows were cut, or an older copy was restored"
            }
            Self::AuditRolledBack => {
                "the audit chain holds another row where its witness recorded the head: an older or different chain"
            }
            Self::ForeignStateDir => {
                "the audit chain belongs to another state directory (its state.init id differs from the witness)"
            }
            Self::WitnessMissing => {
                "the audit chain has rows but its witness beside the audit key is missing (a directory from before witnesses, or moved: `reprise init` adopts it)"
            }
            Self::WitnessInvalid => {
                "the witness beside the audit key does not verify with this key"
            }
        }
    }
}

/// What was read of the audit chain, for the comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainFacts {
    /// Rows of the verified prefix.
    pub rows: u64,
    /// The verified prefix's last row.
    pub head: Option<Head>,
    /// The id bound in row 0, when row 0 is a `state.init` that verified.
    pub state_id: Option<String>,
    /// The digest of the verified row at the witnessed seq, if the prefix holds it.
    pub at_witnessed_seq: Option<Digest>,
}

/// Compares the chain with its witness. `None` means they agree (a chain
/// longer than its witness agrees: a crash can land between an append and
/// the witness's replacement, and nobody without the key can add rows).
pub fn compare(witness: Option<&Witness>, facts: &ChainFacts) -> Option<WitnessReason> {
    let Some(witness) = witness else {
        return Some(if facts.rows > 0 {
            WitnessReason::WitnessMissing
        } else {
            WitnessReason::AuditMissing
        });
    };
    if facts.rows == 0 {
        return Some(WitnessReason::AuditMissing);
    }
    if facts.state_id.as_deref() != Some(witness.state_id.as_str()) {
        return Some(WitnessReason::ForeignStateDir);
    }
    let head_seq = facts.head.map_or(0, |head| head.seq);
    if head_seq < witness.audit.seq {
        return Some(WitnessReason::AuditTruncated);
    }
    if facts.at_witnessed_seq != Some(witness.audit.digest) {
        return Some(WitnessReason::AuditRolledBack);
    }
    None
}

/// Whether an append may build on `previous` given the witness: the chain
/// must still hold the witnessed head (or be past it).
pub fn may_append(witness: &Witness, previous: Option<Head>) -> Result<(), WitnessReason> {
    match previous {
        None => Err(WitnessReason::AuditMissing),
        Some(head) if head.seq < witness.audit.seq => Err(WitnessReason::AuditTruncated),
        Some(head) if head.seq == witness.audit.seq && head.digest != witness.audit.digest => {
            Err(WitnessReason::AuditRolledBack)
        }
        Some(_) => Ok(()),
    }
}

/// What a crash cut from a state directory's creation, when its files show
/// one: the steps after the layout that an older reprise took in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unfinished {
    /// The audit chain has no row: `state.init` and its witness are to be
    /// written. `stale_witness`: a witness is there, an earlier state
    /// directory's at the same path (nothing in this one can match it), to
    /// be set aside first.
    NoFirstRow { stale_witness: bool },
    /// The chain holds its `state.init` row alone and there is no witness.
    NoWitness,
}

/// Whether a state directory is one whose creation a crash cut, and what is
/// left to do. Only a directory that holds no records (`holds_records`:
/// ledger rows, journals, runs, worktrees, snapshots, approvals) and a chain
/// that verifies in full (`chain_clean`) qualify: an emptied chain beside
/// records is tampering or loss, never an unfinished creation, and stays a
/// failed check. A witness that does not verify (`witness_invalid`) is
/// never set aside here.
#[must_use]
pub fn unfinished_creation(
    witness: Option<&Witness>,
    witness_invalid: bool,
    facts: &ChainFacts,
    chain_clean: bool,
    holds_records: bool,
) -> Option<Unfinished> {
    if holds_records || !chain_clean || witness_invalid {
        return None;
    }
    match (facts.rows, witness) {
        (0, witness) => Some(Unfinished::NoFirstRow {
            stale_witness: witness.is_some(),
        }),
        (1, None) if facts.state_id.is_some() => Some(Unfinished::NoWitness),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::tagged_sha256;

    fn head(seq: u64, text: &str) -> Head {
        Head {
            seq,
            digest: tagged_sha256(b"t\n", &[text.as_bytes()]),
        }
    }

    fn witness() -> Witness {
        Witness {
            v: 1,
            state_id: "S-1".into(),
            state_dir: "/p/.reprise".into(),
            audit: head(4, "four"),
            ledger: None,
        }
    }

    fn facts(rows: u64, head_at: Head, state_id: &str, at: Option<Digest>) -> ChainFacts {
        ChainFacts {
            rows,
            head: Some(head_at),
            state_id: Some(state_id.into()),
            at_witnessed_seq: at,
        }
    }

    #[test]
    fn witness_round_trips_and_refuses_another_key_or_an_edit() {
        let key = AuditKey([3; 32]);
        let bytes = encode_witness(&key, &witness()).unwrap();
        assert_eq!(decode_witness(&key, &bytes), Ok(witness()));
        assert_eq!(
            decode_witness(&AuditKey([4; 32]), &bytes),
            Err(WitnessFault::MacMismatch)
        );
        let edited = String::from_utf8(bytes)
            .unwrap()
            .replace("\"seq\":4", "\"seq\":9");
        assert_eq!(
            decode_witness(&key, edited.as_bytes()),
            Err(WitnessFault::MacMismatch)
        );
        assert_eq!(decode_witness(&key, b"[1]"), Err(WitnessFault::Malformed));
    }

    #[test]
    fn each_disagreement_has_its_reason() {
        let w = witness();
        let good = facts(5, head(4, "four"), "S-1", Some(head(4, "four").digest));
        assert_eq!(compare(Some(&w), &good), None);
        let longer = facts(7, head(6, "six"), "S-1", Some(head(4, "four").digest));
        assert_eq!(compare(Some(&w), &longer), None);
        let cut = facts(4, head(3, "three"), "S-1", None);
        assert_eq!(compare(Some(&w), &cut), Some(WitnessReason::AuditTruncated));
        let other = facts(5, head(4, "other"), "S-1", Some(head(4, "other").digest));
        assert_eq!(
            compare(Some(&w), &other),
            Some(WitnessReason::AuditRolledBack)
        );
        let foreign = facts(5, head(4, "four"), "S-2", Some(head(4, "four").digest));
        assert_eq!(
            compare(Some(&w), &foreign),
            Some(WitnessReason::ForeignStateDir)
        );
        let empty = ChainFacts {
            rows: 0,
            head: None,
            state_id: None,
            at_witnessed_seq: None,
        };
        assert_eq!(compare(Some(&w), &empty), Some(WitnessReason::AuditMissing));
        assert_eq!(compare(None, &good), Some(WitnessReason::WitnessMissing));
    }

    #[test]
    fn only_an_empty_directory_is_an_unfinished_creation() {
        let empty = ChainFacts {
            rows: 0,
            head: None,
            state_id: None,
            at_witnessed_seq: None,
        };
        let first = facts(1, head(0, "init"), "S-1", None);
        let w = witness();
        assert_eq!(
            unfinished_creation(None, false, &empty, true, false),
            Some(Unfinished::NoFirstRow {
                stale_witness: false
            })
        );
        assert_eq!(
            unfinished_creation(Some(&w), false, &empty, true, false),
            Some(Unfinished::NoFirstRow {
                stale_witness: true
            })
        );
        assert_eq!(
            unfinished_creation(None, false, &first, true, false),
            Some(Unfinished::NoWitness)
        );
        // Records beside the chain, a torn chain, an invalid witness, a
        // witnessed first row, a longer chain: not a creation's leftovers.
        assert_eq!(
            unfinished_creation(Some(&w), false, &empty, true, true),
            None
        );
        assert_eq!(unfinished_creation(None, false, &empty, false, false), None);
        assert_eq!(unfinished_creation(None, true, &empty, true, false), None);
        assert_eq!(
            unfinished_creation(Some(&w), false, &first, true, false),
            None
        );
        let two = facts(2, head(1, "two"), "S-1", None);
        assert_eq!(unfinished_creation(None, false, &two, true, false), None);
    }

    #[test]
    fn appends_must_build_on_the_witnessed_head_or_past_it() {
        let w = witness();
        assert_eq!(may_append(&w, Some(head(4, "four"))), Ok(()));
        assert_eq!(may_append(&w, Some(head(5, "five"))), Ok(()));
        assert_eq!(
            may_append(&w, Some(head(3, "three"))),
            Err(WitnessReason::AuditTruncated)
        );
        assert_eq!(
            may_append(&w, Some(head(4, "x"))),
            Err(WitnessReason::AuditRolledBack)
        );
        assert_eq!(may_append(&w, None), Err(WitnessReason::AuditMissing));
    }
}

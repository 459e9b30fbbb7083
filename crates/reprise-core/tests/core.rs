//! Record formats pinned by golden bytes, and the verifier checked against a
//! slow reference (parse, re-encode, compare) over every single-byte change.

use std::collections::BTreeMap;

use proptest::prelude::*;
use reprise_core::TaskId;
use reprise_core::canonical::to_canonical_vec;
use reprise_core::chain::{ChainFormat, Reason};
use reprise_core::digest::{
    AUDIT_TAG, AuditKey, Digest, JOURNAL_TAG, LEDGER_TAG, SPINE_TAG, tagged_hmac, tagged_sha256,
};
use reprise_core::record::{
    AuditRow, EncodedRow, Head, JournalRow, LedgerRow, SpineRow, encode_audit_row,
    encode_journal_row, encode_ledger_row, encode_spine_row,
};
use reprise_core::verify::{ChainReport, Fault, Identity, identity, verify_bytes};
use serde_json::{Value, json};

const AT: &str = "2026-01-01T00:00:00Z";
const KEY: AuditKey = AuditKey([0x11; 32]);

fn task() -> TaskId {
    TaskId::parse("add-greeting").unwrap()
}

// ---- golden bytes --------------------------------------------------------
// The expected values were computed by an independent implementation (Python's
// json with sorted keys, hashlib and hmac). A change of format breaks these.

#[test]
fn journal_rows_have_pinned_bytes_and_hashes() {
    let first = encode_journal_row(
        None,
        &task(),
        "task.created",
        AT,
        &json!({"prompt": "Create greeting.txt", "n": 3}),
    )
    .unwrap();
    assert_eq!(
        String::from_utf8(first.line.clone()).unwrap(),
        concat!(
            r#"{"at":"2026-01-01T00:00:00Z","body":{"n":3,"prompt":"Create greeting.txt"},"#,
            r#""event_hash":"36b4035a94c186d44f07150613b1f3964b6354fda55f30d5ef23e2729dea7c0f","#,
            r#""kind":"task.created","prev_hash":"0000000000000000000000000000000000000000000000000000000000000000","#,
            r#""seq":0,"task_id":"add-greeting","v":1}"#,
            "\n"
        )
    );
    let second = encode_journal_row(
        Some(first.head),
        &task(),
        "task.checkpoint",
        AT,
        &json!({"session_id": "s-1"}),
    )
    .unwrap();
    assert_eq!(
        second.head,
        Head {
            seq: 1,
            digest: hex_digest("e0b1b06a0e2ef891fa4ebe5bf9b33376d43b32656ee98486fc61c4f7ee6ed741")
        }
    );
    assert!(
        second
            .line
            .starts_with(br#"{"at":"2026-01-01T00:00:00Z","body":{"session_id":"s-1"},"#)
    );
}

#[test]
fn audit_rows_have_pinned_bytes_and_macs() {
    let seal = encode_audit_row(
        None,
        &KEY,
        "journal.seal",
        AT,
        &json!({"task_id": "add-greeting", "seq": 1,
                "event_hash": "e0b1b06a0e2ef891fa4ebe5bf9b33376d43b32656ee98486fc61c4f7ee6ed741"}),
    )
    .unwrap();
    assert_eq!(
        String::from_utf8(seal.line).unwrap(),
        concat!(
            r#"{"at":"2026-01-01T00:00:00Z","body":{"event_hash":"e0b1b06a0e2ef891fa4ebe5bf9b33376d43b32656ee98486fc61c4f7ee6ed741","seq":1,"task_id":"add-greeting"},"#,
            r#""kind":"journal.seal","mac":"65260e98679dee2b07025c770169d3b2dc165ff72a98cf3a8ddafc0616d5af29","#,
            r#""prev_mac":"0000000000000000000000000000000000000000000000000000000000000000","seq":0,"v":1}"#,
            "\n"
        )
    );
}

#[test]
fn spine_rows_have_pinned_bytes_and_hashes() {
    let decision = json!({"task_id": "add-greeting", "requested_mode": "warm", "mode": "cold",
                          "downgrade_reason": "no_checkpoint"});
    let row = encode_spine_row(None, "retry.decision", &decision, 1).unwrap();
    assert_eq!(
        String::from_utf8(row.line.clone()).unwrap(),
        concat!(
            r#"{"decision":{"downgrade_reason":"no_checkpoint","mode":"cold","requested_mode":"warm","task_id":"add-greeting"},"#,
            r#""decision_hash":"d4be9c34a3f54e0bf918d40f6acd20c3eac3931fb87bfc8954f3efc34037568b","#,
            r#""entry_hash":"e74b241e09b38c50b85ccd93065a512e30300ce5903f027ef949506c8729da6f","#,
            r#""kind":"retry.decision","prev_hash":"0000000000000000000000000000000000000000000000000000000000000000","#,
            r#""sealed_at":1,"seq":0,"v":1}"#,
            "\n"
        )
    );
    // Identical decisions seal to identical bytes, whenever they are made.
    let again = encode_spine_row(None, "retry.decision", &decision, 1).unwrap();
    assert_eq!(row, again);
}

#[test]
fn ledger_rows_have_pinned_bytes_and_hashes() {
    let row = encode_ledger_row(
        None,
        "task.transition",
        AT,
        &json!({"task_id": "add-greeting", "from": "queued", "to": "running", "run_id": "R-1"}),
    )
    .unwrap();
    assert_eq!(
        String::from_utf8(row.line).unwrap(),
        concat!(
            r#"{"at":"2026-01-01T00:00:00Z","body":{"from":"queued","run_id":"R-1","task_id":"add-greeting","to":"running"},"#,
            r#""event_hash":"bb880efb218cd04f960d2a455d666ba5510bc673ed8642ae42148e97d9bfc0a7","#,
            r#""kind":"task.transition","prev_hash":"0000000000000000000000000000000000000000000000000000000000000000","#,
            r#""seq":0,"v":1}"#,
            "\n"
        )
    );
}

#[test]
fn state_init_ledger_seal_and_witness_have_pinned_bytes() {
    use reprise_core::witness::{Witness, decode_witness, encode_witness};
    let init = encode_audit_row(
        None,
        &KEY,
        "state.init",
        AT,
        &json!({"layout": 1, "state_id": "S-00112233445566778899aabbccddeeff"}),
    )
    .unwrap();
    assert_eq!(
        String::from_utf8(init.line.clone()).unwrap(),
        concat!(
            r#"{"at":"2026-01-01T00:00:00Z","body":{"layout":1,"state_id":"S-00112233445566778899aabbccddeeff"},"#,
            r#""kind":"state.init","mac":"649f32da8b8e82abeb1f7410a6066b8debe0b5b08d6e56bd5f2c7bf748907b44","#,
            r#""prev_mac":"0000000000000000000000000000000000000000000000000000000000000000","seq":0,"v":1}"#,
            "\n"
        )
    );
    let ledger_head =
        hex_digest("bb880efb218cd04f960d2a455d666ba5510bc673ed8642ae42148e97d9bfc0a7");
    let seal = encode_audit_row(
        Some(init.head),
        &KEY,
        "ledger.seal",
        AT,
        &json!({"seq": 3, "event_hash": ledger_head}),
    )
    .unwrap();
    assert_eq!(
        String::from_utf8(seal.line.clone()).unwrap(),
        concat!(
            r#"{"at":"2026-01-01T00:00:00Z","body":{"event_hash":"bb880efb218cd04f960d2a455d666ba5510bc673ed8642ae42148e97d9bfc0a7","seq":3},"#,
            r#""kind":"ledger.seal","mac":"aaf1674ae2156450f52ede5e637c634de95b9d93a582c96d3a97826b1f7af935","#,
            r#""prev_mac":"649f32da8b8e82abeb1f7410a6066b8debe0b5b08d6e56bd5f2c7bf748907b44","seq":1,"v":1}"#,
            "\n"
        )
    );
    let witness = Witness {
        v: 1,
        state_id: "S-00112233445566778899aabbccddeeff".into(),
        state_dir: "/p/.reprise".into(),
        audit: seal.head,
        ledger: Some(Head {
            seq: 3,
            digest: ledger_head,
        }),
    };
    let bytes = encode_witness(&KEY, &witness).unwrap();
    assert_eq!(
        String::from_utf8(bytes.clone()).unwrap(),
        concat!(
            r#"{"audit":{"digest":"aaf1674ae2156450f52ede5e637c634de95b9d93a582c96d3a97826b1f7af935","seq":1},"#,
            r#""ledger":{"digest":"bb880efb218cd04f960d2a455d666ba5510bc673ed8642ae42148e97d9bfc0a7","seq":3},"#,
            r#""mac":"44517488f3b854326c7bb9e042d35aed7f9a6daca30beb93d5c1fec8d657cbe1","#,
            r#""state_dir":"/p/.reprise","state_id":"S-00112233445566778899aabbccddeeff","v":1}"#,
            "\n"
        )
    );
    assert_eq!(decode_witness(&KEY, &bytes), Ok(witness));
}

#[test]
fn domain_tags_keep_kinds_apart() {
    let bytes = b"{}";
    let hashes = [
        tagged_sha256(JOURNAL_TAG, &[bytes]),
        tagged_sha256(SPINE_TAG, &[bytes]),
        tagged_hmac(&KEY, AUDIT_TAG, &[bytes]),
    ];
    assert_ne!(hashes[0], hashes[1]);
    assert_ne!(hashes[1], hashes[2]);
}

#[test]
fn records_refuse_floats_at_encode_time() {
    let err = encode_journal_row(None, &task(), "budget", AT, &json!({"usd": 0.5})).unwrap_err();
    assert_eq!(
        err.to_string(),
        "record holds a float at $.body.usd; store money as integer micro-dollars"
    );
}

fn hex_digest(text: &str) -> Digest {
    Digest::from_hex(text.as_bytes()).unwrap()
}

// ---- fixtures ------------------------------------------------------------

/// Bodies that exercise escapes, nesting, unicode and integer edges.
fn body(seq: u64) -> Value {
    match seq % 5 {
        0 => json!({"n": seq, "text": "plain"}),
        1 => {
            json!({"quote": "a \"b\" \\ c\n\t\u{1}", "nested": {"z": [1, -2, {"y": null}], "a": true}})
        }
        2 => json!({"unicode": "h\u{e9}llo \u{1f600} \u{e000}", "\u{e000}": 1, "\u{1f600}": 2}),
        3 => {
            json!({"big": 9007199254740991u64, "neg": -9007199254740991i64, "zero": 0, "list": []})
        }
        _ => {
            json!({"session_id": format!("s-{seq}"), "workspace_hash": "ab".repeat(32), "empty": {}})
        }
    }
}

fn journal(rows: u64) -> (Vec<u8>, Vec<EncodedRow>) {
    let mut bytes = Vec::new();
    let mut encoded = Vec::new();
    let mut head = None;
    for seq in 0..rows {
        let row = encode_journal_row(head, &task(), "step", AT, &body(seq)).unwrap();
        head = Some(row.head);
        bytes.extend_from_slice(&row.line);
        encoded.push(row);
    }
    (bytes, encoded)
}

fn audit(rows: u64) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut head = None;
    for seq in 0..rows {
        let row = encode_audit_row(head, &KEY, "note", AT, &body(seq)).unwrap();
        head = Some(row.head);
        bytes.extend_from_slice(&row.line);
    }
    bytes
}

fn ledger(rows: u64) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut head = None;
    for seq in 0..rows {
        let row = encode_ledger_row(head, "task.transition", AT, &body(seq)).unwrap();
        head = Some(row.head);
        bytes.extend_from_slice(&row.line);
    }
    bytes
}

fn spine(rows: u64) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut head = None;
    for seq in 0..rows {
        let row = encode_spine_row(head, "retry.decision", &body(seq), seq * 2).unwrap();
        head = Some(row.head);
        bytes.extend_from_slice(&row.line);
    }
    bytes
}

// ---- the slow reference ---------------------------------------------------

#[derive(Clone)]
enum SlowLine {
    NotObject,
    Fault(Reason),
    Row {
        seq: u64,
        prev: Digest,
        digest: Digest,
        digest_ok: bool,
        decision_ok: bool,
        task: Option<String>,
    },
}

/// Checks one line the obvious way: serde parse, re-encode, compare, hash.
fn slow_line(format: ChainFormat, line: &[u8]) -> SlowLine {
    let Ok(Value::Object(members)) = serde_json::from_slice::<Value>(line) else {
        return SlowLine::NotObject;
    };
    let typed = match format {
        ChainFormat::Journal => {
            serde_json::from_slice::<JournalRow>(line).map(|row| (row.v, row.seq))
        }
        ChainFormat::Audit => serde_json::from_slice::<AuditRow>(line).map(|row| (row.v, row.seq)),
        ChainFormat::Spine => serde_json::from_slice::<SpineRow>(line).map(|row| (row.v, row.seq)),
        ChainFormat::Ledger => {
            serde_json::from_slice::<LedgerRow>(line).map(|row| (row.v, row.seq))
        }
    };
    let Ok((version, seq)) = typed else {
        return SlowLine::Fault(Reason::MalformedRow);
    };
    if to_canonical_vec(&members).ok().as_deref() != Some(line) {
        return SlowLine::Fault(Reason::NotCanonical);
    }
    if version != 1 {
        return SlowLine::Fault(Reason::UnsupportedVersion);
    }
    let digest_of = |name: &str| hex_digest(members[name].as_str().unwrap());
    let mut without = members.clone();
    without.remove(format.digest_key());
    let bytes = to_canonical_vec(&without).unwrap();
    let computed = match format {
        ChainFormat::Journal => tagged_sha256(JOURNAL_TAG, &[&bytes]),
        ChainFormat::Spine => tagged_sha256(SPINE_TAG, &[&bytes]),
        ChainFormat::Ledger => tagged_sha256(LEDGER_TAG, &[&bytes]),
        ChainFormat::Audit => tagged_hmac(&KEY, AUDIT_TAG, &[&bytes]),
    };
    let decision_ok = format != ChainFormat::Spine
        || reprise_core::record::decision_hash(&members["decision"]).unwrap()
            == digest_of("decision_hash");
    SlowLine::Row {
        seq,
        prev: digest_of(format.prev_key()),
        digest: digest_of(format.digest_key()),
        digest_ok: computed == digest_of(format.digest_key()),
        decision_ok,
        task: members
            .get("task_id")
            .and_then(Value::as_str)
            .map(str::to_owned),
    }
}

/// The first problem in `bytes`, found the slow way.
fn slow_first_problem(format: ChainFormat, bytes: &[u8]) -> Option<Fault> {
    slow_first_problem_knowing(format, bytes, &[])
}

/// As `slow_first_problem`, reusing the results for lines that are the same,
/// at the same index, as in `known` (the untampered file's lines).
fn slow_first_problem_knowing(
    format: ChainFormat,
    bytes: &[u8],
    known: &[(&[u8], SlowLine)],
) -> Option<Fault> {
    let (lines, tail) = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(last) => (&bytes[..last], &bytes[last + 1..]),
        None => (&bytes[..0], bytes),
    };
    let lines: Vec<&[u8]> = if bytes.contains(&b'\n') {
        lines.split(|&b| b == b'\n').collect()
    } else {
        Vec::new()
    };
    let mut head: Option<(u64, Digest)> = None;
    let count = lines.len() as u64;
    for (index, line) in lines.iter().enumerate() {
        let index = index as u64;
        let fault = |reason| Some(Fault { row: index, reason });
        let check = match known.get(index as usize) {
            Some((clean, result)) if clean == line => result.clone(),
            _ => slow_line(format, line),
        };
        match check {
            SlowLine::NotObject => {
                let last = index + 1 == count && tail.is_empty();
                if last && line.last() == Some(&0) {
                    return Some(Fault {
                        row: index,
                        reason: Reason::TornTail,
                    });
                }
                return fault(Reason::MalformedRow);
            }
            SlowLine::Fault(reason) => return fault(reason),
            SlowLine::Row {
                seq,
                prev,
                digest,
                digest_ok,
                decision_ok,
                task,
            } => {
                let (expected_seq, expected_prev) =
                    head.map_or((0, Digest::ZERO), |(s, d)| (s + 1, d));
                if seq != expected_seq {
                    return fault(Reason::SeqGap);
                }
                if prev != expected_prev {
                    return fault(Reason::PrevLinkBreak);
                }
                if !digest_ok {
                    return fault(Reason::DigestMismatch);
                }
                if !decision_ok {
                    return fault(Reason::DecisionHashMismatch);
                }
                if task.is_some_and(|task| task != "add-greeting") {
                    return fault(Reason::ForeignTask);
                }
                head = Some((seq, digest));
            }
        }
    }
    (!tail.is_empty()).then_some(Fault {
        row: count,
        reason: Reason::TornTail,
    })
}

fn fast(format: ChainFormat, bytes: &[u8]) -> ChainReport {
    let key = (format == ChainFormat::Audit).then_some(&KEY);
    let task = (format == ChainFormat::Journal).then_some("add-greeting");
    verify_bytes(format, key, task, bytes)
}

fn line_of(bytes: &[u8], position: usize) -> u64 {
    bytes[..position].iter().filter(|&&b| b == b'\n').count() as u64
}

// ---- the tamper matrix ---------------------------------------------------

/// Every single-byte change of every row is found at that row, with the
/// reason the slow reference gives.
fn tamper_every_byte(format: ChainFormat, bytes: &[u8]) {
    let clean = fast(format, bytes);
    assert_eq!(clean.first_problem(), None);
    let known: Vec<(&[u8], SlowLine)> = bytes
        .split(|&b| b == b'\n')
        .map(|line| (line, slow_line(format, line)))
        .collect();
    let mut reasons: BTreeMap<&'static str, usize> = BTreeMap::new();
    for position in 0..bytes.len() {
        for replacement in [bytes[position] ^ 0x01, b'x', b'0', b' ', b'"', b'\n', 0] {
            if replacement == bytes[position] {
                continue;
            }
            let mut tampered = bytes.to_vec();
            tampered[position] = replacement;
            let problem = fast(format, &tampered).first_problem();
            let expected = slow_first_problem_knowing(format, &tampered, &known);
            assert_eq!(
                problem, expected,
                "byte {position} set to {replacement:#04x}"
            );
            let problem = problem.unwrap_or_else(|| {
                panic!("byte {position} set to {replacement:#04x} went unnoticed")
            });
            assert_eq!(
                problem.row,
                line_of(bytes, position),
                "byte {position} set to {replacement:#04x}"
            );
            *reasons
                .entry(format.reason_name(problem.reason))
                .or_default() += 1;
        }
    }
    // The matrix reaches every reason a single byte can cause.
    for reason in [
        "malformed_row",
        "not_canonical",
        "unsupported_version",
        "seq_gap",
        "torn_tail",
    ] {
        assert!(
            reasons.contains_key(reason),
            "{format:?} never produced {reason}: {reasons:?}"
        );
    }
    assert!(
        reasons.contains_key(format.reason_name(Reason::DigestMismatch)),
        "{reasons:?}"
    );
    assert!(
        reasons.contains_key(format.reason_name(Reason::PrevLinkBreak)),
        "{reasons:?}"
    );
}

#[test]
fn tamper_matrix_journal() {
    tamper_every_byte(ChainFormat::Journal, &journal(50).0);
}

#[test]
fn tamper_matrix_audit() {
    tamper_every_byte(ChainFormat::Audit, &audit(50));
}

#[test]
fn tamper_matrix_ledger() {
    tamper_every_byte(ChainFormat::Ledger, &ledger(20));
}

#[test]
fn tamper_matrix_spine() {
    tamper_every_byte(ChainFormat::Spine, &spine(20));
}

fn rows_of(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

/// Deleting, duplicating, swapping and reordering rows.
fn tamper_rows(format: ChainFormat, bytes: &[u8]) {
    let rows = rows_of(bytes);
    let n = rows.len();
    let first = |rows: &[Vec<u8>]| fast(format, &rows.concat()).first_problem();
    for k in 0..n {
        let mut deleted = rows.clone();
        deleted.remove(k);
        let expected = (k + 1 < n).then_some(Fault {
            row: k as u64,
            reason: Reason::SeqGap,
        });
        // Deleting the last row leaves a shorter valid chain: only a seal can tell.
        assert_eq!(first(&deleted), expected, "delete {k}");

        let mut duplicated = rows.clone();
        duplicated.insert(k, rows[k].clone());
        assert_eq!(
            first(&duplicated),
            Some(Fault {
                row: k as u64 + 1,
                reason: Reason::SeqGap
            }),
            "duplicate {k}"
        );

        if k + 1 < n {
            let mut swapped = rows.clone();
            swapped.swap(k, k + 1);
            assert_eq!(
                first(&swapped),
                Some(Fault {
                    row: k as u64,
                    reason: Reason::SeqGap
                }),
                "swap {k}"
            );
        }
    }
    let mut reversed = rows.clone();
    reversed.reverse();
    assert_eq!(
        first(&reversed),
        Some(Fault {
            row: 0,
            reason: Reason::SeqGap
        })
    );
    let mut rotated = rows;
    rotated.rotate_left(7);
    assert_eq!(
        first(&rotated),
        Some(Fault {
            row: 0,
            reason: Reason::SeqGap
        })
    );
}

#[test]
fn row_tampering_journal_audit_spine() {
    tamper_rows(ChainFormat::Journal, &journal(50).0);
    tamper_rows(ChainFormat::Audit, &audit(50));
    tamper_rows(ChainFormat::Spine, &spine(20));
    tamper_rows(ChainFormat::Ledger, &ledger(20));
}

#[test]
fn rows_rehashed_after_an_edit_still_break_the_link() {
    // Rewriting row 4 with a correct hash of its own moves the break to the
    // next row: the chain, not the row, is what an editor cannot forge.
    let (bytes, rows) = journal(10);
    let forged = encode_journal_row(
        Some(rows[3].head),
        &task(),
        "step",
        AT,
        &json!({"forged": true}),
    )
    .unwrap();
    let mut lines = rows_of(&bytes);
    lines[4] = forged.line;
    assert_eq!(
        fast(ChainFormat::Journal, &lines.concat()).first_problem(),
        Some(Fault {
            row: 5,
            reason: Reason::PrevLinkBreak
        })
    );
}

#[test]
fn a_row_of_another_task_is_foreign() {
    let other = TaskId::parse("other").unwrap();
    let row = encode_journal_row(None, &other, "step", AT, &json!({})).unwrap();
    assert_eq!(
        fast(ChainFormat::Journal, &row.line).first_problem(),
        Some(Fault {
            row: 0,
            reason: Reason::ForeignTask
        })
    );
}

#[test]
fn an_audit_chain_under_another_key_fails_at_row_zero() {
    let bytes = audit(3);
    let report = verify_bytes(
        ChainFormat::Audit,
        Some(&AuditKey([0x22; 32])),
        None,
        &bytes,
    );
    assert_eq!(
        report.first_problem(),
        Some(Fault {
            row: 0,
            reason: Reason::DigestMismatch
        })
    );
}

// ---- torn tails ----------------------------------------------------------

#[test]
fn torn_tails_keep_every_whole_row() {
    let (bytes, rows) = journal(6);
    let whole = rows_of(&bytes)[..5].concat();
    let last = &rows[5].line;
    let head_before = rows[4].head;
    for cut in 0..last.len() {
        let mut torn = whole.clone();
        torn.extend_from_slice(&last[..cut]);
        let report = fast(ChainFormat::Journal, &torn);
        assert_eq!(report.rows, 5, "cut {cut}");
        assert_eq!(report.head, Some(head_before), "cut {cut}");
        assert_eq!(report.fault, None, "cut {cut}");
        assert_eq!(report.torn_tail, (cut > 0).then_some(5), "cut {cut}");
        for zeros in [1, 7, 512] {
            let mut zero_filled = torn.clone();
            zero_filled.extend(std::iter::repeat_n(0u8, zeros));
            let report = fast(ChainFormat::Journal, &zero_filled);
            assert_eq!(
                (report.rows, report.head, report.fault),
                (5, Some(head_before), None)
            );
            assert_eq!(report.torn_tail, Some(5));
            assert_eq!(report.discarded_lines, vec![5]);
            // A zero-filled line that kept its newline is torn too.
            zero_filled.push(b'\n');
            let report = fast(ChainFormat::Journal, &zero_filled);
            assert_eq!((report.fault, report.torn_tail), (None, Some(5)));
        }
    }
    // A whole row missing only its newline was never acknowledged: torn.
    let mut no_newline = bytes;
    no_newline.pop();
    let report = fast(ChainFormat::Journal, &no_newline);
    assert_eq!((report.rows, report.torn_tail), (5, Some(5)));
}

#[test]
fn damage_before_the_end_is_not_a_torn_tail() {
    let (bytes, _) = journal(6);
    let mut lines = rows_of(&bytes);
    lines[2] = b"\0\0\0\0\n".to_vec();
    let report = fast(ChainFormat::Journal, &lines.concat());
    assert_eq!(
        report.fault,
        Some(Fault {
            row: 2,
            reason: Reason::MalformedRow
        })
    );
    assert_eq!(report.torn_tail, None);
}

#[test]
fn a_resumed_verifier_sees_what_a_full_one_sees() {
    let (bytes, rows) = journal(12);
    let lines = rows_of(&bytes);
    let rest: Vec<u8> = lines[7..].concat();
    let full = fast(ChainFormat::Journal, &bytes);
    let mut resumed = reprise_core::verify::ChainVerifier::resume(
        ChainFormat::Journal,
        None,
        Some("add-greeting"),
        rows[6].head,
        7,
    );
    resumed.feed(&rest);
    let resumed = resumed.finish(&[]);
    assert_eq!(
        (resumed.rows, resumed.head, resumed.fault),
        (full.rows, full.head, full.fault)
    );
    // A row that does not link to the head it resumes from is caught.
    let mut wrong = reprise_core::verify::ChainVerifier::resume(
        ChainFormat::Journal,
        None,
        Some("add-greeting"),
        rows[5].head,
        7,
    );
    wrong.feed(&rest);
    assert_eq!(
        wrong.finish(&[]).fault,
        Some(Fault {
            row: 7,
            reason: Reason::SeqGap
        })
    );
}

// ---- identity ------------------------------------------------------------

#[test]
fn identity_follows_the_seals() {
    let (bytes, rows) = journal(8);
    let seal = |index: usize| Head {
        seq: rows[index].head.seq,
        digest: rows[index].head.digest,
    };
    let check = |bytes: &[u8], seals: &[Head]| {
        let mut verifier = reprise_core::verify::ChainVerifier::new(
            ChainFormat::Journal,
            None,
            Some("add-greeting"),
        );
        for seal in seals {
            verifier.watch(seal.seq);
        }
        let (lines, tail) = reprise_core::verify::split_tail(bytes);
        verifier.feed(lines);
        identity(seals, &verifier.finish(tail).watched)
    };
    assert_eq!(check(&bytes, &[]), Identity::Unverifiable);
    assert_eq!(check(&bytes, &[seal(7)]), Identity::Verified);
    // Rows after the last seal are unsealed, not a mismatch.
    assert_eq!(check(&bytes, &[seal(3)]), Identity::Verified);
    // A cut tail no longer holds the sealed row.
    let cut = rows_of(&bytes)[..7].concat();
    assert_eq!(check(&cut, &[seal(7)]), Identity::Mismatched);
    assert_eq!(check(&cut, &[seal(3), seal(7)]), Identity::Mismatched);
    let wrong = Head {
        seq: 7,
        digest: rows[6].head.digest,
    };
    assert_eq!(check(&bytes, &[wrong]), Identity::Mismatched);
}

// ---- properties ----------------------------------------------------------

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-(1i64 << 53) + 1..(1i64 << 53)).prop_map(|n| json!(n)),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..5)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn any_encoded_chain_verifies(bodies in prop::collection::vec(json_value(), 1..8)) {
        let mut bytes = Vec::new();
        let mut head = None;
        for body in &bodies {
            let row = encode_journal_row(head, &task(), "step", AT, body).unwrap();
            head = Some(row.head);
            bytes.extend_from_slice(&row.line);
        }
        let report = fast(ChainFormat::Journal, &bytes);
        prop_assert_eq!(report.first_problem(), None);
        // Rows are assembled from pre-encoded members: the slow path, which
        // re-encodes whole rows with the JCS crate, must agree they are canonical.
        prop_assert_eq!(slow_first_problem(ChainFormat::Journal, &bytes), None);
        prop_assert_eq!(report.rows, bodies.len() as u64);
        prop_assert_eq!(report.head, head);
    }

    #[test]
    fn the_scanner_agrees_with_re_encoding(body in json_value(), pretty in any::<bool>()) {
        // A row whose body is spelled some other way is not canonical, and the
        // fast verifier must say so exactly when re-encoding would.
        let row = encode_journal_row(None, &task(), "step", AT, &body).unwrap();
        let value: Value = serde_json::from_slice(&row.line).unwrap();
        let respelled = if pretty { serde_json::to_vec_pretty(&value).unwrap() } else { serde_json::to_vec(&value).unwrap() };
        let respelled: Vec<u8> = respelled.into_iter().filter(|&b| b != b'\n').collect();
        let mut line = respelled.clone();
        line.push(b'\n');
        let expected = slow_first_problem(ChainFormat::Journal, &line);
        prop_assert_eq!(fast(ChainFormat::Journal, &line).first_problem(), expected);
        prop_assert_eq!(expected.is_none(), respelled == row.line[..row.line.len() - 1]);
    }
}

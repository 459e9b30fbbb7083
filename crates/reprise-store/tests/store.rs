//! The store through its files: appends under injected faults, torn tails
//! and their repair, seals and identity, the audit key's permissions.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use reprise_core::chain::{ChainFormat, Reason};
use reprise_core::record::Head;
use reprise_core::verify::{Fault as ChainFault, Identity, verify_bytes};
use reprise_core::{PlanId, TaskId, TaskKey};
use reprise_store::StoreError;
use reprise_store::audit::{AuditLog, read_audit, seal_journal};
use reprise_store::io::{Fault, FaultyIo, Operation};
use reprise_store::journal::{Journal, Spine, verify_journal};
use reprise_store::key::{check_key, key_path, load_key, load_or_create_key};
use reprise_store::repair::{Refusal, RepairOutcome, repair_journal};
use reprise_store::state::StateDir;
use reprise_testkit::{wait_for_the_file_clock_to_tick, wait_until};
use serde_json::json;

const AT: &str = "2026-01-01T00:00:00.000Z";
const ENOSPC: i32 = 28;
const EIO: i32 = 5;

struct Setup {
    _temp: tempfile::TempDir,
    state: StateDir,
    key: reprise_store::key::KeyFile,
}

fn setup() -> Setup {
    let temp = tempfile::tempdir().unwrap();
    let key_dir = temp.path().join("keys");
    fs::create_dir(&key_dir).unwrap();
    fs::set_permissions(&key_dir, fs::Permissions::from_mode(0o700)).unwrap();
    let key = load_or_create_key(&key_dir.join("audit.key")).unwrap();
    let (state, created) = StateDir::create(&temp.path().join(".reprise")).unwrap();
    assert!(created);
    reprise_store::audit::init_audit(&state, key.clone(), AT).unwrap();
    Setup {
        _temp: temp,
        state,
        key,
    }
}

fn task(name: &str) -> TaskKey {
    TaskKey::new(PlanId::parse("plan").unwrap(), TaskId::parse(name).unwrap())
}

fn append_rows(journal: &mut Journal, range: std::ops::Range<u64>) -> Vec<Head> {
    range
        .map(|n| journal.append("step", AT, &json!({"n": n})).unwrap())
        .collect()
}

fn journal_report(setup: &Setup, name: &str) -> reprise_core::verify::ChainReport {
    let bytes = fs::read(setup.state.journal_path(&task(name))).unwrap();
    verify_bytes(ChainFormat::Journal, None, Some(name), &bytes)
}

// ---- fault injection -----------------------------------------------------

fn fault_cases(line_len: usize) -> Vec<(Operation, Fault)> {
    let mut cases = vec![
        (Operation::Write, Fault::Errno(ENOSPC)),
        (Operation::Write, Fault::Errno(EIO)),
        (Operation::SyncData, Fault::Errno(EIO)),
        (Operation::SyncData, Fault::Errno(ENOSPC)),
    ];
    for short in [0, 1, line_len / 2, line_len - 1] {
        cases.push((Operation::Write, Fault::Short(short)));
        cases.push((Operation::Write, Fault::ShortThenErrno(short, ENOSPC)));
    }
    cases
}

#[test]
fn no_acknowledged_row_is_lost_under_any_single_fault() {
    let line_len = 200; // about the length of the rows below
    for (operation, fault) in fault_cases(line_len) {
        for at in 0..4u64 {
            for truncate_fails in [false, true] {
                let setup = setup();
                let id = task("faulty");
                let mut plan = vec![(operation, at, fault)];
                if truncate_fails {
                    plan.push((Operation::SetLen, 0, Fault::Errno(EIO)));
                }
                let mut journal =
                    Journal::open_with(&setup.state, &id, Arc::new(FaultyIo::new(plan))).unwrap();
                let mut acked = Vec::new();
                let mut failed = false;
                for n in 0..6u64 {
                    match journal.append("step", AT, &json!({"n": n, "pad": "x".repeat(60)})) {
                        Ok(head) => acked.push(head),
                        Err(_) => {
                            failed = true;
                            // Reopen, as a caller must after a failure, and go on.
                            journal = Journal::open(&setup.state, &id).unwrap();
                        }
                    }
                }
                let case = format!(
                    "{operation:?} {fault:?} at call {at}, truncate fails: {truncate_fails}"
                );
                assert!(failed, "{case}: the fault never fired");
                let mut report = journal_report(&setup, "faulty");
                if report.torn_tail.is_some() {
                    // Only a failed clean-up may leave a torn tail, and
                    // repair then removes exactly that.
                    assert!(
                        truncate_fails,
                        "{case}: torn tail without a failed truncate"
                    );
                    let outcome =
                        repair_journal(&setup.state, &id, || Ok(setup.key.clone())).unwrap();
                    assert!(
                        matches!(outcome, RepairOutcome::Repaired { .. }),
                        "{case}: {outcome:?}"
                    );
                    report = journal_report(&setup, "faulty");
                }
                assert_eq!(report.first_problem(), None, "{case}");
                let bytes = fs::read(setup.state.journal_path(&id)).unwrap();
                for head in &acked {
                    let report = verify_bytes(ChainFormat::Journal, None, Some("faulty"), &bytes);
                    assert!(report.rows > head.seq, "{case}: seq {} lost", head.seq);
                }
                // Every acknowledged head is in the file with its hash.
                let mut verifier =
                    reprise_core::verify::ChainVerifier::new(ChainFormat::Journal, None, None);
                for head in &acked {
                    verifier.watch(head.seq);
                }
                let (lines, tail) = reprise_core::verify::split_tail(&bytes);
                verifier.feed(lines);
                let watched = verifier.finish(tail).watched;
                for head in &acked {
                    assert_eq!(
                        watched[&head.seq],
                        Some(head.digest),
                        "{case}: seq {} changed",
                        head.seq
                    );
                }
            }
        }
    }
}

#[test]
fn a_failed_sync_poisons_the_handle() {
    let setup = setup();
    let id = task("poisoned");
    let io = Arc::new(FaultyIo::new(vec![(
        Operation::SyncData,
        1,
        Fault::Errno(EIO),
    )]));
    let mut journal = Journal::open_with(&setup.state, &id, io).unwrap();
    journal.append("step", AT, &json!({})).unwrap();
    assert!(journal.append("step", AT, &json!({})).is_err());
    let err = journal.append("step", AT, &json!({})).unwrap_err();
    assert!(matches!(err, StoreError::Poisoned { .. }), "{err}");
    // A fresh handle re-reads the head and carries on from what is on disk.
    let mut reopened = Journal::open(&setup.state, &id).unwrap();
    let head = reopened.append("step", AT, &json!({})).unwrap();
    assert_eq!(head.seq, 2);
    assert_eq!(journal_report(&setup, "poisoned").first_problem(), None);
}

#[test]
fn two_handles_share_one_chain() {
    let setup = setup();
    let id = task("shared");
    let mut first = Journal::open(&setup.state, &id).unwrap();
    let mut second = Journal::open(&setup.state, &id).unwrap();
    first.append("a", AT, &json!({})).unwrap();
    second.append("b", AT, &json!({})).unwrap();
    // `first` cached its head at the old length: it must notice and re-read.
    let head = first.append("c", AT, &json!({})).unwrap();
    assert_eq!(head.seq, 2);
    let report = journal_report(&setup, "shared");
    assert_eq!((report.rows, report.first_problem()), (3, None));
}

// ---- torn tails and repair -----------------------------------------------

fn write_journal(setup: &Setup, name: &str, rows: u64) -> Vec<Head> {
    let mut journal = Journal::open(&setup.state, &task(name)).unwrap();
    append_rows(&mut journal, 0..rows)
}

#[test]
fn repair_cuts_exactly_the_torn_tail_and_is_idempotent() {
    let setup = setup();
    let id = task("torn");
    let heads = write_journal(&setup, "torn", 5);
    let path = setup.state.journal_path(&id);
    let clean = fs::read(&path).unwrap();
    // The line the crashed append was writing.
    let mut spare = Journal::open(&setup.state, &task("spare")).unwrap();
    append_rows(&mut spare, 0..6);
    let spare_bytes = fs::read(setup.state.journal_path(&task("spare"))).unwrap();
    let last_line = spare_bytes
        .split_inclusive(|&b| b == b'\n')
        .next_back()
        .unwrap()
        .to_vec();

    let mut torn_images: Vec<Vec<u8>> = (1..last_line.len())
        .map(|cut| last_line[..cut].to_vec())
        .collect();
    torn_images.push(vec![0; 4096]);
    torn_images.push([&last_line[..40], &[0u8; 100][..]].concat());
    torn_images.push([&[0u8; 64][..], b"\n"].concat());
    for torn in torn_images {
        fs::write(&path, [&clean[..], &torn[..]].concat()).unwrap();
        // An append onto a torn tail is refused.
        let err = Journal::open(&setup.state, &id)
            .unwrap()
            .append("step", AT, &json!({}))
            .unwrap_err();
        assert!(matches!(err, StoreError::TornTail { .. }), "{err}");
        let outcome = repair_journal(&setup.state, &id, || Ok(setup.key.clone())).unwrap();
        let RepairOutcome::Repaired {
            removed_bytes,
            rows,
            head,
            backup,
        } = outcome
        else {
            panic!("not repaired: {outcome:?}");
        };
        assert_eq!(removed_bytes, torn.len() as u64);
        assert_eq!((rows, head), (5, Some(heads[4])));
        assert_eq!(
            fs::read(&path).unwrap(),
            clean,
            "the head before the torn append is restored byte for byte"
        );
        assert_eq!(
            fs::read(&backup).unwrap(),
            torn,
            "the removed bytes are kept"
        );
        fs::remove_file(&backup).unwrap();
        // Twice is a no-op.
        let again = repair_journal(&setup.state, &id, || Ok(setup.key.clone())).unwrap();
        assert_eq!(
            again,
            RepairOutcome::NoOp {
                rows: 5,
                head: Some(heads[4])
            }
        );
    }
    // The repaired journal takes appends again.
    let head = Journal::open(&setup.state, &id)
        .unwrap()
        .append("step", AT, &json!({}))
        .unwrap();
    assert_eq!(head.seq, 5);
}

#[test]
fn repair_refuses_damage_before_the_end_and_leaves_the_file_alone() {
    let setup = setup();
    let id = task("corrupt");
    write_journal(&setup, "corrupt", 6);
    let path = setup.state.journal_path(&id);
    let mut bytes = fs::read(&path).unwrap();
    let second_line = bytes.iter().position(|&b| b == b'\n').unwrap() + 10;
    bytes[second_line] = b'#';
    bytes.extend_from_slice(b"{\"torn");
    fs::write(&path, &bytes).unwrap();
    let outcome = repair_journal(&setup.state, &id, || Ok(setup.key.clone())).unwrap();
    assert!(
        matches!(
            outcome,
            RepairOutcome::Refused {
                refusal: Refusal::Corruption { row: 1, .. },
                ..
            }
        ),
        "{outcome:?}"
    );
    assert_eq!(fs::read(&path).unwrap(), bytes);
    assert!(!path.with_extension("jsonl.broken").exists());
}

#[test]
fn repair_refuses_a_cut_that_breaks_a_seal() {
    let setup = setup();
    let id = task("sealed");
    write_journal(&setup, "sealed", 4);
    seal_journal(
        &setup.state,
        &mut AuditLog::open(&setup.state, setup.key.clone()).unwrap(),
        &id,
        AT,
    )
    .unwrap();
    let path = setup.state.journal_path(&id);
    let bytes = fs::read(&path).unwrap();
    // Tear the sealed last row itself: cutting it would lose a sealed row.
    let torn = &bytes[..bytes.len() - 20];
    fs::write(&path, torn).unwrap();
    let outcome = repair_journal(&setup.state, &id, || Ok(setup.key.clone())).unwrap();
    assert!(
        matches!(
            outcome,
            RepairOutcome::Refused {
                refusal: Refusal::SealMismatch,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert_eq!(fs::read(&path).unwrap(), torn);
}

// ---- seals, identity, spine ------------------------------------------------

#[test]
fn seals_make_identity_verified_and_a_cut_tail_mismatched() {
    let setup = setup();
    let id = task("identity");
    write_journal(&setup, "identity", 5);
    let key = || Ok(setup.key.clone());
    let live = verify_journal(&setup.state, &id, key).unwrap();
    assert_eq!((live.identity, live.ok()), (Identity::Unverifiable, true));

    let mut audit = AuditLog::open(&setup.state, setup.key.clone()).unwrap();
    let seal = seal_journal(&setup.state, &mut audit, &id, AT).unwrap();
    assert_eq!(seal.seq, 4);
    let sealed = verify_journal(&setup.state, &id, key).unwrap();
    assert_eq!(
        (sealed.identity, sealed.sealed_through, sealed.ok()),
        (Identity::Verified, Some(4), true)
    );

    // A later run continues the journal: the sealed prefix still verifies.
    let mut journal = Journal::open(&setup.state, &id).unwrap();
    append_rows(&mut journal, 5..8);
    let continued = verify_journal(&setup.state, &id, key).unwrap();
    assert_eq!(
        (continued.identity, continued.unsealed_rows, continued.ok()),
        (Identity::Verified, 3, true)
    );

    // Cutting rows off the end, sealed row included, is caught by the seal.
    let path = setup.state.journal_path(&id);
    let bytes = fs::read(&path).unwrap();
    let lines: Vec<&[u8]> = bytes.split_inclusive(|&b| b == b'\n').collect();
    fs::write(&path, lines[..4].concat()).unwrap();
    let cut = verify_journal(&setup.state, &id, key).unwrap();
    assert_eq!(
        cut.chain.first_problem(),
        None,
        "the chain alone cannot see a cut tail"
    );
    assert_eq!((cut.identity, cut.ok()), (Identity::Mismatched, false));
}

#[test]
fn a_broken_audit_chain_fails_journal_verification() {
    let setup = setup();
    let id = task("audited");
    write_journal(&setup, "audited", 3);
    let mut audit = AuditLog::open(&setup.state, setup.key.clone()).unwrap();
    seal_journal(&setup.state, &mut audit, &id, AT).unwrap();
    let audit_path = setup.state.audit_path();
    let mut bytes = fs::read(&audit_path).unwrap();
    let at = bytes.len() - 10;
    bytes[at] ^= 1;
    fs::write(&audit_path, &bytes).unwrap();
    let verification = verify_journal(&setup.state, &id, || Ok(setup.key.clone())).unwrap();
    assert!(!verification.ok());
    let summary = read_audit(&setup.state, &setup.key).unwrap();
    assert_eq!(summary.report.first_problem().map(|f| f.row), Some(1));
}

#[test]
fn sealing_refuses_a_broken_journal() {
    let setup = setup();
    let id = task("broken");
    write_journal(&setup, "broken", 3);
    let path = setup.state.journal_path(&id);
    let mut bytes = fs::read(&path).unwrap();
    bytes[5] ^= 1;
    fs::write(&path, &bytes).unwrap();
    let mut audit = AuditLog::open(&setup.state, setup.key.clone()).unwrap();
    let err = seal_journal(&setup.state, &mut audit, &id, AT).unwrap_err();
    assert!(
        matches!(err, StoreError::Unsealable { row: 0, .. }),
        "{err}"
    );
}

#[test]
fn spine_rows_chain_and_verify() {
    let setup = setup();
    let id = task("spined");
    write_journal(&setup, "spined", 2);
    let mut spine = Spine::open(&setup.state, &id).unwrap();
    let decision = json!({"task_id": "spined", "mode": "warm"});
    spine.append("retry.decision", &decision, 1).unwrap();
    spine.append("retry.decision", &decision, 1).unwrap();
    let verification = verify_journal(&setup.state, &id, || Ok(setup.key.clone())).unwrap();
    let spine_report = verification.spine.unwrap();
    assert_eq!((spine_report.rows, spine_report.first_problem()), (2, None));
    let path = setup.state.spine_path(&id);
    let mut bytes = fs::read(&path).unwrap();
    let position = bytes.windows(4).position(|w| w == b"warm").unwrap();
    bytes[position] = b'W';
    fs::write(&path, &bytes).unwrap();
    let verification = verify_journal(&setup.state, &id, || Ok(setup.key.clone())).unwrap();
    assert!(
        !verification.ok(),
        "a broken spine fails the task's verification"
    );
    assert_eq!(verification.chain.first_problem(), None);
    assert_eq!(
        verification.spine.unwrap().first_problem(),
        Some(ChainFault {
            row: 0,
            reason: Reason::DigestMismatch
        })
    );
}

// ---- the audit key -------------------------------------------------------

fn mode_of(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_new_key_is_private_and_loose_keys_are_refused() {
    let temp = tempfile::tempdir().unwrap();
    let path = temp.path().join("state/reprise/audit.key");
    let key = load_or_create_key(&path).unwrap();
    assert_eq!(mode_of(&path), 0o600);
    assert_eq!(mode_of(path.parent().unwrap()), 0o700);
    assert_eq!(load_key(&path).unwrap(), key);

    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let err = load_key(&path).unwrap_err();
    assert!(
        matches!(err, StoreError::KeyPermissions { mode: 0o644, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("chmod 600"), "{err}");
    assert!(
        load_or_create_key(&path).is_err(),
        "a loose key is never replaced silently"
    );

    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    fs::set_permissions(path.parent().unwrap(), fs::Permissions::from_mode(0o777)).unwrap();
    assert!(matches!(
        check_key(&path),
        Err(StoreError::KeyDirPermissions { .. })
    ));
    fs::set_permissions(path.parent().unwrap(), fs::Permissions::from_mode(0o700)).unwrap();

    fs::write(&path, b"short").unwrap();
    assert!(matches!(
        load_key(&path),
        Err(StoreError::KeyLength { len: 5, .. })
    ));
    fs::remove_file(&path).unwrap();
    assert!(matches!(
        load_key(&path),
        Err(StoreError::KeyMissing { .. })
    ));
}

#[test]
fn the_key_lives_outside_the_state_directory() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    };
    assert_eq!(
        key_path(env(&[("REPRISE_AUDIT_KEY_FILE", "/k/key"), ("HOME", "/h")])).unwrap(),
        Path::new("/k/key")
    );
    assert_eq!(
        key_path(env(&[("XDG_STATE_HOME", "/x"), ("HOME", "/h")])).unwrap(),
        Path::new("/x/reprise/audit.key")
    );
    assert_eq!(
        key_path(env(&[("HOME", "/h")])).unwrap(),
        Path::new("/h/.local/state/reprise/audit.key")
    );
    assert!(matches!(key_path(env(&[])), Err(StoreError::NoKeyHome)));
}

#[test]
fn state_directories_are_found_upwards_and_versions_checked() {
    let setup = setup();
    let project = setup.state.root().parent().unwrap();
    let nested = project.join("a/b");
    fs::create_dir_all(&nested).unwrap();
    assert_eq!(StateDir::discover(&nested).unwrap(), setup.state);
    let elsewhere = tempfile::tempdir().unwrap();
    assert!(matches!(
        StateDir::discover(elsewhere.path()),
        Err(StoreError::NoStateDir { .. })
    ));
    assert_eq!(
        fs::read(setup.state.root().join(".gitignore")).unwrap(),
        b"# written by reprise: the state directory is never committed\n*\n"
    );
    fs::write(setup.state.root().join("layout.json"), br#"{"v":3}"#).unwrap();
    let err = StateDir::open(setup.state.root()).unwrap_err();
    assert!(
        matches!(err, StoreError::UnsupportedLayout { found: 3, .. }),
        "{err}"
    );
    fs::write(setup.state.root().join("layout.json"), br#"{"v":1}"#).unwrap();
    let err = StateDir::open(setup.state.root()).unwrap_err();
    assert!(matches!(err, StoreError::OldLayout { .. }), "{err}");
    assert!(err.to_string().contains("run `reprise init` to migrate it"));
}

#[test]
fn a_layout_1_directory_migrates_with_its_seals_still_vouching() {
    let setup = setup();
    let root = setup.state.root().to_path_buf();
    // A layout-1 directory: journals under tasks/<task>, seals without a
    // plan, and a run that says which plan ran `greet`.
    let old = TaskId::parse("greet").unwrap();
    let old_dir = root.join("tasks").join("greet");
    fs::create_dir_all(&old_dir).unwrap();
    let mut rows = Vec::new();
    let mut previous = None;
    for seq in 0..3 {
        let encoded = reprise_core::record::encode_journal_row(
            previous,
            &old,
            "task.checkpoint",
            "2026-01-01T00:00:00.000Z",
            &json!({"seq": seq}),
        )
        .unwrap();
        rows.extend_from_slice(&encoded.line);
        previous = Some(encoded.head);
    }
    fs::write(old_dir.join("journal.jsonl"), &rows).unwrap();
    let head = previous.unwrap();
    let mut audit = AuditLog::open(&setup.state, setup.key.clone()).unwrap();
    audit
        .append(
            "journal.seal",
            AT,
            &json!({"task_id": "greet", "seq": head.seq, "event_hash": head.digest}),
        )
        .unwrap();
    fs::create_dir_all(root.join("runs/R-1")).unwrap();
    fs::write(
        root.join("runs/R-1/state.json"),
        br#"{"plan_name":"greeter","tasks":[{"task_id":"greet"}]}"#,
    )
    .unwrap();
    fs::write(root.join("layout.json"), br#"{"v":1}"#).unwrap();

    let migration = reprise_store::audit::migrate_state_dir(&root, &setup.key, AT)
        .unwrap()
        .unwrap();
    let key = TaskKey::new(PlanId::parse("greeter").unwrap(), old.clone());
    assert_eq!(migration.tasks, vec![key.clone()]);
    let state = StateDir::open(&root).unwrap();
    assert_eq!(fs::read(state.journal_path(&key)).unwrap(), rows);
    assert!(!root.join("tasks").exists());
    let verification = verify_journal(&state, &key, || Ok(setup.key.clone())).unwrap();
    assert!(verification.ok());
    assert_eq!(verification.identity, Identity::Verified);
    // The same task id in another plan is not vouched for by that seal.
    let other = TaskKey::new(PlanId::parse("other").unwrap(), old);
    assert!(
        read_audit(&state, &setup.key)
            .unwrap()
            .seals_of(&other)
            .is_empty()
    );
    // Migrating again is a no-op.
    assert!(
        reprise_store::audit::migrate_state_dir(&root, &setup.key, AT)
            .unwrap()
            .is_none()
    );
}

// ---- continuity: when earlier verification may be trusted -----------------

#[test]
fn only_own_appends_keep_continuity() {
    let setup = setup();
    let id = task("continuity");
    let mut journal = Journal::open(&setup.state, &id).unwrap();
    append_rows(&mut journal, 0..3);
    journal.mark().unwrap();
    append_rows(&mut journal, 3..6);
    assert!(journal.only_own_appends_since_mark().unwrap());

    // Another writer's row breaks continuity, seen at our next append.
    let mut other = Journal::open(&setup.state, &id).unwrap();
    other.append("step", AT, &json!({"other": true})).unwrap();
    assert!(!journal.only_own_appends_since_mark().unwrap());
    journal.append("step", AT, &json!({})).unwrap();
    assert!(
        !journal.only_own_appends_since_mark().unwrap(),
        "an own append does not mend it"
    );
    journal.mark().unwrap();
    assert!(journal.only_own_appends_since_mark().unwrap());

    // A rewrite in place of the same length breaks it too. Its time is set
    // a second past the old one, as a rewrite a second later would have it:
    // two writes within one tick of the file clock share their times.
    let path = setup.state.journal_path(&id);
    let bytes = fs::read(&path).unwrap();
    let modified = fs::metadata(&path).unwrap().modified().unwrap();
    fs::write(&path, &bytes).unwrap();
    fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(modified + std::time::Duration::from_secs(1))
        .unwrap();
    assert!(!journal.only_own_appends_since_mark().unwrap());
}

#[test]
fn a_replaced_journal_is_followed_not_written_behind_its_back() {
    let setup = setup();
    let id = task("replaced");
    let mut journal = Journal::open(&setup.state, &id).unwrap();
    append_rows(&mut journal, 0..3);
    journal.mark().unwrap();
    let path = setup.state.journal_path(&id);
    // An editor saves by writing a new file and renaming it over the old.
    let bytes = fs::read(&path).unwrap();
    let temp = path.with_extension("tmp");
    fs::write(&temp, &bytes).unwrap();
    fs::rename(&temp, &path).unwrap();
    let head = journal
        .append("step", AT, &json!({"after": "replace"}))
        .unwrap();
    assert_eq!(head.seq, 3);
    let report = journal_report(&setup, "replaced");
    assert_eq!(
        (report.rows, report.first_problem()),
        (4, None),
        "the row is in the file at the path"
    );
    assert!(!journal.only_own_appends_since_mark().unwrap());
}

#[test]
fn reading_from_an_offset_continues_a_verification() {
    let setup = setup();
    let id = task("offset");
    let heads = write_journal(&setup, "offset", 5);
    let path = setup.state.journal_path(&id);
    let (first, end) = reprise_store::read_chain_from(
        &path,
        0,
        reprise_core::verify::ChainVerifier::new(ChainFormat::Journal, None, Some("offset")),
        |_, _| {},
    )
    .unwrap();
    assert_eq!((first.rows, end), (5, fs::metadata(&path).unwrap().len()));
    let mut journal = Journal::open(&setup.state, &id).unwrap();
    append_rows(&mut journal, 5..8);
    let resumed = reprise_core::verify::ChainVerifier::resume(
        ChainFormat::Journal,
        None,
        Some("offset"),
        heads[4],
        5,
    );
    let (rest, end) = reprise_store::read_chain_from(&path, end, resumed, |_, _| {}).unwrap();
    assert_eq!(rest, journal_report(&setup, "offset"));
    assert_eq!(end, fs::metadata(&path).unwrap().len());
}

#[test]
fn a_new_seal_never_papers_over_a_cut_sealed_row() {
    let setup = setup();
    let id = task("resealed");
    write_journal(&setup, "resealed", 4);
    let mut audit = AuditLog::open(&setup.state, setup.key.clone()).unwrap();
    seal_journal(&setup.state, &mut audit, &id, AT).unwrap();
    // Cut the sealed last row and carry on writing: the chain is whole again.
    let path = setup.state.journal_path(&id);
    let bytes = fs::read(&path).unwrap();
    let lines: Vec<&[u8]> = bytes.split_inclusive(|&b| b == b'\n').collect();
    fs::write(&path, lines[..3].concat()).unwrap();
    let mut journal = Journal::open(&setup.state, &id).unwrap();
    for n in 0..3 {
        journal.append("rewritten", AT, &json!({"n": n})).unwrap();
    }
    assert_eq!(journal_report(&setup, "resealed").first_problem(), None);
    let err = seal_journal(&setup.state, &mut audit, &id, AT).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Unsealable {
                reason: "seal_mismatch",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn kept_replies_are_private_capped_replaced_and_dropped() {
    use reprise_store::replies::{KEPT_REPLY_MAX, drop_kept_reply, keep_reply, read_kept_reply};
    let setup = setup();
    let id = task("judged").task;
    let cut = |text: &str, max: usize| text.chars().take(max).collect::<String>();
    assert_eq!(
        keep_reply(&setup.state, "R-1", &id, " \n\t ", cut).unwrap(),
        None
    );
    assert_eq!(read_kept_reply(&setup.state, "R-1", &id).unwrap(), None);
    let path = keep_reply(&setup.state, "R-1", &id, "first", cut)
        .unwrap()
        .unwrap();
    assert_eq!(mode_of(&path), 0o600);
    keep_reply(&setup.state, "R-1", &id, "second", cut).unwrap();
    assert_eq!(
        read_kept_reply(&setup.state, "R-1", &id)
            .unwrap()
            .as_deref(),
        Some("second")
    );
    let long = "x".repeat(KEPT_REPLY_MAX + 10);
    keep_reply(&setup.state, "R-1", &id, &long, cut).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().len(), KEPT_REPLY_MAX as u64);
    drop_kept_reply(&setup.state, "R-1", &id).unwrap();
    assert!(!path.exists());
    drop_kept_reply(&setup.state, "R-1", &id).unwrap();
}

// ---- file checkpoints --------------------------------------------------------

/// Every entry under `dir` (not `.git`): path, kind, mode, and the bytes or
/// the link target.
fn listing(dir: &Path) -> Vec<(String, String, u32, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String, u32, Vec<u8>)>) {
        for entry in fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_name() == ".git" {
                continue;
            }
            let path = entry.path();
            let meta = fs::symlink_metadata(&path).unwrap();
            let name = path.strip_prefix(root).unwrap().display().to_string();
            let mode = meta.permissions().mode() & 0o7777;
            if meta.file_type().is_symlink() {
                let target = fs::read_link(&path).unwrap();
                out.push((
                    name,
                    "link".into(),
                    0,
                    target.display().to_string().into_bytes(),
                ));
            } else if meta.is_dir() {
                out.push((name, "dir".into(), mode, Vec::new()));
                walk(root, &path, out);
            } else {
                out.push((name, "file".into(), mode, fs::read(&path).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn sh(dir: &Path, script: &str) {
    let status = std::process::Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "u")
        .env("GIT_AUTHOR_EMAIL", "u@x")
        .env("GIT_COMMITTER_NAME", "u")
        .env("GIT_COMMITTER_EMAIL", "u@x")
        .status()
        .unwrap();
    assert!(status.success(), "{script}");
}

#[test]
fn a_rollback_restores_every_byte_mode_link_and_directory_and_touches_no_user_file() {
    use reprise_store::snapshot::SnapshotStore;
    let temp = tempfile::tempdir().unwrap();
    let repo = temp.path().join("repo");
    fs::create_dir(&repo).unwrap();
    sh(
        &repo,
        "git init -q && printf 'build/\\n*.log\\n' > .gitignore && echo one > a.txt && \
         mkdir -p src/deep && echo two > src/deep/b.txt && printf '#!/bin/sh\\n' > run.sh && \
         chmod 755 run.sh && git add -A && git commit -qm start && git stash list > /dev/null",
    );
    // Beyond what is committed: untracked, ignored, a link, odd modes, an empty dir.
    sh(
        &repo,
        "echo draft > notes.txt && mkdir build && echo cached > build/out.o && \
         echo log > x.log && ln -s a.txt link && echo secret > private && chmod 600 private && \
         mkdir empty && chmod 700 empty && chmod 640 src/deep/b.txt",
    );
    let user_files = |repo: &Path| {
        [
            "index",
            "config",
            "HEAD",
            "packed-refs",
            "refs/heads/master",
            "logs/HEAD",
        ]
        .iter()
        .map(|name| fs::read(repo.join(".git").join(name)).ok())
        .collect::<Vec<_>>()
    };
    let user_before = user_files(&repo);
    let store = SnapshotStore::open(
        &temp.path().join("shadow"),
        &repo,
        Some(&repo),
        reprise_store::snapshot::DEFAULT_MAX_FILE_BYTES,
    )
    .unwrap();
    let before = listing(&repo);
    let checkpoint = store.take("before").unwrap();
    assert_eq!(checkpoint.manifest.files, 9, "{:?}", checkpoint.manifest);
    // What an agent might do: edit, create, delete, chmod, relink, write
    // into the ignored directory and the untracked file, nest new dirs.
    sh(
        &repo,
        "echo changed >> a.txt && rm src/deep/b.txt && echo new > new.txt && \
         chmod 644 private && chmod 600 a.txt && rm link && ln -s new.txt link && \
         echo more >> build/out.o && echo other > build/extra.o && echo edit >> notes.txt && \
         mkdir -p made/inside && echo x > made/inside/f && rmdir empty && chmod 644 run.sh && \
         ln -s /etc/passwd escape",
    );
    assert_ne!(listing(&repo), before);
    let scratch = temp.path().join("scratch");
    let changes = store.changes(&checkpoint, &scratch).unwrap();
    let listed: Vec<&str> = changes
        .files
        .iter()
        .map(|(_, path)| path.as_str())
        .collect();
    for path in [
        "a.txt",
        "src/deep/b.txt",
        "new.txt",
        "link",
        "build/out.o",
        "escape",
        "empty/",
        "made/",
    ] {
        assert!(listed.contains(&path), "{path} missing from {listed:?}");
    }
    assert_ne!(listing(&repo), before, "a dry run changes nothing");
    store.restore(&checkpoint).unwrap();
    assert_eq!(listing(&repo), before);
    assert_eq!(
        user_files(&repo),
        user_before,
        "the user's git files are untouched"
    );
    // A second checkpoint of the restored tree has the same tree.
    assert_eq!(store.take("again").unwrap().tree, checkpoint.tree);
    assert_eq!(store.list().unwrap().len(), 2);
    assert_eq!(store.find(&checkpoint.id[..10]).unwrap().id, checkpoint.id);
}

/// A checkpoint's tree built without git is the one git builds from the
/// same files (`add --all --force` into a fresh index, `write-tree`), over
/// links, odd modes, ignored files, names that sort around `/` and a second
/// checkpoint after edits; git reads the index written beside it as its
/// own, and finds every entry clean. A tree with an attributes file is left
/// to git.
#[test]
fn a_checkpoint_built_without_git_is_the_tree_git_builds() {
    use reprise_store::snapshot::SnapshotStore;
    let temp = tempfile::tempdir().unwrap();
    let tree = temp.path().join("tree");
    let shadow = temp.path().join("shadow");
    fs::create_dir(&tree).unwrap();
    sh(
        &tree,
        "printf 'ignored/\\n*.log\\n' > .gitignore && mkdir -p ignored a/b 'with space' empty && \
         echo x > ignored/f && echo l > x.log && echo 1 > a-b && echo 2 > a/b/c && echo 3 > a.txt && \
         echo 4 > a0 && echo 5 > 'with space/f g' && : > zero && printf '#!/bin/sh\\n' > run && \
         chmod 755 run && echo s > secret && chmod 600 secret && ln -s a.txt link && ln -s a dirlink && \
         ln -s missing dangling && mkdir -p .reprise/runs && echo own > .reprise/runs/r",
    );
    let git_tree = || {
        let index = temp.path().join("git-index");
        let _ = fs::remove_file(&index);
        let output = std::process::Command::new("sh")
            .args([
                "-c",
                "git add --all --force -- . ':(exclude).git' ':(exclude,top).reprise' && git write-tree",
            ])
            .current_dir(&tree)
            .env("GIT_DIR", &shadow)
            .env("GIT_WORK_TREE", &tree)
            .env("GIT_INDEX_FILE", &index)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    };
    let shadow_git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(&tree)
            .env("GIT_DIR", &shadow)
            .env("GIT_WORK_TREE", &tree)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap()
    };
    let built_here = || {
        !fs::read(shadow.join("index"))
            .unwrap()
            .windows(4)
            .any(|w| w == b"TREE")
    };
    let store = SnapshotStore::open(
        &shadow,
        &tree,
        None,
        reprise_store::snapshot::DEFAULT_MAX_FILE_BYTES,
    )
    .unwrap();
    // A file written within a few milliseconds before a checkpoint (the
    // store's allowance for the file clock's lag) is recorded as changed
    // (smudged), and git would find it dirty: wait until what was written
    // is 50 ms old by the clock the store compares it with.
    let settle = || {
        let marker = temp.path().join("written");
        fs::write(&marker, "").unwrap();
        let written = fs::metadata(&marker).unwrap().modified().unwrap();
        let settled = written + std::time::Duration::from_millis(50);
        assert!(
            wait_until(std::time::Duration::from_secs(10), || {
                std::time::SystemTime::now() > settled
            }),
            "the clock did not pass {settled:?}"
        );
    };
    settle();
    let first = store.take("first").unwrap();
    assert!(built_here(), "git's write-tree leaves a TREE extension");
    assert_eq!(first.tree, git_tree());
    assert!(shadow_git(&["diff-files", "--quiet"]).status.success());
    // Edits of every kind, some within the second the index was written.
    sh(
        &tree,
        "echo 9 > a.txt && rm a-b && echo new > a/b/new && chmod 755 secret && \
         rm link && ln -s a0 link && echo more >> ignored/f && mkdir -p deep/er && echo d > deep/er/f",
    );
    settle();
    let second = store.take("second").unwrap();
    assert!(built_here());
    assert_ne!(second.tree, first.tree);
    assert_eq!(second.tree, git_tree());
    assert!(shadow_git(&["diff-files", "--quiet"]).status.success());
    assert!(
        shadow_git(&["fsck", "--strict", "--no-dangling"])
            .status
            .success()
    );
    // An attributes file could make git convert what it stores: git builds it.
    fs::write(tree.join(".gitattributes"), "*.txt text\n").unwrap();
    let third = store.take("third").unwrap();
    assert!(!built_here());
    assert_eq!(third.tree, git_tree());
}

/// A park's restore into a fresh checkout of the base writes only the files
/// that differ from the base: the shadow takes the checkout's index as its
/// stat cache. Attributes that could convert content keep it out.
#[test]
fn a_restore_into_a_fresh_checkout_writes_only_what_differs_from_the_base() {
    use std::os::unix::fs::MetadataExt;

    use reprise_store::snapshot::SnapshotStore;
    let temp = tempfile::tempdir().unwrap();
    let repo = temp.path().join("repo");
    fs::create_dir(&repo).unwrap();
    sh(
        &repo,
        "git init -q && echo one > a.txt && mkdir d && echo two > d/b.txt && echo three > c.txt && \
         git add -A && git commit -qm start",
    );
    let tree = temp.path().join("tree");
    let checkout = |tree: &Path| {
        sh(
            &repo,
            &format!(
                "git worktree add -q --detach --no-checkout {0} HEAD && git -C {0} reset -q --hard",
                tree.display()
            ),
        );
    };
    let open = || {
        SnapshotStore::open(
            &temp.path().join("shadow"),
            &tree,
            Some(&repo),
            reprise_store::snapshot::DEFAULT_MAX_FILE_BYTES,
        )
        .unwrap()
    };
    // The checkout's git and index as reprise holds them (here, found
    // from the fresh tree: nobody has written it).
    let adopt = |store: &SnapshotStore| {
        let git = reprise_store::git::Git::new(&tree);
        let index = git.own_index().unwrap();
        store.adopt_checkout_index(&git, &index)
    };
    checkout(&tree);
    let store = open();
    assert!(adopt(&store));
    // What the park snapshots: one file changed, one made, one removed.
    sh(
        &tree,
        "echo changed >> a.txt && echo new > new.txt && rm c.txt",
    );
    let parked = store.take("parked").unwrap();
    sh(
        &repo,
        &format!("git worktree remove --force {}", tree.display()),
    );
    // The resume: a fresh checkout of the base, then the park's snapshot.
    checkout(&tree);
    let store = open();
    assert!(adopt(&store));
    // A rewrite gives the file a new inode or a new change time (the wait
    // lets the file clock move past the checkout's).
    let written = |path: &str| {
        let meta = fs::metadata(tree.join(path)).unwrap();
        (meta.ino(), meta.ctime(), meta.ctime_nsec())
    };
    let untouched = written("d/b.txt");
    wait_for_the_file_clock_to_tick(temp.path());
    store.restore(&parked).unwrap();
    assert_eq!(
        written("d/b.txt"),
        untouched,
        "a file equal to the base is not rewritten"
    );
    assert_eq!(
        fs::read_to_string(tree.join("a.txt")).unwrap(),
        "one\nchanged\n"
    );
    assert_eq!(fs::read_to_string(tree.join("new.txt")).unwrap(), "new\n");
    assert!(!tree.join("c.txt").exists());
    // A checkout that may convert content is not a stat cache for the shadow.
    sh(
        &tree,
        "echo '*.txt text eol=crlf' > .gitattributes && git add .gitattributes",
    );
    assert!(!adopt(&open()));
}

/// An adopted checkout index is trusted for one command only: a file an
/// agent rewrites afterwards, in the very second of the checkout and at the
/// same size, is still seen by the next checkpoint (git's racy-entry rule
/// applies again once that command has run).
#[test]
fn a_same_second_same_size_edit_after_the_first_checkpoint_is_seen() {
    use reprise_store::snapshot::SnapshotStore;
    let temp = tempfile::tempdir().unwrap();
    let repo = temp.path().join("repo");
    fs::create_dir(&repo).unwrap();
    sh(
        &repo,
        "git init -q && echo one > a.txt && git add -A && git commit -qm start",
    );
    let second = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    // The whole sequence must fall within one clock second: tried again
    // (bounded) when a second boundary cut through it.
    for round in 0..50 {
        let tree = temp.path().join(format!("tree{round}"));
        let started = second();
        sh(
            &repo,
            &format!(
                "git worktree add -q --detach --no-checkout {0} HEAD && git -C {0} reset -q --hard",
                tree.display()
            ),
        );
        let store = SnapshotStore::open(
            &temp.path().join(format!("shadow{round}")),
            &tree,
            Some(&repo),
            reprise_store::snapshot::DEFAULT_MAX_FILE_BYTES,
        )
        .unwrap();
        let git = reprise_store::git::Git::new(&tree);
        assert!(store.adopt_checkout_index(&git, &git.own_index().unwrap()));
        let before = store.take("before attempt 1").unwrap();
        // The agent: same length, same second.
        fs::write(tree.join("a.txt"), "two\n").unwrap();
        let after = store.take("after").unwrap();
        if second() != started {
            continue;
        }
        assert_ne!(after.tree, before.tree, "the edit was taken on stat data");
        return;
    }
    panic!("no round fitted in one second");
}

/// A result's tree is taken from reprise's copy of the checkout's index,
/// settled so git need not read every file again: an edit made in the very
/// second of the checkout, at the same size, is still in the tree when the
/// tree is taken in a later second (when git would otherwise trust the
/// entry's stat data).
#[test]
fn a_result_tree_sees_a_same_second_same_size_edit_made_after_the_checkout() {
    let temp = tempfile::tempdir().unwrap();
    let repo = temp.path().join("repo");
    fs::create_dir(&repo).unwrap();
    sh(
        &repo,
        "git init -q && echo one > a.txt && echo keep > b.txt && git add -A && git commit -qm start",
    );
    let second = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    let scratch = temp.path().join("scratch");
    fs::create_dir(&scratch).unwrap();
    let head = reprise_store::git::Git::new(&repo).tree_of("HEAD").unwrap();
    for round in 0..50 {
        let tree = temp.path().join(format!("tree{round}"));
        let started = second();
        sh(
            &repo,
            &format!(
                "git worktree add -q --detach --no-checkout {0} HEAD && git -C {0} reset -q --hard",
                tree.display()
            ),
        );
        let seed = temp.path().join(format!("seed{round}"));
        let own = reprise_store::git::Git::new(&tree).own_index().unwrap();
        assert!(reprise_store::git::copy_with_mtime(&own, &seed));
        fs::write(tree.join("a.txt"), "two\n").unwrap();
        if second() != started {
            continue;
        }
        assert!(
            wait_until(std::time::Duration::from_secs(5), || second() != started),
            "the clock stayed in second {started}"
        );
        let git = reprise_store::git::Git::at(&repo.join(".git"), &tree);
        let (taken, _index) = git
            .snapshot_index_from("HEAD", &scratch, Some(&seed))
            .unwrap();
        assert_ne!(taken, head, "the edit was taken on stat data");
        let listed = std::process::Command::new("git")
            .args(["diff-tree", "-r", "--name-only", &head, &taken])
            .current_dir(&repo)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&listed.stdout), "a.txt\n");
        return;
    }
    panic!("no round fitted in one second");
}

/// The checkpoints listed from the store's own files are the ones git
/// lists, in the same order, with the same trees and manifests.
#[test]
fn checkpoints_listed_without_git_are_the_ones_git_lists() {
    use reprise_store::snapshot::SnapshotStore;
    let temp = tempfile::tempdir().unwrap();
    let tree = temp.path().join("tree");
    fs::create_dir(&tree).unwrap();
    let shadow = temp.path().join("shadow");
    let store = SnapshotStore::open(&shadow, &tree, None, 1024).unwrap();
    let mut taken = Vec::new();
    for step in 0..3 {
        fs::write(tree.join(format!("f{step}")), "x").unwrap();
        taken.push(store.take(&format!("step {step}")).unwrap());
    }
    assert_eq!(store.list().unwrap(), taken);
    let output = std::process::Command::new("git")
        .env("GIT_DIR", &shadow)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args([
            "for-each-ref",
            "--sort=refname",
            "--format=%(objectname) %(tree) %(contents)",
            "refs/checkpoints/",
        ])
        .output()
        .unwrap();
    let listed = String::from_utf8(output.stdout).unwrap();
    let by_git: Vec<(String, String, String)> = listed
        .lines()
        .filter(|line| !line.is_empty())
        .map(|line| {
            let mut parts = line.splitn(3, ' ');
            let mut next = || parts.next().unwrap().to_owned();
            (next(), next(), next())
        })
        .collect();
    assert_eq!(by_git.len(), 3, "{listed}");
    for (checkpoint, (id, tree, message)) in taken.iter().zip(&by_git) {
        assert_eq!((&checkpoint.id, &checkpoint.tree), (id, tree));
        let manifest: serde_json::Value = serde_json::from_str(message).unwrap();
        assert_eq!(manifest["label"], checkpoint.manifest.label);
    }
}

#[test]
fn a_file_over_the_size_bound_is_skipped_and_named() {
    use reprise_store::snapshot::SnapshotStore;
    let temp = tempfile::tempdir().unwrap();
    let tree = temp.path().join("tree");
    fs::create_dir(&tree).unwrap();
    fs::write(tree.join("small"), "s").unwrap();
    fs::write(tree.join("big"), vec![7u8; 4096]).unwrap();
    let store = SnapshotStore::open(&temp.path().join("shadow"), &tree, None, 1024).unwrap();
    let checkpoint = store.take("t").unwrap();
    assert_eq!(checkpoint.manifest.skipped, vec![("big".to_owned(), 4096)]);
    fs::write(tree.join("big"), "changed").unwrap();
    fs::write(tree.join("small"), "changed").unwrap();
    let changes = store
        .changes(&checkpoint, &temp.path().join("scratch"))
        .unwrap();
    assert_eq!(changes.not_restored, vec!["big".to_owned()]);
    store.restore(&checkpoint).unwrap();
    assert_eq!(fs::read(tree.join("small")).unwrap(), b"s");
    assert_eq!(
        fs::read(tree.join("big")).unwrap(),
        b"changed",
        "left as it is"
    );
}

#[test]
fn two_audit_handles_keep_the_witness_in_step_and_a_cut_is_never_extended() {
    let setup = setup();
    let mut first = AuditLog::open(&setup.state, setup.key.clone()).unwrap();
    let mut second = AuditLog::open(&setup.state, setup.key.clone()).unwrap();
    for n in 0..6 {
        let audit = if n % 2 == 0 { &mut first } else { &mut second };
        audit.append("test.row", AT, &json!({"n": n})).unwrap();
    }
    let summary = reprise_store::audit::read_audit(&setup.state, &setup.key).unwrap();
    assert!(summary.ok(), "{summary:?}");
    assert_eq!(summary.witness.as_ref().unwrap().audit.seq, 6);
    // Cut the last row: verification says so, and no handle builds on it.
    let path = setup.state.audit_path();
    let text = fs::read_to_string(&path).unwrap();
    let kept: String = text.split_inclusive('\n').take(6).collect();
    fs::write(&path, kept).unwrap();
    let summary = reprise_store::audit::read_audit(&setup.state, &setup.key).unwrap();
    assert_eq!(
        summary.witness_problem,
        Some(reprise_core::witness::WitnessReason::AuditTruncated)
    );
    let mut fresh = AuditLog::open(&setup.state, setup.key.clone()).unwrap();
    let refused = fresh.append("test.row", AT, &json!({"n": 7})).unwrap_err();
    assert!(
        refused.to_string().contains("ends before the head"),
        "{refused}"
    );
    assert_eq!(
        fs::read_to_string(&path).unwrap().lines().count(),
        6,
        "nothing was appended"
    );
}

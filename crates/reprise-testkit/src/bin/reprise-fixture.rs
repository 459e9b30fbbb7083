//! Builds fixtures and runs the raw reference loops for the benchmark script.
//!
//! Usage:
//!   reprise-fixture journal STATE_DIR TASK ROWS   a journal of ROWS rows, written
//!                                                 in bulk (no per-row fsync)
//!   reprise-fixture append STATE_DIR TASK N       N durable appends through reprise
//!   reprise-fixture raw-append FILE N             N times write(2) + fdatasync(2) of
//!                                                 a line of the same length
//!   reprise-fixture checkpoint TREE SHADOW [REPO]   one file checkpoint of TREE
//!                                                 into the shadow store SHADOW
//!                                                 (sharing REPO's objects); prints
//!                                                 the milliseconds and the id
//!   reprise-fixture restore TREE SHADOW ID        a rollback to checkpoint ID;
//!                                                 prints the milliseconds
//!   reprise-fixture audit-append STATE_DIR KEY N  N audit appends, each replacing
//!                                                 the witness beside KEY
//!   reprise-fixture audit-append-bare FILE KEY N  N audit rows of the same shape
//!                                                 through the same appender, no witness
//! The append modes print the elapsed microseconds per append.

#![forbid(unsafe_code)]

use std::fs::OpenOptions;
use std::io::Write;
use std::time::Instant;

use anyhow::{Result, bail};
use reprise_core::chain::ChainFormat;
use reprise_core::record::{encode_audit_row, encode_journal_row};
use reprise_store::ChainFile;
use reprise_store::audit::AuditLog;
use reprise_store::journal::Journal;
use reprise_store::key::load_key;
use reprise_store::state::StateDir;
use reprise_testkit::{FIXED_AT, sample_body};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut stdout = std::io::stdout().lock();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["journal", state_dir, task, rows] => {
            let state = StateDir::open(state_dir.as_ref())?;
            let task = reprise_testkit::fixture_key(task)?;
            reprise_testkit::write_journal_bulk(
                &state.journal_path(&task),
                &task.task,
                rows.parse()?,
            )?;
        }
        ["append", state_dir, task, count] => {
            let state = StateDir::open(state_dir.as_ref())?;
            let task = reprise_testkit::fixture_key(task)?;
            let count: u64 = count.parse()?;
            let mut journal = Journal::open(&state, &task)?;
            let start = Instant::now();
            for seq in 0..count {
                journal.append("task.checkpoint", FIXED_AT, &sample_body(seq))?;
            }
            writeln!(
                stdout,
                "{:.1}",
                start.elapsed().as_secs_f64() * 1e6 / count as f64
            )?;
        }
        ["audit-append", state_dir, key, count] => {
            let state = StateDir::open(state_dir.as_ref())?;
            let count: u64 = count.parse()?;
            let mut audit = AuditLog::open(&state, load_key(key.as_ref())?)?;
            let start = Instant::now();
            for seq in 0..count {
                audit.append("bench.row", FIXED_AT, &sample_body(seq))?;
            }
            writeln!(
                stdout,
                "{:.1}",
                start.elapsed().as_secs_f64() * 1e6 / count as f64
            )?;
        }
        ["audit-append-bare", file, key, count] => {
            let count: u64 = count.parse()?;
            let key = load_key(key.as_ref())?;
            let mut chain = ChainFile::open_real(
                file.as_ref(),
                ChainFormat::Audit,
                None,
                Some(key.key.clone()),
            )?;
            let start = Instant::now();
            for seq in 0..count {
                chain.append(|previous| {
                    Ok(encode_audit_row(
                        previous,
                        &key,
                        "bench.row",
                        FIXED_AT,
                        &sample_body(seq),
                    )?)
                })?;
            }
            writeln!(
                stdout,
                "{:.1}",
                start.elapsed().as_secs_f64() * 1e6 / count as f64
            )?;
        }
        ["raw-append", file, count] => {
            let count: u64 = count.parse()?;
            let task = reprise_core::TaskId::parse("raw")?;
            let line =
                encode_journal_row(None, &task, "task.checkpoint", FIXED_AT, &sample_body(0))?.line;
            let mut out = OpenOptions::new().create(true).append(true).open(file)?;
            let start = Instant::now();
            for _ in 0..count {
                let written = out.write(&line)?;
                assert_eq!(written, line.len(), "short write");
                out.sync_data()?;
            }
            writeln!(
                stdout,
                "{:.1}",
                start.elapsed().as_secs_f64() * 1e6 / count as f64
            )?;
        }
        ["checkpoint", tree, shadow, rest @ ..] => {
            let store = reprise_store::snapshot::SnapshotStore::open(
                shadow.as_ref(),
                tree.as_ref(),
                rest.first().map(|repo| std::path::Path::new(*repo)),
                reprise_store::snapshot::DEFAULT_MAX_FILE_BYTES,
            )?;
            let start = Instant::now();
            let checkpoint = store.take("bench")?;
            writeln!(
                stdout,
                "{:.1} {}",
                start.elapsed().as_secs_f64() * 1e3,
                checkpoint.id
            )?;
        }
        ["restore", tree, shadow, id] => {
            let store = reprise_store::snapshot::SnapshotStore::open(
                shadow.as_ref(),
                tree.as_ref(),
                None,
                reprise_store::snapshot::DEFAULT_MAX_FILE_BYTES,
            )?;
            let checkpoint = store.find(id)?;
            let start = Instant::now();
            store.restore(&checkpoint)?;
            writeln!(stdout, "{:.1}", start.elapsed().as_secs_f64() * 1e3)?;
        }
        _ => bail!(
            "usage: reprise-fixture journal|append STATE_DIR TASK N, raw-append FILE N, checkpoint TREE SHADOW [REPO], or restore TREE SHADOW ID"
        ),
    }
    Ok(())
}

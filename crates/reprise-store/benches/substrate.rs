//! Criterion benchmarks of the substrate, each beside its physical reference
//! measured in the same run:
//! - a durable append vs a raw `write` + `fdatasync` of a line as long;
//! - verifying a 1,000,000-row journal vs SHA-256 over the same bytes;
//! - hashing a 20,000-file x 4 KiB tree (see also `scripts/bench` for
//!   `find | xargs sha256sum` and `git status` on the same tree).

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use reprise_core::TaskId;
use reprise_core::chain::ChainFormat;
use reprise_core::record::encode_journal_row;
use reprise_store::journal::Journal;
use reprise_store::read_chain;
use reprise_store::state::StateDir;
use reprise_store::workspace::hash_workspace;
use serde_json::json;
use sha2::{Digest, Sha256};

const AT: &str = "2026-01-01T00:00:00.000Z";

fn body(seq: u64) -> serde_json::Value {
    json!({
        "attempt": seq % 4 + 1,
        "session_id": format!("0b8c5e7a-3f1d-4c2b-9a6e-{seq:012}"),
        "workspace_hash": "5f2c0a41d7e9b3f86a1c4d2e0b7f9a3c5e8d1f4a6b2c9e0d3f7a1b5c8e2d4f6a",
    })
}

fn append(c: &mut Criterion) {
    let temp = tempfile::tempdir().unwrap();
    let (state, _) = StateDir::create(&temp.path().join(".reprise")).unwrap();
    let task = reprise_core::TaskKey::new(
        reprise_core::PlanId::parse("bench").unwrap(),
        TaskId::parse("bench").unwrap(),
    );
    let mut journal = Journal::open(&state, &task).unwrap();
    let line = encode_journal_row(None, &task.task, "task.checkpoint", AT, &body(0))
        .unwrap()
        .line;
    let mut raw = OpenOptions::new()
        .create(true)
        .append(true)
        .open(temp.path().join("raw.jsonl"))
        .unwrap();
    let mut group = c.benchmark_group("append");
    group.sample_size(50);
    let mut seq = 0;
    group.bench_function("reprise durable append", |b| {
        b.iter(|| {
            seq += 1;
            journal.append("task.checkpoint", AT, &body(seq)).unwrap()
        });
    });
    group.bench_function("raw write+fdatasync", |b| {
        b.iter(|| {
            assert_eq!(raw.write(&line).unwrap(), line.len());
            raw.sync_data().unwrap();
        });
    });
    group.finish();
}

fn verify(c: &mut Criterion) {
    let rows = 1_000_000u64;
    let temp = tempfile::tempdir().unwrap();
    let path = temp.path().join("journal.jsonl");
    let task = TaskId::parse("bench").unwrap();
    let mut out = std::io::BufWriter::new(fs::File::create(&path).unwrap());
    let mut head = None;
    for seq in 0..rows {
        let row = encode_journal_row(head, &task, "task.checkpoint", AT, &body(seq)).unwrap();
        out.write_all(&row.line).unwrap();
        head = Some(row.head);
    }
    drop(out);
    let bytes = fs::read(&path).unwrap();
    let mut group = c.benchmark_group("verify 1M rows");
    group.sample_size(10);
    group.throughput(Throughput::Elements(rows));
    group.bench_function("reprise verify (file)", |b| {
        b.iter(|| {
            let report = read_chain(
                &path,
                ChainFormat::Journal,
                None,
                Some("bench"),
                &[],
                |_, _| {},
            )
            .unwrap();
            assert_eq!(report.rows, rows);
        });
    });
    group.bench_function("sha256 of the same bytes", |b| {
        b.iter(|| Sha256::digest(&bytes));
    });
    group.finish();
}

fn tree(root: &Path, files: usize, size: usize) {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut content = vec![0u8; size];
    for index in 0..files {
        let dir = root.join(format!("d{:03}", index % 200));
        fs::create_dir_all(&dir).unwrap();
        for byte in content.iter_mut() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *byte = state as u8;
        }
        fs::write(dir.join(format!("f{index:05}.bin")), &content).unwrap();
    }
}

fn workspace(c: &mut Criterion) {
    let temp = tempfile::tempdir().unwrap();
    tree(temp.path(), 20_000, 4096);
    let mut group = c.benchmark_group("workspace hash 20k x 4KiB");
    group.sample_size(10);
    group.bench_function("reprise workspace hash", |b| {
        b.iter(|| hash_workspace(temp.path(), 0).unwrap());
    });
    group.finish();
}

criterion_group!(benches, append, verify, workspace);
criterion_main!(benches);

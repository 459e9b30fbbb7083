//! Appends rows to one task journal, durably, one at a time, printing each
//! acknowledged `seq` on its own line as soon as the append returns. Used by
//! the multi-process and kill -9 tests.
//!
//! Usage: reprise-journal-writer STATE_DIR TASK COUNT TAG

#![forbid(unsafe_code)]

use std::io::Write;

use anyhow::{Context, Result};
use reprise_store::journal::Journal;
use reprise_store::state::StateDir;
use serde_json::json;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [state_dir, task, count, tag] = args.as_slice() else {
        anyhow::bail!("usage: reprise-journal-writer STATE_DIR TASK COUNT TAG");
    };
    let state = StateDir::open(state_dir.as_ref())?;
    let task = reprise_testkit::fixture_key(task)?;
    let count: u64 = count.parse().context("COUNT must be a number")?;
    let mut journal = Journal::open(&state, &task)?;
    let mut stdout = std::io::stdout().lock();
    for index in 0..count {
        let head = journal.append(
            "writer.row",
            reprise_testkit::FIXED_AT,
            &json!({"tag": tag, "index": index}),
        )?;
        writeln!(stdout, "{} {}", head.seq, head.digest)?;
        stdout.flush()?;
    }
    Ok(())
}

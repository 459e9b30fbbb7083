//! What supervision and containment cost per attempt: the median wall time
//! of 100 spawns of `true`, run directly (the reference), through the
//! supervisor without a sandbox (`containment: off`), and through the
//! supervisor with the Landlock sandbox (`containment: strict`). Run by
//! `scripts/bench-containment`.

#![allow(clippy::print_stdout)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_reprise");
const SPAWNS: usize = 100;

fn median(mut command: impl FnMut() -> Command) -> Duration {
    let mut times: Vec<Duration> = (0..SPAWNS)
        .map(|_| {
            let started = Instant::now();
            let status = command().status().expect("spawn");
            let elapsed = started.elapsed();
            assert!(status.success(), "{status}");
            elapsed
        })
        .collect();
    times.sort();
    times[SPAWNS / 2]
}

fn supervised(sandbox: serde_json::Value) -> Command {
    let spec = serde_json::json!({
        "v": 1,
        "parent": std::process::id(),
        "parent_death": true,
        "sandbox": sandbox,
    });
    let mut command = Command::new(BIN);
    command
        .arg("__supervise")
        .arg(spec.to_string())
        .arg("--")
        .arg("true");
    command
}

fn main() {
    let temp = tempfile::tempdir().expect("tempdir");
    let worktree = temp.path().join("project/.reprise/worktrees/task");
    let tmp = temp.path().join("project/.reprise/tmp/run/task-1");
    let key_dir = temp.path().join("home/.local/state/reprise");
    for dir in [&worktree, &tmp, &key_dir] {
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    let rules = serde_json::json!({
        "writable": [worktree, tmp],
        "hidden": [temp.path().join("project/.reprise"), key_dir],
    });
    let direct = median(|| Command::new("true"));
    let off = median(|| supervised(serde_json::Value::Null));
    let strict = median(|| supervised(rules.clone()));
    let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
    println!(
        "median of {SPAWNS} spawns of `true` (reprise at {})",
        Path::new(BIN).display()
    );
    println!("  direct (reference):                 {:.3} ms", ms(direct));
    println!("  supervised, containment off:        {:.3} ms", ms(off));
    println!("  supervised, containment strict:     {:.3} ms", ms(strict));
    println!(
        "  sandbox setup (strict - off):       {:.3} ms",
        ms(strict.saturating_sub(off))
    );
    println!(
        "  supervision and sandbox (strict - direct): {:.3} ms",
        ms(strict.saturating_sub(direct))
    );
}

//! What supervision and containment cost per attempt: the median wall time
//! of 100 spawns of `true`, run directly (the reference), through the
//! supervisor without a sandbox (`containment: off`), through the
//! supervisor with the Landlock sandbox (`containment: strict`) built by the
//! supervisor, and the same with the ruleset the driver prepared and hands
//! over (as every process after the first with the same rules gets it), plus
//! the driver's one build of that ruleset. Run by
//! `scripts/bench-containment`, which may name other supervisor binaries
//! (another build's `reprise-supervisor`, or an older `reprise`, which ran
//! the same `__supervise` itself): each is measured too, in the same rounds,
//! one spawn of each in turn.

#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_reprise-supervisor");
const SPAWNS: usize = 100;

/// The median of each command's wall time over `SPAWNS` rounds, each round
/// one spawn of every command in turn (so a burst of load on the machine
/// falls on all of them alike).
fn medians(commands: &mut [Box<dyn FnMut() -> ExitStatus + '_>]) -> Vec<Duration> {
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(SPAWNS); commands.len()];
    for _ in 0..SPAWNS {
        for (command, times) in commands.iter_mut().zip(&mut times) {
            let started = Instant::now();
            let status = command();
            let elapsed = started.elapsed();
            assert!(status.success(), "{status}");
            times.push(elapsed);
        }
    }
    times
        .into_iter()
        .map(|mut times| {
            times.sort();
            times[SPAWNS / 2]
        })
        .collect()
}

fn supervised(supervisor: &str, sandbox: serde_json::Value) -> Command {
    let spec = serde_json::json!({
        "v": 1,
        "parent": std::process::id(),
        "parent_death": true,
        "sandbox": sandbox,
    });
    let mut command = Command::new(supervisor);
    command
        .arg("__supervise")
        .arg(spec.to_string())
        .arg("--")
        .arg("true");
    command
}

fn main() {
    // `cargo bench` passes `--bench`; every other argument is a supervisor.
    let others: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with("--"))
        .collect();
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
    let prepared = reprise_agents::Supervision {
        supervisor: PathBuf::from(BIN),
        sandbox: Some(reprise_agents::SandboxRules {
            writable: vec![worktree, tmp],
            granted: Vec::new(),
            hidden: vec![temp.path().join("project/.reprise"), key_dir],
            writable_shm: false,
            connect_ports: None,
            hidden_by_mounts: false,
        }),
        records: None,
        parent_death: true,
        walls: reprise_agents::Walls::default(),
    };
    // The same, in namespaces of its own: a private view of processes and
    // a network with nothing but its loopback (`network: none`).
    let walled = reprise_agents::Supervision {
        walls: reprise_agents::Walls {
            namespaces: true,
            network: Some(reprise_agents::Reach::nothing()),
        },
        ..prepared.clone()
    };
    let supervisors: Vec<&str> = std::iter::once(BIN)
        .chain(others.iter().map(String::as_str))
        .collect();
    let status = |mut command: Command| command.status().expect("spawn");
    let mut commands: Vec<Box<dyn FnMut() -> ExitStatus + '_>> = vec![
        Box::new(|| status(Command::new("true"))),
        Box::new(|| {
            let (mut command, handover) =
                reprise_agents::supervise::supervised_command(&prepared, Path::new("true"), &[]);
            let mut child = command.spawn().expect("spawn");
            let null = std::fs::File::open("/dev/null").expect("/dev/null");
            handover
                .expect("a ruleset")
                .send(null.into())
                .expect("handover");
            child.wait().expect("wait")
        }),
        Box::new(|| {
            let (mut command, handover) =
                reprise_agents::supervise::supervised_walled(&walled, Path::new("true"), &[]);
            let mut child = command.spawn().expect("spawn");
            let null = std::fs::File::open("/dev/null").expect("/dev/null");
            handover
                .expect("a ruleset")
                .send(null.into())
                .expect("handover");
            child.wait().expect("wait")
        }),
    ];
    for &supervisor in &supervisors {
        commands.push(Box::new(move || {
            status(supervised(supervisor, serde_json::Value::Null))
        }));
        let rules = &rules;
        commands.push(Box::new(move || {
            status(supervised(supervisor, rules.clone()))
        }));
    }
    let times = medians(&mut commands);
    let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
    println!("median of {SPAWNS} spawns of `true`, interleaved");
    println!(
        "  direct (reference):                 {:.3} ms",
        ms(times[0])
    );
    for (index, supervisor) in supervisors.iter().enumerate() {
        let (off, strict) = (times[3 + 2 * index], times[4 + 2 * index]);
        println!("through {}", Path::new(supervisor).display());
        println!("  supervised, containment off:        {:.3} ms", ms(off));
        println!("  supervised, containment strict:     {:.3} ms", ms(strict));
        println!(
            "  sandbox setup (strict - off):       {:.3} ms",
            ms(strict.saturating_sub(off))
        );
        println!(
            "  supervision and sandbox (strict - direct): {:.3} ms",
            ms(strict.saturating_sub(times[0]))
        );
        if index == 0 {
            println!(
                "  supervised, strict, ruleset handed over by the driver: {:.3} ms",
                ms(times[1])
            );
            println!(
                "  the same in namespaces of its own (processes, network: none): {:.3} ms",
                ms(times[2])
            );
        }
    }
    let builds: Vec<Duration> = (0..SPAWNS)
        .map(|_| {
            let started = Instant::now();
            reprise_agents::supervise::build_ruleset(prepared.sandbox.as_ref().expect("rules"))
                .expect("ruleset");
            started.elapsed()
        })
        .collect();
    let mut builds = builds;
    builds.sort();
    println!(
        "the driver's build of that ruleset, once per set of rules: {:.3} ms",
        ms(builds[SPAWNS / 2])
    );
}

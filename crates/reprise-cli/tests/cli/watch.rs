//! `reprise watch` through the built binary: `--once` as text and JSON,
//! and the screen itself in a pseudo-terminal, driven by its keys while a
//! run goes on (the terminal emulator `vt100` turns what it drew into
//! text).

use std::io::{Read as _, Write as _};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::recovery::wait_for_an_attempt;
use super::worktrees::{git_env, outside_dir, write_plan};
use super::*;
use reprise_testkit::wait_until;

/// `reprise watch ARGS` in a pseudo-terminal 40 rows by 160 columns, its
/// screen kept up to date by a terminal emulator.
struct Screen {
    child: Box<dyn portable_pty::Child + Send + Sync>,
    writer: Box<dyn std::io::Write + Send>,
    parser: Arc<Mutex<vt100::Parser>>,
    // Kept open for the child's lifetime.
    _master: Box<dyn portable_pty::MasterPty + Send>,
}

impl Screen {
    fn start(env: &Env, args: &[&str]) -> Self {
        let pty = portable_pty::native_pty_system()
            .openpty(portable_pty::PtySize {
                rows: 40,
                cols: 160,
                pixel_width: 0,
                pixel_height: 0,
            })
            .unwrap();
        let mut command = portable_pty::CommandBuilder::new(BIN);
        command.args(args);
        command.cwd(env.project());
        command.env_clear();
        command.env("HOME", env.temp.path().join("home"));
        command.env("PATH", std::env::var_os("PATH").unwrap_or_default());
        command.env("TERM", "xterm-256color");
        let child = pty.slave.spawn_command(command).unwrap();
        drop(pty.slave);
        let parser = Arc::new(Mutex::new(vt100::Parser::new(40, 160, 0)));
        let mut reader = pty.master.try_clone_reader().unwrap();
        let fed = Arc::clone(&parser);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 8192];
            while let Ok(read) = reader.read(&mut buffer) {
                if read == 0 {
                    break;
                }
                fed.lock().unwrap().process(&buffer[..read]);
            }
        });
        let writer = pty.master.take_writer().unwrap();
        Self {
            child,
            writer,
            parser,
            _master: pty.master,
        }
    }

    fn text(&self) -> String {
        self.parser.lock().unwrap().screen().contents()
    }

    /// Waits (a minute at most) until the screen satisfies `test`.
    fn wait_for(&self, what: &str, test: impl Fn(&str) -> bool) {
        assert!(
            wait_until(Duration::from_secs(60), || test(&self.text())),
            "the screen never showed {what}:\n{}",
            self.text()
        );
    }

    fn wait_for_text(&self, needle: &str) {
        self.wait_for(needle, |text| text.contains(needle));
    }

    fn keys(&mut self, keys: &str) {
        self.writer.write_all(keys.as_bytes()).unwrap();
        self.writer.flush().unwrap();
    }

    /// Waits (a minute at most) for the watch to exit; its exit code.
    fn exit_code(&mut self) -> u32 {
        let mut status = None;
        assert!(
            wait_until(Duration::from_secs(60), || {
                status = self.child.try_wait().unwrap();
                status.is_some()
            }),
            "the watch did not exit:\n{}",
            self.text()
        );
        status.unwrap().exit_code()
    }

    /// Whether the terminal is back as the watch found it: the main screen,
    /// the cursor shown.
    fn restored(&self) -> bool {
        // Give the last bytes time to reach the emulator.
        wait_until(Duration::from_secs(10), || {
            let parser = self.parser.lock().unwrap();
            !parser.screen().alternate_screen() && !parser.screen().hide_cursor()
        })
    }
}

/// The line of `text` holding `needle`, and its index.
fn line_with<'a>(text: &'a str, needle: &str) -> Option<(usize, &'a str)> {
    text.lines()
        .enumerate()
        .find(|(_, line)| line.contains(needle))
}

/// A task parked until approval and one running (a command agent that
/// waits for a file the test writes), on two seats.
fn watched_plan(env: &Env) -> (String, PathBuf) {
    let dir = outside_dir(env, "signals");
    let plan = write_plan(
        env,
        "watched",
        &format!(
            r#"
version: 1
name: watched
seats: 2
tasks:
  - id: gate
    prompt: change the schema
    agent: sim
    sim:
      - {{ reply: "slow", write: {{ g.txt: one }}, delay: 120s }}
      - {{ reply: "after the approval", write: {{ g.txt: two }} }}
  - id: slow
    prompt: wait for the go
    agent: command
    timeout: 5m
    command: [sh, -c, "while [ ! -e {dir}/go ]; do sleep 0.1; done; echo done > s.txt"]
"#,
            dir = dir.display()
        ),
    );
    (plan, dir)
}

/// Waits until the sim agent has opened its session: a park before that
/// stops an attempt that never had one.
fn wait_for_a_sim_session(env: &Env) {
    let store = env.project().join(".reprise/sim");
    assert!(
        wait_until(Duration::from_secs(60), || {
            fs::read_dir(&store).is_ok_and(|entries| {
                entries
                    .flatten()
                    .any(|entry| entry.path().extension().is_some_and(|ext| ext == "jsonl"))
            })
        }),
        "the sim never opened a session"
    );
}

#[test]
fn the_park_comes_first_and_is_approved_and_resumed_from_the_watch_while_the_run_goes_on() {
    let env = git_env();
    let (plan, signals) = watched_plan(&env);
    let run = env.spawn(&["run", &plan, "--json"], std::process::Stdio::piped());
    wait_for_an_attempt(&env, "watched", "gate");
    wait_for_an_attempt(&env, "watched", "slow");
    wait_for_a_sim_session(&env);
    assert_success(&env.run(&[
        "task",
        "suspend",
        "gate",
        "--until",
        "approval",
        "--reason",
        "check the schema",
    ]));

    // One frame, for scripts: the park first under the attention heading,
    // selected, with what wakes it; the running task below, its cost
    // unknown while its attempt runs.
    let once = env.run(&["watch", "--once"]);
    assert_success(&once);
    let text = stdout(&once);
    let (heading, _) = line_with(&text, "ATTENTION (1)").expect(&text);
    let (park, park_line) = line_with(&text, "watched/gate").expect(&text);
    assert_eq!(park, heading + 1, "{text}");
    assert!(park_line.contains("> approval"), "{text}");
    assert!(
        park_line.contains("wakes: approve (a), then resume (r)"),
        "{text}"
    );
    let (_, slow) = line_with(&text, "watched/slow").expect(&text);
    assert!(
        slow.contains("running") && slow.contains("unknown"),
        "{text}"
    );
    assert!(!slow.contains("$0.00"), "{text}");
    let board = json_of(&env.run(&["watch", "--once", "--json"]));
    assert_eq!(board["attention"][0]["task_id"], "gate", "{board}");
    assert_eq!(board["attention"][0]["flag"]["kind"], "approval", "{board}");
    assert_eq!(board["selected"]["task_id"], "gate", "{board}");
    let slow = board["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|task| task["task_id"] == "slow")
        .unwrap();
    assert_eq!(slow["phase"], "running", "{board}");
    assert_eq!(slow["spent_micro_usd"], Value::Null, "{board}");
    assert!(slow["host"].as_str().is_some_and(|host| !host.is_empty()));

    // The screen: the same park first and selected; `a`, a note and Enter
    // approve it (the signed approval `reprise approve` writes); `r`
    // resumes it in the live run; `q` quits.
    let mut screen = Screen::start(&env, &["watch"]);
    screen.wait_for("the park first under the attention heading", |text| {
        line_with(text, "ATTENTION (1)").is_some_and(|(heading, _)| {
            line_with(text, "> approval    watched/gate")
                .is_some_and(|(park, _)| park == heading + 1)
        })
    });
    screen.keys("a");
    screen.wait_for_text("Approve the park of watched/gate");
    screen.keys("looks right\r");
    screen.wait_for_text("approved park");
    let approvals = env.project().join(".reprise/approvals/watched/gate");
    let approval = fs::read_dir(&approvals)
        .unwrap()
        .flatten()
        .find(|entry| entry.path().extension().is_some_and(|ext| ext == "json"))
        .map(|entry| fs::read_to_string(entry.path()).unwrap())
        .expect("the approval file");
    assert!(approval.contains("looks right"), "{approval}");
    screen.wait_for_text("parked      watched/gate");
    screen.wait_for_text("wakes: a resume (r)  (approved)");
    screen.keys("r");
    screen.wait_for_text("resumed watched/gate in live run");
    // The resumed task leaves the attention list and passes.
    screen.wait_for("the resumed task passed", |text| {
        text.contains("ATTENTION (0)")
            && line_with(text, "watched/gate").is_some_and(|(_, line)| line.contains("passed"))
    });
    screen.keys("q");
    assert_eq!(screen.exit_code(), 0);
    assert!(screen.restored(), "the terminal was left drawn on");

    // The running task goes on and the run finishes.
    fs::write(signals.join("go"), "").unwrap();
    let output = run.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    for task in result["tasks"].as_array().unwrap() {
        assert_eq!(task["state"], "passed", "{result}");
    }
    assert_success(&env.run(&["audit", "verify"]));
}

#[test]
fn a_stop_signal_ends_the_watch_with_the_terminal_restored() {
    let env = Env::new();
    env.init();
    let mut screen = Screen::start(&env, &["watch"]);
    screen.wait_for_text("ATTENTION (0)");
    let pid = screen.child.process_id().unwrap().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    assert_eq!(screen.exit_code(), 143);
    assert!(screen.restored(), "the terminal was left drawn on");
}

#[test]
fn watch_refuses_a_run_that_is_not_there_and_a_screen_that_is_not_a_terminal() {
    let env = Env::new();
    env.init();
    assert_one_line_error(
        &env.run(&["watch", "R-01J00000000000000000000000"]),
        2,
        "R-01J00000000000000000000000",
    );
    assert_one_line_error(&env.run(&["watch"]), 2, "--once");
    let once = env.run(&["watch", "--once"]);
    assert_success(&once);
    assert!(stdout(&once).contains("nothing waits on you"));
}

#[test]
fn with_fleet_each_task_shows_the_host_that_holds_it() {
    let env = git_env();
    assert_success(&env.run(&["init", "--plan"]));
    let run = json_of(&env.run(&["run", "plan.yaml", "--json"]));
    let run_id = run["run_id"].as_str().unwrap().to_owned();
    let database = reprise_testkit::pg::TestDatabase::create().unwrap();
    assert_success(&env.run(&["fleet", "init", "--db", &database.url]));
    let client =
        reprise_fleet::FleetClient::connect(&database.url, reprise_fleet::Timings::default())
            .unwrap();
    client.register_worker("build-2", 2).unwrap();
    let other = "R-01JF1EET00000000000000000A";
    for (run, task) in [(run_id.as_str(), "hello"), (other, "t1")] {
        client
            .open_run(&reprise_fleet::RunSpec {
                run_id: run.into(),
                plan_id: "starter".into(),
                coordinator_host: "coordinator".into(),
                remote: "origin".into(),
            })
            .unwrap();
        client
            .submit(run, task, &json!({}), &reprise_fleet::Affinity::Any)
            .unwrap();
    }
    assert_eq!(client.claim("build-2", 2).unwrap().len(), 2);

    // The local run's task, held by the fleet's worker, shows its host.
    let named = json_of(&env.run(&[
        "watch",
        &run_id,
        "--once",
        "--json",
        "--fleet",
        &database.url,
    ]));
    let tasks = named["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{named}");
    assert_eq!(tasks[0]["task_id"], "hello", "{named}");
    assert_eq!(tasks[0]["host"], "build-2", "{named}");
    // Every unfinished run: the fleet's task of a run this state directory
    // does not hold is shown too, with its host.
    let all = json_of(&env.run(&["watch", "--once", "--json", "--fleet", &database.url]));
    let fleet_task = all["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|task| task["task_id"] == "t1")
        .unwrap_or_else(|| panic!("{all}"));
    assert_eq!(fleet_task["host"], "build-2", "{all}");
    assert_eq!(fleet_task["phase"], "running (fleet)", "{all}");
    assert_eq!(fleet_task["spent_micro_usd"], Value::Null, "{all}");
    let text = stdout(&env.run(&["watch", "--once", "--fleet", &database.url]));
    assert!(
        line_with(&text, "-/t1").is_some_and(|(_, line)| line.contains("build-2")),
        "{text}"
    );
    // A bad url is bad input, said in one line.
    assert_one_line_error(
        &env.run(&["watch", "--once", "--fleet", "mysql://nowhere"]),
        2,
        "postgres",
    );
}

//! Snapshots of the CLI's stable text: the help of the main commands, the
//! check of the starter plan, refusals, and the summary of a sim run. What
//! changes from run to run (run ids, session ids, commit hashes, times,
//! temp paths) is redacted by insta's filters, so a snapshot changes only
//! when the words do. `cargo insta review` (or `INSTA_UPDATE=always`)
//! accepts a deliberate change; the `.snap` files are committed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_reprise");

/// A temp directory with a `home` and a git repository `project`, and
/// `reprise` run there with a cleared environment.
struct Env {
    temp: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        let temp = tempfile::tempdir().unwrap();
        fs::create_dir(temp.path().join("home")).unwrap();
        fs::create_dir(temp.path().join("project")).unwrap();
        let env = Self { temp };
        env.git(&["init", "-q", "-b", "main"]);
        fs::write(env.project().join("README"), "a project\n").unwrap();
        env.git(&["add", "README"]);
        env.git(&["commit", "-qm", "start"]);
        env
    }

    fn project(&self) -> PathBuf {
        self.temp.path().join("project")
    }

    fn git(&self, args: &[&str]) {
        let output = Command::new("git")
            .args(["-c", "user.name=user", "-c", "user.email=user@example.com"])
            .args(args)
            .current_dir(self.project())
            .env("HOME", self.temp.path().join("home"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(output.status.success(), "git {args:?}: {output:?}");
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .current_dir(self.project())
            .env_clear()
            .env("HOME", self.temp.path().join("home"))
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .output()
            .unwrap()
    }

    /// The exit code, stdout and stderr of `reprise ARGS`, as one text.
    fn shown(&self, args: &[&str]) -> String {
        let output = self.run(args);
        format!(
            "$ reprise {}\nexit: {}\n--- stdout\n{}--- stderr\n{}",
            args.join(" "),
            output
                .status
                .code()
                .map_or_else(|| "signal".to_owned(), |code| code.to_string()),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        )
    }

    /// insta settings whose filters redact this environment's temp paths
    /// and what changes between runs.
    fn settings(&self) -> insta::Settings {
        let mut settings = insta::Settings::clone_current();
        settings.set_prepend_module_to_snapshot(false);
        settings.add_filter(&regex::escape(&path_text(self.temp.path())), "[TEMP]");
        settings.add_filter(r"R-[0-9A-HJKMNP-TV-Z]{26}", "[RUN]");
        settings.add_filter(r"session [0-9a-f]{8}\b", "session [SESSION]");
        settings.add_filter(r"\b(HEAD|base) [0-9a-f]{7,40}\b", "$1 [COMMIT]");
        // Where a gate's program was found differs between systems.
        settings.add_filter(r"\bis (/[^/\s]+)+/", "is [BIN]/");
        settings
    }
}

fn path_text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

#[test]
fn help_of_the_main_commands() {
    let env = Env::new();
    env.settings().bind(|| {
        for (name, args) in [
            ("help", &["--help"][..]),
            ("help_run", &["run", "--help"][..]),
            ("help_status", &["status", "--help"][..]),
            ("help_task", &["task", "--help"][..]),
            ("help_rehearse", &["rehearse", "--help"][..]),
        ] {
            insta::assert_snapshot!(name, env.shown(args));
        }
    });
}

#[test]
fn the_starter_plan_checked_then_run_on_the_sim_agent() {
    let env = Env::new();
    let mut settings = env.settings();
    // How long the attempt took.
    settings.add_filter(r" *\b\d+(\.\d+)?(ms|s)\b", " [TIME]");
    settings.bind(|| {
        insta::assert_snapshot!("init_plan", env.shown(&["init", "--plan"]));
        env.git(&["add", "plan.yaml"]);
        env.git(&["commit", "-qm", "the starter plan"]);
        insta::assert_snapshot!(
            "run_check_starter",
            env.shown(&["run", "plan.yaml", "--check"])
        );
        insta::assert_snapshot!("run_starter", env.shown(&["run", "plan.yaml"]));
    });
}

#[test]
fn refusals_name_the_problem_and_the_fix() {
    let env = Env::new();
    fs::write(
        env.project().join("typo.yaml"),
        "version: 1\nname: typo\ntasks:\n  - id: a\n    promt: hi\n    agent: sim\n",
    )
    .unwrap();
    env.settings().bind(|| {
        insta::assert_snapshot!("refusal_unknown_plan_key", env.shown(&["run", "typo.yaml"]));
        insta::assert_snapshot!(
            "refusal_missing_plan",
            env.shown(&["run", "missing.yaml", "--check"])
        );
        insta::assert_snapshot!(
            "refusal_task_show_without_a_run",
            env.shown(&["task", "show", "nosuch"])
        );
    });
}

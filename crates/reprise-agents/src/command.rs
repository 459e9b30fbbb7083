//! The `command` adapter: runs any command as the agent. It has no sessions,
//! so its strategy is `Unsupported` and every retry is cold.
//!
//! The contract with the command:
//!
//! - it runs as the plan's argv (`argv[0]` a name on `PATH`, or a path,
//!   relative ones taken from the attempt's cwd; the request's `bin` does
//!   not apply) in the sandbox, in its own process group, with the
//!   wall-clock timeout;
//! - the prompt arrives on stdin (then closed) and in `REPRISE_PROMPT`,
//!   with `REPRISE_TASK_ID` and `REPRISE_ATTEMPT` (1-based) beside it. An
//!   environment string is limited to 128 KiB by Linux, so a larger prompt
//!   fails to spawn: read stdin;
//! - the reply is its stdout, less one trailing newline; the exit code is
//!   reported as is (non-zero is a verdict, not an infrastructure failure);
//! - cost is unknown unless the last line of stdout is `REPRISE_COST_USD=<dollars>`
//!   (a plain decimal such as `0.12`), which is read exactly as micro-dollars
//!   and removed from the reply. A malformed cost line stays in the reply and
//!   cost stays unknown.
//! - a command that exits non-zero and says, on stderr or in its last lines,
//!   that a quota ran out and when it resets (`usage limit reached; reset at
//!   <RFC 3339>`, `quota exhausted, resets in 90 minutes`) ends as
//!   `usage_limit` with the reset time, to be parked until then; one that
//!   prints nothing for the task's `park_when_idle` ends as
//!   `awaiting_permission` with its last lines as the question.
//!
//! No `--version` is probed: an arbitrary command may not understand it and
//! could do real work instead.

use std::path::PathBuf;
use std::time::Duration;

use reprise_core::retry::ResumeStrategy;

use crate::outcome::{
    AttemptOutcome, AttemptReport, InfraKind, Parsed, Streams, enforce_budget, infra,
    parse_usd_micro,
};
use crate::park::{Clock, last_words, settle_usage_limit};
use crate::process::{
    End, Finished, Invocation, Stdin, child_path_var, describe_duration, find_executable,
    park_idle, preflight, run_process, watch_outcome,
};
use crate::request::{Adapter, AttemptRequest, CancelToken};

/// The last-line marker a command prints to report its spend.
const COST_MARKER: &str = "REPRISE_COST_USD=";

/// Runs a plan-given command as the agent; no sessions.
#[derive(Debug, Clone)]
pub struct CommandAdapter {
    argv: Vec<String>,
    /// Variables for this agent's process only (the plan's
    /// `agents.command.env` and `pass_env`), after the request's own.
    env: Vec<(String, String)>,
}

impl CommandAdapter {
    /// An adapter that runs `argv` for every attempt.
    pub fn new(argv: Vec<String>) -> Self {
        Self {
            argv,
            env: Vec::new(),
        }
    }

    /// The same adapter, its processes also given `env` (a gate, which
    /// runs through this adapter too, is built without).
    #[must_use]
    pub fn with_env(mut self, env: Vec<(String, String)>) -> Self {
        self.env = env;
        self
    }
}

impl Adapter for CommandAdapter {
    fn name(&self) -> &'static str {
        "command"
    }

    fn strategy(&self) -> ResumeStrategy {
        ResumeStrategy::Unsupported
    }

    fn run(&self, request: &AttemptRequest, cancel: &CancelToken) -> AttemptReport {
        let mut report = AttemptReport {
            outcome: infra(InfraKind::SpawnFailed, "not started"),
            session_id: None,
            cost_micro_usd: None,
            session_model: None,
            adapter: "command",
            cli_version: None,
            cwd: request.cwd.clone(),
            config_home: request.config_home.clone(),
            argv: self.argv.clone(),
            elapsed: Duration::ZERO,
            streams: Default::default(),
            park: None,
        };
        let Some(name) = self.argv.first().filter(|name| !name.is_empty()) else {
            report.outcome = infra(
                InfraKind::MissingBinary,
                "the command adapter has an empty command; set the task's command",
            );
            return report;
        };
        let mut request = request.clone();
        request.env.extend(self.env.iter().cloned());
        let request = &request;
        let path_var = child_path_var(&request.env);
        let Some(program) = find_executable(name.as_ref(), &request.cwd, path_var.as_deref())
        else {
            report.outcome = infra(
                InfraKind::MissingBinary,
                format!(
                    "command '{name}' is not an executable file or not on PATH; fix the task's command"
                ),
            );
            return report;
        };
        if let Some(outcome) = preflight(request, cancel) {
            report.outcome = outcome;
            return report;
        }
        let invocation = invocation(request, program, &self.argv[1..]);
        let finished = match run_process(
            &invocation,
            &request.cwd,
            request.timeout,
            cancel,
            request.supervision.as_ref(),
            request.watch.clone(),
        ) {
            Ok(finished) => finished,
            Err(error) => {
                report.outcome = infra(
                    InfraKind::SpawnFailed,
                    format!("could not start command '{name}': {error}"),
                );
                return report;
            }
        };
        read_finished(&mut report, name, request, &finished);
        report
    }

    /// Commands keep no transcript reprise knows of.
    fn transcript_path(
        &self,
        _session_id: &str,
        _cwd: &std::path::Path,
        _config_home: Option<&std::path::Path>,
    ) -> Option<PathBuf> {
        None
    }
}

/// The process for one attempt: the prompt on stdin and in the environment.
pub(crate) fn invocation(
    request: &AttemptRequest,
    program: PathBuf,
    args: &[String],
) -> Invocation {
    let mut env = request.env.clone();
    env.extend([
        ("REPRISE_PROMPT".to_string(), request.prompt.clone()),
        (
            "REPRISE_TASK_ID".to_string(),
            request.task_id.as_str().to_string(),
        ),
        ("REPRISE_ATTEMPT".to_string(), request.attempt.to_string()),
    ]);
    Invocation {
        cli_prefixes: &[],
        provider: crate::network::Provider::Any,
        program,
        args: args.to_vec(),
        env,
        stdin: Stdin::Text(request.prompt.clone()),
        prompt_arg: None,
        session_id: None,
    }
}

/// Reads the reply and the optional cost line from a command's stdout.
pub(crate) fn parse(exit_code: i32, stdout: &str) -> Parsed {
    let body = strip_one_newline(stdout);
    let (head, last) = match body.rsplit_once('\n') {
        Some((head, last)) => (head, last),
        None => ("", body),
    };
    let cost = last.strip_prefix(COST_MARKER).and_then(parse_usd_micro);
    let reply = match cost {
        Some(_) => head.strip_suffix('\r').unwrap_or(head),
        None => body,
    };
    Parsed {
        cost_micro_usd: cost,
        ..Parsed::of(AttemptOutcome::Replied {
            exit_code,
            reply: reply.to_string(),
        })
    }
}

fn strip_one_newline(text: &str) -> &str {
    text.strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(text)
}

/// What a finished command comes to, written into `report`: the outcome
/// the way it ended calls for and, when it exited, what its output says.
fn read_finished(
    report: &mut AttemptReport,
    name: &str,
    request: &AttemptRequest,
    finished: &Finished,
) {
    report.elapsed = finished.elapsed;
    report.streams = Streams::kept(&finished.stdout, &finished.stderr);
    report.outcome = match finished.end {
        End::TimedOut => infra(
            InfraKind::Timeout,
            format!(
                "command '{name}' did not finish within {}; its process group was killed",
                describe_duration(request.timeout)
            ),
        ),
        End::Cancelled => infra(
            InfraKind::Cancelled,
            format!("cancelled; the process group of command '{name}' was killed"),
        ),
        End::OutputLimit | End::Idle => {
            watch_outcome(finished.end, &format!("command '{name}'"), &request.watch)
        }
        End::ParkIdle => {
            let (outcome, park) = park_idle(
                &format!("command '{name}'"),
                &request.watch,
                &String::from_utf8_lossy(&finished.stdout),
                &String::from_utf8_lossy(&finished.stderr),
            );
            report.park = Some(park);
            outcome
        }
        End::Exited | End::Talked => {
            let stdout = String::from_utf8_lossy(&finished.stdout);
            let stderr = String::from_utf8_lossy(&finished.stderr);
            let mut parsed = parse(finished.exit_code, &stdout);
            // A command that failed may say it hit a usage limit and
            // when it resets (`reset at <RFC 3339>`, `resets in N
            // minutes`): on stderr, or in the last lines it printed.
            if finished.exit_code != 0 {
                parsed.limit_text = Some(format!("{stderr}\n{}", last_words(&stdout, "")));
            }
            let parsed = settle_usage_limit(parsed, &Clock::system());
            report.park = parsed.park.clone();
            report.cost_micro_usd = parsed.cost_micro_usd;
            enforce_budget(
                parsed.outcome,
                parsed.cost_micro_usd,
                request.budget_micro_usd,
            )
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::SessionMode;
    use crate::request::tests::request;
    use std::path::Path;

    fn replied(exit_code: i32, reply: &str) -> AttemptOutcome {
        AttemptOutcome::Replied {
            exit_code,
            reply: reply.into(),
        }
    }

    #[test]
    fn the_reply_loses_one_trailing_newline() {
        assert_eq!(parse(0, "hello\n").outcome, replied(0, "hello"));
        assert_eq!(parse(0, "hello\n\n").outcome, replied(0, "hello\n"));
        assert_eq!(parse(0, "hello\r\n").outcome, replied(0, "hello"));
        assert_eq!(parse(0, "hello").outcome, replied(0, "hello"));
        assert_eq!(parse(7, "").outcome, replied(7, ""));
    }

    #[test]
    fn a_final_cost_line_is_read_exactly_and_stripped() {
        let parsed = parse(0, "DONE\nREPRISE_COST_USD=0.12\n");
        assert_eq!(parsed.outcome, replied(0, "DONE"));
        assert_eq!(parsed.cost_micro_usd, Some(120_000));
        let parsed = parse(0, "line one\nline two\r\nREPRISE_COST_USD=0.0000015\r\n");
        assert_eq!(parsed.outcome, replied(0, "line one\nline two"));
        assert_eq!(parsed.cost_micro_usd, Some(2));
        let parsed = parse(0, "hello\n\nREPRISE_COST_USD=0.5\n");
        assert_eq!(parsed.outcome, replied(0, "hello\n"));
        let parsed = parse(3, "REPRISE_COST_USD=1");
        assert_eq!(parsed.outcome, replied(3, ""));
        assert_eq!(parsed.cost_micro_usd, Some(1_000_000));
    }

    #[test]
    fn other_cost_lines_stay_in_the_reply() {
        for stdout in [
            "REPRISE_COST_USD=0.12\nDONE\n",
            "DONE\nREPRISE_COST_USD=lots\n",
            "DONE\nREPRISE_COST_USD=-1\n",
            "DONE\n REPRISE_COST_USD=0.1\n",
        ] {
            let parsed = parse(0, stdout);
            assert_eq!(parsed.cost_micro_usd, None, "{stdout:?}");
            assert_eq!(
                parsed.outcome,
                replied(0, strip_one_newline(stdout)),
                "{stdout:?}"
            );
        }
    }

    #[test]
    fn the_invocation_passes_the_prompt_on_stdin_and_in_the_environment() {
        let mut request = request(SessionMode::New { session_id: None }, Path::new("/w"));
        request.attempt = 3;
        request.env = vec![("EXTRA".into(), "1".into())];
        let built = invocation(
            &request,
            PathBuf::from("/bin/agent"),
            &["--flag".to_string()],
        );
        assert_eq!(built.args, ["--flag"]);
        assert_eq!(built.stdin, Stdin::Text(request.prompt.clone()));
        assert_eq!(
            built.env,
            [
                ("EXTRA".to_string(), "1".to_string()),
                ("REPRISE_PROMPT".to_string(), request.prompt),
                ("REPRISE_TASK_ID".to_string(), "add-greeting".to_string()),
                ("REPRISE_ATTEMPT".to_string(), "3".to_string()),
            ]
        );
    }

    fn run_script(script: &str, watch: crate::request::Watch) -> AttemptReport {
        let dir = tempfile::tempdir().expect("tempdir");
        let adapter = CommandAdapter::new(vec!["/bin/sh".into(), "-c".into(), script.into()]);
        let request = AttemptRequest {
            watch,
            ..request(SessionMode::New { session_id: None }, dir.path())
        };
        adapter.run(&request, &CancelToken::new())
    }

    #[test]
    fn a_command_that_reports_a_usage_limit_with_its_reset_is_to_be_parked() {
        let report = run_script(
            "echo 'working'; echo 'usage limit reached; resets in 90 minutes' >&2; exit 3",
            Default::default(),
        );
        let AttemptOutcome::Infra { kind, detail } = &report.outcome else {
            panic!("{report:?}")
        };
        assert_eq!(*kind, InfraKind::UsageLimit, "{detail}");
        let Some(crate::ParkSignal::Until { unix, source }) = report.park else {
            panic!("{report:?}")
        };
        assert_eq!(source, reprise_core::reset::ResetSource::Relative);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!((now + 5390..=now + 5401).contains(&unix), "{unix} vs {now}");
        // The same words from a command that succeeded are its reply.
        let report = run_script(
            "echo 'usage limit reached; resets in 90 minutes'",
            Default::default(),
        );
        assert_eq!(
            (report.outcome, report.park),
            (
                replied(0, "usage limit reached; resets in 90 minutes"),
                None
            )
        );
        // A failure that names no reset stays a verdict.
        let report = run_script("echo 'usage limit reached' >&2; exit 3", Default::default());
        assert_eq!((report.outcome, report.park), (replied(3, ""), None));
    }

    #[test]
    fn a_silent_command_past_park_when_idle_awaits_permission() {
        let report = run_script(
            "echo 'Proceed with the migration? [y/N]'; exec sleep 30",
            crate::request::Watch {
                park_when_idle: Some(Duration::from_millis(300)),
                ..Default::default()
            },
        );
        crate::request::tests::assert_awaits_approval(&report, "Proceed with the migration? [y/N]");
    }

    #[test]
    fn the_strategy_is_none() {
        let adapter = CommandAdapter::new(vec!["true".into()]);
        assert_eq!(adapter.name(), "command");
        assert_eq!(adapter.strategy(), ResumeStrategy::Unsupported);
        assert_eq!(
            adapter.strategy().capability(),
            reprise_core::retry::Capability::None
        );
        assert_eq!(adapter.transcript_path("s", Path::new("/"), None), None);
    }
}

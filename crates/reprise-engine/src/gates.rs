//! Gates: the checks an attempt must pass. A `run` gate is a shell command in
//! the task's sandbox that passes with exit status 0, under its own timeout;
//! a `result_matches` gate is a regex over the agent's reply. A gate graded
//! on a retry-budget criterion runs with `{{ level }}` in its command set to
//! the level the budget allows now, and its verdict records that level.

use std::path::Path;

use reprise_agents::{
    Adapter, AttemptOutcome, AttemptRequest, CancelToken, CommandAdapter, SessionMode, Supervision,
};
use reprise_core::TaskId;
use reprise_core::plan::{Gate, GateCheck};
use reprise_core::recovery::gate_could_not_run;

use crate::state::GateVerdict;

/// What every gate of one attempt shares.
pub(crate) struct GateRun<'a> {
    pub(crate) task: &'a TaskId,
    pub(crate) attempt: u32,
    pub(crate) cwd: &'a Path,
    pub(crate) reply: &'a str,
    pub(crate) cancel: &'a CancelToken,
    /// Extra environment for gate commands.
    pub(crate) env: &'a [(String, String)],
    /// How gate commands are supervised and contained.
    pub(crate) supervision: Option<&'a Supervision>,
}

impl GateRun<'_> {
    /// Runs `gates` in plan order; `level_of` names a criterion's level now.
    pub(crate) fn run_all(
        &self,
        gates: &[Gate],
        level_of: &dyn Fn(&str) -> Option<i64>,
    ) -> Vec<GateVerdict> {
        gates
            .iter()
            .map(|gate| {
                let level = gate
                    .criterion
                    .as_ref()
                    .and_then(|criterion| level_of(&criterion.name));
                self.run(gate, level)
            })
            .collect()
    }

    fn run(&self, gate: &Gate, level: Option<i64>) -> GateVerdict {
        let verdict = |passed: bool,
                       could_not_run: bool,
                       exit_code: Option<i32>,
                       output: String| GateVerdict {
            name: gate.name.clone(),
            passed,
            could_not_run,
            crashed: false,
            exit_code,
            level,
            timed_out_after_ms: None,
            output,
        };
        match &gate.check {
            GateCheck::ResultMatches(pattern) => {
                verdict(pattern.is_match(self.reply), false, None, String::new())
            }
            GateCheck::Run { command, timeout } => {
                // The gate's output is what a developer would read: stdout and
                // stderr together, in order.
                let command = format!("exec 2>&1\n{}", with_level(command, level));
                let shell = CommandAdapter::new(vec!["sh".into(), "-c".into(), command]);
                let mut env = vec![("REPRISE_GATE".to_owned(), gate.name.clone())];
                env.extend(self.env.iter().cloned());
                if let Some(level) = level {
                    env.push(("REPRISE_GATE_LEVEL".to_owned(), level.to_string()));
                }
                let request = AttemptRequest {
                    task_id: self.task.clone(),
                    attempt: self.attempt,
                    prompt: String::new(),
                    session: SessionMode::New { session_id: None },
                    cwd: self.cwd.to_path_buf(),
                    timeout: *timeout,
                    env,
                    bin: None,
                    config_home: None,
                    budget_micro_usd: None,
                    supervision: self.supervision.map(|supervision| {
                        let mut supervision = supervision.clone();
                        supervision.walls.network = crate::walls::reach_of(&gate.network, &[]);
                        supervision
                    }),
                    watch: Default::default(),
                    model: None,
                };
                let contained = self
                    .supervision
                    .is_some_and(|supervision| supervision.sandbox.is_some());
                match shell.run(&request, self.cancel).outcome {
                    // 126 and 127: the command was not executable or not
                    // found. The gate said nothing about the work.
                    AttemptOutcome::Replied { exit_code, reply }
                        if gate_could_not_run(exit_code) =>
                    {
                        verdict(false, true, Some(exit_code), reply)
                    }
                    AttemptOutcome::Replied { exit_code, reply } => {
                        let reply = if exit_code != 0 && contained {
                            with_denial_hint(reply)
                        } else {
                            reply
                        };
                        verdict(exit_code == 0, false, Some(exit_code), reply)
                    }
                    // Stopped midway (its timeout): it may have left the tree
                    // half-written.
                    AttemptOutcome::Infra {
                        kind: reprise_agents::InfraKind::Timeout,
                        ..
                    } => GateVerdict {
                        crashed: true,
                        timed_out_after_ms: Some(
                            u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                        ),
                        ..verdict(false, true, None, String::new())
                    },
                    AttemptOutcome::Infra { .. } => verdict(false, true, None, String::new()),
                }
            }
        }
    }
}

/// What a failed, contained gate's output gains when it reads like a denied
/// write: where the fix goes.
pub(crate) const DENIAL_HINT: &str = "reprise: this gate runs contained: it may write only in the worktree and its TMPDIR; add a path it must write elsewhere (a cache, say) to the task's allowed_paths";

fn with_denial_hint(output: String) -> String {
    if denied_lines(&output).is_empty() {
        return output;
    }
    let sep = if output.is_empty() || output.ends_with('\n') {
        ""
    } else {
        "\n"
    };
    format!("{output}{sep}{DENIAL_HINT}\n")
}

/// The lines of `output` that report a permission error, as a contained
/// process sees a denied access (at most 10).
pub(crate) fn denied_lines(output: &str) -> Vec<String> {
    output
        .lines()
        .filter(|line| {
            line.contains("Permission denied")
                || line.contains("Operation not permitted")
                || line.contains("EACCES")
                || line.contains("EPERM")
        })
        .take(10)
        .map(|line| crate::text::clip(line, 300))
        .collect()
}

/// The gate's command with `{{ level }}` (or `{{level}}`) replaced.
fn with_level(command: &str, level: Option<i64>) -> String {
    let Some(level) = level else {
        return command.to_owned();
    };
    let level = level.to_string();
    command
        .replace("{{ level }}", &level)
        .replace("{{level}}", &level)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_level_is_put_into_the_command() {
        assert_eq!(
            with_level("check --min {{ level }}", Some(70)),
            "check --min 70"
        );
        assert_eq!(
            with_level("check --min {{level}}", Some(-1)),
            "check --min -1"
        );
        assert_eq!(
            with_level("check --min {{ level }}", None),
            "check --min {{ level }}"
        );
    }
}

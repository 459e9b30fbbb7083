//! Gates: the checks an attempt must pass. A `run` gate is a shell command in
//! the task's sandbox that passes with exit status 0, under its own timeout;
//! a `result_matches` gate is a regex over the agent's reply.

use std::path::Path;

use reprise_agents::{
    Adapter, AttemptOutcome, AttemptRequest, CancelToken, CommandAdapter, SessionMode,
};
use reprise_core::TaskId;
use reprise_core::plan::{Gate, GateCheck};

use crate::state::GateVerdict;

/// Runs every gate of an attempt, in plan order.
pub(crate) fn run_gates(
    task: &TaskId,
    attempt: u32,
    gates: &[Gate],
    cwd: &Path,
    reply: &str,
    cancel: &CancelToken,
) -> Vec<GateVerdict> {
    gates
        .iter()
        .map(|gate| run_gate(task, attempt, gate, cwd, reply, cancel))
        .collect()
}

fn run_gate(
    task: &TaskId,
    attempt: u32,
    gate: &Gate,
    cwd: &Path,
    reply: &str,
    cancel: &CancelToken,
) -> GateVerdict {
    match &gate.check {
        GateCheck::ResultMatches(pattern) => GateVerdict {
            name: gate.name.clone(),
            passed: pattern.is_match(reply),
            could_not_run: false,
            exit_code: None,
        },
        GateCheck::Run { command, timeout } => {
            let shell = CommandAdapter::new(vec!["sh".into(), "-c".into(), command.clone()]);
            let request = AttemptRequest {
                task_id: task.clone(),
                attempt,
                prompt: String::new(),
                session: SessionMode::New { session_id: None },
                cwd: cwd.to_path_buf(),
                timeout: *timeout,
                env: vec![("REPRISE_GATE".into(), gate.name.clone())],
                bin: None,
                config_home: None,
                budget_micro_usd: None,
            };
            match shell.run(&request, cancel).outcome {
                AttemptOutcome::Replied { exit_code, .. } => GateVerdict {
                    name: gate.name.clone(),
                    passed: exit_code == 0,
                    could_not_run: false,
                    exit_code: Some(exit_code),
                },
                AttemptOutcome::Infra { .. } => GateVerdict {
                    name: gate.name.clone(),
                    passed: false,
                    could_not_run: true,
                    exit_code: None,
                },
            }
        }
    }
}

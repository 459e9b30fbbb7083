//! A scenario checked against the plan it is to serve, before anything runs:
//! a rule naming a task the plan does not have, a task no rule can answer,
//! and a tool the task's CLI does not offer would otherwise surface only as
//! failed requests (or, for an unknown tool, as an agent looping on the
//! error). Pure.

use crate::model_server::{Position, Scenario, ScenarioError};
use crate::setup::Client;

/// The tools each CLI offers its model: what the pinned versions
/// (`scripts/install-agent-clis`) sent in kept request bodies, then the
/// other built-in tools their code names.
pub fn tools(client: Client) -> Option<&'static [&'static str]> {
    match client {
        // 2.1.197 sends the first 24 (seen in kept bodies); the rest it
        // offers in other configurations.
        Client::Claude => Some(&[
            "Agent",
            "Bash",
            "CronCreate",
            "CronDelete",
            "CronList",
            "Edit",
            "EnterWorktree",
            "ExitWorktree",
            "NotebookEdit",
            "Read",
            "ReportFindings",
            "ScheduleWakeup",
            "SendMessage",
            "Skill",
            "TaskCreate",
            "TaskGet",
            "TaskList",
            "TaskOutput",
            "TaskStop",
            "TaskUpdate",
            "WebFetch",
            "WebSearch",
            "Workflow",
            "Write",
            "Glob",
            "Grep",
            "TodoWrite",
            "ToolSearch",
            "AskUserQuestion",
            "EnterPlanMode",
            "ExitPlanMode",
        ]),
        // 0.171 sends the first ten; the rest it offers in other modes.
        Client::Codex => Some(&[
            "exec_command",
            "write_stdin",
            "request_user_input",
            "apply_patch",
            "view_image",
            "get_goal",
            "create_goal",
            "update_goal",
            "tool_search",
            "web_search",
            "shell",
            "update_plan",
            "list_mcp_resources",
            "list_mcp_resource_templates",
            "read_mcp_resource",
        ]),
        // 0.61 sends the first eleven under `--approval-mode auto_edit`;
        // the rest are its other built-in tools.
        Client::Gemini => Some(&[
            "update_topic",
            "list_directory",
            "read_file",
            "grep_search",
            "glob",
            "replace",
            "write_file",
            "web_fetch",
            "google_web_search",
            "enter_plan_mode",
            "invoke_agent",
            "read_many_files",
            "run_shell_command",
            "write_todos",
            "save_memory",
            "activate_skill",
            "ask_user",
            "exit_plan_mode",
            "complete_task",
            "get_internal_docs",
            "list_mcp_resources",
            "read_mcp_resource",
        ]),
        Client::Command | Client::Acp => None,
    }
}

fn client_name(client: Client) -> &'static str {
    match client {
        Client::Claude => "claude",
        Client::Codex => "codex",
        Client::Gemini => "gemini",
        Client::Command => "command",
        Client::Acp => "acp",
    }
}

/// One task of the plan as the checks see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanTask<'a> {
    pub id: &'a str,
    /// The CLI the server serves it, or `None` when it never calls the server.
    pub client: Option<Client>,
}

/// The first problem of `scenario` (read from `file`) for a plan of `tasks`.
pub fn check(scenario: &Scenario, file: &str, tasks: &[PlanTask<'_>]) -> Result<(), ScenarioError> {
    let invalid = |at: Position, key: &str, problem: String| ScenarioError::Invalid {
        file: file.to_owned(),
        at,
        key: key.to_owned(),
        problem,
    };
    let served: Vec<&PlanTask<'_>> = tasks.iter().filter(|task| task.client.is_some()).collect();
    for rule in &scenario.rules {
        if let Some(task) = &rule.matcher.task
            && !tasks.iter().any(|planned| planned.id == task)
        {
            let names: Vec<&str> = tasks.iter().map(|task| task.id).collect();
            return Err(invalid(
                rule.task_at,
                "match.task",
                format!(
                    "the plan has no task {task} (its tasks: {}); fix the name or remove the rule",
                    names.join(", ")
                ),
            ));
        }
    }
    for (rule, tool) in scenario.tool_calls() {
        let applies = served.iter().filter(|task| {
            rule.matcher
                .task
                .as_deref()
                .is_none_or(|named| named == task.id)
        });
        for task in applies {
            let Some(client) = task.client else { continue };
            let Some(offered) = tools(client) else {
                continue;
            };
            if !offered.contains(&tool.name.as_str()) {
                return Err(invalid(
                    tool.at,
                    "reply.tool",
                    format!(
                        "{} (task {}) offers no tool {}; it offers {}",
                        client_name(client),
                        task.id,
                        tool.name,
                        offered.join(", ")
                    ),
                ));
            }
        }
    }
    for task in &served {
        let answerable = scenario.rules.iter().any(|rule| {
            rule.matcher
                .task
                .as_deref()
                .is_none_or(|named| named == task.id)
        });
        if !answerable {
            return Err(invalid(
                scenario.rules_at,
                "rules",
                format!(
                    "no rule can answer task {}: every rule names another task; add a rule with `task: {}` or one without `task`",
                    task.id, task.id
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &[PlanTask<'static>] = &[
        PlanTask {
            id: "fix",
            client: Some(Client::Codex),
        },
        PlanTask {
            id: "docs",
            client: Some(Client::Claude),
        },
        PlanTask {
            id: "local",
            client: None,
        },
    ];

    fn problem(yaml: &str) -> String {
        let scenario = Scenario::from_yaml(yaml).expect("the scenario parses");
        check(&scenario, "s.yaml", PLAN).unwrap_err().to_string()
    }

    #[test]
    fn a_rule_for_a_task_the_plan_lacks_is_refused_at_its_name() {
        let yaml = "rules:\n  - match: { task: fix }\n    reply: { text: ok }\n  - match: { task: dosc }\n    reply: { text: ok }\n  - reply: { text: ok }\n";
        assert_eq!(
            problem(yaml),
            "s.yaml:4:20: match.task: the plan has no task dosc (its tasks: fix, docs, local); fix the name or remove the rule"
        );
    }

    #[test]
    fn a_tool_the_cli_lacks_is_refused_at_the_tool() {
        let yaml = "rules:\n  - match: { task: docs }\n    reply: { tool: Read }\n  - reply: { tool: Bash, input: { command: ls } }\n";
        let message = problem(yaml);
        assert!(
            message.starts_with("s.yaml:4:20: reply.tool: codex (task fix) offers no tool Bash; it offers exec_command"),
            "{message}"
        );
        let steps = "rules:\n  - match: { task: fix }\n    reply:\n      steps:\n        - { tool: exec_command, input: { cmd: ls } }\n        - { tool: Edit }\n  - reply: { text: ok }\n";
        assert!(
            problem(steps)
                .starts_with("s.yaml:6:19: reply.tool: codex (task fix) offers no tool Edit")
        );
    }

    #[test]
    fn a_task_no_rule_answers_is_refused_at_the_rules() {
        let yaml = "rules:\n  - match: { task: fix }\n    reply: { text: ok }\n";
        assert_eq!(
            problem(yaml),
            "s.yaml:2:3: rules: no rule can answer task docs: every rule names another task; add a rule with `task: docs` or one without `task`"
        );
        let fine = "rules:\n  - match: { task: fix }\n    reply: { tool: apply_patch, input: \"x\" }\n  - reply: { text: ok }\n";
        let scenario = Scenario::from_yaml(fine).unwrap();
        assert!(check(&scenario, "s.yaml", PLAN).is_ok());
    }
}

//! Whole-plan tests: a full plan resolved to its typed values, and a table of
//! bad plans, each pinned to the line, key path and message of its error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::{TaskId, TaskIdError};

const FULL: &str = r#"version: 1
name: quickstart
seats: 2
budget_usd: "5.00"
retry_budget: "2 retries, degrade: coverage"
agents:
  claude: { bin: /opt/claude/bin/claude, allowed_tools: [Bash, "Bash(git log:*)"] }
  sim: {}
defaults:
  agent: sim
  retry_policy: fork
  max_retries: 3
  timeout: 20m
  sandbox: none
tasks:
  - id: add-greeting
    prompt: "Create greeting.txt containing hello"
    budget_usd: "1.00"
    sim:
      - reply: "I wrote it"
        write: { greeting.txt: "hi\n", sub/dir/b.txt: "" }
        exit_code: 1
        cost_usd: "0.01"
        delay: 500ms
      - reply: DONE
    gates:
      - { name: content, run: "grep -qx hello greeting.txt", disclose: verdict, timeout: 1m }
      - { name: answer, result_matches: "^DONE" }
      - name: coverage
        run: "check --level {{ level }}"
        criterion: coverage
        levels: [90, 80, 70]
  - id: review
    prompt: Review it
    agent: command
    command: ["sh", "-c", "echo hi"]
    retry_policy: cold
    max_retries: 0
    timeout: 1h30m
    agent_restart_between_retries: true
    budget_usd: "1.5"
    sandbox: worktree
    depends_on: [add-greeting]
  - id: plain
    prompt: Defaults only
"#;

fn id(text: &str) -> TaskId {
    TaskId::parse(text).unwrap()
}

#[test]
fn plan_full_plan_resolves_to_typed_values() {
    let plan = parse_plan(FULL, "plan.yaml").unwrap();
    assert_eq!(plan.name(), "quickstart");
    assert_eq!(plan.seats(), 2);
    assert_eq!(plan.budget_micro_usd(), Some(5_000_000));
    assert_eq!(plan.retry_budget(), Some("2 retries, degrade: coverage"));
    assert_eq!(
        plan.agent_settings(AgentKind::Claude),
        Some(&AgentSettings {
            bin: Some("/opt/claude/bin/claude".into()),
            allowed_tools: vec!["Bash".into(), "Bash(git log:*)".into()],
            ..AgentSettings::default()
        })
    );
    assert_eq!(
        plan.agent_settings(AgentKind::Sim),
        Some(&AgentSettings::default())
    );
    assert_eq!(plan.agent_settings(AgentKind::Codex), None);
    assert_eq!(plan.tasks().len(), 3);

    let greeting = &plan.tasks()[0];
    assert_eq!(greeting.id, id("add-greeting"));
    assert_eq!(greeting.prompt, "Create greeting.txt containing hello");
    // From defaults.
    assert_eq!(greeting.retry_policy, RetryPolicy::Fork);
    assert_eq!(greeting.max_retries, 3);
    assert_eq!(greeting.timeout, Duration::from_secs(20 * 60));
    assert_eq!(greeting.sandbox, Sandbox::None);
    // Built in.
    assert!(!greeting.agent_restart_between_retries);
    assert!(greeting.depends_on.is_empty());
    // Its own.
    assert_eq!(greeting.budget_micro_usd, Some(1_000_000));
    let TaskAgent::Sim { script } = &greeting.agent else {
        panic!("expected the sim agent, got {:?}", greeting.agent)
    };
    assert_eq!(
        script,
        &[
            SimStep {
                reply: "I wrote it".into(),
                write: BTreeMap::from([
                    ("greeting.txt".to_owned(), "hi\n".to_owned()),
                    ("sub/dir/b.txt".to_owned(), String::new()),
                ]),
                exit_code: 1,
                cost_micro_usd: 10_000,
                delay: Duration::from_millis(500),
            },
            SimStep {
                reply: "DONE".into(),
                ..SimStep::default()
            },
        ]
    );
    assert_eq!(greeting.gates.len(), 3);
    let content = &greeting.gates[0];
    assert_eq!(content.name, "content");
    assert_eq!(content.disclose, Disclose::Verdict);
    assert!(content.criterion.is_none());
    match &content.check {
        GateCheck::Run { command, timeout } => {
            assert_eq!(command, "grep -qx hello greeting.txt");
            assert_eq!(*timeout, Duration::from_secs(60));
        }
        other => panic!("expected a run gate, got {other:?}"),
    }
    let answer = &greeting.gates[1];
    assert_eq!(answer.name, "answer");
    assert_eq!(answer.disclose, Disclose::Verdict);
    match &answer.check {
        GateCheck::ResultMatches(regex) => {
            assert_eq!(regex.as_str(), "^DONE");
            assert!(regex.is_match("DONE, all good"));
            assert!(!regex.is_match("not DONE"));
        }
        other => panic!("expected a result_matches gate, got {other:?}"),
    }
    let coverage = &greeting.gates[2];
    assert_eq!(coverage.disclose, Disclose::Output);
    assert_eq!(
        coverage.criterion,
        Some(Criterion {
            name: "coverage".into(),
            levels: vec![90, 80, 70]
        })
    );
    match &coverage.check {
        GateCheck::Run { command, timeout } => {
            assert_eq!(command, "check --level {{ level }}");
            assert_eq!(*timeout, DEFAULT_GATE_TIMEOUT);
        }
        other => panic!("expected a run gate, got {other:?}"),
    }

    let review = &plan.tasks()[1];
    assert_eq!(review.id, id("review"));
    assert_eq!(
        review.agent,
        TaskAgent::Command {
            argv: vec!["sh".into(), "-c".into(), "echo hi".into()]
        }
    );
    assert_eq!(review.agent.kind(), AgentKind::Command);
    assert_eq!(review.retry_policy, RetryPolicy::Cold);
    assert_eq!(review.max_retries, 0);
    assert_eq!(review.timeout, Duration::from_secs(90 * 60));
    assert!(review.agent_restart_between_retries);
    assert_eq!(review.budget_micro_usd, Some(1_500_000));
    assert_eq!(review.sandbox, Sandbox::Worktree);
    assert_eq!(review.depends_on, [id("add-greeting")]);
    assert!(review.gates.is_empty());

    let plain = &plan.tasks()[2];
    assert_eq!(
        plain.agent,
        TaskAgent::Sim {
            script: vec![SimStep::default()]
        }
    );
    assert_eq!(plain.retry_policy, RetryPolicy::Fork);
    assert_eq!(plain.max_retries, 3);
    assert_eq!(plain.budget_micro_usd, None);
    assert_eq!(plain.sandbox, Sandbox::None);
}

#[test]
fn plan_builtin_defaults_apply_without_a_defaults_section() {
    let text =
        "version: 1\nname: minimal\ntasks:\n  - id: only\n    prompt: do it\n    agent: claude\n";
    let plan = parse_plan(text, "plan.yaml").unwrap();
    assert_eq!(plan.seats(), 1);
    assert_eq!(plan.budget_micro_usd(), None);
    assert_eq!(plan.retry_budget(), None);
    assert_eq!(plan.agent_settings(AgentKind::Claude), None);
    let task = &plan.tasks()[0];
    assert_eq!(task.agent, TaskAgent::Claude);
    assert_eq!(task.retry_policy, RetryPolicy::Warm);
    assert_eq!(task.max_retries, DEFAULT_MAX_RETRIES);
    assert_eq!(task.max_retries, 2);
    assert_eq!(task.timeout, DEFAULT_TASK_TIMEOUT);
    assert_eq!(task.timeout, Duration::from_secs(600));
    assert!(!task.agent_restart_between_retries);
    assert_eq!(task.budget_micro_usd, None);
    assert_eq!(task.sandbox, Sandbox::Worktree);
    assert_eq!(task.containment, Containment::Strict);
    assert!(task.allowed_paths.is_empty());
    assert!(task.depends_on.is_empty());
    assert!(task.gates.is_empty());
    assert_eq!(
        plan.task(&id("only")).map(|task| &task.prompt),
        Some(&"do it".to_owned())
    );
    assert!(plan.task(&id("other")).is_none());
}

#[test]
fn plan_dependency_order_is_topological_with_ties_in_plan_order() {
    let text = r#"version: 1
name: order
defaults: { agent: sim }
tasks:
  - { id: c, prompt: p, depends_on: [b] }
  - { id: a, prompt: p }
  - { id: b, prompt: p, depends_on: [a] }
  - { id: d, prompt: p }
  - { id: e, prompt: p, depends_on: [d, c] }
"#;
    let plan = parse_plan(text, "plan.yaml").unwrap();
    let order: Vec<&str> = plan
        .dependency_order()
        .iter()
        .map(|task| task.id.as_str())
        .collect();
    assert_eq!(order, ["a", "b", "c", "d", "e"]);
}

#[test]
fn plan_dependency_order_keeps_plan_order_without_dependencies() {
    let text = "version: 1\nname: flat\ndefaults: { agent: sim }\ntasks:\n  - { id: z, prompt: p }\n  - { id: y, prompt: p }\n  - { id: x, prompt: p }\n";
    let plan = parse_plan(text, "plan.yaml").unwrap();
    let order: Vec<&str> = plan
        .dependency_order()
        .iter()
        .map(|task| task.id.as_str())
        .collect();
    assert_eq!(order, ["z", "y", "x"]);
}

/// One bad plan: its error's line, key path and a distinctive part of its message.
struct Bad {
    what: &'static str,
    text: String,
    line: u64,
    path: &'static str,
    message: &'static str,
}

fn bad(
    what: &'static str,
    text: &str,
    line: u64,
    path: &'static str,
    message: &'static str,
) -> Bad {
    Bad {
        what,
        text: text.to_owned(),
        line,
        path,
        message,
    }
}

/// Lines 1 to 6 of most cases: a valid plan with one sim task `a`.
const HEAD: &str = "version: 1\nname: t\ntasks:\n  - id: a\n    prompt: p\n    agent: sim\n";

fn with_head(rest: &str) -> String {
    format!("{HEAD}{rest}")
}

fn bad_plans() -> Vec<Bad> {
    let long_id = "a".repeat(65);
    vec![
        // ---- keys ----
        bad(
            "unknown key at the top level",
            "version: 1\nname: t\ncolour: red\ntasks:\n  - { id: a, prompt: p, agent: sim }\n",
            3,
            "",
            "unknown key \"colour\" (expected one of version, name, seats, budget_usd, retry_budget, agents, defaults, tasks)",
        ),
        bad(
            "unknown key in a task",
            &with_head("    retries: 3\n"),
            7,
            "tasks[0]",
            "unknown key \"retries\" (expected one of id, prompt, agent,",
        ),
        bad(
            "unknown key in a gate",
            &with_head(
                "    gates:\n      - name: g\n        run: \"true\"\n        discloze: output\n",
            ),
            10,
            "tasks[0].gates[0]",
            "unknown key \"discloze\"; did you mean \"disclose\"? (expected one of name, run, result_matches, disclose, timeout, criterion, levels, weight, protect, network)",
        ),
        bad(
            "unknown key in defaults",
            "version: 1\nname: t\ndefaults:\n  agent: sim\n  gates: []\ntasks:\n  - { id: a, prompt: p }\n",
            5,
            "defaults",
            "unknown key \"gates\" (expected one of agent, retry_policy, max_retries, timeout, agent_restart_between_retries, budget_usd, sandbox, read_only, checkpoint_max_file_bytes, rollback_on_retry, containment, max_output_bytes, idle_timeout, park_when_idle, pause_upgrade_after, pass_env, writable_shm, network)",
        ),
        bad(
            "id in defaults",
            "version: 1\nname: t\ndefaults:\n  id: x\ntasks:\n  - { id: a, prompt: p, agent: sim }\n",
            4,
            "defaults",
            "unknown key \"id\"",
        ),
        bad(
            "unknown key in a sim step",
            &with_head("    sim:\n      - reply: hi\n        stdout: x\n"),
            9,
            "tasks[0].sim[0]",
            "unknown key \"stdout\" (expected one of reply, write, exit_code, cost_usd, delay)",
        ),
        bad(
            "allowed_tools on an agent other than claude",
            "version: 1\nname: t\nagents:\n  codex: { allowed_tools: [Bash] }\ntasks:\n  - { id: a, prompt: p, agent: sim }\n",
            4,
            "agents.codex",
            "unknown key \"allowed_tools\" (expected one of bin, model, args, env, pass_env, network)",
        ),
        bad(
            "allowed_tools that is not a list",
            "version: 1\nname: t\nagents:\n  claude: { allowed_tools: Bash }\ntasks:\n  - { id: a, prompt: p, agent: sim }\n",
            4,
            "agents.claude.allowed_tools",
            "a list of tool names",
        ),
        bad(
            "an empty allowed tool",
            "version: 1\nname: t\nagents:\n  claude: { allowed_tools: [Bash, \"\"] }\ntasks:\n  - { id: a, prompt: p, agent: sim }\n",
            4,
            "agents.claude.allowed_tools[1]",
            "must not be empty",
        ),
        bad(
            "unknown agent in agents",
            "version: 1\nname: t\nagents:\n  clade: { bin: /x }\ntasks:\n  - { id: a, prompt: p, agent: sim }\n",
            4,
            "agents",
            "unknown key \"clade\"; did you mean \"claude\"? (expected one of claude, codex, gemini, command, sim, acp)",
        ),
        bad(
            "key given twice",
            &with_head("    prompt: again\n"),
            7,
            "tasks[0].prompt",
            "key \"prompt\" is given twice (first on line 5)",
        ),
        bad(
            "missing prompt",
            "version: 1\nname: t\ntasks:\n  - id: a\n    agent: sim\n",
            4,
            "tasks[0].prompt",
            "required key is missing; add prompt:",
        ),
        bad(
            "agent acp without agents.acp.command",
            "version: 1\nname: t\ntasks:\n  - id: a\n    prompt: p\n    agent: acp\n",
            6,
            "tasks[0].agent",
            "agent acp needs the agent's command; add agents: {acp: {command: [gemini, --acp]}}",
        ),
        bad(
            "an empty agents.acp.command",
            "version: 1\nname: t\nagents:\n  acp: { command: [] }\ntasks:\n  - { id: a, prompt: p, agent: acp }\n",
            4,
            "agents.acp.command",
            "agent acp needs the agent's command",
        ),
        bad(
            "agents.acp.command as a shell line",
            "version: 1\nname: t\nagents:\n  acp: { command: \"gemini --acp\" }\ntasks:\n  - { id: a, prompt: p, agent: acp }\n",
            4,
            "agents.acp.command",
            "e.g. [gemini, --acp]",
        ),
        bad(
            "a relative agents.acp.state_dirs entry",
            "version: 1\nname: t\nagents:\n  acp: { command: [x], state_dirs: [~/.x, sessions] }\ntasks:\n  - { id: a, prompt: p, agent: acp }\n",
            4,
            "agents.acp.state_dirs[1]",
            "state dir \"sessions\" is relative; write ~/DIR for a directory under the agent's home (like ~/.gemini), or an absolute path",
        ),
        bad(
            "an agents.acp.state_dirs entry under another user's home",
            "version: 1\nname: t\nagents:\n  acp: { command: [x], state_dirs: [\"~bob/.x\"] }\ntasks:\n  - { id: a, prompt: p, agent: acp }\n",
            4,
            "agents.acp.state_dirs[0]",
            "state dir \"~bob/.x\" is relative",
        ),
        bad(
            "an agents.acp.state_dirs entry that is the whole home",
            "version: 1\nname: t\nagents:\n  acp: { command: [x], state_dirs: [~/] }\ntasks:\n  - { id: a, prompt: p, agent: acp }\n",
            4,
            "agents.acp.state_dirs[0]",
            "state dir \"~/\" is the agent's whole home; name the directory it keeps its sessions in, like ~/.gemini",
        ),
        bad(
            "state_dirs for an agent other than acp",
            "version: 1\nname: t\nagents:\n  gemini: { state_dirs: [~/.gemini] }\ntasks:\n  - { id: a, prompt: p, agent: sim }\n",
            4,
            "agents.gemini",
            "unknown key \"state_dirs\"",
        ),
        bad(
            "a model for agent acp",
            "version: 1\nname: t\nagents:\n  acp: { model: m, command: [x] }\ntasks:\n  - { id: a, prompt: p, agent: acp }\n",
            4,
            "agents.acp",
            "unknown key \"model\"",
        ),
        bad(
            "missing agent and no default",
            "version: 1\nname: t\ntasks:\n  - id: a\n    prompt: p\n",
            4,
            "tasks[0].agent",
            "set agent (claude, codex, gemini, command, sim or acp) here or in defaults.agent",
        ),
        // ---- version ----
        bad(
            "version 2, with keys this reprise does not know",
            "version: 2\nname: t\nfuture_key: 1\ntasks: []\n",
            1,
            "version",
            "2 is newer than the plan version this reprise reads (1); this plan needs a newer reprise",
        ),
        bad(
            "version 0",
            "version: 0\nname: t\ntasks: []\n",
            1,
            "version",
            "0 is not a plan version; write \"version: 1\"",
        ),
        bad(
            "missing version",
            "name: t\ntasks:\n  - { id: a, prompt: p, agent: sim }\n",
            1,
            "version",
            "required key is missing; add \"version: 1\"",
        ),
        bad(
            "version as a string",
            "version: \"1\"\nname: t\ntasks: []\n",
            1,
            "version",
            "expected the integer 1, found the string \"1\"",
        ),
        // ---- dependencies ----
        bad(
            "cycle of two",
            "version: 1\nname: t\ndefaults: { agent: sim }\ntasks:\n  - id: a\n    prompt: p\n    depends_on: [b]\n  - id: b\n    prompt: p\n    depends_on: [a]\n",
            10,
            "tasks[1].depends_on[0]",
            "\"b\" -> \"a\" -> \"b\" is a cycle; remove one of these dependencies",
        ),
        bad(
            "cycle of three",
            "version: 1\nname: t\ndefaults: { agent: sim }\ntasks:\n  - id: a\n    prompt: p\n    depends_on: [b]\n  - id: b\n    prompt: p\n    depends_on: [c]\n  - id: c\n    prompt: p\n    depends_on:\n      - a\n",
            14,
            "tasks[2].depends_on[0]",
            "\"c\" -> \"a\" -> \"b\" -> \"c\" is a cycle",
        ),
        bad(
            "self-dependency",
            &with_head("    depends_on: [a]\n"),
            7,
            "tasks[0].depends_on[0]",
            "task \"a\" depends on itself",
        ),
        bad(
            "unknown dependency",
            &with_head("    depends_on: [build]\n"),
            7,
            "tasks[0].depends_on[0]",
            "\"build\" is not the id of any task in this plan",
        ),
        bad(
            "dependency listed twice",
            "version: 1\nname: t\ndefaults: { agent: sim }\ntasks:\n  - { id: a, prompt: p }\n  - id: b\n    prompt: p\n    depends_on: [a, a]\n",
            8,
            "tasks[1].depends_on[1]",
            "\"a\" is listed twice",
        ),
        // ---- ids and names ----
        bad(
            "duplicate task id",
            "version: 1\nname: t\ntasks:\n  - id: a\n    prompt: p\n    agent: sim\n  - id: a\n    prompt: q\n    agent: sim\n",
            7,
            "tasks[1].id",
            "\"a\" is already the id of tasks[0]",
        ),
        bad(
            "task id with a path",
            "version: 1\nname: t\ntasks:\n  - id: ../x\n    prompt: p\n    agent: sim\n",
            4,
            "tasks[0].id",
            "task id \"../x\" must start with a letter or digit",
        ),
        bad(
            "empty task id",
            "version: 1\nname: t\ntasks:\n  - id: \"\"\n    prompt: p\n    agent: sim\n",
            4,
            "tasks[0].id",
            "task id is empty",
        ),
        bad(
            "task id of 65 bytes",
            &format!(
                "version: 1\nname: t\ntasks:\n  - id: {long_id}\n    prompt: p\n    agent: sim\n"
            ),
            4,
            "tasks[0].id",
            "task id is 65 bytes long; the limit is 64",
        ),
        bad(
            "task id that is a number",
            "version: 1\nname: t\ntasks:\n  - id: 7\n    prompt: p\n    agent: sim\n",
            4,
            "tasks[0].id",
            "expected a string, found the number 7; put the value in quotes",
        ),
        bad(
            "duplicate gate name",
            &with_head(
                "    gates:\n      - { name: g, run: \"true\" }\n      - { name: g, run: \"false\" }\n",
            ),
            9,
            "tasks[0].gates[1].name",
            "\"g\" is already the name of gates[0]",
        ),
        bad(
            "gate name with a space",
            &with_head("    gates:\n      - { name: \"my gate\", run: \"true\" }\n"),
            8,
            "tasks[0].gates[0].name",
            "gate name \"my gate\" is not valid",
        ),
        // ---- gates ----
        bad(
            "gate with run and result_matches",
            &with_head(
                "    gates:\n      - name: g\n        run: \"true\"\n        result_matches: ok\n",
            ),
            10,
            "tasks[0].gates[0]",
            "a gate has run or result_matches, not both",
        ),
        bad(
            "gate with neither run nor result_matches",
            &with_head("    gates:\n      - name: g\n        disclose: output\n"),
            8,
            "tasks[0].gates[0]",
            "a gate needs run (a shell command) or result_matches (a regex)",
        ),
        bad(
            "invalid regex",
            &with_head("    gates:\n      - name: g\n        result_matches: \"(unclosed\"\n"),
            9,
            "tasks[0].gates[0].result_matches",
            "invalid regex: unclosed group",
        ),
        bad(
            "protect on a result_matches gate",
            &with_head(
                "    gates:\n      - name: g\n        result_matches: ok\n        protect: [tests/**]\n",
            ),
            10,
            "tasks[0].gates[0].protect",
            "protect applies only to run gates",
        ),
        bad(
            "protect glob outside the tree",
            &with_head(
                "    gates:\n      - name: g\n        run: ./gate.sh\n        protect: [tests/**, ../data]\n",
            ),
            10,
            "tasks[0].gates[0].protect[1]",
            "protect glob \"../data\" has a \"..\" component",
        ),
        bad(
            "timeout on a result_matches gate",
            &with_head(
                "    gates:\n      - name: g\n        result_matches: ok\n        timeout: 1m\n",
            ),
            10,
            "tasks[0].gates[0].timeout",
            "timeout applies only to run gates",
        ),
        bad(
            "unknown disclose",
            &with_head("    gates:\n      - { name: g, run: \"true\", disclose: all }\n"),
            8,
            "tasks[0].gates[0].disclose",
            "unknown disclose \"all\" (expected one of output, verdict)",
        ),
        bad(
            "criterion without levels",
            &with_head(
                "    gates:\n      - name: g\n        run: \"true\"\n        criterion: coverage\n",
            ),
            10,
            "tasks[0].gates[0].criterion",
            "criterion needs levels",
        ),
        bad(
            "levels without criterion",
            &with_head(
                "    gates:\n      - name: g\n        run: \"true\"\n        levels: [1, 2]\n",
            ),
            10,
            "tasks[0].gates[0].levels",
            "levels needs a criterion",
        ),
        bad(
            "criterion with a bad name",
            &with_head(
                "    gates:\n      - name: g\n        run: \"true\"\n        criterion: 9lives\n        levels: [1]\n",
            ),
            10,
            "tasks[0].gates[0].criterion",
            "criterion \"9lives\" is not valid",
        ),
        bad(
            "empty levels",
            &with_head(
                "    gates:\n      - name: g\n        run: \"true\"\n        criterion: c\n        levels: []\n",
            ),
            11,
            "tasks[0].gates[0].levels",
            "must not be empty",
        ),
        bad(
            "levels that go up",
            &with_head(
                "    gates:\n      - name: g\n        run: \"true\"\n        criterion: c\n        levels: [60, 80]\n",
            ),
            11,
            "tasks[0].gates[0].levels",
            "levels must go strictly down",
        ),
        bad(
            "levels that repeat",
            &with_head(
                "    gates:\n      - name: g\n        run: \"true\"\n        criterion: c\n        levels: [80, 80]\n",
            ),
            11,
            "tasks[0].gates[0].levels",
            "levels must go strictly down",
        ),
        // ---- durations ----
        bad(
            "duration without a unit, unquoted",
            &with_head("    timeout: 10\n"),
            7,
            "tasks[0].timeout",
            "10 is a number; write a duration as a string with a unit, like \"10m\"",
        ),
        bad(
            "duration without a unit, quoted",
            &with_head("    timeout: \"10\"\n"),
            7,
            "tasks[0].timeout",
            "\"10\" is not a duration: a number has no unit",
        ),
        bad(
            "fractional duration",
            &with_head("    timeout: 1.5m\n"),
            7,
            "tasks[0].timeout",
            "\"1.5m\" is not a duration: '.' is not allowed",
        ),
        bad(
            "negative duration",
            &with_head("    timeout: -1s\n"),
            7,
            "tasks[0].timeout",
            "\"-1s\" is not a duration: '-' is not allowed",
        ),
        bad(
            "duration with a space",
            &with_head("    timeout: 10 m\n"),
            7,
            "tasks[0].timeout",
            "\"10 m\" is not a duration: ' ' is not allowed",
        ),
        bad(
            "empty duration",
            &with_head("    timeout: \"\"\n"),
            7,
            "tasks[0].timeout",
            "\"\" is not a duration: it is empty",
        ),
        bad(
            "zero timeout",
            &with_head("    timeout: 0s\n"),
            7,
            "tasks[0].timeout",
            "\"0s\" is zero; use a duration greater than zero",
        ),
        bad(
            "zero park_when_idle",
            &with_head("    park_when_idle: 0s\n"),
            7,
            "tasks[0].park_when_idle",
            "\"0s\" is zero; use a duration greater than zero",
        ),
        bad(
            "park_when_idle as a number",
            &with_head("    park_when_idle: 30\n"),
            7,
            "tasks[0].park_when_idle",
            "30",
        ),
        bad(
            "park_when_idle with an unknown unit",
            "version: 1\nname: t\ndefaults:\n  park_when_idle: 2d\ntasks:\n  - { id: a, prompt: p, agent: sim }\n",
            4,
            "defaults.park_when_idle",
            "unknown unit \"d\"; use ms, s, m or h",
        ),
        bad(
            "zero pause_upgrade_after",
            &with_head("    pause_upgrade_after: 0s\n"),
            7,
            "tasks[0].pause_upgrade_after",
            "\"0s\" is zero; use a duration greater than zero",
        ),
        bad(
            "pause_upgrade_after with an unknown unit",
            "version: 1\nname: t\ndefaults:\n  pause_upgrade_after: 1w\ntasks:\n  - { id: a, prompt: p, agent: sim }\n",
            4,
            "defaults.pause_upgrade_after",
            "unknown unit \"w\"; use ms, s, m or h",
        ),
        bad(
            "zero gate timeout",
            &with_head("    gates:\n      - { name: g, run: \"true\", timeout: 0ms }\n"),
            8,
            "tasks[0].gates[0].timeout",
            "\"0ms\" is zero",
        ),
        bad(
            "unknown duration unit in a sim delay",
            &with_head("    sim:\n      - delay: 3d\n"),
            8,
            "tasks[0].sim[0].delay",
            "unknown unit \"d\"; use ms, s, m or h",
        ),
        // ---- money ----
        bad(
            "pool budget as a float",
            "version: 1\nname: t\nbudget_usd: 5.00\ntasks:\n  - { id: a, prompt: p, agent: sim }\n",
            3,
            "budget_usd",
            "5.00 is a number; write money as a quoted decimal string like \"5.00\"",
        ),
        bad(
            "task budget as an integer",
            &with_head("    budget_usd: 5\n"),
            7,
            "tasks[0].budget_usd",
            "5 is a number; write money as a quoted decimal string",
        ),
        bad(
            "money with seven decimals",
            &with_head("    budget_usd: \"0.0000001\"\n"),
            7,
            "tasks[0].budget_usd",
            "\"0.0000001\" is not an amount of money: it has 7 decimal places; use at most 6",
        ),
        bad(
            "negative money",
            &with_head("    budget_usd: \"-1.00\"\n"),
            7,
            "tasks[0].budget_usd",
            "\"-1.00\" is not an amount of money: it has a sign",
        ),
        bad(
            "money that is not a number",
            &with_head("    budget_usd: abc\n"),
            7,
            "tasks[0].budget_usd",
            "\"abc\" is not an amount of money: 'a' is not allowed",
        ),
        bad(
            "money with an exponent",
            &with_head("    budget_usd: \"1e3\"\n"),
            7,
            "tasks[0].budget_usd",
            "it has an exponent",
        ),
        bad(
            "sim cost as a float",
            &with_head("    sim:\n      - cost_usd: 0.01\n"),
            8,
            "tasks[0].sim[0].cost_usd",
            "0.01 is a number",
        ),
        bad(
            "task budget above the pool",
            "version: 1\nname: t\nbudget_usd: \"1.00\"\ntasks:\n  - id: a\n    prompt: p\n    agent: sim\n    budget_usd: \"1.5\"\n",
            8,
            "tasks[0].budget_usd",
            "1.50 is more than the run's budget_usd of 1.00; lower it or raise the run's budget",
        ),
        bad(
            "default budget above the pool",
            "version: 1\nname: t\nbudget_usd: \"1\"\ndefaults:\n  budget_usd: \"2\"\ntasks:\n  - { id: a, prompt: p, agent: sim }\n",
            5,
            "defaults.budget_usd",
            "2.00 is more than the run's budget_usd of 1.00",
        ),
        // ---- agents ----
        bad(
            "unknown agent",
            "version: 1\nname: t\ntasks:\n  - id: a\n    prompt: p\n    agent: clade\n",
            6,
            "tasks[0].agent",
            "unknown agent \"clade\"; did you mean \"claude\"? (expected one of claude, codex, gemini, command, sim, acp)",
        ),
        bad(
            "unknown default agent",
            "version: 1\nname: t\ndefaults: { agent: gpt }\ntasks:\n  - { id: a, prompt: p }\n",
            3,
            "defaults.agent",
            "unknown agent \"gpt\"",
        ),
        bad(
            "agent command without command",
            "version: 1\nname: t\ntasks:\n  - id: a\n    prompt: p\n    agent: command\n",
            4,
            "tasks[0].command",
            "agent command needs the command to run",
        ),
        bad(
            "agent command from defaults without command",
            "version: 1\nname: t\ndefaults: { agent: command }\ntasks:\n  - id: a\n    prompt: p\n",
            5,
            "tasks[0].command",
            "agent command needs the command to run",
        ),
        bad(
            "command on a sim task",
            &with_head("    command: [\"sh\", \"-c\", \"true\"]\n"),
            7,
            "tasks[0].command",
            "command is only for agent command, and this task's agent is sim; remove it",
        ),
        bad(
            "sim on a claude task",
            "version: 1\nname: t\ntasks:\n  - id: a\n    prompt: p\n    agent: claude\n    sim:\n      - reply: hi\n",
            8,
            "tasks[0].sim",
            "sim is only for agent sim, and this task's agent is claude",
        ),
        bad(
            "empty command",
            "version: 1\nname: t\ntasks:\n  - id: a\n    prompt: p\n    agent: command\n    command: []\n",
            7,
            "tasks[0].command",
            "must not be empty",
        ),
        bad(
            "command as an empty string",
            "version: 1\nname: t\ntasks:\n  - id: a\n    prompt: p\n    agent: command\n    command: \"  \"\n",
            7,
            "tasks[0].command",
            "must not be empty",
        ),
        bad(
            "empty sim script",
            &with_head("    sim: []\n"),
            7,
            "tasks[0].sim",
            "the sim script has no steps",
        ),
        bad(
            "sim writing outside the workspace",
            &with_head("    sim:\n      - write: { ../x: boom }\n"),
            8,
            "tasks[0].sim[0].write[\"../x\"]",
            "sim write path \"../x\" has a \"..\" component",
        ),
        bad(
            "sim writing an absolute path",
            &with_head("    sim:\n      - write:\n          /etc/x: boom\n"),
            9,
            "tasks[0].sim[0].write[\"/etc/x\"]",
            "sim write path \"/etc/x\" is absolute",
        ),
        bad(
            "sim exit code out of range",
            &with_head("    sim:\n      - exit_code: 256\n"),
            8,
            "tasks[0].sim[0].exit_code",
            "256 is out of range; use an integer from 0 to 255",
        ),
        // ---- other values ----
        bad(
            "max_retries above 100",
            &with_head("    max_retries: 101\n"),
            7,
            "tasks[0].max_retries",
            "101 is out of range; use an integer from 0 to 100",
        ),
        bad(
            "zero seats",
            "version: 1\nname: t\nseats: 0\ntasks:\n  - { id: a, prompt: p, agent: sim }\n",
            3,
            "seats",
            "0 is out of range; use an integer from 1 to",
        ),
        bad(
            "yes is not a boolean",
            &with_head("    agent_restart_between_retries: yes\n"),
            7,
            "tasks[0].agent_restart_between_retries",
            "expected true or false, found the string \"yes\"",
        ),
        bad(
            "prompt as a number",
            "version: 1\nname: t\ntasks:\n  - id: a\n    prompt: 42\n    agent: sim\n",
            5,
            "tasks[0].prompt",
            "expected a string, found the number 42; put the value in quotes",
        ),
        bad(
            "blank prompt",
            "version: 1\nname: t\ntasks:\n  - id: a\n    prompt: \"  \"\n    agent: sim\n",
            5,
            "tasks[0].prompt",
            "must not be empty",
        ),
        bad(
            "unknown retry policy",
            &with_head("    retry_policy: hot\n"),
            7,
            "tasks[0].retry_policy",
            "unknown retry policy \"hot\" (expected one of warm, fork, cold, auto)",
        ),
        bad(
            "unknown sandbox",
            &with_head("    sandbox: docker\n"),
            7,
            "tasks[0].sandbox",
            "unknown sandbox \"docker\" (expected one of worktree, none)",
        ),
        // ---- document ----
        bad(
            "empty tasks list",
            "version: 1\nname: t\ntasks: []\n",
            3,
            "tasks",
            "the plan has no tasks",
        ),
        bad(
            "missing tasks",
            "version: 1\nname: t\n",
            1,
            "tasks",
            "required key is missing; add tasks:",
        ),
        bad(
            "empty name",
            "version: 1\nname: \"\"\ntasks:\n  - { id: a, prompt: p, agent: sim }\n",
            2,
            "name",
            "must not be empty",
        ),
        bad(
            "tasks as a mapping",
            "version: 1\nname: t\ntasks:\n  a: { prompt: p }\n",
            4,
            "tasks",
            "expected a list of tasks, found a mapping",
        ),
        bad(
            "yaml syntax error",
            "version: 1\nname: t\ntasks:\n  - id: a\n    prompt: \"unclosed\n    agent: sim\n",
            5,
            "",
            "invalid yaml: ",
        ),
        bad(
            "unknown network policy",
            &with_head("    network: some\n"),
            7,
            "tasks[0].network",
            "unknown network \"some\" (expected one of none, model, all)",
        ),
        bad(
            "network entry without a port",
            &with_head("    network: [api.example.com]\n"),
            7,
            "tasks[0].network[0]",
            "network entry \"api.example.com\" is not an endpoint: an endpoint is host:port",
        ),
        bad(
            "network entry with a bad port",
            &with_head("    network: [\"db:0\"]\n"),
            7,
            "tasks[0].network[0]",
            "the port is not a number from 1 to 65535",
        ),
        bad(
            "a whole policy inside a network list",
            &with_head("    network: [model, all]\n"),
            7,
            "tasks[0].network[1]",
            "network all is a whole policy, not an entry of a list; write network: all alone",
        ),
        bad(
            "an endpoint listed twice",
            &with_head("    network: [\"db:5432\", \"db:5432\"]\n"),
            7,
            "tasks[0].network[1]",
            "network entry \"db:5432\" is already listed at [0]; list each endpoint once",
        ),
        bad(
            "a gate's network is a policy too",
            &with_head("    gates:\n      - { name: g, run: \"true\", network: [\"[::1]80\"] }\n"),
            8,
            "tasks[0].gates[0].network[0]",
            "an IPv6 address is written [address]:port",
        ),
        bad("empty document", "", 1, "", "the plan is empty"),
        bad(
            "document that is a list",
            "- version: 1\n",
            1,
            "",
            "expected a mapping of plan keys, found a list",
        ),
    ]
}

#[test]
fn plan_bad_plans_fail_at_the_offending_line_and_key() {
    let cases = bad_plans();
    assert!(cases.len() >= 25);
    let mut failures = Vec::new();
    for case in &cases {
        let error = match parse_plan(&case.text, "plan.yaml") {
            Ok(_) => {
                failures.push(format!("{}: parsed without error", case.what));
                continue;
            }
            Err(error) => error,
        };
        let display = error.to_string();
        let location = match error.column() {
            Some(column) => format!("plan.yaml:{}:{column}: ", case.line),
            None => format!("plan.yaml:{}: ", case.line),
        };
        let path = if case.path.is_empty() {
            String::new()
        } else {
            format!("{}: ", case.path)
        };
        let problems = [
            (error.line() != case.line).then(|| format!("line {} != {}", error.line(), case.line)),
            (error.path() != case.path)
                .then(|| format!("path {:?} != {:?}", error.path(), case.path)),
            (!display.contains(case.message)).then(|| format!("message lacks {:?}", case.message)),
            (!display.starts_with(&format!("{location}{path}"))).then(|| "bad prefix".to_owned()),
            display
                .contains('\n')
                .then(|| "more than one line".to_owned()),
            display[location.len() + path.len()..]
                .starts_with(|c: char| c.is_uppercase())
                .then(|| "message starts in uppercase".to_owned()),
            (error.file() != "plan.yaml").then(|| "file name lost".to_owned()),
        ];
        for problem in problems.into_iter().flatten() {
            failures.push(format!("{}: {problem}\n    got: {display}", case.what));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn plan_error_lines_read_as_documented() {
    let cases: &[(&str, &str)] = &[
        (
            &with_head(
                "    gates:\n      - name: g\n        run: \"true\"\n        discloze: output\n",
            ),
            "plan.yaml:10:9: tasks[0].gates[0]: unknown key \"discloze\"; did you mean \"disclose\"? (expected one of name, run, result_matches, disclose, timeout, criterion, levels, weight, protect, network)",
        ),
        (
            "version: 1\nname: t\ndefaults: { agent: sim }\ntasks:\n  - id: a\n    prompt: p\n    depends_on: [b]\n  - id: b\n    prompt: p\n    depends_on: [a]\n",
            "plan.yaml:10:18: tasks[1].depends_on[0]: \"b\" -> \"a\" -> \"b\" is a cycle; remove one of these dependencies",
        ),
        (
            &with_head("    budget_usd: 5.00\n"),
            "plan.yaml:7:17: tasks[0].budget_usd: 5.00 is a number; write money as a quoted decimal string like \"5.00\"",
        ),
        (
            "version: 1\nname: t\ntasks:\n  - id: a\n    prompt: p\n    agent: sim\n  - id: a\n    prompt: q\n    agent: sim\n",
            "plan.yaml:7:9: tasks[1].id: \"a\" is already the id of tasks[0]; give each task its own id",
        ),
        (
            "version: 3\n",
            "plan.yaml:1:10: version: 3 is newer than the plan version this reprise reads (1); this plan needs a newer reprise",
        ),
    ];
    for (text, expected) in cases {
        let error = parse_plan(text, "plan.yaml").unwrap_err();
        assert_eq!(error.to_string(), *expected);
    }
}

#[test]
fn plan_error_kinds_are_typed() {
    let error = parse_plan("version: 2\n", "p.yaml").unwrap_err();
    assert_eq!(error.kind(), &PlanErrorKind::NewerVersion { found: 2 });
    let error = parse_plan(
        "version: 1\nname: t\ntasks:\n  - { id: ../x, prompt: p, agent: sim }\n",
        "p.yaml",
    )
    .unwrap_err();
    assert_eq!(
        error.kind(),
        &PlanErrorKind::InvalidTaskId {
            reason: TaskIdError::BadFirst { id: "../x".into() }
        }
    );
    assert_eq!(error.column(), Some(11));
}

#[test]
fn plan_errors_name_the_given_file() {
    let error = parse_plan("", "plans/nightly.yaml").unwrap_err();
    assert_eq!(error.file(), "plans/nightly.yaml");
    assert!(error.to_string().starts_with("plans/nightly.yaml:1:1: "));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Damaged plans never panic the parser, and every error is one located line.
    #[test]
    fn plan_damaged_plans_fail_cleanly(
        start in 0..FULL.len(),
        removed in 0usize..12,
        inserted in "[ -~\n]{0,3}",
    ) {
        let end = (start + removed).min(FULL.len());
        let text = format!("{}{inserted}{}", &FULL[..start], &FULL[end..]);
        if let Err(error) = parse_plan(&text, "plan.yaml") {
            let display = error.to_string();
            prop_assert!(!display.contains('\n'), "{}", display);
            prop_assert!(display.starts_with("plan.yaml:"), "{}", display);
            let lines = u64::try_from(text.lines().count()).unwrap();
            prop_assert!(error.line() >= 1 && error.line() <= lines + 1, "{} in\n{}", display, text);
        }
    }
}

#[test]
fn plan_windows_line_endings_read_the_same() {
    let error = parse_plan(
        &with_head("    timeout: 1.5m\n").replace('\n', "\r\n"),
        "plan.yaml",
    )
    .unwrap_err();
    assert_eq!((error.line(), error.column()), (7, Some(14)));
    assert_eq!(error.path(), "tasks[0].timeout");
    let plan = parse_plan(&FULL.replace('\n', "\r\n"), "plan.yaml").unwrap();
    assert_eq!(plan.tasks().len(), 3);
}

#[test]
fn plan_anchors_and_merge_keys_resolve() {
    let text = "version: 1\nname: t\ntasks:\n  - &base\n    id: a\n    prompt: shared\n    agent: sim\n    budget_usd: 2.5\n  - <<: *base\n    id: b\n";
    let error = parse_plan(text, "plan.yaml").unwrap_err();
    // The first use of the bad value is reported where it is written.
    assert_eq!((error.line(), error.path()), (8, "tasks[0].budget_usd"));
    assert!(error.to_string().contains("2.5 is a number"), "{error}");
    let plan = parse_plan(&text.replace("2.5", "\"2.5\""), "plan.yaml").unwrap();
    let b = &plan.tasks()[1];
    assert_eq!((b.id.as_str(), b.prompt.as_str()), ("b", "shared"));
    assert_eq!(b.budget_micro_usd, Some(2_500_000));
}

#[test]
fn only_cold_retries_roll_back_unless_the_plan_says_otherwise() {
    use crate::plan::RollbackOnRetry;
    for (policy, cold, expected) in [
        (RollbackOnRetry::Auto, true, true),
        (RollbackOnRetry::Auto, false, false),
        (RollbackOnRetry::Always, false, true),
        (RollbackOnRetry::Always, true, true),
        (RollbackOnRetry::Never, true, false),
        (RollbackOnRetry::Never, false, false),
    ] {
        assert_eq!(policy.rolls_back(cold), expected, "{policy:?} cold={cold}");
    }
}

#[test]
fn containment_comes_from_the_task_then_defaults_then_strict() {
    let text = "version: 1\nname: c\ndefaults: { agent: sim, containment: off }\ntasks:\n  - id: a\n    prompt: p\n  - id: b\n    prompt: p\n    containment: required\n    allowed_paths: [/tmp/cache, build-cache]\n";
    let plan = parse_plan(text, "plan.yaml").unwrap();
    assert_eq!(plan.tasks()[0].containment, Containment::Off);
    assert!(!plan.tasks()[0].containment.confines());
    assert_eq!(plan.tasks()[1].containment, Containment::Required);
    assert_eq!(plan.tasks()[1].allowed_paths, ["/tmp/cache", "build-cache"]);
    let bad = parse_plan(
        "version: 1\nname: c\ntasks:\n  - id: a\n    prompt: p\n    agent: sim\n    containment: loose\n",
        "plan.yaml",
    )
    .unwrap_err();
    assert!(
        bad.to_string()
            .contains("unknown containment \"loose\" (expected one of strict, off, required)"),
        "{bad}"
    );
}

#[test]
fn checkpoint_and_recovery_keys_resolve_with_their_defaults() {
    use crate::plan::{DEFAULT_CHECKPOINT_MAX_FILE_BYTES, RollbackOnRetry};
    let text = "version: 1\nname: r\ndefaults: { agent: sim, rollback_on_retry: never }\ntasks:\n  - id: a\n    prompt: p\n  - id: b\n    prompt: p\n    read_only: true\n    rollback_on_retry: always\n    checkpoint_max_file_bytes: 1024\n    accept_partial: 0.5\n    gates:\n      - { name: heavy, run: \"true\", weight: 2 }\n      - { name: light, run: \"true\" }\n";
    let plan = parse_plan(text, "plan.yaml").unwrap();
    let (a, b) = (&plan.tasks()[0], &plan.tasks()[1]);
    assert!(!a.read_only);
    assert_eq!(a.rollback_on_retry, RollbackOnRetry::Never);
    assert_eq!(
        a.checkpoint_max_file_bytes,
        DEFAULT_CHECKPOINT_MAX_FILE_BYTES
    );
    assert_eq!(a.accept_partial_basis_points, None);
    assert!(b.read_only);
    assert_eq!(b.rollback_on_retry, RollbackOnRetry::Always);
    assert_eq!(b.checkpoint_max_file_bytes, 1024);
    assert_eq!(b.accept_partial_basis_points, Some(5_000));
    assert_eq!(
        b.gates.iter().map(|gate| gate.weight).collect::<Vec<_>>(),
        [2, 1]
    );
    for (bad, needle) in [
        ("accept_partial: 1.5", "out of range"),
        ("accept_partial: \"half\"", "a number from 0.0 to 1.0"),
        (
            "rollback_on_retry: sometimes",
            "expected one of auto, always, never",
        ),
        ("checkpoint_max_file_bytes: 0", "out of range"),
    ] {
        let text = format!(
            "version: 1\nname: r\ntasks:\n  - id: a\n    prompt: p\n    agent: sim\n    {bad}\n"
        );
        let err = parse_plan(&text, "plan.yaml").unwrap_err().to_string();
        assert!(err.contains(needle), "{bad}: {err}");
    }
}

#[test]
fn park_when_idle_comes_from_the_task_then_defaults_then_none() {
    let text = "version: 1\nname: p\ndefaults: { agent: sim, park_when_idle: 3m }\ntasks:\n  - id: a\n    prompt: p\n  - id: b\n    prompt: p\n    park_when_idle: 1500ms\n    idle_timeout: 10m\n";
    let plan = parse_plan(text, "plan.yaml").unwrap();
    let (a, b) = (&plan.tasks()[0], &plan.tasks()[1]);
    assert_eq!(a.park_when_idle, Some(Duration::from_secs(180)));
    assert_eq!(a.idle_timeout, None);
    assert_eq!(b.park_when_idle, Some(Duration::from_millis(1500)));
    assert_eq!(b.idle_timeout, Some(Duration::from_secs(600)));
    let plain = parse_plan(
        "version: 1\nname: p\ntasks:\n  - { id: a, prompt: p, agent: sim }\n",
        "plan.yaml",
    )
    .unwrap();
    assert_eq!(plain.tasks()[0].park_when_idle, None);
}

#[test]
fn pause_upgrade_after_comes_from_the_task_then_defaults_then_none() {
    let text = "version: 1\nname: p\ndefaults: { agent: sim, pause_upgrade_after: 10m }\ntasks:\n  - id: a\n    prompt: p\n  - id: b\n    prompt: p\n    pause_upgrade_after: 30s\n";
    let plan = parse_plan(text, "plan.yaml").unwrap();
    let (a, b) = (&plan.tasks()[0], &plan.tasks()[1]);
    assert_eq!(a.pause_upgrade_after, Some(Duration::from_secs(600)));
    assert_eq!(b.pause_upgrade_after, Some(Duration::from_secs(30)));
    let plain = parse_plan(
        "version: 1\nname: p\ntasks:\n  - { id: a, prompt: p, agent: sim }\n",
        "plan.yaml",
    )
    .unwrap();
    assert_eq!(plain.tasks()[0].pause_upgrade_after, None);
}

/// A 2 MB plan whose last sim write repeats the first: refused, naming both
/// lines. (The duplicate checks are linear; scripts/bench-plan times this.)
#[test]
fn a_two_megabyte_plan_with_a_repeated_write_is_refused() {
    let mut text = String::from(
        "version: 1\nname: big\ndefaults: { agent: sim }\ntasks:\n  - id: t\n    prompt: p\n    sim:\n      - reply: x\n        write:\n",
    );
    let mut n = 0;
    while text.len() < 2_000_000 {
        text.push_str(&format!("          \"f{n:07}.txt\": \"x\"\n"));
        n += 1;
    }
    text.push_str("          \"f0000000.txt\": \"again\"\n");
    let error = parse_plan(&text, "big.yaml").expect_err("a repeated path");
    let display = error.to_string();
    assert!(
        display.contains("\"f0000000.txt\" is given twice (first on line 10)"),
        "{display}"
    );
}

/// The plan reference, docs/plan.md: its key rows (`| \`key\` | ...`).
fn documented_keys() -> Vec<String> {
    include_str!("../../../../docs/plan.md")
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(key, _)| key.to_owned())
        .collect()
}

#[test]
fn the_plan_reference_lists_every_key_the_parser_accepts_and_no_other() {
    let accepted = super::accepted_keys();
    let documented = documented_keys();
    let missing: Vec<&String> = accepted
        .iter()
        .filter(|key| !documented.contains(key))
        .collect();
    let unknown: Vec<&String> = documented
        .iter()
        .filter(|key| !accepted.contains(key))
        .collect();
    assert!(
        missing.is_empty(),
        "keys the parser accepts with no row in docs/plan.md: {missing:?}"
    );
    assert!(
        unknown.is_empty(),
        "rows in docs/plan.md for keys the parser does not accept: {unknown:?}"
    );
    let mut seen = std::collections::HashSet::new();
    let twice: Vec<&String> = documented.iter().filter(|key| !seen.insert(*key)).collect();
    assert!(twice.is_empty(), "keys documented twice: {twice:?}");
}

#[test]
fn agent_settings_take_a_model_arguments_and_environment() {
    let plan = parse_plan(
        r#"
version: 1
name: p
agents:
  codex: { model: gpt-5-codex, args: [-c, "model_reasoning_effort=high"], env: { RUST_LOG: info, DEPTH: 2 } }
defaults: { agent: codex }
tasks:
  - { id: a, prompt: x }
"#,
        "plan.yaml",
    )
    .unwrap();
    let codex = plan.agent_settings(AgentKind::Codex).unwrap();
    assert_eq!(codex.model.as_deref(), Some("gpt-5-codex"));
    assert_eq!(codex.args, vec!["-c", "model_reasoning_effort=high"]);
    assert_eq!(
        codex.env,
        BTreeMap::from([
            ("DEPTH".to_owned(), "2".to_owned()),
            ("RUST_LOG".to_owned(), "info".to_owned())
        ])
    );
    let refused = parse_plan(
        "version: 1\nname: p\nagents:\n  claude: { env: { REPRISE_STATE_DIR: x } }\ndefaults: { agent: claude }\ntasks:\n  - { id: a, prompt: x }\n",
        "plan.yaml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        refused.contains("agents.claude.env.REPRISE_STATE_DIR"),
        "{refused}"
    );
    assert!(refused.contains("not REPRISE_*"), "{refused}");
}

#[test]
fn pass_env_and_writable_shm_come_from_the_task_then_defaults() {
    let plan = parse_plan(
        r#"
version: 1
name: p
agents:
  command: { env: { MODE: fast }, pass_env: [AGENT_ONLY] }
  gemini: { pass_env: [GOOGLE_CLOUD_PROJECT] }
defaults: { agent: command, pass_env: [DATABASE_URL, CI], writable_shm: true }
tasks:
  - { id: a, prompt: x, command: "true" }
  - { id: b, prompt: x, command: "true", pass_env: [], writable_shm: false }
"#,
        "plan.yaml",
    )
    .unwrap();
    let (a, b) = (&plan.tasks()[0], &plan.tasks()[1]);
    assert_eq!(a.pass_env, ["DATABASE_URL", "CI"]);
    assert!(a.writable_shm);
    assert!(b.pass_env.is_empty());
    assert!(!b.writable_shm);
    let command = plan.agent_settings(AgentKind::Command).unwrap();
    assert_eq!(command.pass_env, ["AGENT_ONLY"]);
    assert_eq!(
        command.env,
        BTreeMap::from([("MODE".to_owned(), "fast".to_owned())])
    );
    assert_eq!(
        plan.agent_settings(AgentKind::Gemini).unwrap().pass_env,
        ["GOOGLE_CLOUD_PROJECT"]
    );
    let plain = parse_plan(&with_head(""), "plan.yaml").unwrap();
    assert!(plain.tasks()[0].pass_env.is_empty());
    assert!(
        !plain.tasks()[0].writable_shm,
        "/dev/shm is closed unless granted"
    );
    for (text, located, message) in [
        (
            with_head("    pass_env: [REPRISE_STATE_DIR]\n"),
            "plan.yaml:7:16: tasks[0].pass_env[0]: ",
            "not REPRISE_*",
        ),
        (
            with_head("    pass_env: [\"A B\"]\n"),
            "plan.yaml:7:16: tasks[0].pass_env[0]: ",
            "use letters, digits and _",
        ),
        (
            with_head("    pass_env: [CI, CI]\n"),
            "plan.yaml:7:20: tasks[0].pass_env[1]: ",
            "\"CI\" is already listed at [0]; list each variable once",
        ),
        (
            with_head("    pass_env: CI\n"),
            "plan.yaml:7:15: tasks[0].pass_env: ",
            "expected a list of variable names",
        ),
        (
            with_head("    writable_shm: yes please\n"),
            "plan.yaml:7:19: tasks[0].writable_shm: ",
            "expected true or false",
        ),
        (
            "version: 1\nname: p\nagents:\n  sim: { pass_env: [CI] }\ntasks:\n  - { id: a, prompt: x, agent: sim }\n".to_owned(),
            "agents.sim",
            "unknown key \"pass_env\" (expected one of bin)",
        ),
    ] {
        let error = parse_plan(&text, "plan.yaml").unwrap_err().to_string();
        assert!(error.contains(located), "{error}");
        assert!(error.contains(message), "{error}");
    }
}

#[test]
fn a_command_given_as_a_string_runs_through_the_shell() {
    let plan = parse_plan(
        "version: 1\nname: p\ndefaults: { agent: command }\ntasks:\n  - { id: a, prompt: x, command: \"echo hi; exit 3\" }\n  - { id: b, prompt: x, command: [echo, hi] }\n",
        "plan.yaml",
    )
    .unwrap();
    assert_eq!(
        plan.tasks()[0].agent,
        TaskAgent::Command {
            argv: vec!["sh".into(), "-c".into(), "echo hi; exit 3".into()]
        }
    );
    assert_eq!(
        plan.tasks()[1].agent,
        TaskAgent::Command {
            argv: vec!["echo".into(), "hi".into()]
        }
    );
}

#[test]
fn a_run_gate_protects_the_globs_it_names() {
    let plan = parse_plan(
        "version: 1\nname: p\ndefaults: { agent: sim }\ntasks:\n  - id: a\n    prompt: p\n    gates:\n      - { name: t, run: ./gate.sh, protect: [\"tests/**\", data/expected.txt] }\n      - { name: u, run: \"true\" }\n",
        "p.yaml",
    )
    .unwrap();
    let gates = &plan.tasks()[0].gates;
    assert_eq!(gates[0].protect, ["tests/**", "data/expected.txt"]);
    assert!(gates[1].protect.is_empty());
}

#[test]
fn an_acp_agent_takes_its_command_args_env_and_allowed_tools() {
    let plan = parse_plan(
        "version: 1\nname: t\nagents:\n  acp:\n    command: [gemini, --acp]\n    args: [--debug]\n    env: { GEMINI_API_KEY: k }\n    pass_env: [HTTPS_PROXY]\n    allowed_tools: [edit, write_file]\ntasks:\n  - { id: a, prompt: p, agent: acp }\n",
        "plan.yaml",
    )
    .expect("a valid plan");
    assert_eq!(plan.tasks()[0].agent, TaskAgent::Acp);
    assert_eq!(plan.tasks()[0].agent.kind().as_str(), "acp");
    let settings = plan.agent_settings(AgentKind::Acp).expect("acp settings");
    assert_eq!(settings.command, ["gemini", "--acp"]);
    assert_eq!(settings.args, ["--debug"]);
    assert_eq!(
        settings.env.get("GEMINI_API_KEY").map(String::as_str),
        Some("k")
    );
    assert_eq!(settings.pass_env, ["HTTPS_PROXY"]);
    assert_eq!(settings.allowed_tools, ["edit", "write_file"]);
    assert_eq!(settings.state_dirs, None, "absent: inferred later");
}

#[test]
fn an_acp_agent_s_state_dirs_are_under_its_home_or_absolute() {
    let plan = parse_plan(
        "version: 1\nname: t\nagents:\n  acp:\n    command: [peer]\n    state_dirs: [~/.peer/sessions, /srv/peer]\ntasks:\n  - { id: a, prompt: p, agent: acp }\n",
        "plan.yaml",
    )
    .expect("a valid plan");
    let settings = plan.agent_settings(AgentKind::Acp).expect("acp settings");
    let dirs = settings.state_dirs.clone().expect("given");
    assert_eq!(
        dirs,
        [
            AgentStateDir::InHome(PathBuf::from(".peer/sessions")),
            AgentStateDir::Absolute(PathBuf::from("/srv/peer")),
        ]
    );
    let home = Path::new("/home/child");
    assert_eq!(
        dirs[0].resolve(Some(home)),
        Some(PathBuf::from("/home/child/.peer/sessions"))
    );
    assert_eq!(dirs[0].resolve(None), None, "no home, no ~");
    assert_eq!(
        dirs[1].resolve(Some(home)),
        Some(PathBuf::from("/srv/peer"))
    );
    assert_eq!(dirs[0].as_written(), "~/.peer/sessions");
    let none = parse_plan(
        "version: 1\nname: t\nagents:\n  acp: { command: [peer], state_dirs: [] }\ntasks:\n  - { id: a, prompt: p, agent: acp }\n",
        "plan.yaml",
    )
    .expect("a valid plan");
    assert_eq!(
        none.agent_settings(AgentKind::Acp).unwrap().state_dirs,
        Some(Vec::new()),
        "an empty list says: infer nothing"
    );
}

#[test]
fn network_comes_from_the_task_then_its_agent_then_defaults_then_its_kind() {
    let text = r#"version: 1
name: n
agents: { codex: { network: ["db.local:5432", model] } }
defaults: { network: all }
tasks:
  - { id: own, prompt: p, agent: claude, network: none }
  - { id: by-agent, prompt: p, agent: codex }
  - { id: by-defaults, prompt: p, agent: gemini }
  - id: gated
    prompt: p
    agent: command
    command: "true"
    network: []
    gates:
      - { name: closed, run: "true" }
      - { name: open, run: "true", network: ["127.0.0.1:80"] }
"#;
    let plan = parse_plan(text, "plan.yaml").unwrap();
    let network = |index: usize| plan.tasks()[index].network.clone();
    assert_eq!(network(0), Network::None);
    assert_eq!(
        network(1),
        Network::Allow {
            model: true,
            endpoints: vec![Endpoint::parse("db.local:5432").unwrap()],
        }
    );
    assert_eq!(network(1).to_string(), "model, db.local:5432");
    assert_eq!(network(2), Network::All);
    // An empty list is none.
    assert_eq!(network(3), Network::None);
    let gates = &plan.tasks()[3].gates;
    assert_eq!(gates[0].network, Network::None);
    assert_eq!(gates[1].network.to_string(), "127.0.0.1:80");
    // Without a word anywhere: a CLI or ACP agent its model, a command agent
    // nothing.
    let bare = parse_plan(
        "version: 1\nname: b\ntasks:\n  - { id: a, prompt: p, agent: claude }\n  - { id: b, prompt: p, agent: command, command: \"true\" }\n",
        "plan.yaml",
    )
    .unwrap();
    assert_eq!(bare.tasks()[0].network, Network::model());
    assert_eq!(bare.tasks()[1].network, Network::None);
}

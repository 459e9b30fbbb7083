//! Money as the binary shows it (issue 25): a cost is a known amount or
//! unknown everywhere (never `$0.00`, never `0` in JSON), an interrupted
//! run's known spend counts, and a rehearsal is marked as one and priced at
//! the prices it ran with.

use super::recovery::wait_for_an_attempt;
use super::worktrees::{count_attempt, git_env, outside_dir, task_json, write_plan};
use super::*;
use reprise_testkit::wait_until;

/// `reprise report` of the latest run, as HTML.
fn report_html(env: &Env) -> String {
    let output = env.run(&["report", "--json"]);
    assert_success(&output);
    fs::read_to_string(json_of(&output)["report"].as_str().unwrap()).unwrap()
}

#[test]
fn a_cost_nobody_reported_is_unknown_in_the_table_the_totals_and_json() {
    let env = git_env();
    // One command reports its cost on its last line; the other reports none.
    let plan = write_plan(
        &env,
        "costs",
        r#"
version: 1
name: costs
defaults: { agent: command, max_retries: 0, timeout: 30s }
tasks:
  - id: paid
    prompt: p
    command: [sh, -c, "echo DONE; echo REPRISE_COST_USD=0.06"]
  - id: unpaid
    prompt: p
    command: [sh, -c, "echo DONE"]
"#,
    );
    let output = env.run(&["run", &plan]);
    assert_success(&output);
    let printed = stdout(&output);
    assert!(printed.contains("spent $0.06 + 1 unknown)"), "{printed}");
    let unpaid_row = printed
        .lines()
        .find(|line| line.trim_start().starts_with("unpaid") && line.contains("passed"))
        .unwrap_or_else(|| panic!("no row of unpaid in {printed}"));
    assert!(unpaid_row.trim_end().ends_with("unknown"), "{unpaid_row}");
    assert!(!printed.contains("$0.00"), "{printed}");

    let runs = stdout(&env.run(&["runs"]));
    assert!(runs.contains("$0.06 + 1 unknown"), "{runs}");
    let listed = json_of(&env.run(&["runs", "--json"]));
    let row = &listed["runs"][0];
    assert_eq!(
        (
            row["spent_micro_usd"].clone(),
            row["spent_known_micro_usd"].clone(),
            row["costs_unknown"].clone()
        ),
        (Value::Null, json!(60_000), json!(1)),
        "{listed}"
    );

    let status = env.run(&["status"]);
    assert!(
        stdout(&status).contains("spent: $0.06 + 1 unknown"),
        "{}",
        stdout(&status)
    );
    let status = json_of(&env.run(&["status", "--json"]));
    assert_eq!(status["spent_micro_usd"], Value::Null, "{status}");
    let unpaid = task_json(&status, "unpaid");
    assert_eq!(unpaid["spent_micro_usd"], Value::Null, "{unpaid}");
    assert_eq!(unpaid["costs_unknown"], 1, "{unpaid}");
    assert_eq!(unpaid["attempts"][0]["cost_micro_usd"], Value::Null);
    assert_eq!(task_json(&status, "paid")["spent_micro_usd"], 60_000);

    let listed = stdout(&env.run(&["task", "list"]));
    let unpaid_line = listed
        .lines()
        .find(|line| line.starts_with("unpaid"))
        .unwrap();
    assert!(unpaid_line.ends_with("spent unknown"), "{listed}");

    let html = report_html(&env);
    assert!(html.contains("spent $0.06 + 1 unknown</p>"), "{html}");
}

#[test]
fn an_interrupted_run_counts_the_spend_its_journal_recorded() {
    let env = git_env();
    let counter_dir = outside_dir(&env, "counter");
    let counter = counter_dir.join("count");
    // Attempt 1 costs $0.05 and fails its gate; attempt 2 hangs until the
    // run's process is killed.
    let script = format!(
        "{}; if [ \"$n\" = 1 ]; then echo no; echo REPRISE_COST_USD=0.05; else sleep 300; fi",
        count_attempt(&counter)
    );
    let plan = write_plan(
        &env,
        "cut",
        &format!(
            r#"
version: 1
name: cut
defaults: {{ agent: command, timeout: 5m }}
tasks:
  - id: slow
    prompt: p
    max_retries: 1
    allowed_paths: ['{counter_dir}']
    command: [sh, -c, {script:?}]
    gates: [ {{ name: answer, result_matches: "^DONE" }} ]
"#,
            counter_dir = counter_dir.display()
        ),
    );
    let mut child = env.spawn(&["run", &plan], std::process::Stdio::null());
    wait_for_an_attempt(&env, "cut", "slow");
    assert!(
        wait_until(std::time::Duration::from_secs(60), || {
            fs::read_to_string(&counter).is_ok_and(|n| n.trim() == "2")
        }),
        "attempt 2 never started"
    );
    child.kill().unwrap();
    child.wait().unwrap();

    let runs = stdout(&env.run(&["runs"]));
    let line = runs.lines().next().unwrap();
    assert!(line.contains("interrupted"), "{runs}");
    assert!(line.ends_with("$0.05 + 1 unknown"), "{runs}");
    let listed = json_of(&env.run(&["runs", "--json"]));
    let row = &listed["runs"][0];
    assert_eq!(
        (
            row["spent_micro_usd"].clone(),
            row["spent_known_micro_usd"].clone(),
            row["costs_unknown"].clone()
        ),
        (Value::Null, json!(50_000), json!(1)),
        "{listed}"
    );
    let status = stdout(&env.run(&["status"]));
    assert!(status.contains("attempt 1 (new): not accepted"), "{status}");
    assert!(status.contains("cost $0.05"), "{status}");
    assert!(
        status.contains(
            "spent: $0.05 + 1 unknown (attempt 2 of slow was cut off when the run stopped"
        ),
        "{status}"
    );
}

/// `reprise rehearse` of `plan` (written as plan.yaml) under a scenario
/// that replies "hi" to every request, with `extra` arguments.
fn rehearse(env: &Env, plan: &str, extra: &[&str]) -> std::process::Output {
    fs::write(env.project().join("plan.yaml"), plan).unwrap();
    fs::write(
        env.project().join("scenario.yaml"),
        "rules:\n  - reply: { text: hi }\n",
    )
    .unwrap();
    let mut args = vec!["rehearse", "plan.yaml", "--scenario", "scenario.yaml"];
    args.extend_from_slice(extra);
    env.run(&args)
}

/// A command task that asks the rehearsal's server once for each of `models`.
fn asking_plan(models: &[&str]) -> String {
    let asks: Vec<String> = models
        .iter()
        .map(|model| {
            format!(
                r#"curl -s -X POST "$ANTHROPIC_BASE_URL/v1/messages" -d '{{"model":"{model}","max_tokens":10,"messages":[{{"role":"user","content":"say hi"}}]}}' >/dev/null"#
            )
        })
        .collect();
    let script = format!("{}; echo DONE", asks.join("; "));
    format!(
        "version: 1\nname: ask\ndefaults: {{ agent: command, sandbox: none, timeout: 30s }}\ntasks:\n  - id: ask\n    prompt: p\n    command: [\"sh\", \"-c\", {script:?}]\n"
    )
}

#[test]
fn a_rehearsal_is_marked_everywhere_and_priced_with_the_prices_it_ran_with() {
    let env = Env::new();
    let output = rehearse(
        &env,
        &asking_plan(&["claude-sonnet-4-5"]),
        &["--price", "10/50", "--json"],
    );
    assert_success(&output);
    let rehearsed = json_of(&output);
    let task = &rehearsed["rehearsal"]["tasks"][0];
    let would = task["would_cost_micro_usd"].as_u64().unwrap();
    // The same usage at the shipped list's $3/$15 is not what --price gave.
    let usage = &task["usage"];
    let tokens = |name: &str| usage[name].as_u64().unwrap();
    let at_list = (tokens("fresh_input_tokens") * 3_000_000
        + (tokens("cache_write_tokens") - tokens("cache_write_1h_tokens")) * 3_750_000
        + tokens("cache_write_1h_tokens") * 6_000_000
        + tokens("cache_read_tokens") * 300_000
        + tokens("output_tokens") * 15_000_000)
        .div_ceil(1_000_000);
    assert_ne!(would, at_list, "{task}");
    assert_eq!(rehearsed["rehearsal"]["would_cost_micro_usd"], would);

    let runs = stdout(&env.run(&["runs"]));
    let line = runs.lines().next().unwrap();
    assert!(line.contains("  rehearsal, would cost $"), "{runs}");
    let listed = json_of(&env.run(&["runs", "--json"]));
    let row = &listed["runs"][0];
    assert_eq!(row["rehearsal"], true, "{listed}");
    assert_eq!(row["spent_micro_usd"], 0, "a rehearsal spends nothing");
    assert_eq!(row["would_cost_micro_usd"], would, "{listed}");

    let status = stdout(&env.run(&["status"]));
    assert!(
        status.contains("a rehearsal: nothing spent; would cost $"),
        "{status}"
    );
    assert!(status.contains("under this run's own"), "{status}");
    assert!(!status.contains("spent: $"), "{status}");
    let status = json_of(&env.run(&["status", "--json"]));
    assert_eq!(status["rehearsal"], true, "{status}");
    assert_eq!(status["would_cost_micro_usd"], would);
    assert_eq!(status["spent_micro_usd"], 0, "{status}");
    assert_eq!(status["tasks"][0]["would_cost_micro_usd"], would);
    assert_eq!(status["prices"]["overridden"], true, "{status}");

    let html = report_html(&env);
    assert!(
        html.contains("a rehearsal: nothing spent; would cost $"),
        "{html}"
    );
    assert!(!html.contains("· spent"), "{html}");
    assert!(html.contains("<th>would cost</th>"), "{html}");

    // Prices it cannot read are refused in one line that says what to do.
    let run_id = row["run_id"].as_str().unwrap();
    let stored = env
        .reprise_dir()
        .join("runs")
        .join(run_id)
        .join("rehearsal/prices.json");
    let text = fs::read_to_string(&stored).unwrap();
    fs::write(&stored, text.replace("\"format\":1", "\"format\":2")).unwrap();
    let before = env.snapshot();
    assert_one_line_error(&env.run(&["status"]), 2, "newer than this reprise reads");
    assert_eq!(env.snapshot(), before, "nothing is written");
    fs::write(&stored, "{").unwrap();
    let before = env.snapshot();
    assert_one_line_error(&env.run(&["runs"]), 2, "remove the file");
    assert_eq!(env.snapshot(), before, "nothing is written");
}

#[test]
fn the_pinned_clis_default_models_are_priced_out_of_the_box() {
    let env = Env::new();
    let output = rehearse(
        &env,
        &asking_plan(&["gpt-5.5", "gemini-3.1-pro-preview", "gemini-3.5-flash-lite"]),
        &["--json"],
    );
    assert_success(&output);
    let task = &json_of(&output)["rehearsal"]["tasks"][0];
    assert_eq!(task["requests"], 3, "{task}");
    assert_eq!(task["unpriced_models"], json!([]), "{task}");
    assert!(task["would_cost_micro_usd"].as_u64().unwrap() > 0, "{task}");
}

/// While a rehearsal runs, an attempt's line says nothing was spent, never
/// the agent's own figure for tokens nobody paid.
#[test]
fn a_rehearsals_live_lines_spend_nothing() {
    let env = Env::new();
    let output = rehearse(
        &env,
        "version: 1\nname: live\ndefaults: { agent: command, sandbox: none, timeout: 30s }\ntasks:\n  - id: paid\n    prompt: p\n    command: [sh, -c, \"echo DONE; echo REPRISE_COST_USD=0.05\"]\n",
        &[],
    );
    assert_success(&output);
    let printed = stdout(&output);
    let line = printed
        .lines()
        .find(|line| line.contains("[paid] attempt 1 (new):"))
        .unwrap_or_else(|| panic!("no attempt line in {printed}"));
    assert!(line.ends_with("; nothing spent (a rehearsal)"), "{line}");
    assert!(!printed.contains("cost $0.05"), "{printed}");
}

//! `reprise budget check SPEC [--plan PLAN]`: what each retry of a budget
//! would do, or the one-line reason it is refused.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use reprise_core::budget::{RetryBudget, parse_budget};
use reprise_engine::{load_plan, plan_criteria, resolve_budget};
use serde_json::json;

use crate::error::CliError;
use crate::output::Outcome;
use crate::settings::Settings;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum BudgetCommand {
    /// Show what each retry of SPEC would do, or why SPEC is refused.
    #[command(after_help = help!("\
  reprise budget check \"3 retries, degrade: coverage>tests>style\"
  reprise budget check \"2 retries, degrade: coverage\" --plan plan.yaml"))]
    Check(BudgetCheckArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct BudgetCheckArgs {
    /// The retry budget, e.g. \"3 retries, degrade: coverage>tests\".
    spec: String,
    /// Check the spec against this plan's gate criteria and their levels.
    #[arg(long, value_name = "PLAN")]
    plan: Option<PathBuf>,
}

impl BudgetCommand {
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        match self {
            Self::Check(args) => check(settings, &args.spec, args.plan.as_deref()),
        }
    }
}

fn check(settings: &Settings, spec: &str, plan: Option<&Path>) -> Result<Outcome, CliError> {
    let usage = |err: &dyn std::fmt::Display| CliError::usage(err.to_string());
    let (spec, criteria) = match plan {
        Some(plan) => {
            let path = if plan.is_absolute() {
                plan.to_path_buf()
            } else {
                settings.cwd.join(plan)
            };
            let plan = load_plan(&path).map_err(|err| usage(&err))?;
            let spec = resolve_budget(&plan, Some(spec))
                .map_err(|err| usage(&err))?
                .expect("a spec was given");
            (spec, plan_criteria(&plan))
        }
        None => {
            // Without a plan the ladders are unknown: show one rung per step.
            let spec = parse_budget(spec).map_err(|err| usage(&err))?;
            let rungs = i64::from(spec.retries) + 1;
            let criteria = spec
                .criteria
                .iter()
                .map(|name| (name.clone(), (0..rungs).rev().collect()))
                .collect();
            (spec, criteria)
        }
    };
    let mut budget = RetryBudget::new(&spec, &criteria).map_err(|err| usage(&err))?;
    let mut text = format!(
        "{spec}: {} authorised\n",
        if spec.retries == 1 {
            "1 retry".to_owned()
        } else {
            format!("{} retries", spec.retries)
        }
    );
    let mut steps = Vec::new();
    while let Ok(decision) = budget.consume() {
        let levels: Vec<String> = decision
            .criteria
            .iter()
            .map(|criterion| format!("{}={}", criterion.name, criterion.level))
            .collect();
        let _ = writeln!(
            text,
            "  retry {}: {}{}",
            decision.retry_number,
            decision.reason,
            if levels.is_empty() {
                String::new()
            } else {
                format!(" ({})", levels.join(", "))
            }
        );
        steps.push(decision);
    }
    if plan.is_none() && !spec.criteria.is_empty() {
        text.push_str(
            "  (levels are steps down from the start; pass --plan to see the gates' own levels)\n",
        );
    }
    Ok(Outcome {
        exit: None,
        json: json!({"spec": spec.to_string(), "retries": spec.retries, "steps": steps}),
        text,
        ok: true,
    })
}

//! `reprise init`: the state directory, the audit key, and the audit chain's
//! first row.

use reprise_core::witness::Unfinished;
use reprise_store::audit::{adopt_witness, check_key_binding_at, migrate_state_dir};
use reprise_store::creation::{
    CreationStep, Finished, create_state_dir, finish_creation, unfinished,
};
use reprise_store::key::{check_key, load_or_create_key};
use reprise_store::state::now_rfc3339;
use serde_json::json;

use crate::error::CliError;
use crate::output::Outcome;
use crate::settings::Settings;

#[derive(Debug, clap::Args)]
pub(crate) struct InitArgs {
    /// Also write a commented starter plan.yaml here (refused if one exists).
    #[arg(long)]
    plan: bool,
}

impl InitArgs {
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        run(settings, self.plan)
    }
}

/// The commented plan `reprise init --plan` writes: it runs as it is, on
/// the built-in `sim` agent.
pub(crate) const STARTER_PLAN: &str = include_str!("starter_plan.yaml");

/// The file `init --plan` writes, in the current directory.
const STARTER_PLAN_FILE: &str = "plan.yaml";

/// What `init` did to the state directory.
struct Initialised {
    state: reprise_store::state::StateDir,
    created: bool,
    migration: Option<reprise_store::state::Migration>,
    finished: Option<Finished>,
    adopted: Option<reprise_store::audit::Adopted>,
}

/// Brings the state directory at `target` to life, or to the present: the
/// key checked against it, an older layout migrated, the directory created
/// whole, a creation a crash cut finished, and a chain without a witness
/// adopted.
fn initialise(
    settings: &Settings,
    target: &std::path::Path,
    key_path: &std::path::Path,
    key_existed: bool,
) -> Result<Initialised, CliError> {
    let audit_path = reprise_store::state::audit_path_in(target);
    if !key_existed && audit_path.metadata().is_ok_and(|meta| meta.len() > 0) {
        // A new key could not verify the chain that is already there.
        return Err(settings.key_missing_error(target));
    }
    let key = if key_existed {
        let key = reprise_store::key::load_key(key_path)?;
        // An existing directory must be this key's: refuse another one
        // before anything (a migration included) is written.
        check_key_binding_at(target, &key).map_err(|err| settings.binding_error(err))?;
        Some(key)
    } else {
        None
    };
    // An older layout is migrated first (and the move recorded).
    let migration = match &key {
        Some(key) => migrate_state_dir(target, key, &now_rfc3339())?,
        None => None,
    };
    let key = match key {
        Some(key) => key,
        None => load_or_create_key(key_path)?,
    };
    // The state directory, its id bound into the chain's first row and into
    // the witness beside the key, made whole or not at all.
    let creation = create_state_dir(target, &key, &now_rfc3339(), creation_hook)?;
    let (state, created) = (creation.state, creation.created);
    if let Some(aside) = &creation.superseded_witness {
        superseded_note(aside, creation.superseded_removed);
    }
    // One an older reprise began in place and a crash cut before its first
    // audit row is finished (a first row without its witness is adopted
    // below, openly, as any chain without one is).
    let finished = match created {
        false
            if matches!(
                unfinished(&state, &key)?,
                Some(Unfinished::NoFirstRow { .. })
            ) =>
        {
            finish_creation(&state, &key, &now_rfc3339())?
        }
        _ => None,
    };
    // A directory whose chain has no witness (from before witnesses, or
    // moved) is adopted, openly: from here on, a cut is detected.
    let adopted = if created {
        None
    } else {
        adopt_witness(&state, &key, &now_rfc3339())?
    };
    Ok(Initialised {
        state,
        created,
        migration,
        finished,
        adopted,
    })
}

pub(crate) fn run(settings: &Settings, write_plan: bool) -> Result<Outcome, CliError> {
    let target = settings.init_target();
    let plan_path = settings.cwd.join(STARTER_PLAN_FILE);
    if write_plan && std::fs::symlink_metadata(&plan_path).is_ok() {
        return Err(CliError::usage(format!(
            "{} already exists; nothing was written: run `reprise init --plan` in another directory, or move it aside",
            plan_path.display()
        )));
    }
    let key_path = settings.key_path()?;
    // Refuse a bad key before anything is written.
    let key_existed = check_key(key_path)?;
    let Initialised {
        state,
        created,
        migration,
        finished,
        adopted,
    } = initialise(settings, &target, key_path, key_existed)?;
    let mut text = String::new();
    if let Some(finished) = &finished {
        text.push_str(&finished_line(finished));
        text.push('\n');
    }
    if let Some(migration) = &migration {
        text.push_str(&migration_line(migration));
    }
    if let Some(adopted) = &adopted {
        text.push_str(&format!(
            "adopted the audit chain ({} row{}, verified with the key) under a new witness: rows removed before now cannot be detected, later ones can\n",
            adopted.rows,
            if adopted.rows == 1 { "" } else { "s" }
        ));
    }
    text.push_str(&format!(
        "{} reprise state at {}\n",
        if created {
            "initialised"
        } else {
            "found existing"
        },
        state.root().display(),
    ));
    if key_existed {
        text.push_str(&format!("audit key: {} (existing)\n", key_path.display()));
    } else {
        text.push_str(&key_created_line(key_path));
        text.push('\n');
    }
    if write_plan {
        reprise_store::write_atomic(&plan_path, STARTER_PLAN.as_bytes(), 0o644)?;
        text.push_str(&format!(
            "wrote a starter plan to {}; check it with `reprise run {STARTER_PLAN_FILE} --check`, run it with `reprise run {STARTER_PLAN_FILE}`\n",
            plan_path.display()
        ));
    }
    Ok(Outcome {
        exit: None,
        json: json!({
            "state_dir": state.root(),
            "created": created,
            "audit_key": key_path,
            "key_created": !key_existed,
            "plan": write_plan.then_some(&plan_path),
            "adopted_rows": adopted.as_ref().map(|adopted| adopted.rows),
            "finished_creation": finished.is_some(),
            "migrated": migration.as_ref().map(|migration| migration
                .tasks
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()),
        }),
        text,
        ok: true,
    })
}

/// Says, on stderr, that a new state directory replaced the witness of an
/// earlier one at the same path (which was removed), where that went, and
/// how many older ones were removed to keep the newest few.
pub(crate) fn superseded_note(aside: &std::path::Path, removed: usize) {
    use std::io::Write as _;
    let pruned = if removed == 0 {
        String::new()
    } else {
        format!(
            " (only the newest {} such witnesses are kept: {removed} older one{} removed)",
            reprise_store::witness::SUPERSEDED_KEPT,
            if removed == 1 { " was" } else { "s were" }
        )
    };
    let _ = writeln!(
        std::io::stderr().lock(),
        "note: a state directory here was removed; its witness is kept at {}{pruned}",
        aside.display()
    );
}

/// One line saying how a creation a crash had cut was finished.
pub(crate) fn finished_line(finished: &Finished) -> String {
    match finished {
        Finished::FirstRow {
            superseded_witness: Some(aside),
            ..
        } => format!(
            "finished the state directory's creation, which a crash had cut: wrote the audit chain's first row and its witness (the witness found there was an earlier state directory's; it is kept at {})",
            aside.display()
        ),
        Finished::FirstRow { .. } => "finished the state directory's creation, which a crash had cut: wrote the audit chain's first row and its witness".to_owned(),
        Finished::Witness { .. } => "finished the state directory's creation, which a crash had cut: wrote the witness of the audit chain's first row".to_owned(),
    }
}

/// Called after each step of creating a state directory. In a debug build,
/// `REPRISE_TEST_KILL_AT=creation:STEP` kills the process there as `kill -9`
/// would, so tests can leave each state a crash leaves; otherwise nothing.
pub(crate) fn creation_hook(step: CreationStep) {
    if cfg!(debug_assertions)
        && std::env::var("REPRISE_TEST_KILL_AT")
            .is_ok_and(|at| at.strip_prefix("creation:") == Some(step.name()))
    {
        let _ = signal_hook::low_level::raise(signal_hook::consts::SIGKILL);
    }
}

/// One line saying what a layout migration moved.
pub(crate) fn migration_line(migration: &reprise_store::state::Migration) -> String {
    format!(
        "migrated the state directory to layout {}: {} task journal{} now kept per plan\n",
        reprise_store::state::LAYOUT_VERSION,
        migration.tasks.len(),
        if migration.tasks.len() == 1 { "" } else { "s" },
    )
}

/// What `init` and the first `run` say when they created the audit key: where
/// it is, and that it must be kept.
pub(crate) fn key_created_line(key_path: &std::path::Path) -> String {
    format!(
        "created the audit key {}: keep it, and its witness/ directory beside it (back them up together); without it this state directory's audit chain can neither be verified nor extended",
        key_path.display()
    )
}

//! `reprise init`: the state directory, the audit key, and the audit chain's
//! first row.

use reprise_store::StoreError;
use reprise_store::audit::{adopt_witness, check_key_binding_at, init_audit, migrate_state_dir};
use reprise_store::key::{check_key, load_or_create_key};
use reprise_store::state::{StateDir, now_rfc3339};
use serde_json::json;

use crate::error::CliError;
use crate::output::Outcome;
use crate::settings::Settings;

pub(crate) fn run(settings: &Settings) -> Result<Outcome, CliError> {
    let target = settings.init_target();
    let key_path = settings.key_path()?;
    // Refuse a bad key before anything is written.
    let key_existed = check_key(key_path)?;
    let audit_path = target.join("audit").join("audit.jsonl");
    if !key_existed && audit_path.metadata().is_ok_and(|meta| meta.len() > 0) {
        // A new key could not verify the chain that is already there.
        return Err(StoreError::KeyMissing {
            path: key_path.to_path_buf(),
        }
        .into());
    }
    let key = if key_existed {
        let key = reprise_store::key::load_key(key_path)?;
        // An existing directory must be this key's: refuse another one
        // before anything (a migration included) is written.
        check_key_binding_at(&target, &key).map_err(|err| settings.binding_error(err))?;
        Some(key)
    } else {
        None
    };
    // An older layout is migrated first (and the move recorded).
    let migration = match &key {
        Some(key) => migrate_state_dir(&target, key, &now_rfc3339())?,
        None => None,
    };
    let (state, created) = StateDir::create(&target)?;
    let key = match key {
        Some(key) => key,
        None => load_or_create_key(key_path)?,
    };
    // A directory whose chain has no witness (from before witnesses, or
    // moved) is adopted, openly: from here on, a cut is detected.
    let adopted = if created {
        None
    } else {
        adopt_witness(&state, &key, &now_rfc3339())?
    };
    if created {
        // The state directory's id, bound into the chain's first row and
        // into the witness beside the key.
        let initialised = init_audit(&state, key, &now_rfc3339())?;
        if let Some(aside) = &initialised.superseded_witness {
            superseded_note(aside);
        }
    }
    let mut text = String::new();
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
        "{} reprise state at {}\naudit key: {} ({})\n",
        if created {
            "initialised"
        } else {
            "found existing"
        },
        state.root().display(),
        key_path.display(),
        if key_existed { "existing" } else { "created" },
    ));
    Ok(Outcome {
        json: json!({
            "state_dir": state.root(),
            "created": created,
            "audit_key": key_path,
            "key_created": !key_existed,
            "adopted_rows": adopted.as_ref().map(|adopted| adopted.rows),
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
/// earlier one at the same path (which was removed), and where that went.
pub(crate) fn superseded_note(aside: &std::path::Path) {
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr().lock(),
        "note: a state directory here was removed; its witness is kept at {}",
        aside.display()
    );
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

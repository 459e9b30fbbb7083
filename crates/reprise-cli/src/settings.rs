//! Resolved settings: flags and environment folded into the values commands
//! use, so no command reads raw flags or the environment itself.

use std::path::{Path, PathBuf};

use reprise_store::StoreError;
use reprise_store::audit::check_key_binding;
use reprise_store::key::{KeyFile, key_path, load_key};
use reprise_store::state::{STATE_DIR_NAME, StateDir};

use crate::error::CliError;
use crate::output::{ColorChoice, Display};

/// The flags every command takes, before they are resolved.
#[derive(Debug, clap::Args)]
pub(crate) struct GlobalArgs {
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// The state directory to use (default: `.reprise` here or in a parent;
    /// also REPRISE_STATE_DIR).
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) state_dir: Option<PathBuf>,
    /// Colour: on a terminal unless NO_COLOR is set (auto), always, or never.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    pub(crate) color: ColorChoice,
    /// Print less: a run shows only warnings and its summary.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub(crate) quiet: bool,
    /// Print more: a run also shows each attempt's phases as lines.
    #[arg(short, long, global = true)]
    pub(crate) verbose: bool,
}

#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) json: bool,
    /// `run --events`: one JSON object a line on stdout as things happen.
    pub(crate) events: bool,
    /// How human output looks.
    pub(crate) display: Display,
    /// An explicit state directory (flag, then REPRISE_STATE_DIR).
    pub(crate) state_dir: Option<PathBuf>,
    pub(crate) cwd: PathBuf,
    /// Where the audit key lives, or why it cannot be placed.
    pub(crate) key_path: Result<PathBuf, String>,
    /// Where that path came from, for messages.
    pub(crate) key_origin: &'static str,
    /// `--plan`: the plan a TASK argument belongs to.
    pub(crate) plan: Option<String>,
    /// The `PATH` agents and gates will search.
    pub(crate) path_var: Option<String>,
    /// `REPRISE_CLAUDE_BIN`, `REPRISE_CODEX_BIN`, `REPRISE_GEMINI_BIN`, as set.
    pub(crate) agent_bins: std::collections::BTreeMap<&'static str, String>,
    /// `USER`: who an approval names.
    pub(crate) user: Option<String>,
    /// `REPRISE_DATABASE_URL`: the fleet's database when `--db` is not given.
    pub(crate) database_url: Option<String>,
}

impl Settings {
    pub(crate) fn from_env(global: &GlobalArgs, env: impl Fn(&str) -> Option<String>) -> Self {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        let state_dir = global.state_dir.clone().or_else(|| {
            env("REPRISE_STATE_DIR")
                .filter(|value| !value.is_empty())
                .map(PathBuf::from)
        });
        let state_dir = state_dir.map(|dir| absolute(&cwd, &dir));
        let set = |name: &str| env(name).is_some_and(|value| !value.is_empty());
        let key_origin = if set("REPRISE_AUDIT_KEY_FILE") {
            "from REPRISE_AUDIT_KEY_FILE"
        } else if set("XDG_STATE_HOME") {
            "from XDG_STATE_HOME"
        } else {
            "the default under HOME"
        };
        let agent_bins = [
            "REPRISE_CLAUDE_BIN",
            "REPRISE_CODEX_BIN",
            "REPRISE_GEMINI_BIN",
        ]
        .into_iter()
        .filter_map(|name| {
            env(name)
                .filter(|value| !value.is_empty())
                .map(|value| (name, value))
        })
        .collect();
        Self {
            key_origin,
            json: global.json,
            events: false,
            display: Display::resolve(global.color, global.quiet, global.verbose, &env),
            state_dir,
            key_path: key_path(&env).map_err(|err| err.to_string()),
            plan: None,
            path_var: env("PATH"),
            agent_bins,
            user: env("USER"),
            database_url: env("REPRISE_DATABASE_URL").filter(|value| !value.is_empty()),
            cwd,
        }
    }

    /// The existing state directory this invocation works on.
    ///
    /// Opening it first stops what a dead run left running: supervisors
    /// recorded by a reprise that is gone (`reprise_agents::supervise`).
    pub(crate) fn state(&self) -> Result<StateDir, CliError> {
        Ok(self.open_state()?)
    }

    /// As [`Settings::state`], with the store's own error, for a caller
    /// that treats some of them (an older layout) as work to do.
    pub(crate) fn open_state(&self) -> Result<StateDir, StoreError> {
        let state = match &self.state_dir {
            Some(dir) => StateDir::open(dir)?,
            None => StateDir::discover(&self.cwd)?,
        };
        reprise_agents::supervise::reap_leftovers(&state.supervision_dir());
        Ok(state)
    }

    /// Where `init` creates the state directory.
    pub(crate) fn init_target(&self) -> PathBuf {
        self.state_dir
            .clone()
            .unwrap_or_else(|| self.cwd.join(STATE_DIR_NAME))
    }

    /// The same settings with `run --events` on or off.
    pub(crate) fn with_events(&self, events: bool) -> Self {
        Self {
            events,
            ..self.with_plan(self.plan.clone())
        }
    }

    /// The same settings with `--plan` as a TASK argument's plan.
    pub(crate) fn with_plan(&self, plan: Option<String>) -> Self {
        Self {
            json: self.json,
            events: self.events,
            display: self.display,
            state_dir: self.state_dir.clone(),
            cwd: self.cwd.clone(),
            key_path: self.key_path.clone(),
            key_origin: self.key_origin,
            plan,
            path_var: self.path_var.clone(),
            agent_bins: self.agent_bins.clone(),
            user: self.user.clone(),
            database_url: self.database_url.clone(),
        }
    }

    /// The state directory and the key that signs it: a valid key that does
    /// not match this state directory is refused here, before any write.
    pub(crate) fn keyed_state(&self) -> Result<(StateDir, KeyFile), CliError> {
        let state = self.state()?;
        let key = match load_key(self.key_path()?) {
            Err(StoreError::KeyMissing { .. }) => return Err(self.key_missing_error(state.root())),
            other => other?,
        };
        self.check_binding(&state, &key)?;
        Ok((state, key))
    }

    /// Refuses `key` when it does not sign `state`, naming where it came from.
    pub(crate) fn check_binding(&self, state: &StateDir, key: &KeyFile) -> Result<(), CliError> {
        check_key_binding(state, key).map_err(|err| self.binding_error(err))
    }

    /// The CLI's message for a key that does not sign a state directory.
    pub(crate) fn binding_error(&self, err: StoreError) -> CliError {
        match err {
            StoreError::KeyMismatch { path, state } => CliError::usage(format!(
                "wrong audit key: {} ({}) is not the key the audit chain of {} was made with (its state.init row does not verify with it; nothing suggests tampering); point REPRISE_AUDIT_KEY_FILE at the key this state directory was initialised with",
                path.display(),
                self.key_origin,
                state.display()
            )),
            other => other.into(),
        }
    }

    /// The CLI's message for a state directory whose key is not where this
    /// invocation looks for it.
    pub(crate) fn key_missing_error(&self, state: &Path) -> CliError {
        let path = self.key_path.as_deref().map_or_else(
            |_| "(no key path)".to_owned(),
            |path| path.display().to_string(),
        );
        CliError::usage(format!(
            "the audit chain of {} was made with a key that is not at {path} ({}): restore that key file there (or point REPRISE_AUDIT_KEY_FILE at it), or start a new state directory with --state-dir DIR",
            state.display(),
            self.key_origin
        ))
    }

    pub(crate) fn key_path(&self) -> Result<&Path, CliError> {
        self.key_path
            .as_deref()
            .map_err(|message| CliError::usage(message.clone()))
    }
}

fn absolute(cwd: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    }
}

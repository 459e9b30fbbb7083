//! Where the agent CLIs keep their state: the session stores the adapters'
//! `transcript_path` looks in, to preserve a transcript and put it back, and
//! the config homes the sandbox must let each CLI write.
//!
//! The path choice is pure ([`StateHome::root`], [`StateHome::paths`]): it
//! reads the child's variables through a lookup the caller passes. The
//! adapters build that lookup from the plan's `agents.<cli>.env` (what the
//! child is given last, so it wins) and reprise's own environment.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::request::StatePaths;

/// True for an id that can name a transcript file: non-empty, ASCII letters,
/// digits and '-' only, so it can never climb out of the store.
pub(crate) fn is_plain_session_id(session_id: &str) -> bool {
    !session_id.is_empty()
        && session_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// Where one CLI keeps its state, as the CLI itself finds it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StateHome {
    /// The variable that moves the CLI's root (`CLAUDE_CONFIG_DIR`).
    pub(crate) env_var: &'static str,
    /// The root beneath `$HOME` when the variable is unset (empty: `$HOME`).
    pub(crate) home_dir: &'static str,
    /// The directory the CLI writes, beneath its root (empty: the root).
    pub(crate) state_dir: &'static str,
    /// Files the CLI keeps in `$HOME` itself, beside its default root, when
    /// the variable is unset (Claude Code's `~/.claude.json`), with what a
    /// new one holds.
    pub(crate) home_files: &'static [(&'static str, &'static str)],
}

/// The child's value of a variable, or `None` when unset or empty.
pub(crate) type Lookup<'a> = &'a dyn Fn(&str) -> Option<OsString>;

impl StateHome {
    /// The CLI's root: the attempt's `config_home`, else `$<env_var>`, else
    /// `$HOME/<home_dir>`.
    pub(crate) fn root(&self, config_home: Option<&Path>, var: Lookup<'_>) -> Option<PathBuf> {
        if let Some(home) = config_home {
            return Some(home.to_path_buf());
        }
        if let Some(dir) = var(self.env_var) {
            return Some(PathBuf::from(dir));
        }
        let home = PathBuf::from(var("HOME")?);
        Some(if self.home_dir.is_empty() {
            home
        } else {
            home.join(self.home_dir)
        })
    }

    /// What the CLI writes outside its worktree: its state directory, and
    /// the files it keeps in `$HOME` when its root is the default one.
    /// Nothing else of `$HOME`: the sandbox grants exactly these.
    pub(crate) fn paths(&self, config_home: Option<&Path>, var: Lookup<'_>) -> StatePaths {
        let Some(root) = self.root(config_home, var) else {
            return StatePaths::default();
        };
        let dir = if self.state_dir.is_empty() {
            root
        } else {
            root.join(self.state_dir)
        };
        let moved = config_home.is_some() || var(self.env_var).is_some();
        let files = match var("HOME") {
            Some(home) if !moved => self
                .home_files
                .iter()
                .map(|(file, initial)| (Path::new(&home).join(file), *initial))
                .collect(),
            _ => Vec::new(),
        };
        StatePaths {
            dirs: vec![dir],
            files,
        }
    }
}

/// The lookup of the child's variables: the last of `overlay` (the plan's
/// `agents.<cli>.env`) that names one, else `home` for `HOME` (a home the
/// caller made for the task), else reprise's own environment, which the
/// child inherits.
pub(crate) fn child_var<'a>(
    overlay: &'a [(String, String)],
    home: Option<&'a Path>,
) -> impl Fn(&str) -> Option<OsString> + 'a {
    move |name| {
        let value = overlay
            .iter()
            .rev()
            .find(|(key, _)| key == name)
            .map(|(_, value)| OsString::from(value))
            .or_else(|| {
                (name == "HOME")
                    .then(|| home.map(|home| home.as_os_str().to_owned()))
                    .flatten()
            })
            .or_else(|| std::env::var_os(name));
        value.filter(|value| !value.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLAUDE: StateHome = StateHome {
        env_var: "CLAUDE_CONFIG_DIR",
        home_dir: ".claude",
        state_dir: "",
        home_files: &[(".claude.json", "{}\n")],
    };
    const GEMINI: StateHome = StateHome {
        env_var: "GEMINI_CLI_HOME",
        home_dir: "",
        state_dir: ".gemini",
        home_files: &[],
    };

    fn vars(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| OsString::from(value))
        }
    }

    #[test]
    fn claude_writes_its_directory_and_its_file_in_home_and_nothing_else() {
        let paths = CLAUDE.paths(None, &vars(&[("HOME", "/h")]));
        assert_eq!(paths.dirs, [PathBuf::from("/h/.claude")]);
        assert_eq!(paths.files, [(PathBuf::from("/h/.claude.json"), "{}\n")]);
    }

    #[test]
    fn a_moved_root_keeps_everything_inside_it() {
        let moved = vars(&[("HOME", "/h"), ("CLAUDE_CONFIG_DIR", "/c")]);
        let paths = CLAUDE.paths(None, &moved);
        assert_eq!(paths.dirs, [PathBuf::from("/c")]);
        assert!(paths.files.is_empty(), "{paths:?}");
        let given = CLAUDE.paths(Some(Path::new("/r/.claude")), &moved);
        assert_eq!(given.dirs, [PathBuf::from("/r/.claude")]);
        assert!(given.files.is_empty());
    }

    #[test]
    fn gemini_writes_the_gemini_directory_of_its_home() {
        let paths = GEMINI.paths(None, &vars(&[("HOME", "/h")]));
        assert_eq!(paths.dirs, [PathBuf::from("/h/.gemini")]);
        let moved = GEMINI.paths(None, &vars(&[("HOME", "/h"), ("GEMINI_CLI_HOME", "/g")]));
        assert_eq!(moved.dirs, [PathBuf::from("/g/.gemini")]);
        assert_eq!(
            GEMINI.root(None, &vars(&[("HOME", "/h")])),
            Some("/h".into())
        );
    }

    #[test]
    fn without_a_home_there_is_nothing_to_write() {
        assert_eq!(CLAUDE.paths(None, &vars(&[])), StatePaths::default());
    }

    #[test]
    fn the_plans_variables_win_then_the_callers_home() {
        let overlay = vec![
            ("HOME".to_owned(), "/first".to_owned()),
            ("HOME".to_owned(), "/plan".to_owned()),
            ("EMPTY".to_owned(), String::new()),
        ];
        let var = child_var(&overlay, Some(Path::new("/made")));
        assert_eq!(var("HOME"), Some("/plan".into()));
        assert_eq!(var("EMPTY"), None);
        let var = child_var(&[], Some(Path::new("/made")));
        assert_eq!(var("HOME"), Some("/made".into()));
    }
}

//! Where the agent CLIs keep their sessions: shared by the adapters'
//! `transcript_path`, which must find a CLI's transcript to preserve it and
//! put it back.

use std::path::PathBuf;

/// True for an id that can name a transcript file: non-empty, ASCII letters,
/// digits and '-' only, so it can never climb out of the store.
pub(crate) fn is_plain_session_id(session_id: &str) -> bool {
    !session_id.is_empty()
        && session_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// A CLI's state directory: the attempt's `config_home`, else the CLI's own
/// environment variable (`env_var`), else `$HOME/<home_dir>` (`$HOME` itself
/// when `home_dir` is empty).
pub(crate) fn config_root(
    config_home: Option<&std::path::Path>,
    env_var: &str,
    home_dir: &str,
) -> Option<PathBuf> {
    if let Some(home) = config_home {
        return Some(home.to_path_buf());
    }
    if let Some(dir) = std::env::var_os(env_var).filter(|value| !value.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    let home = PathBuf::from(std::env::var_os("HOME")?);
    Some(if home_dir.is_empty() {
        home
    } else {
        home.join(home_dir)
    })
}

/// A CLI's state paths for the sandbox: its config root (`config_home`,
/// else `$<env_var>`, else `<home>/<home_dir>`) and the files beside it in
/// `home` that it also keeps (`extra_files`, when they exist).
pub(crate) fn state_paths(
    config_home: Option<&std::path::Path>,
    env_var: &str,
    home: Option<&std::path::Path>,
    home_dir: &str,
    extra_files: &[&str],
) -> Vec<PathBuf> {
    let home = home
        .map(std::path::Path::to_path_buf)
        .or_else(|| std::env::var_os("HOME").map(PathBuf::from));
    let root = config_home
        .map(std::path::Path::to_path_buf)
        .or_else(|| {
            std::env::var_os(env_var)
                .filter(|value| !value.is_empty())
                .map(PathBuf::from)
        })
        .or_else(|| home.as_ref().map(|home| home.join(home_dir)));
    let mut paths: Vec<PathBuf> = root.into_iter().collect();
    if config_home.is_none()
        && let Some(home) = &home
    {
        paths.extend(
            extra_files
                .iter()
                .map(|file| home.join(file))
                .filter(|path| path.exists()),
        );
    }
    paths
}

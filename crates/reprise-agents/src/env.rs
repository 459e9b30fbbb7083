//! What of reprise's own environment a child gets: an allow-list, never the
//! whole of it.
//!
//! reprise runs with the user's environment, which holds whatever the user
//! exported: tokens, cloud credentials, agent sockets. An agent runs what a
//! model chose and a gate runs in a tree the agent controlled, so neither
//! gets a variable unless it is on this list, is the agent CLI's own (its
//! authentication and configuration), is named by the plan (`pass_env`), or
//! is set by reprise or the plan for the child (the invocation's own
//! variables, added after these). `REPRISE_*` never passes, whatever a list
//! says: the audit key's path is one of them.

use std::ffi::{OsStr, OsString};

/// Variables every child gets when reprise has them: the search path, who
/// and where the user is, locale, terminal, time zone, temporary directory
/// (an attempt's is reprise's own, set after these), proxies and
/// certificates.
const BASE_NAMES: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "TZ",
    "TMPDIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
];

/// Prefixes every child gets: the locale's categories.
const BASE_PREFIXES: &[&str] = &["LC_"];

/// reprise's own settings, which no child ever gets.
const OWN_PREFIX: &str = "REPRISE_";

/// The prefixes of the variables an agent CLI reads for its authentication
/// and configuration (`ANTHROPIC_API_KEY`, `CLAUDE_CONFIG_DIR`,
/// `OPENAI_API_KEY`, `CODEX_HOME`, `GEMINI_API_KEY`, `GOOGLE_CLOUD_PROJECT`,
/// ...); none for anything else (a `command` agent, a gate).
pub(crate) fn cli_prefixes(cli: &str) -> &'static [&'static str] {
    match cli {
        "claude" => &["ANTHROPIC_", "CLAUDE_"],
        "codex" => &["OPENAI_", "CODEX_"],
        "gemini" => &["GEMINI_", "GOOGLE_"],
        _ => &[],
    }
}

/// Whether a child gets `name` from reprise's environment, given the
/// CLI's own prefixes.
fn passes(name: &OsStr, cli_prefixes: &[&str]) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    if name.starts_with(OWN_PREFIX) {
        return false;
    }
    BASE_NAMES.contains(&name)
        || BASE_PREFIXES
            .iter()
            .chain(cli_prefixes)
            .any(|prefix| name.starts_with(prefix))
}

/// The variables of `vars` (reprise's environment) a child gets.
pub(crate) fn inherited(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
    cli_prefixes: &[&str],
) -> Vec<(OsString, OsString)> {
    vars.into_iter()
        .filter(|(name, _)| passes(name, cli_prefixes))
        .collect()
}

/// The values reprise's environment holds for the plan's `pass_env`
/// names, in their order; a name it lacks (or holds as non-UTF-8) is left
/// out. `REPRISE_*` names never pass (the plan refuses them too).
pub fn passed_env(names: &[String]) -> Vec<(String, String)> {
    names
        .iter()
        .filter(|name| !name.starts_with(OWN_PREFIX))
        .filter_map(|name| std::env::var(name).ok().map(|value| (name.clone(), value)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(vars: &[(&str, &str)], cli: &str) -> Vec<String> {
        inherited(
            vars.iter()
                .map(|(name, value)| (OsString::from(name), OsString::from(value))),
            cli_prefixes(cli),
        )
        .into_iter()
        .map(|(name, _)| name.to_string_lossy().into_owned())
        .collect()
    }

    const USER_ENV: &[(&str, &str)] = &[
        ("PATH", "/usr/bin"),
        ("HOME", "/home/me"),
        ("LC_TIME", "C"),
        ("MY_FAKE_SECRET", "s3cret"),
        ("GITHUB_TOKEN", "ghp"),
        ("SSH_AUTH_SOCK", "/run/agent"),
        ("REPRISE_AUDIT_KEY_FILE", "/k"),
        ("REPRISE_CLAUDE_BIN", "/c"),
        ("ANTHROPIC_API_KEY", "a"),
        ("CLAUDE_CONFIG_DIR", "/c"),
        ("OPENAI_API_KEY", "o"),
        ("GEMINI_API_KEY", "g"),
        ("GOOGLE_CLOUD_PROJECT", "p"),
        ("HTTPS_PROXY", "http://proxy"),
    ];

    #[test]
    fn only_the_allow_list_and_the_cli_own_variables_pass() {
        let base = ["PATH", "HOME", "LC_TIME", "HTTPS_PROXY"];
        assert_eq!(names(USER_ENV, "command"), base);
        let mut claude = names(USER_ENV, "claude");
        claude.sort();
        let mut expected = [&base[..], &["ANTHROPIC_API_KEY", "CLAUDE_CONFIG_DIR"]].concat();
        expected.sort();
        assert_eq!(claude, expected);
        assert!(names(USER_ENV, "codex").contains(&"OPENAI_API_KEY".to_owned()));
        assert!(!names(USER_ENV, "codex").contains(&"ANTHROPIC_API_KEY".to_owned()));
        let gemini = names(USER_ENV, "gemini");
        assert!(gemini.contains(&"GEMINI_API_KEY".to_owned()));
        assert!(gemini.contains(&"GOOGLE_CLOUD_PROJECT".to_owned()));
    }

    #[test]
    fn reprise_own_settings_never_pass() {
        for cli in ["claude", "codex", "gemini", "command"] {
            assert!(
                names(USER_ENV, cli)
                    .iter()
                    .all(|name| !name.starts_with("REPRISE_")),
                "{cli}"
            );
        }
        assert_eq!(
            passed_env(&["REPRISE_AUDIT_KEY_FILE".to_owned()]),
            Vec::<(String, String)>::new()
        );
    }

    #[test]
    fn pass_env_takes_only_what_is_set() {
        // PATH is set in any test environment; this name is not.
        let passed = passed_env(&[
            "PATH".to_owned(),
            "REPRISE_NOT_A_VARIABLE_ANYONE_SETS".to_owned(),
            "NOT_A_VARIABLE_ANYONE_SETS_7f3a".to_owned(),
        ]);
        assert_eq!(passed.len(), 1);
        assert_eq!(passed[0].0, "PATH");
    }
}

//! What a plan adds to an agent CLI's command line and environment
//! (`agents.<cli>.model`, `.args`, `.env`), and the flags it may not add.
//!
//! reprise owns some of each CLI's flags: the ones that pick the session
//! (resume, fork, session id), the output format its parser reads, the
//! permission or sandbox mode the threat model relies on, and the budget.
//! An extra argument that names one of them would silently change what a
//! retry resumes or what the parser reads, so the plan is refused before
//! anything runs (`clashing_arg`); everything else is passed through after
//! reprise's own arguments, as the user would type it.

use crate::process::Invocation;

/// Extra settings for one agent CLI, from the plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CliOptions {
    /// `--model M`.
    pub model: Option<String>,
    /// Extra arguments, after reprise's own and before the prompt.
    pub args: Vec<String>,
    /// Variables for this agent's process only (never its gates).
    pub env: Vec<(String, String)>,
}

/// Claude Code's flags that reprise sets or must not have changed.
const CLAUDE_FLAGS: &[&str] = &[
    "-p",
    "--print",
    "--output-format",
    "--input-format",
    "--permission-mode",
    "--session-id",
    "-r",
    "--resume",
    "-c",
    "--continue",
    "--fork-session",
    "--max-budget-usd",
    "--allowedTools",
    "--allowed-tools",
    "--model",
];

/// Codex's.
const CODEX_FLAGS: &[&str] = &[
    "--json",
    "--skip-git-repo-check",
    "-s",
    "--sandbox",
    "-C",
    "--cd",
    "-m",
    "--model",
    "--full-auto",
    "--dangerously-bypass-approvals-and-sandbox",
    "--last",
];

/// Gemini CLI's.
const GEMINI_FLAGS: &[&str] = &[
    "-p",
    "--prompt",
    "-i",
    "--prompt-interactive",
    "-o",
    "--output-format",
    "--skip-trust",
    "--approval-mode",
    "-y",
    "--yolo",
    "--session-id",
    "-r",
    "--resume",
    "-m",
    "--model",
];

/// The flags reprise controls for `cli` (`claude`, `codex`, `gemini`).
pub fn controlled_flags(cli: &str) -> &'static [&'static str] {
    match cli {
        "claude" => CLAUDE_FLAGS,
        "codex" => CODEX_FLAGS,
        "gemini" => GEMINI_FLAGS,
        _ => &[],
    }
}

/// The first of `args` that sets a flag reprise controls for `cli`, with
/// that flag: `--resume`, `--resume=x`, and for codex a `-c sandbox_mode=...`
/// override (other `-c` settings pass).
pub fn clashing_arg<'a>(cli: &str, args: &'a [String]) -> Option<(&'a str, &'static str)> {
    let flags = controlled_flags(cli);
    for (index, arg) in args.iter().enumerate() {
        let name = arg.split_once('=').map_or(arg.as_str(), |(name, _)| name);
        if let Some(flag) = flags.iter().find(|flag| **flag == name) {
            return Some((arg, flag));
        }
        if cli == "codex" && matches!(name, "-c" | "--config") {
            let value = match arg.split_once('=') {
                Some((_, value)) => Some(value),
                None => args.get(index + 1).map(String::as_str),
            };
            if value.is_some_and(|value| value.trim_start().starts_with("sandbox_mode")) {
                return Some((arg, "-c sandbox_mode"));
            }
        }
    }
    None
}

impl CliOptions {
    /// Whether the plan set nothing.
    pub fn is_empty(&self) -> bool {
        self.model.is_none() && self.args.is_empty() && self.env.is_empty()
    }

    /// `invocation` with the model and extra arguments put after reprise's
    /// own options (before the `--` that ends them, if there is one) and the
    /// variables added to the child's environment.
    /// `model` is the attempt's own choice, which wins over the plan's.
    pub(crate) fn apply(&self, mut invocation: Invocation, model: Option<&str>) -> Invocation {
        if self.is_empty() && model.is_none() {
            return invocation;
        }
        let mut extra = Vec::new();
        if let Some(model) = model.or(self.model.as_deref()) {
            extra.extend(["--model".to_owned(), model.to_owned()]);
        }
        extra.extend(self.args.iter().cloned());
        let at = invocation
            .args
            .iter()
            .position(|arg| arg == "--")
            .unwrap_or(invocation.args.len());
        let added = extra.len();
        invocation.args.splice(at..at, extra);
        if let Some(prompt) = invocation.prompt_arg.as_mut()
            && *prompt >= at
        {
            *prompt += added;
        }
        invocation.env.extend(self.env.iter().cloned());
        invocation
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::Stdin;
    use std::path::PathBuf;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|item| (*item).to_owned()).collect()
    }

    #[test]
    fn extra_arguments_go_after_reprises_own_and_before_the_prompt() {
        let invocation = Invocation {
            cli_prefixes: &[],
            provider: crate::network::Provider::Any,
            program: PathBuf::from("claude"),
            args: strings(&["-p", "--output-format", "json", "--", "the prompt"]),
            env: vec![("A".into(), "1".into())],
            stdin: Stdin::Null,
            prompt_arg: Some(4),
            session_id: None,
        };
        let options = CliOptions {
            model: Some("opus".into()),
            args: strings(&["--verbose"]),
            env: vec![("B".into(), "2".into())],
        };
        let applied = options.apply(invocation.clone(), None);
        assert_eq!(
            applied.args,
            strings(&[
                "-p",
                "--output-format",
                "json",
                "--model",
                "opus",
                "--verbose",
                "--",
                "the prompt"
            ])
        );
        assert_eq!(applied.prompt_arg, Some(7));
        assert_eq!(applied.args[7], "the prompt");
        assert_eq!(
            applied.env,
            vec![("A".into(), "1".into()), ("B".into(), "2".into())]
        );
        // An attempt's own model (a retry after a request for context) wins.
        let retried = options.apply(invocation.clone(), Some("haiku"));
        assert_eq!(retried.args[3..5], strings(&["--model", "haiku"]));
        let only_attempt = CliOptions::default().apply(invocation, Some("haiku"));
        assert_eq!(only_attempt.args[3..5], strings(&["--model", "haiku"]));
    }

    #[test]
    fn flags_reprise_controls_are_named() {
        assert_eq!(
            clashing_arg("claude", &strings(&["--verbose", "--resume", "x"])),
            Some(("--resume", "--resume"))
        );
        assert_eq!(
            clashing_arg("claude", &strings(&["--output-format=text"])),
            Some(("--output-format=text", "--output-format"))
        );
        assert_eq!(
            clashing_arg(
                "codex",
                &strings(&["-c", "sandbox_mode=danger-full-access"])
            ),
            Some(("-c", "-c sandbox_mode"))
        );
        assert_eq!(
            clashing_arg("codex", &strings(&["-c", "model_reasoning_effort=high"])),
            None
        );
        assert_eq!(
            clashing_arg("gemini", &strings(&["--yolo"])),
            Some(("--yolo", "--yolo"))
        );
        assert_eq!(clashing_arg("claude", &strings(&["--verbose"])), None);
    }
}

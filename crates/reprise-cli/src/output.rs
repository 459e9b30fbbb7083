//! Printing: every command returns what to show; this module shows it.

use std::io::{IsTerminal, Write};

use serde_json::Value;

use crate::error::ExitKind;

/// What a command produced: its JSON form, its text form, and whether it
/// succeeded.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) json: Value,
    pub(crate) text: String,
    pub(crate) ok: bool,
    /// An exit other than the one `ok` gives (a run that left tasks parked).
    pub(crate) exit: Option<ExitKind>,
}

impl Outcome {
    pub(crate) fn exit_code(&self) -> u8 {
        let kind = self.exit.unwrap_or(if self.ok {
            ExitKind::Success
        } else {
            ExitKind::Failed
        });
        kind.code()
    }

    pub(crate) fn print(&self, json: bool) {
        let mut stdout = std::io::stdout().lock();
        let _ = if json {
            writeln!(
                stdout,
                "{}",
                serde_json::to_string_pretty(&self.json).expect("json renders")
            )
        } else {
            write!(stdout, "{}", self.text)
        };
    }
}

/// When output is coloured (`--color`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ColorChoice {
    Auto,
    Always,
    Never,
}

/// How human output looks, settled once from the flags and the terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Display {
    pub(crate) color: bool,
    /// Status lines redrawn in place (an interactive terminal, colour allowed).
    pub(crate) live: bool,
    pub(crate) quiet: bool,
    pub(crate) verbose: bool,
}

impl Display {
    pub(crate) fn resolve(
        color: ColorChoice,
        quiet: bool,
        verbose: bool,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Self {
        let terminal =
            std::io::stdout().is_terminal() && env("TERM").is_none_or(|term| term != "dumb");
        let no_color = env("NO_COLOR").is_some_and(|value| !value.is_empty());
        let color = match color {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => terminal && !no_color,
        };
        Self {
            color,
            live: terminal && color && !quiet,
            quiet,
            verbose,
        }
    }
}

/// Dollars, from micro-dollars: `$0.0523`.
pub(crate) fn money(micro_usd: u64) -> String {
    format!("${}", reprise_core::plan::format_micro_usd(micro_usd))
}

/// A duration as the result lines show it, right-aligned: `  1.2s`, ` 73.0s`.
pub(crate) fn seconds(ms: u64) -> String {
    format!("{:>5.1}s", ms as f64 / 1000.0)
}

/// A commit id as text output shows it: its first seven digits.
pub(crate) fn short_commit(commit: &str) -> &str {
    &commit[..commit.len().min(7)]
}

/// Shortens a digest for text output.
pub(crate) fn short(hex: &str) -> &str {
    &hex[..hex.len().min(12)]
}

/// `count` and `noun`, the noun plural unless the count is one: `1 task`,
/// `2 tasks`. Nouns here all take a plain `s`.
pub(crate) fn count(count: impl Into<u64>, noun: &str) -> String {
    let count = count.into();
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(0u64, "task"), "0 tasks");
        assert_eq!(count(1u64, "task"), "1 task");
        assert_eq!(count(2u32, "decision"), "2 decisions");
    }
}

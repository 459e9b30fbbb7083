//! Printing: every command returns what to show; this module shows it.

use std::io::Write;

use serde_json::Value;

use crate::error::{EXIT_FAILED, EXIT_OK};

/// What a command produced: its JSON form, its text form, and whether it
/// succeeded.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) json: Value,
    pub(crate) text: String,
    pub(crate) ok: bool,
    /// An exit code other than the one `ok` gives (3: a run left tasks parked).
    pub(crate) code: Option<u8>,
}

impl Outcome {
    pub(crate) fn exit_code(&self) -> u8 {
        self.code
            .unwrap_or(if self.ok { EXIT_OK } else { EXIT_FAILED })
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

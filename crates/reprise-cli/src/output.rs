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
}

impl Outcome {
    pub(crate) fn exit_code(&self) -> u8 {
        if self.ok { EXIT_OK } else { EXIT_FAILED }
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

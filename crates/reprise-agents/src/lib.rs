//! Adapters that drive agent CLIs (Claude Code, Codex, Gemini, any command,
//! and the built-in `sim` agent). Each adapter will pair a pure invocation
//! builder and output parser with a process driver; see DESIGN.md section 11.
//! The run engine (a later issue) is the first consumer; until then this crate
//! holds nothing.

#![forbid(unsafe_code)]

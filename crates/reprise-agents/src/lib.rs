//! Adapters that drive agent CLIs (Claude Code, Codex, Gemini, any command)
//! and the built-in `sim` agent, for the run engine.
//!
//! Each adapter declares its resume strategy (the retry capability derives
//! from it alone) and turns an [`AttemptRequest`] into an [`AttemptReport`]:
//! a reply, or an infrastructure failure of a named [`InfraKind`]. The CLI
//! adapters pair a pure invocation builder and a pure output parser with one
//! process driver (own process group, wall-clock timeout, cancel, always
//! reaped); see DESIGN.md section 11 and each module's table of arguments.
//! Nothing here prints: the engine records, the CLI renders.

#![deny(unsafe_code)]

mod acp;
mod acp_state;
mod check;
mod claude;
#[cfg(test)]
mod cli_flags;
mod codex;
mod command;
mod env;
mod gemini;
mod home;
pub mod lineage;
mod namespaces;
mod network;
mod options;
mod outcome;
mod park;
mod process;
mod proxy;
mod request;
mod rulesets;
mod sim;
pub mod supervise;

pub use acp::{AcpAdapter, Handshake};
pub use acp_state::{AcpState, AcpStateSource};
pub use check::{AgentBinary, bin_env_var, find_program, resolve_agent_binary};
pub use claude::ClaudeAdapter;
pub use codex::CodexAdapter;
pub use command::CommandAdapter;
pub use env::passed_env;
pub use gemini::GeminiAdapter;
pub use lineage::Lineage;
pub use network::{Reach, Walls};
pub use options::{CliOptions, clashing_arg, controlled_flags};
pub use outcome::{
    AttemptOutcome, AttemptReport, InfraKind, ParkSignal, QUESTION_MAX_BYTES, STREAM_KEEP_BYTES,
    Streams,
};
pub use request::{
    Adapter, AttemptRequest, CancelToken, SessionMode, StatePaths, Watch, is_file_safe_session_id,
};
pub use sim::{SimAdapter, SimStep, SimTurn, sim_transcript};
pub use supervise::{SandboxRules, Supervision};

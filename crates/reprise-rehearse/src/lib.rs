//! Rehearsal for reprise: a scripted model server on loopback that speaks the
//! Anthropic Messages API and the OpenAI Responses API (as Claude Code and
//! Codex call them), how to point each agent CLI at it, and the summary of
//! what each task sent it.
//!
//! `reprise rehearse` points a plan's agents at this server so a plan runs
//! through the real CLIs, their real sessions and tool loops, without a
//! token spent; the test suite drives the real CLIs through it too.

#![forbid(unsafe_code)]

pub mod check;
pub mod model_server;
pub mod pricing;
pub mod report;
pub mod setup;

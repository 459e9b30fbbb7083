//! The run loop: plan loading, scheduling with seats and budget envelopes,
//! sandboxes, gates, attempts and retries (DESIGN.md sections 5 to 10).
//! Built by the run-engine issue; until then this crate holds nothing.

#![forbid(unsafe_code)]

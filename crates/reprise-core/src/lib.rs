//! Pure decisions and record formats of reprise.
//!
//! Nothing in this crate touches the file system, spawns a process, reads the
//! clock or draws randomness: times, nonces and keys come in as arguments, so
//! every function here is deterministic and can be tested exhaustively.

#![forbid(unsafe_code)]

pub mod attention;
pub mod budget;
pub mod canonical;
pub mod chain;
pub mod digest;
pub mod grant;
mod id;
pub mod lifecycle;
pub mod outcome;
pub mod plan;
pub mod pool;
pub mod prompt;
pub mod record;
pub mod recovery;
pub mod reset;
pub mod retry;
pub mod retry_cost;
pub mod retry_mode;
pub mod row_kind;
pub mod rows;
mod scan;
pub mod schedule;
pub mod suspension;
pub mod verify;
pub mod witness;

pub use id::{PlanId, RunIdError, TASK_ID_MAX_LEN, TaskId, TaskIdError, TaskKey, check_run_id};

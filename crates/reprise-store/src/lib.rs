//! The reprise state directory and everything written in it.
//!
//! Effects live here: files, locks, fsync. The formats and the decisions about
//! them live in `reprise-core`; this crate reads and writes bytes and hands
//! them to the core to judge.

#![forbid(unsafe_code)]

pub mod agent_checkpoint;
pub mod approvals;
pub mod audit;
mod chainfile;
pub mod creation;
mod dir_stat;
pub mod error;
mod fsutil;
pub mod git;
pub mod io;
pub mod journal;
pub mod key;
pub mod ledger;
pub mod locks;
pub mod logs;
mod loose;
pub mod parks;
pub mod repair;
pub mod replies;
mod shadow_tree;
pub mod snapshot;
pub mod state;
pub mod suspension;
pub mod witness;
pub mod workspace;

pub use chainfile::{ChainFile, Fingerprint, read_chain, read_chain_from};
pub use error::{Result, StoreError};
pub use fsutil::{read_no_follow, replace_file, write_atomic};

//! The words a retry is decided in: its mode (warm, fork or cold), what an
//! adapter declares about resuming its CLI's sessions, and the capability
//! that follows. The decision table (`retry`) and the cost prediction
//! (`retry_cost`) both speak them; neither needs the other to.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How a retry continues the agent's conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryMode {
    /// Resume the same session: it already holds the failed attempt.
    Warm,
    /// Branch a new session off the checkpoint; the original stays as it was.
    Fork,
    /// A fresh session with the prompt rebuilt from scratch.
    Cold,
}

impl RetryMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Warm => "warm",
            Self::Fork => "fork",
            Self::Cold => "cold",
        }
    }

    /// The mode a name stands for, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Warm, Self::Fork, Self::Cold]
            .into_iter()
            .find(|mode| mode.as_str() == name)
    }
}

impl fmt::Display for RetryMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an adapter declares about resuming its CLI's sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResumeStrategy {
    /// Native resume, and the session store can branch a session.
    NativeForkable,
    /// Native resume only.
    Native,
    /// No resume: every attempt starts fresh.
    Unsupported,
}

/// The retry capability, derived from the declared strategy alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    Fork,
    Resume,
    None,
}

impl ResumeStrategy {
    pub fn capability(self) -> Capability {
        match self {
            Self::NativeForkable => Capability::Fork,
            Self::Native => Capability::Resume,
            Self::Unsupported => Capability::None,
        }
    }
}

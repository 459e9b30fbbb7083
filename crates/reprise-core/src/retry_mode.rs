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

/// What an Agent Client Protocol agent declares at `initialize` about its
/// sessions: `loadSession`, `sessionCapabilities.resume` and
/// `sessionCapabilities.fork`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct DeclaredSessions {
    pub load: bool,
    pub resume: bool,
    pub fork: bool,
}

impl DeclaredSessions {
    /// The strategy the declaration comes to: a session that can be
    /// continued (loaded or resumed) and forked is `NativeForkable`, one
    /// that can only be continued `Native`, any other `Unsupported`. A fork
    /// alone is not enough for a fork retry: the decision's table has a
    /// fork only beside a resume (a fork's session is resumed in its turn).
    pub fn strategy(self) -> ResumeStrategy {
        match (self.load || self.resume, self.fork) {
            (true, true) => ResumeStrategy::NativeForkable,
            (true, false) => ResumeStrategy::Native,
            (false, _) => ResumeStrategy::Unsupported,
        }
    }

    /// How a warm retry continues a session: `session/resume` where
    /// declared (it replays nothing), else `session/load`.
    pub fn continues_by_resume(self) -> bool {
        self.resume
    }
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

#[cfg(test)]
mod declared_tests {
    use super::*;

    #[test]
    fn an_acp_declaration_maps_onto_the_capability_table() {
        let cases = [
            ((false, false, false), Capability::None),
            ((true, false, false), Capability::Resume),
            ((false, true, false), Capability::Resume),
            ((true, true, false), Capability::Resume),
            ((true, false, true), Capability::Fork),
            ((false, true, true), Capability::Fork),
            ((false, false, true), Capability::None),
        ];
        for ((load, resume, fork), capability) in cases {
            let declared = DeclaredSessions { load, resume, fork };
            assert_eq!(declared.strategy().capability(), capability, "{declared:?}");
        }
        assert!(
            DeclaredSessions {
                load: true,
                resume: true,
                fork: false
            }
            .continues_by_resume()
        );
        assert!(
            !DeclaredSessions {
                load: true,
                ..Default::default()
            }
            .continues_by_resume()
        );
    }
}

//! Where an ACP agent keeps its own state (its saved sessions): the plan's
//! `agents.acp.state_dirs`, else what reprise knows of the agent its
//! command runs, from one small table ([`KNOWN_AGENTS`]).
//!
//! The engine makes these directories before a contained attempt and the
//! sandbox lets the agent write them, as for a CLI adapter's state
//! ([`crate::StatePaths`]); without them a contained agent cannot save its
//! session, and every warm retry goes cold. `~/` is the child's `HOME`,
//! known only where the agent runs, so the choice reads the child's
//! variables through a lookup the caller passes.

use std::path::{Path, PathBuf};

use reprise_core::plan::AgentStateDir;

use crate::home::{Lookup, StateHome};

/// The agents whose state reprise knows, by their program's file name.
/// Add a row when another agent's store is measured.
const KNOWN_AGENTS: &[(&str, StateHome)] = &[("gemini", crate::gemini::GEMINI_STATE)];

/// The directories an ACP agent may write for its own state, and how
/// reprise came to them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcpState {
    pub dirs: Vec<PathBuf>,
    pub source: AcpStateSource,
}

/// Where [`AcpState::dirs`] come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcpStateSource {
    /// The plan's `agents.acp.state_dirs`.
    Plan,
    /// The table's row for the command's program (`gemini`).
    Inferred { program: &'static str },
    /// Neither: the agent may write nothing of its own outside the worktree.
    Unknown,
}

/// The agent's state directories: `declared` (the plan's, `~/` taken as
/// the child's `HOME`; one under an unknown home is left out) when given,
/// else the table's for `program` (the agent's argv[0], matched by its
/// file name), else none.
pub(crate) fn acp_state(
    declared: Option<&[AgentStateDir]>,
    program: Option<&str>,
    var: Lookup<'_>,
) -> AcpState {
    if let Some(declared) = declared {
        let home = var("HOME").map(PathBuf::from);
        return AcpState {
            dirs: declared
                .iter()
                .filter_map(|dir| dir.resolve(home.as_deref()))
                .collect(),
            source: AcpStateSource::Plan,
        };
    }
    let known = program
        .and_then(|program| Path::new(program).file_name())
        .and_then(|name| {
            KNOWN_AGENTS
                .iter()
                .find(|(known, _)| name == std::ffi::OsStr::new(known))
        });
    match known {
        Some((program, state)) => AcpState {
            // An ACP agent gets no config home of reprise's: its own
            // variable, else its default under `HOME`.
            dirs: state.paths(None, var).dirs,
            source: AcpStateSource::Inferred { program },
        },
        None => AcpState {
            dirs: Vec::new(),
            source: AcpStateSource::Unknown,
        },
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::*;

    fn vars(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| OsString::from(value))
        }
    }

    #[test]
    fn gemini_s_store_is_inferred_under_its_home_or_its_own_variable() {
        let home = vars(&[("HOME", "/h")]);
        for program in ["gemini", "/usr/local/bin/gemini"] {
            assert_eq!(
                acp_state(None, Some(program), &home),
                AcpState {
                    dirs: vec![PathBuf::from("/h/.gemini")],
                    source: AcpStateSource::Inferred { program: "gemini" },
                },
                "{program}"
            );
        }
        let moved = vars(&[("HOME", "/h"), ("GEMINI_CLI_HOME", "/g")]);
        assert_eq!(
            acp_state(None, Some("gemini"), &moved).dirs,
            [PathBuf::from("/g/.gemini")]
        );
    }

    #[test]
    fn an_unknown_agent_writes_nothing_of_its_own() {
        let home = vars(&[("HOME", "/h")]);
        for program in [Some("node"), Some("gemini-wrapper"), None] {
            assert_eq!(
                acp_state(None, program, &home),
                AcpState {
                    dirs: Vec::new(),
                    source: AcpStateSource::Unknown,
                },
                "{program:?}"
            );
        }
    }

    #[test]
    fn the_plan_s_dirs_win_with_tilde_as_the_child_s_home() {
        let declared = [
            AgentStateDir::InHome(PathBuf::from(".peer/sessions")),
            AgentStateDir::Absolute(PathBuf::from("/srv/peer")),
        ];
        let state = acp_state(Some(&declared), Some("gemini"), &vars(&[("HOME", "/h")]));
        assert_eq!(
            state,
            AcpState {
                dirs: vec![
                    PathBuf::from("/h/.peer/sessions"),
                    PathBuf::from("/srv/peer")
                ],
                source: AcpStateSource::Plan,
            }
        );
        let homeless = acp_state(Some(&declared), None, &vars(&[]));
        assert_eq!(homeless.dirs, [PathBuf::from("/srv/peer")]);
        let none = acp_state(Some(&[]), Some("gemini"), &vars(&[("HOME", "/h")]));
        assert!(none.dirs.is_empty(), "an empty list infers nothing");
        assert_eq!(none.source, AcpStateSource::Plan);
    }
}

//! What a retry says to the agent: the templated corrective instruction sent
//! alone to a resumed (warm) or branched (fork) session, and the fresh-session
//! prompt of a cold retry (DESIGN.md section 6).
//!
//! The instruction is built from a fixed template, never free text, so what a
//! resumed session receives is auditable: its template id and hash go into the
//! decision record. A check that discloses only its verdict is never named.
//! Quoting gate output and the failed reply (fenced, bounded) is the subject
//! of the next piece of work; until it exists nothing untrusted is quoted.

use crate::digest::{Digest, tagged_sha256};

/// Template id of the corrective instruction, recorded with each decision.
pub const CORRECTIVE_TEMPLATE_ID: &str = "corrective/v1";
/// Domain tag of an instruction's hash.
pub const INSTRUCTION_TAG: &[u8] = b"reprise/instruction/v1\n";

/// A check that did not accept the attempt, as the prompt may describe it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailedCheck<'a> {
    /// A `disclose: output` gate: named, with its exit status when it has one.
    Named {
        name: &'a str,
        exit_code: Option<i32>,
    },
    /// A `disclose: verdict` gate: nothing about it is said but that it failed.
    Withheld,
    /// The agent itself exited non-zero.
    AgentExit { exit_code: i32 },
}

/// The corrective instruction for `failed`, and its hash.
pub fn corrective_instruction(failed: &[FailedCheck<'_>]) -> (String, Digest) {
    let mut text = String::from("Checks did not accept your last attempt:\n");
    let mut withheld = false;
    for check in failed {
        match check {
            FailedCheck::Named {
                name,
                exit_code: Some(code),
            } => {
                text.push_str(&format!("- `{name}` failed (exit status {code})\n"));
            }
            FailedCheck::Named {
                name,
                exit_code: None,
            } => {
                text.push_str(&format!("- `{name}` failed\n"));
            }
            FailedCheck::AgentExit { exit_code } => {
                text.push_str(&format!("- your run ended with exit status {exit_code}\n"));
            }
            FailedCheck::Withheld => withheld = true,
        }
    }
    if withheld {
        text.push_str("- a check did not accept it\n");
    }
    text.push_str("Fix the work in place to meet the original request, then reply.\n");
    let hash = tagged_sha256(INSTRUCTION_TAG, &[text.as_bytes()]);
    (text, hash)
}

/// The prompt of a cold retry: the base prompt rebuilt from scratch, with a
/// sentence saying the earlier session is not visible.
pub fn cold_retry_prompt(base: &str, attempt: u32) -> String {
    format!(
        "{base}\n\n(This is attempt {attempt}, in a fresh session: an earlier attempt was checked and \
         not accepted, and you cannot see its conversation. Check the files as they are now.)\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_checks_are_never_named() {
        let (text, _) = corrective_instruction(&[FailedCheck::Withheld, FailedCheck::Withheld]);
        assert_eq!(
            text,
            "Checks did not accept your last attempt:\n\
             - a check did not accept it\n\
             Fix the work in place to meet the original request, then reply.\n"
        );
    }

    #[test]
    fn output_checks_are_named_with_their_status() {
        let (text, hash) = corrective_instruction(&[
            FailedCheck::Named {
                name: "content",
                exit_code: Some(1),
            },
            FailedCheck::Withheld,
        ]);
        assert!(
            text.contains("- `content` failed (exit status 1)\n"),
            "{text}"
        );
        assert!(text.contains("- a check did not accept it\n"), "{text}");
        assert_eq!(hash, tagged_sha256(INSTRUCTION_TAG, &[text.as_bytes()]));
        let (other, other_hash) = corrective_instruction(&[FailedCheck::Named {
            name: "lint",
            exit_code: Some(1),
        }]);
        assert_ne!((text, hash), (other, other_hash));
    }

    #[test]
    fn cold_prompts_start_from_the_base_prompt() {
        let prompt = cold_retry_prompt("Create greeting.txt", 3);
        assert!(
            prompt.starts_with("Create greeting.txt\n\n(This is attempt 3, in a fresh session"),
            "{prompt}"
        );
    }
}

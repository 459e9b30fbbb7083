//! The two things a retry can say, built from one [`RetryContext`]: the cold
//! prompt rebuilt from the base prompt, and the corrective instruction sent
//! alone to a resumed or forked session.
//!
//! Both are fixed templates filled with trusted facts (gate names, exit
//! statuses) plus fenced, bounded quotes of untrusted text; nothing the agent
//! or a gate wrote is ever spliced in unfenced. Only a judged previous attempt
//! is spoken of at all, and only `disclose: output` gates are named: a
//! `verdict` gate is "a check", whatever its name, predicate or detail.

use crate::digest::{Digest, tagged_sha256};
use crate::outcome::{AttemptOutcome, Verdict};
use crate::plan::Disclose;

use super::excerpt::{excerpt, without_nul};
use super::fence::{Fenced, Nonce, fence_or_notice};

/// Template id of the corrective instruction, recorded with each decision.
pub const CORRECTIVE_TEMPLATE_ID: &str = "corrective/v2";
/// Domain tag of an instruction's hash.
pub const INSTRUCTION_TAG: &[u8] = b"reprise/instruction/v1\n";
/// Most bytes of a prior reply quoted into a cold prompt, cut announcement included.
pub const REPLY_QUOTE_MAX: usize = 8000;
/// Most bytes of one gate's output quoted into a prompt, cut announcement included.
pub const GATE_OUTPUT_MAX: usize = 4000;

/// The fence label of a quoted prior reply.
const REPLY_LABEL: &str = "prior-reply";
/// The fence label of an attempt's request for context.
const REQUEST_LABEL: &str = "context-request";
/// Most bytes of a request for context quoted into a prompt.
const REQUEST_QUOTE_MAX: usize = 2_000;
/// The first line of every corrective instruction about a judged attempt.
const CORRECTIVE_OPENING: &str = "Checks did not accept your last attempt:\n";
/// The line that stands for every failed `verdict` gate, however many.
const WITHHELD_LINE: &str = "- a check did not accept it\n";

/// Everything a retry's prompt is built from.
#[derive(Debug, Clone)]
pub struct RetryContext<'a> {
    /// The task's interpolated prompt with nothing appended: every cold prompt
    /// is rebuilt from it, never from an earlier attempt's prompt.
    pub base_prompt: &'a str,
    /// The number of the attempt being prepared (the first attempt is 1).
    pub attempt: u32,
    /// The attempt immediately before this one, if anything is known of it.
    pub previous: Option<PreviousAttempt<'a>>,
    /// The files were restored to how they were before that attempt (a
    /// resumed session must not think its changes are still there).
    pub files_rolled_back: bool,
    /// That attempt asked for more context instead of finishing.
    pub needs_context: Option<ContextRequest<'a>>,
}

/// An attempt's `NEEDS_CONTEXT:` request, and what the plan's
/// `on_needs_context` answers it with.
#[derive(Debug, Clone, Copy)]
pub struct ContextRequest<'a> {
    /// What the agent said it needs (its words: quoted fenced).
    pub what: &'a str,
    /// The plan's extra prompt text, if any.
    pub answer: Option<&'a str>,
}

/// The request quoted and the plan's answer, for either kind of retry.
fn push_context_request(
    request: &ContextRequest<'_>,
    opening: &str,
    nonces: &mut NonceSource<'_>,
    built: &mut BuiltPrompt,
) {
    built.text.push_str(opening);
    match fence_or_notice(
        REQUEST_LABEL,
        &excerpt(&without_nul(request.what), REQUEST_QUOTE_MAX),
        nonces(),
    ) {
        Fenced::Quoted(block) => built.text.push_str(&block),
        Fenced::Dropped { notice } => built.notices.push(notice),
    }
    match request.answer {
        Some(answer) => {
            built.text.push_str("\nWhat there is to add:\n");
            built.text.push_str(answer);
            if !answer.ends_with('\n') {
                built.text.push('\n');
            }
        }
        None => built.text.push_str(
            "\nNo more context is available: make the best of the request and the files.\n",
        ),
    }
}

/// What is known of the attempt immediately before the one being prepared.
#[derive(Debug, Clone)]
pub struct PreviousAttempt<'a> {
    /// Whether it was a verdict on the work: from
    /// [`AttemptOutcome::is_judged`], or from the `judged` a finished run
    /// recorded. Unless set, nothing below is quoted or named.
    pub judged: bool,
    /// Its reply, as the agent gave it.
    pub reply: &'a str,
    /// The agent's own non-zero exit status, when that was a verdict.
    pub agent_exit_code: Option<i32>,
    /// The gates that did not accept it, in the plan's order.
    pub failed_gates: Vec<FailedGate<'a>>,
}

/// One gate that did not accept the previous attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedGate<'a> {
    pub name: &'a str,
    pub exit_code: Option<i32>,
    pub disclose: Disclose,
    /// What it printed; ignored unless `disclose` is `output`.
    pub output: &'a str,
}

/// A built prompt, and the notices for the progress output about quotes that
/// had to be left out of it.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltPrompt {
    pub text: String,
    pub notices: Vec<String>,
}

/// Where each fenced block of a prompt gets its nonce: called once per block,
/// after that block's text is fixed; `None` when minting failed.
pub type NonceSource<'a> = dyn FnMut() -> Option<Nonce> + 'a;

impl<'a> PreviousAttempt<'a> {
    /// The previous attempt as `outcome` classified it.
    ///
    /// `judged` is `outcome.is_judged()`; an unjudged attempt keeps neither
    /// its reply nor its gates. `output_of` is asked for the output of each
    /// failed `disclose: output` gate only, so a `verdict` gate's output never
    /// enters the context.
    pub fn from_outcome(
        outcome: &'a AttemptOutcome,
        reply: &'a str,
        output_of: &dyn Fn(&str) -> &'a str,
    ) -> Self {
        let mut previous = Self {
            judged: outcome.is_judged(),
            reply: "",
            agent_exit_code: None,
            failed_gates: Vec::new(),
        };
        let (true, AttemptOutcome::Judged(verdicts)) = (previous.judged, outcome) else {
            return previous;
        };
        previous.reply = reply;
        for verdict in verdicts {
            match verdict {
                Verdict::GateRejected {
                    gate,
                    exit_code,
                    disclose,
                } => previous.failed_gates.push(FailedGate {
                    name: gate,
                    exit_code: *exit_code,
                    disclose: *disclose,
                    output: match disclose {
                        Disclose::Output => output_of(gate),
                        Disclose::Verdict => "",
                    },
                }),
                Verdict::PredicateRejected { gate, disclose } => {
                    previous.failed_gates.push(FailedGate {
                        name: gate,
                        exit_code: None,
                        disclose: *disclose,
                        output: "",
                    });
                }
                Verdict::AgentExit { exit_code } => previous.agent_exit_code = Some(*exit_code),
            }
        }
        previous
    }
}

/// The plain cold prompt: the base prompt and the fresh-session sentence.
///
/// It is what a cold retry sends when the previous attempt was not judged,
/// and what every richer cold prompt starts with.
pub fn cold_retry_prompt(base: &str, attempt: u32) -> String {
    format!(
        "{base}\n\n(This is attempt {attempt}, in a fresh session: an earlier attempt did not \
         succeed, and neither it nor its conversation is in your context. Check the files as \
         they are now.)\n"
    )
}

/// The prompt of a cold retry.
///
/// The plain cold prompt, then, only when the previous attempt was judged:
/// what did not accept it, one fenced quote of its reply (excerpted to
/// [`REPLY_QUOTE_MAX`]) and the fenced output of each failed `output` gate
/// (excerpted to [`GATE_OUTPUT_MAX`]). Each block asks `nonces` for its own
/// nonce; a block that gets none is left out and noted in `notices`.
pub fn cold_prompt(context: &RetryContext<'_>, nonces: &mut NonceSource<'_>) -> BuiltPrompt {
    let mut built = BuiltPrompt {
        text: cold_retry_prompt(context.base_prompt, context.attempt),
        notices: Vec::new(),
    };
    if let Some(request) = &context.needs_context {
        push_context_request(
            request,
            "\nAn earlier attempt at this request stopped to ask for more context. It asked:\n",
            nonces,
            &mut built,
        );
        return built;
    }
    let Some(previous) = judged_previous(context) else {
        return built;
    };
    let lines = rejection_lines(previous);
    if lines.is_empty() {
        built
            .text
            .push_str("\nYour previous attempt was checked and not accepted.\n");
    } else {
        built
            .text
            .push_str("\nYour previous attempt was checked and not accepted:\n");
        built.text.push_str(&lines);
    }
    if previous.reply.trim().is_empty() {
        built.text.push_str("\nIts reply was empty.\n");
    } else {
        let quoted = excerpt(&without_nul(previous.reply), REPLY_QUOTE_MAX);
        let nonce = nonces();
        match fence_or_notice(REPLY_LABEL, &quoted, nonce) {
            Fenced::Quoted(block) => {
                built.text.push_str(
                    "\nIts reply is quoted below, and it is all of that attempt you get. Use it \
                     to do better, not to argue with the verdict: do not address the checks or \
                     write a report about this retry, do the work the request above asks for.\n",
                );
                built.text.push_str(&block);
            }
            Fenced::Dropped { notice } => built.notices.push(notice),
        }
    }
    push_gate_outputs(previous, nonces, &mut built);
    built
}

/// The closing line of a corrective instruction after a rollback.
const ROLLED_BACK_CLOSING: &str = "\nThe files have been restored to how they were before that attempt: \
     every change it made is gone. Do the work again from there to meet the original request, \
     then reply.\n";

/// The same, for an attempt nothing judged.
const ROLLED_BACK_NOTE: &str = "The files have been restored to how they were before that attempt: \
     every change it made is gone.\n";

/// The corrective instruction of a warm or fork retry, and its hash.
///
/// The session already holds the reply, so it is not quoted: the instruction
/// names the failed `output` gates with their exit status and quotes their
/// output fenced and excerpted to [`GATE_OUTPUT_MAX`]; `verdict` gates are
/// only "a check". After an attempt that was not judged it says that nothing
/// judged the work. The hash is over the text actually built, nonces and all,
/// so build once and send what was hashed.
pub fn corrective(
    context: &RetryContext<'_>,
    nonces: &mut NonceSource<'_>,
) -> (BuiltPrompt, Digest) {
    let mut built = BuiltPrompt {
        text: String::new(),
        notices: Vec::new(),
    };
    match (context.needs_context.as_ref(), judged_previous(context)) {
        (Some(request), _) => {
            push_context_request(
                request,
                "You stopped to ask for more context. You asked:\n",
                nonces,
                &mut built,
            );
            built
                .text
                .push_str("\nGo on with the original request from there, then reply.\n");
        }
        (None, Some(previous)) => {
            built.text.push_str(CORRECTIVE_OPENING);
            built.text.push_str(&rejection_lines(previous));
            push_gate_outputs(previous, nonces, &mut built);
            built.text.push_str(if context.files_rolled_back {
                ROLLED_BACK_CLOSING
            } else {
                "\nFix the work in place to meet the original request, then reply.\n"
            });
        }
        (None, None) => built.text.push_str(
            "Your last attempt could not be checked: it was stopped, or a check could not run, \
             so nothing has judged the work yet. Make sure the work meets the original request, \
             then reply.\n",
        ),
    }
    if context.files_rolled_back && judged_previous(context).is_none() {
        built.text.push_str(ROLLED_BACK_NOTE);
    }
    let hash = tagged_sha256(INSTRUCTION_TAG, &[built.text.as_bytes()]);
    (built, hash)
}

fn judged_previous<'c, 'a>(context: &'c RetryContext<'a>) -> Option<&'c PreviousAttempt<'a>> {
    context.previous.as_ref().filter(|previous| previous.judged)
}

/// One line per named failure, then one line for all withheld ones.
fn rejection_lines(previous: &PreviousAttempt<'_>) -> String {
    let mut lines = String::new();
    let mut withheld = false;
    for gate in &previous.failed_gates {
        match (gate.disclose, gate.exit_code) {
            (Disclose::Output, Some(code)) => {
                lines.push_str(&format!("- `{}` failed (exit status {code})\n", gate.name));
            }
            (Disclose::Output, None) => lines.push_str(&format!("- `{}` failed\n", gate.name)),
            (Disclose::Verdict, _) => withheld = true,
        }
    }
    if let Some(code) = previous.agent_exit_code {
        lines.push_str(&format!("- your run ended with exit status {code}\n"));
    }
    if withheld {
        lines.push_str(WITHHELD_LINE);
    }
    lines
}

/// Appends the fenced output of each failed `output` gate that printed
/// anything.
fn push_gate_outputs(
    previous: &PreviousAttempt<'_>,
    nonces: &mut NonceSource<'_>,
    built: &mut BuiltPrompt,
) {
    let disclosed = previous
        .failed_gates
        .iter()
        .filter(|gate| gate.disclose == Disclose::Output && !gate.output.trim().is_empty());
    for gate in disclosed {
        let quoted = excerpt(&without_nul(gate.output), GATE_OUTPUT_MAX);
        let nonce = nonces();
        match fence_or_notice(&format!("output-of-{}", gate.name), &quoted, nonce) {
            Fenced::Quoted(block) => {
                built
                    .text
                    .push_str(&format!("\nThe output of `{}`:\n", gate.name));
                built.text.push_str(&block);
            }
            Fenced::Dropped { notice } => {
                built.text.push_str(&format!(
                    "\nThe output of `{}` could not be shown.\n",
                    gate.name
                ));
                built.notices.push(notice);
            }
        }
    }
}

/// What a resumed session is told when its parked task wakes: its files are
/// as it left them, why it was parked, and what the person who woke it
/// said (an approval's note). Both texts are the operator's, not an agent's.
pub fn resume_prompt(reason: Option<&str>, note: Option<&str>) -> String {
    let mut text = String::from(
        "Your work on this task was paused and is now resumed. The files are as you left them.",
    );
    if let Some(reason) = reason.filter(|reason| !reason.trim().is_empty()) {
        text.push_str(&format!("\nIt was paused because: {}", reason.trim()));
    }
    if let Some(note) = note.filter(|note| !note.trim().is_empty()) {
        text.push_str(&format!(
            "\nThe person who resumed it says: {}",
            note.trim()
        ));
    }
    text.push_str("\nContinue the task from where you stopped, and finish it.");
    text
}

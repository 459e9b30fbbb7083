//! What a retry says to the agent (DESIGN.md section 6): the cold prompt
//! rebuilt from the base prompt, the corrective instruction sent alone to a
//! resumed (warm) or branched (fork) session, and the fence and excerpt every
//! quote of untrusted text goes through.
//!
//! A retry is told what it needs to do better and nothing that makes passing
//! cheaper than doing the work: a judged attempt's reply is quoted to a cold
//! session, `disclose: output` gates are named with their output, and a
//! `disclose: verdict` gate is only ever "a check". Every quote is bounded by
//! [`excerpt`] and fenced by [`fence`], the one fence implementation, with a
//! nonce the caller mints from the OS CSPRNG after the quoted text is fixed.
//! Instructions are fixed templates, so their template id and hash can go
//! into the decision record.

mod compose;
mod excerpt;
mod fence;
#[cfg(test)]
mod tests;

pub use compose::{
    BuiltPrompt, CORRECTIVE_TEMPLATE_ID, ContextRequest, FailedGate, GATE_OUTPUT_MAX,
    INSTRUCTION_TAG, NonceSource, PreviousAttempt, REPLY_QUOTE_MAX, RetryContext, cold_prompt,
    cold_retry_prompt, corrective, resume_prompt,
};
pub use excerpt::excerpt;
pub use fence::{Fenced, Nonce, fence, fence_or_notice};

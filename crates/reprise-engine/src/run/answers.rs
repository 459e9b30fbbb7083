//! The coordinator's answers on the control socket, one type each: the
//! client reads the JSON line they serialise to (`{"ok": true, ...}`, or a
//! refusal: `{"ok": false, "error": ...}`).

use reprise_core::TaskId;
use serde::Serialize;
use serde_json::Value;

use crate::park::Parked;

pub(super) use crate::control::refusal_reply as refused;

/// A ping's answer: the run is alive, in this process.
#[derive(Serialize)]
struct Pong<'a> {
    ok: bool,
    run_id: &'a str,
    pid: u32,
}

/// A resume's answer: the task is queued to run again.
#[derive(Serialize)]
struct Queued<'a> {
    ok: bool,
    run_id: &'a str,
    task: &'a TaskId,
    queued: bool,
}

fn to_answer(answer: &impl Serialize) -> Value {
    serde_json::to_value(answer).expect("control answers serialise")
}

pub(super) fn pong(run_id: &str) -> Value {
    to_answer(&Pong {
        ok: true,
        run_id,
        pid: std::process::id(),
    })
}

pub(super) fn queued(run_id: &str, task: &TaskId) -> Value {
    to_answer(&Queued {
        ok: true,
        run_id,
        task,
        queued: true,
    })
}

pub(super) fn parked(parked: &Parked) -> Value {
    to_answer(&parked.answer())
}

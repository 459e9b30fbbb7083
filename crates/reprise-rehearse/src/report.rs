//! What each task sent the model server, read back from the server's request
//! log: requests, bytes, the usage the server reported (fresh input, cache
//! writes and reads, output) and what it would cost at a price table, the
//! requests no rule matched and the attempts cut off as loops, and a line
//! per turn (one turn per prompt, so per attempt: a tool loop stays in its
//! prompt's turn).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::model_server::LOG_FORMAT;
use crate::pricing::{PriceTable, TokenUsage, micro_usd};

/// One task's traffic (or the traffic of requests that named no task).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Traffic {
    /// API requests (probes of the base URL are not counted).
    pub requests: u64,
    /// Request body bytes, all requests.
    pub bytes: u64,
    /// The input tokens the server reported back (about four bytes a token).
    pub input_tokens: u64,
    /// The output tokens the server reported back.
    pub output_tokens: u64,
    /// Requests answered with an HTTP error, left hanging, or matching no rule.
    pub failed: u64,
    /// The usage of every answered request, by token class.
    pub usage: TokenUsage,
    /// At the price table; `None` when a model has no price.
    pub would_cost_micro_usd: Option<u64>,
    /// Models the price table has no price for.
    pub unpriced_models: Vec<String>,
    /// Requests that matched no scenario rule, and the first of them.
    pub unmatched: u64,
    pub first_unmatched: Option<Unmatched>,
    /// Attempts cut off at `max_requests_per_attempt` (`rehearsal_loop`).
    pub loops: u64,
    pub turns: Vec<Turn>,
}

/// A request no rule matched.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Unmatched {
    pub turn: u64,
    pub prompt: String,
}

/// The requests of one prompt: the one that carried it and any tool-result
/// follow-ups.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Turn {
    pub turn: u64,
    pub requests: u64,
    pub bytes: u64,
    /// The body bytes of the request that carried the prompt.
    pub first_request_bytes: u64,
    /// The bytes of the prompt text itself: what was new in this turn.
    pub prompt_bytes: u64,
    pub usage: TokenUsage,
    pub would_cost_micro_usd: Option<u64>,
    /// The attempt passed `max_requests_per_attempt` and was ended as a loop.
    pub rehearsal_loop: bool,
}

/// Why a log could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("request log line {line}: {problem}")]
pub struct LogError {
    pub line: usize,
    pub problem: String,
}

/// Side calls made before their turn's prompt arrived.
#[derive(Default)]
struct Early {
    requests: u64,
    bytes: u64,
    usage: TokenUsage,
    pico: u128,
}

/// The fields of a log line this summary reads.
#[derive(Deserialize)]
struct Line {
    /// Absent in logs written before the format was numbered (format 1).
    #[serde(default)]
    format: u32,
    api: Option<String>,
    task: Option<String>,
    #[serde(default)]
    bytes: u64,
    #[serde(default)]
    tokens: u64,
    output_tokens: Option<u64>,
    prompt_text: Option<String>,
    #[serde(default)]
    tool_result: bool,
    #[serde(default)]
    turn: u64,
    status: Option<u16>,
    model: Option<String>,
    usage: Option<TokenUsage>,
    #[serde(default, rename = "loop")]
    looped: bool,
    #[serde(default)]
    side: bool,
    reply: Option<String>,
}

/// Sums a request log (one JSON object a line) per task. A log cut off in
/// the middle of its last line (the server killed while writing) loses only
/// that line; any other bad line is an error naming it.
pub fn summarise(
    log: &str,
    prices: &PriceTable,
) -> Result<BTreeMap<Option<String>, Traffic>, LogError> {
    let mut tally = Tally::default();
    let complete = log.ends_with('\n') || log.is_empty();
    let lines: Vec<&str> = log.lines().collect();
    for (index, text) in lines.iter().enumerate() {
        if text.trim().is_empty() {
            continue;
        }
        let line: Line = match serde_json::from_str(text) {
            Ok(line) => line,
            Err(_) if !complete && index + 1 == lines.len() => break,
            Err(error) => {
                return Err(LogError {
                    line: index + 1,
                    problem: error.to_string(),
                });
            }
        };
        if line.format > LOG_FORMAT {
            return Err(LogError {
                line: index + 1,
                problem: format!(
                    "format {} is newer than this reprise reads ({LOG_FORMAT}): upgrade reprise",
                    line.format
                ),
            });
        }
        if line.api.is_some() {
            tally.add(line, prices);
        }
    }
    Ok(tally.finish())
}

/// The sums while the log is read. Costs are exact picodollars per task and
/// per turn, rounded once at the end.
#[derive(Default)]
struct Tally {
    tasks: BTreeMap<Option<String>, Traffic>,
    /// Per task: its cost, and each of its turns' in order.
    pico: BTreeMap<Option<String>, (u128, Vec<u128>)>,
    /// Per task: the models its usage names that the price table lacks.
    unpriced: BTreeMap<Option<String>, BTreeSet<String>>,
    /// Side calls waiting for their turn's prompt, by task and turn.
    pending: BTreeMap<(Option<String>, u64), Early>,
}

impl Tally {
    /// One API request's line, counted on its task and on its turn.
    fn add(&mut self, line: Line, prices: &PriceTable) {
        let task = line.task.clone();
        let traffic = self.tasks.entry(task.clone()).or_default();
        count_request(traffic, &line);
        // A side call (Gemini's router) never opens a turn; one made before
        // its turn's prompt arrived waits for that turn.
        let opens_turn = !line.side
            && (!line.tool_result
                || traffic
                    .turns
                    .last()
                    .is_none_or(|turn| turn.turn != line.turn));
        let (task_pico, turn_pico) = self.pico.entry(task.clone()).or_default();
        if opens_turn {
            let early = self.pending.remove(&(task.clone(), line.turn));
            open_turn(traffic, turn_pico, &line, early);
        }
        let mut cost = 0;
        if let Some(usage) = &line.usage {
            traffic.usage.add(usage);
            let model = line.model.clone().unwrap_or_default();
            match prices.price(&model) {
                Some(price) => cost = price.cost_pico_usd(usage),
                None => {
                    self.unpriced.entry(task.clone()).or_default().insert(model);
                }
            }
            *task_pico += cost;
        }
        let usage = line.usage.unwrap_or_default();
        match traffic.turns.last_mut() {
            Some(turn) if turn.turn == line.turn || !line.side => {
                turn.requests += 1;
                turn.bytes += line.bytes;
                turn.usage.add(&usage);
                if let Some(last) = turn_pico.last_mut() {
                    *last += cost;
                }
                if line.looped && !turn.rehearsal_loop {
                    turn.rehearsal_loop = true;
                    traffic.loops += 1;
                }
            }
            _ => {
                let early = self.pending.entry((task, line.turn)).or_default();
                early.requests += 1;
                early.bytes += line.bytes;
                early.usage.add(&usage);
                early.pico += cost;
            }
        }
    }

    /// Each task's traffic, its costs rounded to micro-dollars: unknown
    /// when a model of the task has no price.
    fn finish(mut self) -> BTreeMap<Option<String>, Traffic> {
        for (task, traffic) in &mut self.tasks {
            let models = self.unpriced.remove(task).unwrap_or_default();
            let (task_pico, turn_pico) = self.pico.remove(task).unwrap_or_default();
            if models.is_empty() {
                traffic.would_cost_micro_usd = Some(micro_usd(task_pico));
                for (turn, cost) in traffic.turns.iter_mut().zip(turn_pico) {
                    turn.would_cost_micro_usd = Some(micro_usd(cost));
                }
            }
            traffic.unpriced_models = models.into_iter().collect();
        }
        self.tasks
    }
}

/// What a request adds to its task's own counts, whatever its turn.
fn count_request(traffic: &mut Traffic, line: &Line) {
    traffic.requests += 1;
    traffic.bytes += line.bytes;
    traffic.input_tokens += line.tokens;
    traffic.output_tokens += line.output_tokens.unwrap_or(0);
    if line.status.is_none_or(|status| status >= 400) {
        traffic.failed += 1;
    }
    let unmatched = line.status.is_some() && line.reply.is_none() && !line.looped;
    if unmatched {
        traffic.unmatched += 1;
        traffic.first_unmatched.get_or_insert_with(|| Unmatched {
            turn: line.turn,
            prompt: line.prompt_text.clone().unwrap_or_default(),
        });
    }
}

/// Opens the task's turn `line` carries the prompt of, with the side calls
/// that came early for it (`early`).
fn open_turn(traffic: &mut Traffic, turn_pico: &mut Vec<u128>, line: &Line, early: Option<Early>) {
    let mut turn = Turn {
        turn: line.turn,
        first_request_bytes: line.bytes,
        prompt_bytes: line
            .prompt_text
            .as_ref()
            .map_or(0, |text| text.len() as u64),
        ..Turn::default()
    };
    let mut cost = 0;
    if let Some(early) = early {
        turn.requests += early.requests;
        turn.bytes += early.bytes;
        turn.usage.add(&early.usage);
        cost += early.pico;
    }
    traffic.turns.push(turn);
    turn_pico.push(cost);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(task: &str, turn: u64, tool_result: bool, bytes: u64, prompt: &str) -> String {
        serde_json::json!({
            "api": "messages", "task": task, "bytes": bytes, "tokens": bytes / 4,
            "output_tokens": 3, "prompt_text": prompt, "tool_result": tool_result,
            "turn": turn, "status": 200, "reply": "message", "model": "claude-sonnet-4-5",
            "usage": {"fresh_input": 10, "cache_write": 1000, "cache_write_1h": 0,
                "cache_read": bytes, "output": 3},
        })
        .to_string()
            + "\n"
    }

    #[test]
    fn turns_gather_their_tool_follow_ups_per_task() {
        let log = [
            line("a", 1, false, 1000, "write the file"),
            line("a", 1, true, 1200, "write the file"),
            line("b", 1, false, 400, "other"),
            line("a", 2, false, 1500, "fix it"),
            r#"{"api":null,"task":"a","method":"HEAD","bytes":0,"status":200}"#.to_owned() + "\n",
        ]
        .concat();
        let tasks = summarise(&log, &PriceTable::default()).unwrap();
        let a = &tasks[&Some("a".to_owned())];
        assert_eq!(a.requests, 3, "the probe is not an API request");
        assert_eq!(a.bytes, 3700);
        assert_eq!(a.input_tokens, 925);
        assert_eq!(a.output_tokens, 9);
        assert_eq!(a.failed, 0);
        assert_eq!(
            a.turns,
            [
                Turn {
                    turn: 1,
                    requests: 2,
                    bytes: 2200,
                    first_request_bytes: 1000,
                    prompt_bytes: 14,
                    usage: TokenUsage {
                        fresh_input: 20,
                        cache_write: 2000,
                        cache_write_1h: 0,
                        cache_read: 2200,
                        output: 6
                    },
                    // 20*3 + 2000*3.75 + 2200*0.3 + 6*15 µ$ (tokens times $ per million)
                    would_cost_micro_usd: Some(8310),
                    rehearsal_loop: false,
                },
                Turn {
                    turn: 2,
                    requests: 1,
                    bytes: 1500,
                    first_request_bytes: 1500,
                    prompt_bytes: 6,
                    usage: TokenUsage {
                        fresh_input: 10,
                        cache_write: 1000,
                        cache_write_1h: 0,
                        cache_read: 1500,
                        output: 3
                    },
                    would_cost_micro_usd: Some(4275),
                    rehearsal_loop: false,
                },
            ]
        );
        assert_eq!(tasks[&Some("b".to_owned())].requests, 1);
    }

    #[test]
    fn unmatched_requests_loops_and_unpriced_models_are_reported() {
        let log = [
            r#"{"api":"messages","task":"a","turn":1,"status":400,"reply":null,"prompt_text":"do the thing"}"#,
            r#"{"api":"messages","task":"a","turn":2,"status":400,"reply":null,"prompt_text":"again"}"#,
            r#"{"api":"responses","task":"a","turn":3,"status":200,"reply":"message","model":"gpt-9-unlisted","usage":{"fresh_input":1,"cache_write":0,"cache_write_1h":0,"cache_read":0,"output":1}}"#,
            r#"{"api":"responses","task":"a","turn":3,"tool_result":true,"status":400,"reply":"loop","loop":true}"#,
            r#"{"api":"responses","task":"a","turn":3,"tool_result":true,"status":400,"reply":"loop","loop":true}"#,
        ]
        .join("\n")
            + "\n";
        let tasks = summarise(&log, &PriceTable::default()).unwrap();
        let a = &tasks[&Some("a".to_owned())];
        assert_eq!(a.unmatched, 2);
        assert_eq!(
            a.first_unmatched,
            Some(Unmatched {
                turn: 1,
                prompt: "do the thing".to_owned()
            })
        );
        assert_eq!(a.loops, 1, "one attempt ended as a loop");
        assert!(a.turns[2].rehearsal_loop);
        assert_eq!(a.unpriced_models, ["gpt-9-unlisted"]);
        assert_eq!(a.would_cost_micro_usd, None, "no price, no figure");
    }

    #[test]
    fn a_side_call_before_its_prompt_is_counted_in_that_prompts_turn() {
        let usage = r#""usage":{"fresh_input":100,"cache_write":0,"cache_write_1h":0,"cache_read":0,"output":1}"#;
        let line = |turn: u64, tool_result: bool, side: bool| {
            format!(
                r#"{{"api":"gemini","task":"g","turn":{turn},"tool_result":{tool_result},"side":{side},"status":200,"reply":"{}","model":"claude-haiku-4-5",{usage}}}"#,
                if side { "side" } else { "message" }
            )
        };
        let log = [
            line(1, true, true),
            line(1, false, false),
            line(1, true, false),
            line(2, true, true),
            line(2, false, false),
        ]
        .join("\n")
            + "\n";
        let tasks = summarise(&log, &PriceTable::default()).unwrap();
        let g = &tasks[&Some("g".to_owned())];
        let turns: Vec<(u64, u64, u64)> = g
            .turns
            .iter()
            .map(|turn| (turn.turn, turn.requests, turn.usage.fresh_input))
            .collect();
        assert_eq!(turns, [(1, 3, 300), (2, 2, 200)]);
        // 100 fresh at $1 and 1 out at $5 per million, five times.
        assert_eq!(g.would_cost_micro_usd, Some(525));
        assert_eq!(g.turns[1].would_cost_micro_usd, Some(210));
    }

    #[test]
    fn failures_count_and_a_torn_last_line_is_dropped() {
        let error = r#"{"api":"responses","task":"a","bytes":10,"turn":1,"status":529}"#;
        let hang = r#"{"api":"responses","task":"a","bytes":10,"turn":2,"status":null}"#;
        let log = format!("{error}\n{hang}\n{{\"api\":\"resp");
        let tasks = summarise(&log, &PriceTable::default()).unwrap();
        assert_eq!(tasks[&Some("a".to_owned())].failed, 2);
        assert_eq!(tasks[&Some("a".to_owned())].requests, 2);
        let newer = r#"{"format":2,"api":"messages","task":"a"}"#;
        let message = summarise(&format!("{error}\n{newer}\n"), &PriceTable::default())
            .unwrap_err()
            .to_string();
        assert_eq!(
            message,
            "request log line 2: format 2 is newer than this reprise reads (1): upgrade reprise"
        );
        let bad = format!("{error}\nnot json\n{hang}\n");
        assert_eq!(summarise(&bad, &PriceTable::default()).unwrap_err().line, 2);
    }
}

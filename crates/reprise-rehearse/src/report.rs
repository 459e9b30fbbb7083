//! What each task sent the model server, read back from the server's request
//! log: requests, bytes, the server's token figures, and a line per turn (one
//! turn per prompt, so per attempt: a tool loop stays in its prompt's turn).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
    pub turns: Vec<Turn>,
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
}

/// Why a log could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("request log line {line}: {problem}")]
pub struct LogError {
    pub line: usize,
    pub problem: String,
}

/// The fields of a log line this summary reads.
#[derive(Deserialize)]
struct Line {
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
}

/// Sums a request log (one JSON object a line) per task. A log cut off in
/// the middle of its last line (the server killed while writing) loses only
/// that line; any other bad line is an error naming it.
pub fn summarise(log: &str) -> Result<BTreeMap<Option<String>, Traffic>, LogError> {
    let mut tasks: BTreeMap<Option<String>, Traffic> = BTreeMap::new();
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
        if line.api.is_none() {
            continue;
        }
        let traffic = tasks.entry(line.task).or_default();
        traffic.requests += 1;
        traffic.bytes += line.bytes;
        traffic.input_tokens += line.tokens;
        traffic.output_tokens += line.output_tokens.unwrap_or(0);
        if line.status.is_none_or(|status| status >= 400) {
            traffic.failed += 1;
        }
        let opens_turn = !line.tool_result
            || traffic
                .turns
                .last()
                .is_none_or(|turn| turn.turn != line.turn);
        if opens_turn {
            traffic.turns.push(Turn {
                turn: line.turn,
                first_request_bytes: line.bytes,
                prompt_bytes: line.prompt_text.map_or(0, |text| text.len() as u64),
                ..Turn::default()
            });
        }
        if let Some(turn) = traffic.turns.last_mut() {
            turn.requests += 1;
            turn.bytes += line.bytes;
        }
    }
    Ok(tasks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(task: &str, turn: u64, tool_result: bool, bytes: u64, prompt: &str) -> String {
        serde_json::json!({
            "api": "messages", "task": task, "bytes": bytes, "tokens": bytes / 4,
            "output_tokens": 3, "prompt_text": prompt, "tool_result": tool_result,
            "turn": turn, "status": 200,
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
        let tasks = summarise(&log).unwrap();
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
                    prompt_bytes: 14
                },
                Turn {
                    turn: 2,
                    requests: 1,
                    bytes: 1500,
                    first_request_bytes: 1500,
                    prompt_bytes: 6
                },
            ]
        );
        assert_eq!(tasks[&Some("b".to_owned())].requests, 1);
    }

    #[test]
    fn failures_count_and_a_torn_last_line_is_dropped() {
        let error = r#"{"api":"responses","task":"a","bytes":10,"turn":1,"status":529}"#;
        let hang = r#"{"api":"responses","task":"a","bytes":10,"turn":2,"status":null}"#;
        let log = format!("{error}\n{hang}\n{{\"api\":\"resp");
        let tasks = summarise(&log).unwrap();
        assert_eq!(tasks[&Some("a".to_owned())].failed, 2);
        assert_eq!(tasks[&Some("a".to_owned())].requests, 2);
        let bad = format!("{error}\nnot json\n{hang}\n");
        assert_eq!(summarise(&bad).unwrap_err().line, 2);
    }
}

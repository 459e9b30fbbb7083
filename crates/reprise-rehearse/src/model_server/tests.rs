//! Drives the server with a raw TCP client, as the real CLIs would.

use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use super::{ModelServer, Reply, Scenario, ScenarioError};

const SCENARIO: &str = r#"
version: 1
rules:
  - match: { contains: "write the file", tool_result: false }
    reply: { tool: Write, input: { file_path: "/tmp/out/hello.txt", content: "héllo \"world\"\n" } }
  - match: { tool_result: true }
    reply: { text: "Wrote it." }
  - match: { contains: "first" }
    reply: { text: "Reply to the first prompt, long enough to need several deltas." }
  - match: { contains: "second" }
    reply: { text: "Reply to the second prompt." }
  - match: { contains: "overload" }
    reply: { error: { status: 529, message: "Overloaded" } }
  - match: { contains: "stall" }
    reply: { hang: true }
  - match: { turn: 7 }
    reply: { text: "seventh" }
  - match: { contains: "plan limit" }
    reply:
      error:
        status: 429
        message: "This request would exceed your account's rate limit."
        headers: { retry-after: "3600", anthropic-ratelimit-unified-reset: "1796131992" }
"#;

struct Response {
    status: u16,
    head: String,
    body: String,
}

fn start(dir: &Path) -> ModelServer {
    let scenario = Scenario::from_yaml(SCENARIO).expect("scenario parses");
    ModelServer::start(scenario, dir.join("requests.jsonl")).expect("server starts")
}

/// One request on a fresh connection that asks to be closed after it.
fn post(server: &ModelServer, path: &str, body: &Value) -> Response {
    let body = body.to_string();
    let mut stream = TcpStream::connect(server.addr()).expect("connect");
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        server.addr(),
        body.len()
    )
    .expect("send");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("read response");
    parse_response(&raw)
}

fn parse_response(raw: &str) -> Response {
    let (head, body) = raw.split_once("\r\n\r\n").expect("response has a head");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|status| status.parse().ok())
        .expect("status code");
    let head = head.to_ascii_lowercase();
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(body).0
    } else {
        body.to_owned()
    };
    Response { status, head, body }
}

/// The body of a chunked response, and how many chunks carried it.
fn dechunk(mut raw: &str) -> (String, usize) {
    let mut body = String::new();
    let mut chunks = 0;
    loop {
        let (size, rest) = raw.split_once("\r\n").expect("a chunk size line");
        let size = usize::from_str_radix(size.trim(), 16).expect("a hex chunk size");
        if size == 0 {
            return (body, chunks);
        }
        body.push_str(&rest[..size]);
        chunks += 1;
        raw = &rest[size + 2..];
    }
}

/// The (event name, data) pairs of an SSE body.
fn events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|chunk| !chunk.trim().is_empty())
        .map(|chunk| {
            let mut name = String::new();
            let mut data = Value::Null;
            for line in chunk.lines() {
                if let Some(rest) = line.strip_prefix("event: ") {
                    name = rest.to_owned();
                } else if let Some(rest) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(rest).expect("event data is json");
                }
            }
            assert_eq!(data["type"], name.as_str(), "event name matches its type");
            (name, data)
        })
        .collect()
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(name, _)| name.as_str()).collect()
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>ignore me</system-reminder>"},
        {"type": "text", "text": text},
    ]})
}

fn messages_request(messages: Vec<Value>) -> Value {
    json!({"model": "claude-test", "stream": true, "max_tokens": 100, "messages": messages})
}

fn read_log(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("requests.jsonl"))
        .expect("log exists")
        .lines()
        .map(|line| serde_json::from_str(line).expect("log line is json"))
        .collect()
}

#[test]
fn streamed_text_arrives_as_the_messages_event_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let response = post(
        &server,
        "/v1/messages?beta=true",
        &messages_request(vec![user("the first prompt")]),
    );
    assert_eq!(response.status, 200);
    assert!(response.head.contains("content-type: text/event-stream"));
    let events = events(&response.body);
    let deltas = events.len() - 5;
    assert!(deltas > 1, "the text is split over several deltas");
    let mut expected = vec!["message_start", "content_block_start"];
    expected.extend(std::iter::repeat_n("content_block_delta", deltas));
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(names(&events), expected);
    let start = &events[0].1["message"];
    assert_eq!(start["model"], "claude-test");
    assert!(start["id"].as_str().unwrap().starts_with("msg_"));
    assert!(start["usage"]["input_tokens"].as_u64().unwrap() > 0);
    let text: String = events
        .iter()
        .filter(|(name, _)| name == "content_block_delta")
        .map(|(_, data)| {
            assert_eq!(data["delta"]["type"], "text_delta");
            data["delta"]["text"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(
        text,
        "Reply to the first prompt, long enough to need several deltas."
    );
    let delta = &events[events.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert!(delta["usage"]["output_tokens"].as_u64().unwrap() > 0);
}

#[test]
fn non_streamed_request_gets_one_message_object() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut request = messages_request(vec![user("the first prompt")]);
    request["stream"] = json!(false);
    let response = post(&server, "/v1/messages", &request);
    assert_eq!(response.status, 200);
    assert!(response.head.contains("content-type: application/json"));
    let message: Value = serde_json::from_str(&response.body).unwrap();
    assert_eq!(message["type"], "message");
    assert_eq!(message["stop_reason"], "end_turn");
    assert_eq!(
        message["content"][0]["text"],
        "Reply to the first prompt, long enough to need several deltas."
    );
}

#[test]
fn tool_use_streams_input_json_deltas_that_parse_to_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let response = post(
        &server,
        "/v1/messages?beta=true",
        &messages_request(vec![user("please write the file")]),
    );
    let events = events(&response.body);
    let block = &events[1].1["content_block"];
    assert_eq!(block["type"], "tool_use");
    assert_eq!(block["name"], "Write");
    assert!(block["id"].as_str().unwrap().starts_with("toolu_"));
    let partial: Vec<String> = events
        .iter()
        .filter(|(name, _)| name == "content_block_delta")
        .map(|(_, data)| {
            assert_eq!(data["delta"]["type"], "input_json_delta");
            data["delta"]["partial_json"].as_str().unwrap().to_owned()
        })
        .collect();
    assert!(partial.len() > 1, "the input is split over several deltas");
    let input: Value = serde_json::from_str(&partial.concat()).unwrap();
    assert_eq!(
        input,
        json!({"file_path": "/tmp/out/hello.txt", "content": "héllo \"world\"\n"})
    );
    let delta = &events[events.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");

    // The client's tool_result answer is a follow-up in the same turn.
    let follow_up = messages_request(vec![
        user("please write the file"),
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Write", "input": input}]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}),
    ]);
    let events_after = events_of(&server, &follow_up);
    assert_eq!(events_after[2].1["delta"]["text"], "Wrote it.");
    let log = read_log(dir.path());
    assert_eq!(log[1]["tool_result"], true);
    assert_eq!(log[1]["turn"], 1);
    assert_eq!(log[1]["prompt_text"], "please write the file");
}

fn text_of(events: &[(String, Value)]) -> String {
    events
        .iter()
        .filter_map(|(_, data)| data["delta"]["text"].as_str())
        .collect()
}

fn events_of(server: &ModelServer, request: &Value) -> Vec<(String, Value)> {
    events(&post(server, "/v1/messages", request).body)
}

#[test]
fn contains_picks_the_second_rule_for_a_second_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let first = events_of(&server, &messages_request(vec![user("the first prompt")]));
    let second = events_of(
        &server,
        &messages_request(vec![
            user("the first prompt"),
            json!({"role": "assistant", "content": [{"type": "text", "text": "Reply to the first prompt"}]}),
            user("now the second prompt"),
        ]),
    );
    assert!(text_of(&first).starts_with("Reply to the first"));
    assert_eq!(text_of(&second), "Reply to the second prompt.");
    let log = read_log(dir.path());
    assert_eq!(log[0]["rule"], 2);
    assert_eq!(log[1]["rule"], 3);
    assert_eq!(log[1]["turn"], 2);
}

#[test]
fn turn_counts_prompt_bearing_requests() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    for _ in 0..6 {
        post(
            &server,
            "/v1/messages",
            &messages_request(vec![user("the first prompt")]),
        );
    }
    let seventh = events_of(&server, &messages_request(vec![user("no rule by text")]));
    assert_eq!(seventh[2].1["delta"]["text"], "seventh");
    let eighth = post(
        &server,
        "/v1/messages",
        &messages_request(vec![user("no rule by text")]),
    );
    assert_eq!(eighth.status, 400, "no rule matches turn 8");
}

#[test]
fn an_error_rule_sends_its_headers_as_a_usage_limit_would() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let response = post(
        &server,
        "/v1/messages?beta=true",
        &messages_request(vec![user("over the plan limit")]),
    );
    assert_eq!(response.status, 429);
    assert!(
        response.head.contains("\r\nretry-after: 3600"),
        "{}",
        response.head
    );
    assert!(
        response
            .head
            .contains("\r\nanthropic-ratelimit-unified-reset: 1796131992"),
        "{}",
        response.head
    );
    let body: Value = serde_json::from_str(&response.body).unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error");
    // A header that HTTP cannot carry is refused when the scenario is read.
    let bad = "rules:\n  - match: { contains: x }\n    reply: { error: { status: 429, message: m, headers: { \"bad name\": v } } }\n";
    let error = Scenario::from_yaml(bad).unwrap_err().to_string();
    assert!(error.contains("not a valid HTTP header"), "{error}");
}

#[test]
fn error_rule_returns_its_status_and_an_error_json() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let response = post(
        &server,
        "/v1/messages?beta=true",
        &messages_request(vec![user("overload me")]),
    );
    assert_eq!(response.status, 529);
    let body: Value = serde_json::from_str(&response.body).unwrap();
    assert_eq!(
        body,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );
}

#[test]
fn unknown_path_is_a_404_json_error() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let response = post(&server, "/v1/complete", &json!({}));
    assert_eq!(response.status, 404);
    let body: Value = serde_json::from_str(&response.body).unwrap();
    assert_eq!(body["error"]["type"], "not_found_error");
}

#[test]
fn request_log_records_path_count_roles_and_last_user_text() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let request = messages_request(vec![
        user("the first prompt"),
        json!({"role": "assistant", "content": "ok"}),
        user("the second prompt"),
    ]);
    post(&server, "/v1/messages?beta=true", &request);
    let log = read_log(dir.path());
    assert_eq!(log.len(), 1);
    let line = &log[0];
    assert_eq!(line["path"], "/v1/messages");
    assert_eq!(line["query"], "beta=true");
    assert_eq!(line["model"], "claude-test");
    assert_eq!(line["messages"], 3);
    assert_eq!(line["roles"], json!(["user", "assistant", "user"]));
    assert_eq!(line["bytes"], request.to_string().len());
    assert_eq!(line["last_user_text"], "the second prompt");
}

#[test]
fn responses_streams_the_codex_events_with_the_text() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let request = json!({"model": "gpt-test", "stream": true, "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<environment_context>cwd</environment_context>"},
            {"type": "input_text", "text": "the second prompt"},
        ]},
    ]});
    let response = post(&server, "/v1/responses", &request);
    assert_eq!(response.status, 200);
    assert!(response.head.contains("content-type: text/event-stream"));
    let events = events(&response.body);
    let deltas = events.len() - 4;
    let mut expected = vec!["response.created", "response.output_item.added"];
    expected.extend(std::iter::repeat_n("response.output_text.delta", deltas));
    expected.extend(["response.output_item.done", "response.completed"]);
    assert_eq!(names(&events), expected);
    let text: String = events
        .iter()
        .filter_map(|(_, data)| data["delta"].as_str())
        .collect();
    assert_eq!(text, "Reply to the second prompt.");
    let done = &events[events.len() - 2].1["item"];
    assert_eq!(done["content"][0]["text"], "Reply to the second prompt.");
    let usage = &events[events.len() - 1].1["response"]["usage"];
    assert!(usage["input_tokens"].as_u64().unwrap() > 0);
    assert!(usage["output_tokens"].as_u64().unwrap() > 0);
    let log = read_log(dir.path());
    assert_eq!(log[0]["roles"], json!(["developer", "user"]));
    assert_eq!(log[0]["last_user_text"], "the second prompt");
}

#[test]
fn hang_holds_the_socket_until_the_server_stops() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let body = messages_request(vec![user("stall please")]).to_string();
    let mut stream = TcpStream::connect(server.addr()).unwrap();
    write!(
        stream,
        "POST /v1/messages HTTP/1.1\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // The log line is written before the reply would be: wait for it.
    while read_log_len(dir.path()) == 0 {
        std::thread::sleep(Duration::from_millis(5));
    }
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buffer = [0; 64];
    let pending = stream.read(&mut buffer);
    assert!(pending.is_err(), "no answer while hanging: {pending:?}");
    server.stop();
    stream.set_read_timeout(None).unwrap();
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "closed without an answer");
}

fn read_log_len(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("requests.jsonl"))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

#[test]
fn binds_loopback_only() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    assert_eq!(server.addr().ip(), IpAddr::from([127, 0, 0, 1]));
    assert_eq!(
        server.base_url(),
        format!("http://127.0.0.1:{}", server.addr().port())
    );
    // When the machine has a non-loopback address, the port is closed there.
    let outward = UdpSocket::bind("0.0.0.0:0")
        .and_then(|socket| socket.connect("10.255.255.255:9").map(|()| socket))
        .and_then(|socket| socket.local_addr());
    if let Ok(local) = outward
        && !local.ip().is_loopback()
        && !local.ip().is_unspecified()
    {
        let attempt = TcpStream::connect((local.ip(), server.addr().port()));
        assert!(attempt.is_err(), "reachable on {}", local.ip());
    }
}

#[test]
fn scenario_rejects_ambiguous_replies_and_newer_versions() {
    let both = "rules:\n  - reply: { text: hi, hang: true }\n";
    assert_eq!(
        Scenario::from_yaml(both).unwrap_err().to_string(),
        "scenario:2:5: reply: a reply needs exactly one of text/tool, steps, error or hang"
    );
    assert!(matches!(
        Scenario::from_yaml("version: 2\nrules: []\n"),
        Err(ScenarioError::NewerVersion { found: 2, .. })
    ));
    let scenario = Scenario::from_yaml(SCENARIO).unwrap();
    assert_eq!(scenario.rules.len(), 8);
    assert_eq!(scenario.rules[5].reply, Reply::Hang);
}

#[test]
fn a_task_prefix_routes_matches_and_counts_turns_per_task() {
    let scenario = Scenario::from_yaml(
        r#"
rules:
  - match: { task: alpha, turn: 2 }
    reply: { text: "alpha again" }
  - match: { task: alpha }
    reply: { text: "alpha first" }
  - match: { turn: 1 }
    reply: { text: "no task" }
"#,
    )
    .expect("scenario parses");
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(scenario, dir.path().join("requests.jsonl")).unwrap();
    let text = |path: &str| {
        let response = post(&server, path, &messages_request(vec![user("go")]));
        assert_eq!(response.status, 200, "{path}: {}", response.body);
        let events = events(&response.body);
        events
            .iter()
            .filter(|(name, _)| name == "content_block_delta")
            .map(|(_, data)| data["delta"]["text"].as_str().unwrap().to_owned())
            .collect::<String>()
    };
    assert_eq!(text("/t/alpha/v1/messages?beta=true"), "alpha first");
    // Each task counts its own turns: beta and the task-less client are at 1.
    assert_eq!(text("/t/beta/v1/messages"), "no task");
    assert_eq!(text("/v1/messages"), "no task");
    let beta = post(
        &server,
        "/t/beta/v1/messages",
        &messages_request(vec![user("go")]),
    );
    assert_eq!(
        beta.status, 400,
        "beta's turn 2 matches no rule: {}",
        beta.body
    );
    assert!(beta.body.contains("task beta turn 2"), "{}", beta.body);
    assert_eq!(text("/t/alpha/v1/messages"), "alpha again");
    // A client probing its base URL gets an empty 200, and is logged.
    let mut stream = TcpStream::connect(server.addr()).unwrap();
    write!(
        stream,
        "HEAD /t/alpha HTTP/1.1\r\nHost: x\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    assert!(raw.starts_with("HTTP/1.1 200 "), "{raw}");
    drop(server);
    let log = read_log(dir.path());
    let tasks: Vec<&Value> = log.iter().map(|line| &line["task"]).collect();
    let alpha = json!("alpha");
    let beta = json!("beta");
    assert_eq!(tasks, [&alpha, &beta, &Value::Null, &beta, &alpha, &alpha]);
    let turns: Vec<&Value> = log.iter().map(|line| &line["turn"]).collect();
    assert_eq!(
        turns[..5],
        [&json!(1), &json!(1), &json!(1), &json!(2), &json!(2)]
    );
    assert_eq!(log[5]["method"], "HEAD");
    assert_eq!(log[5]["path"], "/t/alpha");
}

#[test]
fn a_string_input_is_a_freeform_tool_call_in_responses_and_an_object_in_messages() {
    let patch = "*** Begin Patch\n*** Add File: a.txt\n+line\n*** End Patch\n";
    let scenario = Scenario::from_yaml(&format!(
        "rules:\n  - reply: {{ tool: apply_patch, input: {patch:?} }}\n"
    ))
    .expect("scenario parses");
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(scenario, dir.path().join("requests.jsonl")).unwrap();
    let request = json!({"model": "gpt-test", "stream": true, "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "patch it"}]},
    ]});
    let response = post(&server, "/v1/responses", &request);
    let events = events(&response.body);
    let item = &events
        .iter()
        .find(|(name, _)| name == "response.output_item.done")
        .expect("an item is done")
        .1["item"];
    assert_eq!(item["type"], "custom_tool_call");
    assert_eq!(item["name"], "apply_patch");
    assert_eq!(item["input"], patch, "the input is the raw text, not json");
    assert!(item["call_id"].as_str().unwrap().starts_with("call_"));
    let message = post(
        &server,
        "/v1/messages",
        &json!({"model": "m", "max_tokens": 9, "messages": [user("patch it")]}),
    );
    let message: Value = serde_json::from_str(&message.body).unwrap();
    assert_eq!(message["content"][0]["input"], json!({"input": patch}));
    drop(server);
    let log = read_log(dir.path());
    assert_eq!(log[0]["reply"], "message");
    assert_eq!(log[0]["status"], 200);
    assert!(log[0]["output_tokens"].as_u64().unwrap() >= 1);
    assert!(Scenario::from_yaml("rules:\n  - reply: { tool: x, input: [1] }\n").is_err());
}

/// Sends one request on an open connection and reads exactly its response.
fn exchange(stream: &mut TcpStream, path: &str, body: &Value) -> Response {
    let body = body.to_string();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    // A chunked body ends with the zero chunk; read until it.
    let mut raw = Vec::new();
    let mut buffer = [0; 8192];
    while !raw.ends_with(b"\r\n0\r\n\r\n") && !raw.ends_with(b"0\r\n\r\n") {
        let read = stream.read(&mut buffer).expect("read");
        assert!(read > 0, "the server closed a kept-alive connection");
        raw.extend_from_slice(&buffer[..read]);
    }
    parse_response(&String::from_utf8(raw).unwrap())
}

#[test]
fn one_connection_carries_several_requests_and_sse_arrives_in_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut stream = TcpStream::connect(server.addr()).unwrap();
    for prompt in ["the first prompt", "now the second prompt"] {
        let response = exchange(
            &mut stream,
            "/v1/messages",
            &messages_request(vec![user(prompt)]),
        );
        assert_eq!(response.status, 200);
        assert!(
            !response.head.contains("connection: close"),
            "{}",
            response.head
        );
        assert!(response.head.contains("transfer-encoding: chunked"));
    }
    // Each event is its own chunk of the streaming body.
    let body = messages_request(vec![user("the first prompt")]).to_string();
    write!(
        stream,
        "POST /v1/messages HTTP/1.1\r\nHost: x\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (_, chunked) = raw.split_once("\r\n\r\n").unwrap();
    let (text, chunks) = dechunk(chunked);
    assert_eq!(chunks, events(&text).len(), "one chunk per event");
    assert_eq!(read_log(dir.path()).len(), 3);
}

#[test]
fn a_hanging_request_does_not_hold_up_another_connection() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let body = messages_request(vec![user("stall please")]).to_string();
    let mut hanging = TcpStream::connect(server.addr()).unwrap();
    write!(
        hanging,
        "POST /v1/messages HTTP/1.1\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    while read_log_len(dir.path()) == 0 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let answered = post(
        &server,
        "/v1/messages",
        &messages_request(vec![user("the first prompt")]),
    );
    assert_eq!(answered.status, 200, "served while the other hangs");
    drop(server);
}

fn tool_result_follow_up(prompt: &str, round: usize) -> Value {
    let mut messages = vec![user(prompt)];
    for index in 0..round {
        let id = format!("toolu_{index}");
        messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "Read", "input": {}}]}));
        messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]}));
    }
    messages_request(messages)
}

/// What task `a`'s request `round` of the "fix it" attempt got: the tool's
/// name, or the reply's text.
fn played(server: &ModelServer, round: usize) -> String {
    let events = events(
        &post(
            server,
            "/t/a/v1/messages",
            &tool_result_follow_up("fix it", round),
        )
        .body,
    );
    let block = events[1].1["content_block"].clone();
    match block["type"].as_str() {
        Some("tool_use") => block["name"].as_str().unwrap().to_owned(),
        _ => text_of(&events),
    }
}

#[test]
fn steps_play_one_per_request_within_an_attempt_and_start_again_in_the_next() {
    let scenario = Scenario::from_yaml(
        r#"
rules:
  - match: { contains: "fix it" }
    reply:
      steps:
        - { tool: Read, input: { file_path: /w/a.py } }
        - { tool: Edit, input: { file_path: /w/a.py, old_string: hi, new_string: hello } }
        - { text: "Fixed." }
"#,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(scenario, dir.path().join("requests.jsonl")).unwrap();
    let played = |round: usize| played(&server, round);
    assert_eq!(
        [played(0), played(1), played(2), played(3)],
        ["Read", "Edit", "Fixed.", "Fixed."],
        "one step per request, the last repeated"
    );
    assert_eq!(
        played(0),
        "Read",
        "a new prompt is a new attempt: steps start over"
    );
    drop(server);
    let steps: Vec<Value> = read_log(dir.path())
        .iter()
        .map(|line| line["step"].clone())
        .collect();
    assert_eq!(steps, [json!(0), json!(1), json!(2), json!(2), json!(0)]);
}

/// A rehearsal continued in a new process: the second server takes up the
/// first's log, so the turn, its steps and the request numbers go on.
#[test]
fn a_server_taking_up_a_log_goes_on_where_the_last_one_stopped() {
    let scenario = || {
        Scenario::from_yaml(
            r#"
rules:
  - match: { contains: "fix it" }
    reply:
      steps:
        - { tool: Read, input: { file_path: /w/a.py } }
        - { tool: Edit, input: { file_path: /w/a.py, old_string: hi, new_string: hello } }
        - { text: "Fixed." }
  - match: { turn: 2 }
    reply: { text: "the second turn" }
"#,
        )
        .unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let first = ModelServer::start(scenario(), log.clone()).unwrap();
    assert_eq!([played(&first, 0), played(&first, 1)], ["Read", "Edit"]);
    drop(first);
    // A killed server's torn last line is cut, not held against the log.
    let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    file.write_all(b"{\"format\": 1, \"requ").unwrap();
    drop(file);
    let take_up = super::ServerOptions {
        take_up: true,
        ..super::ServerOptions::default()
    };
    let second = ModelServer::start_with(scenario(), log.clone(), take_up.clone()).unwrap();
    assert_eq!(played(&second, 2), "Fixed.", "the turn's third step");
    let again = post(
        &second,
        "/t/a/v1/messages",
        &messages_request(vec![user("again")]),
    );
    assert_eq!(text_of(&events(&again.body)), "the second turn");
    drop(second);
    let numbers: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap()["request"].clone())
        .collect();
    assert_eq!(numbers, [json!(1), json!(2), json!(3), json!(4)]);
    // Without take_up the same request is the start of a conversation.
    let fresh = tempfile::tempdir().unwrap();
    std::fs::copy(&log, fresh.path().join("requests.jsonl")).unwrap();
    let anew = ModelServer::start(scenario(), fresh.path().join("requests.jsonl")).unwrap();
    assert_eq!(played(&anew, 2), "Read");
    drop(anew);
    // A line torn in the middle of the log is refused, not guessed past.
    let torn = tempfile::tempdir().unwrap();
    std::fs::write(
        torn.path().join("requests.jsonl"),
        "{\"format\": 1, \"requ\n{\"format\": 1}\n",
    )
    .unwrap();
    let err = ModelServer::start_with(scenario(), torn.path().join("requests.jsonl"), take_up)
        .unwrap_err();
    assert!(err.to_string().contains("line 1 is not json"), "{err}");
}

#[test]
fn an_attempt_past_its_request_cap_is_answered_as_a_rehearsal_loop() {
    let scenario = Scenario::from_yaml(
        "max_requests_per_attempt: 3\nrules:\n  - reply: { tool: Read, input: { file_path: /x } }\n",
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(scenario, dir.path().join("requests.jsonl")).unwrap();
    let statuses: Vec<u16> = (0..5)
        .map(|round| {
            post(
                &server,
                "/t/spin/v1/messages",
                &tool_result_follow_up("go", round),
            )
            .status
        })
        .collect();
    assert_eq!(statuses, [200, 200, 200, 400, 400]);
    let last = post(
        &server,
        "/t/spin/v1/messages",
        &tool_result_follow_up("go", 5),
    );
    assert!(last.body.contains("rehearsal_loop"), "{}", last.body);
    // A new attempt (a new prompt) starts its count again.
    let fresh = post(
        &server,
        "/t/spin/v1/messages",
        &messages_request(vec![user("again")]),
    );
    assert_eq!(fresh.status, 200);
    drop(server);
    let looped: Vec<bool> = read_log(dir.path())
        .iter()
        .map(|line| line["loop"].as_bool().unwrap())
        .collect();
    assert_eq!(looped, [false, false, false, true, true, true, false]);
}

#[test]
fn the_second_request_reads_the_cached_prefix_until_the_lifetime_ends() {
    let scenario = Scenario::from_yaml("rules:\n  - reply: { text: ok }\n").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let clock = super::ManualClock::default();
    let options = super::ServerOptions {
        clock: Some(clock.clone()),
        ..super::ServerOptions::default()
    };
    let server =
        ModelServer::start_with(scenario, dir.path().join("requests.jsonl"), options).unwrap();
    let system = json!([{"type": "text", "text": "s".repeat(20_000), "cache_control": {"type": "ephemeral"}}]);
    let request = |turns: &[&str]| {
        let mut messages = Vec::new();
        for (index, turn) in turns.iter().enumerate() {
            let mut block = json!({"type": "text", "text": turn});
            if index + 1 == turns.len() {
                block["cache_control"] = json!({"type": "ephemeral"});
            } else {
                messages.push(json!({"role": "user", "content": [block]}));
                messages.push(
                    json!({"role": "assistant", "content": [{"type": "text", "text": "ok"}]}),
                );
                continue;
            }
            messages.push(json!({"role": "user", "content": [block]}));
        }
        json!({"model": "claude-test", "stream": true, "system": system, "messages": messages})
    };
    let usage = |body: &Value| {
        let events = events(&post(&server, "/v1/messages", body).body);
        events[0].1["message"]["usage"].clone()
    };
    let first = usage(&request(&["first question"]));
    assert_eq!(first["cache_read_input_tokens"], 0);
    let written = first["cache_creation_input_tokens"].as_u64().unwrap();
    assert!(written > 5000, "{first}");
    clock.advance(Duration::from_secs(120));
    let second = usage(&request(&["first question", "a follow-up"]));
    assert_eq!(
        second["cache_read_input_tokens"], written,
        "the whole first prompt is read"
    );
    let new_part = second["cache_creation_input_tokens"].as_u64().unwrap();
    assert!(
        new_part > 0 && new_part < 50,
        "only the new turn is written: {second}"
    );
    assert_eq!(
        second["input_tokens"], 0,
        "nothing after the last breakpoint"
    );
    clock.advance(Duration::from_secs(6 * 60));
    let expired = usage(&request(&["first question", "a follow-up"]));
    assert_eq!(expired["cache_read_input_tokens"], 0, "five minutes passed");
    assert_eq!(expired["cache_creation_input_tokens"], written + new_part);
    drop(server);
    let log = read_log(dir.path());
    assert_eq!(log[1]["usage"]["cache_read"], written);
    assert_eq!(log[1]["usage"]["cache_write"], new_part);
}

#[test]
fn responses_reports_a_repeated_prefix_as_cached_input_tokens() {
    let scenario = Scenario::from_yaml("rules:\n  - reply: { text: ok }\n").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(scenario, dir.path().join("requests.jsonl")).unwrap();
    let request = |prompts: &[&str]| {
        let input: Vec<Value> = prompts
            .iter()
            .map(|prompt| json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}))
            .collect();
        json!({"model": "gpt-test", "stream": true, "instructions": "i".repeat(12_000), "input": input})
    };
    let usage = |body: &Value| {
        let events = events(&post(&server, "/v1/responses", body).body);
        events.last().unwrap().1["response"]["usage"].clone()
    };
    let first = usage(&request(&["first"]));
    assert_eq!(first["input_tokens_details"]["cached_tokens"], 0);
    let second = usage(&request(&["first", "second"]));
    let cached = second["input_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(cached >= 1024 && (cached - 1024) % 128 == 0, "{second}");
    assert!(cached <= first["input_tokens"].as_u64().unwrap());
    assert!(
        second["input_tokens"].as_u64().unwrap() > cached,
        "cached tokens are part of the input"
    );
}

#[test]
fn gemini_streams_text_and_a_function_call_and_side_calls_are_not_turns() {
    let scenario = Scenario::from_yaml(
        "rules:\n  - match: { turn: 1, tool_result: false }\n    reply: { text: \"Writing it.\", tool: write_file, input: { file_path: a.txt, content: hi } }\n  - match: { turn: 1, tool_result: true }\n    reply: { text: DONE }\n",
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(scenario, dir.path().join("requests.jsonl")).unwrap();
    let prompt = json!({"role": "user", "parts": [{"text": "<session_context>ctx</session_context>"}, {"text": "write a.txt"}]});
    // The router's side call comes first; it is answered `{}`.
    let side = post(
        &server,
        "/t/g/v1beta/models/flash-lite:generateContent",
        &json!({"contents": [prompt]}),
    );
    assert_eq!(side.status, 200);
    let side: Value = serde_json::from_str(&side.body).unwrap();
    assert_eq!(side["candidates"][0]["content"]["parts"][0]["text"], "{}");
    let stream = post(
        &server,
        "/t/g/v1beta/models/pro:streamGenerateContent?alt=sse",
        &json!({"contents": [prompt], "systemInstruction": {"parts": [{"text": "be brief"}]}}),
    );
    assert_eq!(stream.status, 200);
    assert!(stream.head.contains("content-type: text/event-stream"));
    let chunks: Vec<Value> = stream
        .body
        .split("\r\n\r\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    assert_eq!(chunks.len(), 2, "the text, then the call");
    assert_eq!(
        chunks[0]["candidates"][0]["content"]["parts"][0]["text"],
        "Writing it."
    );
    let call = &chunks[1]["candidates"][0]["content"]["parts"][0]["functionCall"];
    assert_eq!(call["name"], "write_file");
    assert_eq!(call["args"], json!({"file_path": "a.txt", "content": "hi"}));
    assert_eq!(chunks[1]["candidates"][0]["finishReason"], "STOP");
    assert!(
        chunks[1]["usageMetadata"]["promptTokenCount"]
            .as_u64()
            .unwrap()
            > 0
    );
    // The function's response is a follow-up in the same turn.
    let follow_up = json!({"contents": [prompt,
        {"role": "model", "parts": [{"functionCall": {"name": "write_file", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "write_file", "response": {"output": "ok"}}}]}]});
    let done = post(
        &server,
        "/t/g/v1beta/models/pro:streamGenerateContent?alt=sse",
        &follow_up,
    );
    assert!(done.body.contains("\"text\":\"DONE\""), "{}", done.body);
    drop(server);
    let log = read_log(dir.path());
    let seen: Vec<(Value, Value, Value)> = log
        .iter()
        .map(|line| {
            (
                line["side"].clone(),
                line["turn"].clone(),
                line["tool_result"].clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (json!(true), json!(1), json!(true)),
            (json!(false), json!(1), json!(false)),
            (json!(false), json!(1), json!(true)),
        ],
        "the side call is for the first turn and does not open it"
    );
    assert_eq!(log[1]["prompt_text"], "write a.txt");
    assert_eq!(log[1]["model"], "pro");
}

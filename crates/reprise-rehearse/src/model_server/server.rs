//! The server: a loopback listener on a background thread, one thread per
//! connection, a request log, and the turn counter the scenario matches on.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};

use super::http::{self, Request};
use super::messages::{self, Assistant, Summary, output_tokens, tokens};
use super::responses;
use super::scenario::{Observed, Reply, Scenario};

/// A stalled client must not keep a connection thread alive forever.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A running scripted model server; dropping it stops it.
#[derive(Debug)]
pub struct ModelServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

/// How to run the server beyond its scenario and log.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// The port on 127.0.0.1; 0 takes any free one.
    pub port: u16,
    /// Keep each API request's body as `<dir>/<request number>.json` (the
    /// number is the log line's `request`), for a close look at what a
    /// client sent.
    pub bodies: Option<PathBuf>,
}

#[derive(Debug)]
struct Shared {
    scenario: Scenario,
    bodies: Option<PathBuf>,
    log: Mutex<File>,
    counters: Mutex<Counters>,
    stopping: AtomicBool,
    /// Wakes hanging connections when the server stops.
    stopped: (Mutex<bool>, Condvar),
    connections: Mutex<Vec<JoinHandle<()>>>,
}

#[derive(Debug, Default)]
struct Counters {
    requests: u64,
    /// Prompt-bearing requests per task (`None`: requests without a task).
    turns: BTreeMap<Option<String>, u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Messages,
    Responses,
}

impl ModelServer {
    /// Binds 127.0.0.1 on a free port and serves `scenario`, appending one
    /// JSON line per request to `log`.
    pub fn start(scenario: Scenario, log: PathBuf) -> io::Result<Self> {
        Self::start_with(scenario, log, ServerOptions::default())
    }

    /// As [`ModelServer::start`], with a fixed port or request bodies kept.
    pub fn start_with(
        scenario: Scenario,
        log: PathBuf,
        options: ServerOptions,
    ) -> io::Result<Self> {
        let log_file = OpenOptions::new().create(true).append(true).open(&log)?;
        if let Some(dir) = &options.bodies {
            std::fs::create_dir_all(dir)?;
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, options.port))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            scenario,
            bodies: options.bodies,
            log: Mutex::new(log_file),
            counters: Mutex::new(Counters::default()),
            stopping: AtomicBool::new(false),
            stopped: (Mutex::new(false), Condvar::new()),
            connections: Mutex::new(Vec::new()),
        });
        let accept_shared = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("model-server-accept".to_owned())
            .spawn(move || accept_loop(&listener, &accept_shared))?;
        Ok(Self {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, for `ANTHROPIC_BASE_URL` (Codex takes it with `/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, releases hanging requests and joins every thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let Some(accept) = self.accept.take() else {
            return;
        };
        self.shared.stopping.store(true, Ordering::SeqCst);
        {
            let (lock, condvar) = &self.shared.stopped;
            *lock.lock().unwrap_or_else(PoisonError::into_inner) = true;
            condvar.notify_all();
        }
        // Wake the blocking accept; failure means it is already gone.
        let _ = TcpStream::connect(self.addr);
        let _ = accept.join();
        let connections = std::mem::take(
            &mut *self
                .shared
                .connections
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for connection in connections {
            let _ = connection.join();
        }
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let connection_shared = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name("model-server-connection".to_owned())
            .spawn(move || {
                // A broken client connection concerns only that client.
                let _ = serve(stream, &connection_shared);
            });
        if let Ok(handle) = spawned {
            let mut connections = shared
                .connections
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            connections.retain(|handle| !handle.is_finished());
            connections.push(handle);
        }
    }
}

fn serve(stream: TcpStream, shared: &Shared) -> io::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = io::BufWriter::new(stream);
    let Some(request) = http::read_request(&mut reader)? else {
        return Ok(());
    };
    let (task, route) = split_task(&request.path);
    let api = match (request.method.as_str(), route) {
        ("POST", "/v1/messages") => Some(Api::Messages),
        ("POST", "/v1/responses") => Some(Api::Responses),
        _ => None,
    };
    let observed = Observed {
        task: task.map(str::to_owned),
        ..Observed::default()
    };
    let Some(api) = api else {
        shared.record(&request, None, &Summary::default(), &observed, None, None)?;
        // Clients probe the base URL before they call the API: answer those.
        if matches!(request.method.as_str(), "GET" | "HEAD") {
            return http::write_json(&mut writer, 200, b"");
        }
        let message = format!("no route for {} {}", request.method, request.path);
        let body = messages::error_body(404, &message).to_string();
        return http::write_json(&mut writer, 404, body.as_bytes());
    };
    let Ok(body) = serde_json::from_slice::<Value>(&request.body) else {
        shared.record(&request, None, &Summary::default(), &observed, None, None)?;
        return shared.write_error(&mut writer, api, 400, "request body is not json");
    };
    let summary = match api {
        Api::Messages => messages::summarise(&body),
        Api::Responses => responses::summarise(&body),
    };
    let (index, observed) = {
        let mut counters = shared
            .counters
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        counters.requests += 1;
        let tool_result = summary.last_user_text.is_none();
        let turn = counters.turns.entry(observed.task.clone()).or_default();
        if !tool_result {
            *turn += 1;
        }
        let observed = Observed {
            prompt_text: summary.prompt_text.clone(),
            tool_result,
            turn: *turn,
            ..observed
        };
        (counters.requests, observed)
    };
    let rule = shared.scenario.pick(&observed);
    if let Some(dir) = &shared.bodies {
        std::fs::write(dir.join(format!("{index:06}.json")), &request.body)?;
    }
    shared.record(&request, Some(api), &summary, &observed, rule, Some(index))?;
    let Some(rule) = rule else {
        let message = format!(
            "reprise-model-server: no scenario rule matches task {} turn {} with prompt {:?}",
            observed.task.as_deref().unwrap_or("-"),
            observed.turn,
            observed.prompt_text.as_deref().unwrap_or("")
        );
        return shared.write_error(&mut writer, api, 400, &message);
    };
    match &shared.scenario.rules[rule].reply {
        Reply::Error(error) => shared.write_error(&mut writer, api, error.status, &error.message),
        Reply::Hang => {
            shared.wait_for_stop();
            Ok(())
        }
        Reply::Message { text, tool } => {
            let assistant = Assistant {
                id: format!("msg_{index:020}"),
                model: summary
                    .model
                    .clone()
                    .unwrap_or_else(|| "scripted".to_owned()),
                input_tokens: tokens(request.body.len()),
                text: text.as_deref(),
                tool: tool.as_ref(),
            };
            match (api, summary.stream) {
                (Api::Messages, true) => assistant.stream(&mut writer),
                (Api::Messages, false) => {
                    http::write_json(&mut writer, 200, assistant.message().to_string().as_bytes())
                }
                (Api::Responses, _) => responses::stream(&assistant, &mut writer),
            }
        }
    }
}

/// Splits `/t/<task>/rest` into the task and `/rest`; other paths have no task.
fn split_task(path: &str) -> (Option<&str>, &str) {
    let Some(after) = path.strip_prefix("/t/") else {
        return (None, path);
    };
    match after.find('/') {
        Some(slash) if slash > 0 => (Some(&after[..slash]), &after[slash..]),
        _ if !after.is_empty() => (Some(after), ""),
        _ => (None, path),
    }
}

impl Shared {
    fn write_error(
        &self,
        writer: &mut impl Write,
        api: Api,
        status: u16,
        message: &str,
    ) -> io::Result<()> {
        let body = match api {
            Api::Messages => messages::error_body(status, message),
            Api::Responses => responses::error_body(status, message),
        };
        http::write_json(writer, status, body.to_string().as_bytes())
    }

    fn wait_for_stop(&self) {
        let (lock, condvar) = &self.stopped;
        let mut stopped = lock.lock().unwrap_or_else(PoisonError::into_inner);
        while !*stopped {
            stopped = condvar
                .wait(stopped)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Appends the request's log line before any reply, so hung and failed
    /// requests are recorded too.
    /// `number` is an API request's count, which names its kept body.
    fn record(
        &self,
        request: &Request,
        api: Option<Api>,
        summary: &Summary,
        observed: &Observed,
        rule: Option<usize>,
        number: Option<u64>,
    ) -> io::Result<()> {
        let line = json!({
            "request": number,
            "method": request.method,
            "task": observed.task,
            "path": request.path,
            "query": request.query,
            "api": api.map(|api| match api {
                Api::Messages => "messages",
                Api::Responses => "responses",
            }),
            "model": summary.model,
            "stream": summary.stream,
            "messages": summary.roles.len(),
            "roles": summary.roles,
            "bytes": request.body.len(),
            "tokens": tokens(request.body.len()),
            "last_user_text": summary.last_user_text,
            "prompt_text": observed.prompt_text,
            "tool_result": observed.tool_result,
            "turn": observed.turn,
            "rule": rule,
            "reply": rule.map(|rule| match &self.scenario.rules[rule].reply {
                Reply::Message { .. } => "message",
                Reply::Error(_) => "error",
                Reply::Hang => "hang",
            }),
            "status": match rule.map(|rule| &self.scenario.rules[rule].reply) {
                Some(Reply::Message { .. }) => Some(200),
                Some(Reply::Error(error)) => Some(error.status),
                Some(Reply::Hang) => None,
                None if api.is_some() => Some(400),
                None if matches!(request.method.as_str(), "GET" | "HEAD") => Some(200),
                None => Some(404),
            },
            "output_tokens": rule.and_then(|rule| match &self.scenario.rules[rule].reply {
                Reply::Message { text, tool } => Some(output_tokens(text.as_deref(), tool.as_ref())),
                _ => None,
            }),
        });
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        writeln!(log, "{line}")?;
        log.flush()
    }
}

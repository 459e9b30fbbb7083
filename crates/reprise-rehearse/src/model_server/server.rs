//! The server: hyper's HTTP/1.1 on a single-threaded tokio runtime in a
//! background thread. Connections are kept alive and served concurrently
//! (real clients reuse connections and send side requests in parallel);
//! what the scenario matches on (turns, steps, the per-attempt request count)
//! and the prompt cache are kept per task behind one lock, and every request
//! is logged as one JSON line before it is answered.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::cache::{InputUsage, Prompt, PromptCache};
use super::gemini::{self, Call};
use super::http::{self, Body, MAX_BODY_BYTES};
use super::messages::{self, Assistant, Summary, output_tokens};
use super::responses;
use super::scenario::{Observed, Reply, Scenario, Step};
use crate::pricing::TokenUsage;

/// The request log's line format; readers refuse a newer one.
pub const LOG_FORMAT: u32 = 1;

/// A client that sends nothing must not hold a connection forever.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A running scripted model server; dropping it stops it.
#[derive(Debug)]
pub struct ModelServer {
    addr: SocketAddr,
    stop: Option<watch::Sender<bool>>,
    thread: Option<JoinHandle<()>>,
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
    /// The clock cache lifetimes are measured on (the wall clock if none).
    pub clock: Option<ManualClock>,
    /// Go on from what `log` already records (a rehearsal continued in a
    /// new process): request numbers, and each task's turn, prompt and the
    /// steps its turn has played, carry on from the log's last lines. The
    /// prompt cache starts empty.
    pub take_up: bool,
}

/// A clock that moves only when told to, for tests of cache lifetimes.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    pub fn advance(&self, by: Duration) {
        let millis = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.0.fetch_add(millis, Ordering::SeqCst);
    }

    fn now(&self) -> Duration {
        Duration::from_millis(self.0.load(Ordering::SeqCst))
    }
}

#[derive(Debug)]
struct Shared {
    scenario: Scenario,
    bodies: Option<PathBuf>,
    log: Mutex<File>,
    state: Mutex<State>,
    clock: Option<ManualClock>,
    started: Instant,
}

#[derive(Debug, Default)]
struct State {
    requests: u64,
    /// Per task (`None`: requests without a task).
    tasks: BTreeMap<Option<String>, TaskState>,
    cache: PromptCache,
}

impl State {
    /// The state an earlier server left, from its request log: the last
    /// request number, and per task the turn its last lines are in, that
    /// turn's prompt, its request count and the steps each rule played. A
    /// line that does not parse (a torn last line of a killed server) is
    /// refused unless it is the last.
    fn from_log(text: &str) -> io::Result<Self> {
        let mut state = Self::default();
        let lines: Vec<&str> = text
            .lines()
            .filter(|line| !line.trim().is_empty())
            .collect();
        for (index, line) in lines.iter().enumerate() {
            let Ok(line) = serde_json::from_str::<Value>(line) else {
                if index + 1 == lines.len() {
                    break;
                }
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("request log line {} is not json", index + 1),
                ));
            };
            if line["format"].as_u64() > Some(u64::from(LOG_FORMAT)) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "request log line {} has format {}, newer than this server's {LOG_FORMAT}",
                        index + 1,
                        line["format"]
                    ),
                ));
            }
            if let Some(number) = line["request"].as_u64() {
                state.requests = state.requests.max(number);
            }
            // Only the conversation's requests move a turn: probes, side
            // calls and unreadable bodies do not.
            if line["api"].is_null() || line["side"] == true || line["request"].is_null() {
                continue;
            }
            let task = line["task"].as_str().map(str::to_owned);
            let task_state = state.tasks.entry(task).or_default();
            let turn = line["turn"].as_u64().unwrap_or(task_state.turn);
            if turn != task_state.turn {
                task_state.turn = turn;
                task_state.turn_requests = 0;
                task_state.steps_played.clear();
            }
            if line["tool_result"] == false {
                task_state.prompt = line["prompt_text"].as_str().map(str::to_owned);
            }
            task_state.turn_requests += 1;
            if let (Some(rule), Some("message")) = (
                line["rule"]
                    .as_u64()
                    .and_then(|rule| usize::try_from(rule).ok()),
                line["reply"].as_str(),
            ) {
                *task_state.steps_played.entry(rule).or_default() += 1;
            }
        }
        Ok(state)
    }
}

/// What the server remembers of one task's conversation.
#[derive(Debug, Default)]
struct TaskState {
    /// Prompt-bearing requests so far: the current turn (attempt).
    turn: u64,
    /// API requests in the current turn.
    turn_requests: u64,
    /// Per rule, the steps already played in the current turn.
    steps_played: BTreeMap<usize, usize>,
    /// The current turn's prompt (a side call with another is for the next).
    prompt: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Messages,
    Responses,
    Gemini,
}

impl Api {
    fn name(self) -> &'static str {
        match self {
            Api::Messages => "messages",
            Api::Responses => "responses",
            Api::Gemini => "gemini",
        }
    }
}

/// What one request gets.
enum Answer {
    Now(Response<Body>),
    /// Never answered: held until the server stops.
    Hang,
}

impl ModelServer {
    /// Binds 127.0.0.1 on a free port and serves `scenario`, appending one
    /// JSON line per request to `log`.
    pub fn start(scenario: Scenario, log: PathBuf) -> io::Result<Self> {
        Self::start_with(scenario, log, ServerOptions::default())
    }

    /// As [`ModelServer::start`], with a fixed port, request bodies kept or
    /// a manual clock.
    pub fn start_with(
        scenario: Scenario,
        log: PathBuf,
        options: ServerOptions,
    ) -> io::Result<Self> {
        let (state, whole) = if options.take_up {
            match std::fs::read_to_string(&log) {
                Ok(text) => (
                    State::from_log(&text)?,
                    (!text.is_empty() && !text.ends_with('\n'))
                        .then(|| text.rfind('\n').map_or(0, |end| end + 1)),
                ),
                Err(err) if err.kind() == io::ErrorKind::NotFound => (State::default(), None),
                Err(err) => return Err(err),
            }
        } else {
            (State::default(), None)
        };
        let log_file = OpenOptions::new().create(true).append(true).open(&log)?;
        if let Some(whole) = whole {
            // A killed server's torn last line: cut, so the log goes on
            // whole (a reader refuses a torn line before others).
            log_file.set_len(u64::try_from(whole).unwrap_or(u64::MAX))?;
        }
        if let Some(dir) = &options.bodies {
            std::fs::create_dir_all(dir)?;
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, options.port))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let listener = {
            let _context = runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let shared = Arc::new(Shared {
            scenario,
            bodies: options.bodies,
            log: Mutex::new(log_file),
            state: Mutex::new(state),
            clock: options.clock,
            started: Instant::now(),
        });
        let (stop, stopped) = watch::channel(false);
        let thread = std::thread::Builder::new()
            .name("model-server".to_owned())
            .spawn(move || {
                runtime.block_on(accept_loop(listener, shared, stopped));
                // Dropping the runtime drops every connection still open,
                // hanging requests included: their sockets close unanswered.
                drop(runtime);
            })?;
        Ok(Self {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, for `ANTHROPIC_BASE_URL` (Codex takes it with `/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, drops every open connection and joins the thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            // Failure means the loop is already gone.
            let _ = stop.send(true);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped.changed() => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let shared = Arc::clone(&shared);
                async move { Ok::<_, Infallible>(handle(&shared, request).await) }
            });
            // A broken client connection concerns only that client.
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn handle(shared: &Shared, request: Request<Incoming>) -> Response<Body> {
    let method = request.method().as_str().to_owned();
    let path = request.uri().path().to_owned();
    let query = request.uri().query().map(str::to_owned);
    let body = match Limited::new(request.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes().to_vec(),
        Err(_) => {
            let body = messages::error_body(413, "request body unreadable or too large");
            return http::json(413, body.to_string().into_bytes());
        }
    };
    let seen = Seen {
        method,
        path,
        query,
        body,
    };
    match shared.answer(&seen) {
        Ok(Answer::Now(response)) => response,
        Ok(Answer::Hang) => std::future::pending().await,
        Err(error) => {
            let body = messages::error_body(500, &format!("reprise-model-server: {error}"));
            http::json(500, body.to_string().into_bytes())
        }
    }
}

/// One request as received.
struct Seen {
    method: String,
    path: String,
    query: Option<String>,
    body: Vec<u8>,
}

/// One request to an API, read and counted: what its reply and its log
/// line are made from.
struct ApiRequest<'a> {
    seen: &'a Seen,
    api: Api,
    summary: Summary,
    prompt: Prompt,
    /// Its count among the API requests, which names its kept body.
    number: u64,
    /// When it came, on the clock cache lifetimes are measured on.
    now: Duration,
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

/// What the log line says of the answer.
#[derive(Debug, Default)]
struct Outcome {
    rule: Option<usize>,
    step: Option<usize>,
    reply: Option<&'static str>,
    status: Option<u16>,
    usage: Option<TokenUsage>,
    /// The attempt passed `max_requests_per_attempt`.
    looped: bool,
}

impl Shared {
    fn now(&self) -> Duration {
        self.clock
            .as_ref()
            .map_or_else(|| self.started.elapsed(), ManualClock::now)
    }

    /// Routes one request and answers it: a probe or an unknown route, a
    /// body that is no JSON, a Gemini side call, or a turn's request.
    fn answer(&self, seen: &Seen) -> io::Result<Answer> {
        let (task, route) = split_task(&seen.path);
        let gemini_call = gemini::route(route).filter(|_| seen.method == "POST");
        let api = match (seen.method.as_str(), route) {
            ("POST", "/v1/messages") => Some(Api::Messages),
            ("POST", "/v1/responses") => Some(Api::Responses),
            _ if gemini_call.is_some() => Some(Api::Gemini),
            _ => None,
        };
        let observed = Observed {
            task: task.map(str::to_owned),
            ..Observed::default()
        };
        let Some(api) = api else {
            return self.unrouted(seen, &observed);
        };
        let Ok(body) = serde_json::from_slice::<Value>(&seen.body) else {
            let outcome = Outcome {
                status: Some(400),
                ..Outcome::default()
            };
            self.record(
                seen,
                Some(api),
                &Summary::default(),
                &observed,
                None,
                &outcome,
                0,
            )?;
            return Ok(Answer::Now(error(api, 400, "request body is not json")));
        };
        let (summary, prompt) = match (api, &gemini_call) {
            (Api::Gemini, Some((model, _))) => (
                gemini::summarise(&body, model),
                Prompt::gemini(&body, model),
            ),
            (Api::Responses, _) => (responses::summarise(&body), Prompt::responses(&body)),
            _ => (messages::summarise(&body), Prompt::messages(&body)),
        };
        let now = self.now();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.requests += 1;
        let request = ApiRequest {
            seen,
            api,
            summary,
            prompt,
            number: state.requests,
            now,
        };
        match gemini_call.filter(|(_, call)| *call != Call::Stream) {
            Some((model, call)) => self.side_call(&request, state, observed, &model, call),
            None => self.turn(&request, state, observed),
        }
    }

    /// A request to no API: clients probe the base URL before they call
    /// the API, so a GET or HEAD is answered; anything else is not found.
    fn unrouted(&self, seen: &Seen, observed: &Observed) -> io::Result<Answer> {
        let probe = matches!(seen.method.as_str(), "GET" | "HEAD");
        let outcome = Outcome {
            status: Some(if probe { 200 } else { 404 }),
            ..Outcome::default()
        };
        self.record(seen, None, &Summary::default(), observed, None, &outcome, 0)?;
        if probe {
            return Ok(Answer::Now(http::json(200, Vec::new())));
        }
        let message = format!("no route for {} {}", seen.method, seen.path);
        let body = messages::error_body(404, &message).to_string();
        Ok(Answer::Now(http::json(404, body.into_bytes())))
    }

    /// A Gemini call beside the stream (counting tokens, a side question):
    /// answered, logged and priced, never a turn.
    fn side_call(
        &self,
        request: &ApiRequest<'_>,
        mut state: MutexGuard<'_, State>,
        observed: Observed,
        model: &str,
        call: Call,
    ) -> io::Result<Answer> {
        let summary = &request.summary;
        let task_state = state.tasks.entry(observed.task.clone()).or_default();
        let for_next = summary.prompt_text.is_some() && summary.prompt_text != task_state.prompt;
        let observed = Observed {
            prompt_text: summary.prompt_text.clone(),
            tool_result: true,
            turn: task_state.turn + u64::from(for_next),
            ..observed
        };
        let input = state.cache.openai(&request.prompt, request.now);
        drop(state);
        let (body, usage) = if call == Call::CountTokens {
            (json!({"totalTokens": request.prompt.total_tokens()}), None)
        } else {
            let usage = TokenUsage {
                fresh_input: input.fresh,
                cache_read: input.cache_read,
                output: 1,
                ..TokenUsage::default()
            };
            (gemini::side_reply(model, &input), Some(usage))
        };
        let outcome = Outcome {
            reply: Some("side"),
            status: Some(200),
            usage,
            ..Outcome::default()
        };
        self.keep_and_record(request, &observed, &outcome)?;
        Ok(Answer::Now(http::json(200, body.to_string().into_bytes())))
    }

    /// A request of a turn: a new prompt starts the task's next turn, a
    /// tool result goes on with the current one. The scenario's first
    /// matching rule answers, unless the turn has sent too many requests.
    fn turn(
        &self,
        request: &ApiRequest<'_>,
        mut guard: MutexGuard<'_, State>,
        observed: Observed,
    ) -> io::Result<Answer> {
        let state = &mut *guard;
        let summary = &request.summary;
        let tool_result = summary.last_user_text.is_none();
        let task_state = state.tasks.entry(observed.task.clone()).or_default();
        if !tool_result {
            task_state.turn += 1;
            task_state.turn_requests = 0;
            task_state.steps_played.clear();
            task_state.prompt.clone_from(&summary.prompt_text);
        }
        task_state.turn_requests += 1;
        let observed = Observed {
            prompt_text: summary.prompt_text.clone(),
            tool_result,
            turn: task_state.turn,
            ..observed
        };
        let max = self.scenario.max_requests_per_attempt;
        let looped = task_state.turn_requests > max;
        let rule = if looped {
            None
        } else {
            self.scenario.pick(&observed)
        };
        let mut outcome = Outcome {
            rule,
            looped,
            ..Outcome::default()
        };
        let answer = match rule {
            _ if looped => {
                outcome.reply = Some("loop");
                outcome.status = Some(400);
                let message = format!(
                    "reprise-model-server: rehearsal_loop: task {} sent more than {max} requests in attempt {} (max_requests_per_attempt); the scenario's replies keep the agent looping",
                    observed.task.as_deref().unwrap_or("-"),
                    observed.turn
                );
                Answer::Now(error(request.api, 400, &message))
            }
            None => {
                outcome.status = Some(400);
                let message = format!(
                    "reprise-model-server: no scenario rule matches task {} turn {} with prompt {:?}",
                    observed.task.as_deref().unwrap_or("-"),
                    observed.turn,
                    observed.prompt_text.as_deref().unwrap_or("")
                );
                Answer::Now(error(request.api, 400, &message))
            }
            Some(rule) => {
                let played = task_state.steps_played.entry(rule).or_default();
                self.play(rule, request, played, &mut state.cache, &mut outcome)
            }
        };
        drop(guard);
        self.keep_and_record(request, &observed, &outcome)?;
        Ok(answer)
    }

    /// The reply of the scenario's rule `rule`; `played`: how many of its
    /// steps this turn has played so far (the last is repeated).
    fn play(
        &self,
        rule: usize,
        request: &ApiRequest<'_>,
        played: &mut usize,
        cache: &mut PromptCache,
        outcome: &mut Outcome,
    ) -> Answer {
        match &self.scenario.rules[rule].reply {
            Reply::Error(reply) => {
                outcome.reply = Some("error");
                outcome.status = Some(reply.status);
                let mut response = error(request.api, reply.status, &reply.message);
                for (name, value) in &reply.headers {
                    // Checked when the scenario was read.
                    if let (Ok(name), Ok(value)) = (
                        hyper::header::HeaderName::from_bytes(name.as_bytes()),
                        hyper::header::HeaderValue::from_str(value),
                    ) {
                        response.headers_mut().insert(name, value);
                    }
                }
                Answer::Now(response)
            }
            Reply::Hang => {
                outcome.reply = Some("hang");
                Answer::Hang
            }
            Reply::Steps(steps) => {
                let index = (*played).min(steps.len() - 1);
                *played += 1;
                let step = &steps[index];
                let input = match request.api {
                    Api::Messages => cache.anthropic(&request.prompt, request.now),
                    Api::Responses | Api::Gemini => cache.openai(&request.prompt, request.now),
                };
                outcome.reply = Some("message");
                outcome.status = Some(200);
                outcome.step = (steps.len() > 1).then_some(index);
                outcome.usage = Some(token_usage(input, step));
                let summary = &request.summary;
                Answer::Now(reply(request.api, summary, request.number, input, step))
            }
        }
    }

    /// An API request's body kept (with `--keep-requests`) and its log line,
    /// with every input token of its prompt.
    fn keep_and_record(
        &self,
        request: &ApiRequest<'_>,
        observed: &Observed,
        outcome: &Outcome,
    ) -> io::Result<()> {
        let number = request.number;
        if let Some(dir) = &self.bodies {
            std::fs::write(dir.join(format!("{number:06}.json")), &request.seen.body)?;
        }
        self.record(
            request.seen,
            Some(request.api),
            &request.summary,
            observed,
            Some(number),
            outcome,
            request.prompt.total_tokens(),
        )
    }

    /// Appends the request's log line before any reply, so hung and failed
    /// requests are recorded too. `number` is an API request's count, which
    /// names its kept body.
    #[expect(clippy::too_many_arguments)]
    fn record(
        &self,
        seen: &Seen,
        api: Option<Api>,
        summary: &Summary,
        observed: &Observed,
        number: Option<u64>,
        outcome: &Outcome,
        input_tokens: u64,
    ) -> io::Result<()> {
        let line = json!({
            "format": LOG_FORMAT,
            "request": number,
            "method": seen.method,
            "task": observed.task,
            "path": seen.path,
            "query": seen.query,
            "api": api.map(Api::name),
            "model": summary.model,
            "stream": summary.stream,
            "messages": summary.roles.len(),
            "roles": summary.roles,
            "bytes": seen.body.len(),
            "tokens": input_tokens,
            "last_user_text": summary.last_user_text,
            "prompt_text": observed.prompt_text,
            "tool_result": observed.tool_result,
            "turn": observed.turn,
            "rule": outcome.rule,
            "step": outcome.step,
            "reply": outcome.reply,
            "status": outcome.status,
            "loop": outcome.looped,
            "side": outcome.reply == Some("side"),
            "usage": outcome.usage,
            "output_tokens": outcome.usage.map(|usage| usage.output),
        });
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        writeln!(log, "{line}")?;
        log.flush()
    }
}

fn token_usage(input: InputUsage, step: &Step) -> TokenUsage {
    TokenUsage {
        fresh_input: input.fresh,
        cache_write: input.cache_write,
        cache_write_1h: input.cache_write_1h,
        cache_read: input.cache_read,
        output: output_tokens(step.text.as_deref(), step.tool.as_ref()),
    }
}

fn error(api: Api, status: u16, message: &str) -> Response<Body> {
    let body = match api {
        Api::Messages => messages::error_body(status, message),
        Api::Responses => responses::error_body(status, message),
        Api::Gemini => gemini::error_body(status, message),
    };
    http::json(status, body.to_string().into_bytes())
}

fn reply(
    api: Api,
    summary: &Summary,
    number: u64,
    usage: InputUsage,
    step: &Step,
) -> Response<Body> {
    let assistant = Assistant {
        id: format!("msg_{number:020}"),
        model: summary
            .model
            .clone()
            .unwrap_or_else(|| "scripted".to_owned()),
        usage,
        text: step.text.as_deref(),
        tool: step.tool.as_ref(),
    };
    match (api, summary.stream) {
        (Api::Messages, true) => assistant.stream().response(),
        (Api::Messages, false) => http::json(200, assistant.message().to_string().into_bytes()),
        (Api::Responses, _) => responses::stream(&assistant).response(),
        (Api::Gemini, _) => gemini::stream(&assistant).response(),
    }
}

//! The `acp` adapter: any agent that speaks the Agent Client Protocol
//! (JSON-RPC over its stdio), driven as a client on the
//! `agent-client-protocol` crate.
//!
//! The agent runs as the plan's `agents.acp.command` (then `.args`) through
//! the same process driver as every agent: supervised and contained, in its
//! own process group, bounded by the task's timeout and watches, always
//! reaped. The client lives in the driver's conversation ([`Talk`]) and
//! speaks to that child's stdin and stdout:
//!
//! | step | request | when |
//! |---|---|---|
//! | handshake | `initialize` (protocol 1, no fs or terminal capability) | always |
//! | new | `session/new` in the attempt's cwd | a new attempt, a cold retry |
//! | warm | `session/resume`, else `session/load` of the same session | declared `sessionCapabilities.resume`, `loadSession` |
//! | fork | `session/fork` of the session | declared `sessionCapabilities.fork` (unstable) |
//! | prompt | `session/prompt` with the attempt's text | always |
//! | stop | `session/cancel`, then the group is signalled | timeout, cancel, a watch's bound |
//!
//! What the agent declares at `initialize` is the adapter's strategy
//! ([`DeclaredSessions::strategy`]): continued and forked is forkable, only
//! continued is native, neither is none. It is learned by the handshake of
//! an attempt, or by [`AcpAdapter::handshake`] before the task's first one.
//!
//! The reply is the text of the agent's message chunks after the prompt
//! was sent (a loaded session's replayed history is not part of it); the
//! agent's stdout, every update it streamed, is kept as the attempt's
//! transcript (`agent.stdout`). A permission the agent asks for is allowed
//! when an entry of `agents.acp.allowed_tools` names the tool (its
//! programmatic name, its kind such as `edit` or `execute`, or its title)
//! and rejected otherwise; each answer is written after the agent's stderr
//! in `agent.stderr` as a `reprise: permission ...` line. Cost is the
//! change of the cumulative USD cost the agent's `usage_update`s report
//! over the prompt, else unknown.
//!
//! The agent's own state (its saved sessions) is `agents.acp.state_dirs`,
//! or inferred for an agent reprise knows ([`crate::acp_state`]): the
//! adapter's `state_paths`, made before a contained attempt and writable in
//! its sandbox, so a warm retry finds the session the attempt before saved.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    CancelNotification, ClientCapabilities, ContentBlock, ForkSessionRequest, Implementation,
    InitializeRequest, InitializeResponse, LoadSessionRequest, NewSessionRequest,
    PermissionOptionKind, PromptRequest, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, ResumeSessionRequest, SelectedPermissionOutcome, SessionId,
    SessionNotification, SessionUpdate, StopReason, TextContent,
};
use agent_client_protocol::{Agent, Client, Lines};
use futures::channel::mpsc::{UnboundedSender, unbounded};
use reprise_core::grant::allowing_entry;
use reprise_core::plan::AgentStateDir;
use reprise_core::retry::ResumeStrategy;
use reprise_core::retry_mode::DeclaredSessions;

use crate::acp_state::{AcpState, acp_state};
use crate::home::child_var;
use crate::outcome::{
    AttemptOutcome, AttemptReport, InfraKind, Streams, enforce_budget, infra, kind_from_error_text,
    one_line, parse_usd_micro,
};
use crate::process::{
    End, Finished, Invocation, Stdin, Talk, child_path_var, describe_duration, find_executable,
    park_idle, preflight, run_talking, watch_outcome,
};
use crate::request::{Adapter, AttemptRequest, CancelToken, SessionMode, StatePaths};

const NAME: &str = "acp";
/// The bound on a handshake made outside an attempt.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Drives an ACP agent; its strategy is what the agent declares.
#[derive(Debug, Default)]
pub struct AcpAdapter {
    /// The plan's `agents.acp.command` then `.args`.
    argv: Vec<String>,
    /// The plan's `agents.acp.env` and `pass_env`, after the request's own.
    env: Vec<(String, String)>,
    allowed_tools: Vec<String>,
    /// The plan's `agents.acp.state_dirs`; `None`: inferred (see
    /// [`crate::acp_state`]).
    state_dirs: Option<Vec<AgentStateDir>>,
    /// What the agent declared at its latest handshake.
    learned: Mutex<Option<Handshake>>,
}

/// What an agent said at `initialize`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    /// `name version` from its `agentInfo`, when it sent one.
    pub agent: Option<String>,
    pub declared: DeclaredSessions,
}

impl Handshake {
    /// How a warm retry continues a session, and whether a fork can run.
    pub fn describe(&self) -> String {
        let declared = self.declared;
        let warm = match (declared.resume, declared.load) {
            (true, _) => "session/resume",
            (false, true) => "session/load",
            (false, false) => "none",
        };
        format!(
            "retry capability {} (warm by {warm}, fork {})",
            capability_name(declared.strategy()),
            if declared.fork && declared.strategy() == ResumeStrategy::NativeForkable {
                "by session/fork"
            } else {
                "not declared"
            }
        )
    }
}

/// The capability's name as records spell it (`fork`, `resume`, `none`).
fn capability_name(strategy: ResumeStrategy) -> String {
    serde_json::to_value(strategy.capability())
        .ok()
        .and_then(|value| value.as_str().map(str::to_owned))
        .unwrap_or_default()
}

impl AcpAdapter {
    /// An adapter that runs `command` (program, then arguments) for every
    /// attempt.
    pub fn new(command: Vec<String>) -> Self {
        Self {
            argv: command,
            ..Self::default()
        }
    }

    /// The plan's extra arguments, after the command's own.
    #[must_use]
    pub fn with_args(mut self, args: Vec<String>) -> Self {
        self.argv.extend(args);
        self
    }

    /// Variables for the agent's process only.
    #[must_use]
    pub fn with_env(mut self, env: Vec<(String, String)>) -> Self {
        self.env = env;
        self
    }

    /// The tools whose permission requests are allowed.
    #[must_use]
    pub fn with_allowed_tools(mut self, tools: Vec<String>) -> Self {
        self.allowed_tools = tools;
        self
    }

    /// Where the agent keeps its own state, as the plan's
    /// `agents.acp.state_dirs` says (`None`: not said, inferred for a known
    /// agent).
    #[must_use]
    pub fn with_state_dirs(mut self, dirs: Option<Vec<AgentStateDir>>) -> Self {
        self.state_dirs = dirs;
        self
    }

    /// The directories the agent may write for its own state, `~/` taken
    /// as its `HOME`: the plan's `agents.acp.env` one, else `home` (a home
    /// the caller made for the task), else reprise's own.
    pub fn own_state(&self, home: Option<&Path>) -> AcpState {
        acp_state(
            self.state_dirs.as_deref(),
            self.argv.first().map(String::as_str),
            &child_var(&self.env, home),
        )
    }

    /// What the agent declared at its latest handshake, if one happened.
    pub fn learned(&self) -> Option<Handshake> {
        self.learned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Starts the agent as an attempt would (`request`'s cwd, environment
    /// and supervision; its prompt and session are not used), says
    /// `initialize`, and ends it: what it declared, remembered as the
    /// adapter's strategy. Bounded by `request.timeout` and at most 30s.
    pub fn handshake(
        &self,
        request: &AttemptRequest,
        cancel: &CancelToken,
    ) -> Result<Handshake, String> {
        let request = AttemptRequest {
            timeout: request.timeout.min(HANDSHAKE_TIMEOUT),
            ..request.clone()
        };
        let report = self.converse(&request, cancel, false);
        match self.learned() {
            Some(handshake) if report.0.handshook => Ok(handshake),
            _ => Err(match report.1.outcome {
                AttemptOutcome::Infra { detail, .. } => detail,
                AttemptOutcome::Replied { .. } => "the agent did not answer initialize".to_owned(),
            }),
        }
    }

    /// The agent's program as the child would find it.
    fn program(&self, request: &AttemptRequest) -> Result<PathBuf, String> {
        let Some(name) = self.argv.first().filter(|name| !name.is_empty()) else {
            return Err(
                "the acp agent has no command; set agents.acp.command, e.g. [gemini, --acp]"
                    .to_owned(),
            );
        };
        let path_var = child_path_var(&self.child_env(request));
        find_executable(Path::new(name), &request.cwd, path_var.as_deref()).ok_or_else(|| {
            format!(
                "acp agent '{name}' is not an executable file or not on PATH; fix agents.acp.command"
            )
        })
    }

    fn child_env(&self, request: &AttemptRequest) -> Vec<(String, String)> {
        let mut env = request.env.clone();
        env.extend(self.env.iter().cloned());
        env
    }

    /// Runs the agent and talks to it: through the prompt when `prompt`,
    /// else the handshake alone.
    fn converse(
        &self,
        request: &AttemptRequest,
        cancel: &CancelToken,
        prompt: bool,
    ) -> (Heard, AttemptReport) {
        let mut report = AttemptReport {
            outcome: infra(InfraKind::SpawnFailed, "not started"),
            session_id: None,
            cost_micro_usd: None,
            session_model: None,
            adapter: NAME,
            cli_version: None,
            cwd: request.cwd.clone(),
            config_home: request.config_home.clone(),
            argv: self.argv.clone(),
            elapsed: Duration::ZERO,
            streams: Streams::default(),
            park: None,
        };
        let program = match self.program(request) {
            Ok(program) => program,
            Err(detail) => {
                report.outcome = infra(InfraKind::MissingBinary, detail);
                return (Heard::default(), report);
            }
        };
        if let Some(outcome) = preflight(request, cancel) {
            report.outcome = outcome;
            return (Heard::default(), report);
        }
        let invocation = Invocation {
            cli_prefixes: &[],
            provider: crate::network::Provider::Any,
            program,
            args: self.argv[1..].to_vec(),
            env: self.child_env(request),
            stdin: Stdin::Open,
            prompt_arg: None,
            session_id: None,
        };
        let script = Script {
            cwd: request.cwd.clone(),
            session: request.session.clone(),
            prompt: prompt.then(|| request.prompt.clone()),
            allowed_tools: self.allowed_tools.clone(),
        };
        let heard = Arc::new(Mutex::new(Heard::default()));
        let finished = run_talking(
            &invocation,
            &request.cwd,
            request.timeout,
            cancel,
            request.supervision.as_ref(),
            request.watch.clone(),
            talk(script, Arc::clone(&heard)),
        );
        let heard = std::mem::take(&mut *heard.lock().unwrap_or_else(PoisonError::into_inner));
        if let Some(declared) = heard.declared {
            *self.learned.lock().unwrap_or_else(PoisonError::into_inner) = Some(Handshake {
                agent: heard.agent.clone(),
                declared,
            });
        }
        match finished {
            Ok(finished) => read_finished(&mut report, request, &finished, &heard),
            Err(error) => {
                report.outcome = infra(
                    InfraKind::SpawnFailed,
                    format!("could not start acp agent '{}': {error}", self.argv[0]),
                );
            }
        }
        (heard, report)
    }
}

impl Adapter for AcpAdapter {
    fn name(&self) -> &'static str {
        NAME
    }

    /// What the agent declared at its latest handshake; before any, none
    /// (a retry then starts cold).
    fn strategy(&self) -> ResumeStrategy {
        self.learned()
            .map_or(ResumeStrategy::Unsupported, |handshake| {
                handshake.declared.strategy()
            })
    }

    fn learns_strategy(&self) -> bool {
        self.learned().is_none()
    }

    fn learn_strategy(&self, request: &AttemptRequest, cancel: &CancelToken) -> Result<(), String> {
        if self.learned().is_some() {
            return Ok(());
        }
        self.handshake(request, cancel).map(|_| ())
    }

    fn run(&self, request: &AttemptRequest, cancel: &CancelToken) -> AttemptReport {
        self.converse(request, cancel, true).1
    }

    /// Its state directories ([`AcpAdapter::own_state`]); an ACP agent gets
    /// no config home of reprise's.
    fn state_paths(&self, _config_home: Option<&Path>, home: Option<&Path>) -> StatePaths {
        StatePaths {
            dirs: self.own_state(home).dirs,
            files: Vec::new(),
        }
    }

    /// The agent's transcript is its stream, kept in the attempt's logs;
    /// reprise knows of no file of its own.
    fn transcript_path(
        &self,
        _session_id: &str,
        _cwd: &Path,
        _config_home: Option<&Path>,
    ) -> Option<PathBuf> {
        None
    }
}

/// What the client is to do in one conversation.
#[derive(Debug, Clone)]
struct Script {
    cwd: PathBuf,
    session: SessionMode,
    /// `None`: the handshake only.
    prompt: Option<String>,
    allowed_tools: Vec<String>,
}

/// What the client heard and did, as the conversation goes.
#[derive(Debug, Default)]
struct Heard {
    handshook: bool,
    agent: Option<String>,
    declared: Option<DeclaredSessions>,
    session_id: Option<String>,
    /// Whether the prompt was sent: message chunks count from then on.
    prompting: bool,
    reply: String,
    stop_reason: Option<StopReason>,
    /// The step that failed and why: an error answer, or a mode the agent
    /// did not declare.
    failure: Option<(InfraKind, String)>,
    /// One line per permission asked and how it was answered.
    permissions: Vec<String>,
    /// The session's cumulative USD cost, in micro-dollars, as last
    /// reported before the prompt (a new session's starts at 0) and after.
    cost_before: Option<u64>,
    cost_after: Option<u64>,
}

/// The lines the client writes to the agent's stdin.
type OutgoingLines = std::pin::Pin<Box<dyn futures::Sink<String, Error = std::io::Error> + Send>>;

/// Where `session/cancel` goes once there is a session.
type CancelSlot = Arc<Mutex<Option<(ConnectionTo<Agent>, SessionId)>>>;

/// The conversation the driver holds with the child.
fn talk(script: Script, heard: Arc<Mutex<Heard>>) -> Talk {
    let (lines, incoming) = unbounded::<std::io::Result<String>>();
    let slot: CancelSlot = Arc::default();
    let interrupt_slot = Arc::clone(&slot);
    Talk {
        heard: Box::new(line_splitter(lines)),
        converse: Box::new(move |stdin| {
            let outgoing = futures::sink::unfold(stdin, |mut stdin, line: String| async move {
                use std::io::Write;
                stdin.write_all(line.as_bytes())?;
                stdin.write_all(b"\n")?;
                stdin.flush()?;
                Ok::<_, std::io::Error>(stdin)
            });
            let outgoing: OutgoingLines = Box::pin(outgoing);
            let transport = Lines::new(outgoing, incoming);
            let outcome =
                futures::executor::block_on(client(script, Arc::clone(&heard), slot, transport));
            if let Err(error) = outcome {
                let mut heard = heard.lock().unwrap_or_else(PoisonError::into_inner);
                if heard.failure.is_none() && heard.stop_reason.is_none() {
                    heard.failure = Some((
                        InfraKind::ApiError,
                        format!("the ACP connection failed: {}", error.message),
                    ));
                }
            }
        }),
        interrupt: Box::new(move || {
            if let Some((connection, session)) = interrupt_slot
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
            {
                let _ = connection.send_notification(CancelNotification::new(session.clone()));
            }
        }),
    }
}

/// Cuts stdout into lines for the client; a line's end is `\n`.
fn line_splitter(lines: UnboundedSender<std::io::Result<String>>) -> impl FnMut(&[u8]) + Send {
    let mut pending: Vec<u8> = Vec::new();
    move |bytes: &[u8]| {
        pending.extend_from_slice(bytes);
        while let Some(at) = memchr::memchr(b'\n', &pending) {
            let line: Vec<u8> = pending.drain(..=at).collect();
            let text = String::from_utf8_lossy(&line[..at])
                .trim_end_matches('\r')
                .to_owned();
            if !text.trim().is_empty() {
                let _ = lines.unbounded_send(Ok(text));
            }
        }
    }
}

/// The client's side of one conversation.
async fn client(
    script: Script,
    heard: Arc<Mutex<Heard>>,
    slot: CancelSlot,
    transport: Lines<
        OutgoingLines,
        futures::channel::mpsc::UnboundedReceiver<std::io::Result<String>>,
    >,
) -> Result<(), agent_client_protocol::Error> {
    let on_update = Arc::clone(&heard);
    let on_permission = Arc::clone(&heard);
    let allowed_tools = script.allowed_tools.clone();
    Client
        .v1()
        .name("reprise")
        .on_receive_notification(
            async move |notification: SessionNotification, _connection| {
                let mut heard = on_update.lock().unwrap_or_else(PoisonError::into_inner);
                hear(&mut heard, notification.update);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |request: RequestPermissionRequest, responder, _connection| {
                let (response, line) = answer_permission(&allowed_tools, &request);
                on_permission
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .permissions
                    .push(line);
                responder.respond(response)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(transport, async move |connection: ConnectionTo<Agent>| {
            run_script(&script, &heard, &slot, &connection).await;
            Ok(())
        })
        .await
}

/// The requests of one conversation, in order; a failure stops it,
/// written into `heard`.
async fn run_script(
    script: &Script,
    heard: &Arc<Mutex<Heard>>,
    slot: &CancelSlot,
    connection: &ConnectionTo<Agent>,
) {
    let fail = |kind: InfraKind, detail: String| {
        heard.lock().unwrap_or_else(PoisonError::into_inner).failure = Some((kind, detail));
    };
    let initialize = InitializeRequest::new(ProtocolVersion::V1)
        .client_capabilities(ClientCapabilities::default())
        .client_info(Implementation::new("reprise", env!("CARGO_PKG_VERSION")));
    let declared = match connection.send_request(initialize).block_task().await {
        Ok(response) => {
            let declared = declared_of(&response);
            let mut heard = heard.lock().unwrap_or_else(PoisonError::into_inner);
            heard.handshook = true;
            heard.declared = Some(declared);
            heard.agent = response
                .agent_info
                .map(|info| format!("{} {}", info.name, info.version));
            declared
        }
        Err(error) => return fail(kind_of(&error), said("initialize", &error)),
    };
    let Some(prompt) = &script.prompt else {
        return;
    };
    let session = match open_session(script, declared, connection).await {
        Ok(session) => session,
        Err((kind, detail)) => return fail(kind, detail),
    };
    {
        let mut heard = heard.lock().unwrap_or_else(PoisonError::into_inner);
        heard.session_id = Some(session.0.to_string());
        if matches!(script.session, SessionMode::New { .. }) && heard.cost_before.is_none() {
            heard.cost_before = Some(0);
        }
        heard.prompting = true;
    }
    *slot.lock().unwrap_or_else(PoisonError::into_inner) =
        Some((connection.clone(), session.clone()));
    let request = PromptRequest::new(
        session,
        vec![ContentBlock::Text(TextContent::new(prompt.clone()))],
    );
    match connection.send_request(request).block_task().await {
        Ok(response) => {
            heard
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .stop_reason = Some(response.stop_reason);
        }
        Err(error) => fail(kind_of(&error), said("session/prompt", &error)),
    }
}

/// The session the attempt prompts in: new, the same one continued, or a
/// fork of it, as the agent declared it can.
async fn open_session(
    script: &Script,
    declared: DeclaredSessions,
    connection: &ConnectionTo<Agent>,
) -> Result<SessionId, (InfraKind, String)> {
    let cwd = script.cwd.clone();
    let gone = |method: &str, error: &agent_client_protocol::Error| {
        (InfraKind::SessionUnavailable, said(method, error))
    };
    match &script.session {
        SessionMode::New { .. } => connection
            .send_request(NewSessionRequest::new(cwd))
            .block_task()
            .await
            .map(|response| response.session_id)
            .map_err(|error| (kind_of(&error), said("session/new", &error))),
        SessionMode::Resume { session_id } if declared.continues_by_resume() => connection
            .send_request(ResumeSessionRequest::new(session_id.clone(), cwd))
            .block_task()
            .await
            .map(|_| SessionId::new(session_id.clone()))
            .map_err(|error| gone("session/resume", &error)),
        SessionMode::Resume { session_id } if declared.load => connection
            .send_request(LoadSessionRequest::new(session_id.clone(), cwd))
            .block_task()
            .await
            .map(|_| SessionId::new(session_id.clone()))
            .map_err(|error| gone("session/load", &error)),
        SessionMode::Resume { session_id } => Err((
            InfraKind::SessionUnavailable,
            format!(
                "the acp agent declares neither session/resume nor loadSession: session {session_id} cannot be continued; retry cold"
            ),
        )),
        SessionMode::Fork { from, .. } if declared.strategy() == ResumeStrategy::NativeForkable => {
            connection
                .send_request(ForkSessionRequest::new(from.clone(), cwd))
                .block_task()
                .await
                .map(|response| response.session_id)
                .map_err(|error| gone("session/fork", &error))
        }
        SessionMode::Fork { from, .. } => Err((
            InfraKind::ApiError,
            format!(
                "the acp agent does not declare session/fork (fork unsupported): session {from} cannot be forked; retry warm or cold"
            ),
        )),
    }
}

/// What the agent's `initialize` answer declares about sessions.
fn declared_of(response: &InitializeResponse) -> DeclaredSessions {
    let capabilities = &response.agent_capabilities;
    DeclaredSessions {
        load: capabilities.load_session,
        resume: capabilities.session_capabilities.resume.is_some(),
        fork: capabilities.session_capabilities.fork.is_some(),
    }
}

/// One streamed update, taken into what the attempt heard.
fn hear(heard: &mut Heard, update: SessionUpdate) {
    match update {
        SessionUpdate::AgentMessageChunk(chunk) if heard.prompting => {
            if let ContentBlock::Text(text) = chunk.content {
                heard.reply.push_str(&text.text);
            }
        }
        SessionUpdate::UsageUpdate(usage) => {
            let Some(cost) = usage.cost.filter(|cost| cost.currency == "USD") else {
                return;
            };
            let Some(micro) = parse_usd_micro(&cost.amount.to_string()) else {
                return;
            };
            if heard.prompting {
                heard.cost_after = Some(micro);
            } else {
                heard.cost_before = Some(micro);
            }
        }
        _ => {}
    }
}

/// The answer to a permission request under `allowed_tools`, and the line
/// that records it.
fn answer_permission(
    allowed_tools: &[String],
    request: &RequestPermissionRequest,
) -> (RequestPermissionResponse, String) {
    let fields = &request.tool_call.fields;
    let kind = fields
        .kind
        .as_ref()
        .and_then(|kind| serde_json::to_value(kind).ok())
        .and_then(|value| value.as_str().map(str::to_owned))
        .unwrap_or_default();
    let name = fields.name.clone().unwrap_or_default();
    let title = fields.title.clone().unwrap_or_default();
    let entry = allowing_entry(allowed_tools, &[&name, &kind, &title]);
    let wanted: &[PermissionOptionKind] = match entry {
        Some(_) => &[
            PermissionOptionKind::AllowOnce,
            PermissionOptionKind::AllowAlways,
        ],
        None => &[
            PermissionOptionKind::RejectOnce,
            PermissionOptionKind::RejectAlways,
        ],
    };
    let option = wanted
        .iter()
        .find_map(|wanted| request.options.iter().find(|option| option.kind == *wanted));
    let tool = format!(
        "tool call {} (name {name:?}, kind {kind:?}, title {:?})",
        request.tool_call.tool_call_id.0,
        one_line(&title, 120)
    );
    let (outcome, answer) = match (option, entry) {
        (Some(option), Some(entry)) => (
            RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(
                option.option_id.clone(),
            )),
            format!(
                "allowed ({}), as agents.acp.allowed_tools lists {entry:?}",
                option.option_id.0
            ),
        ),
        (Some(option), None) => (
            RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(
                option.option_id.clone(),
            )),
            format!(
                "rejected ({}): agents.acp.allowed_tools does not list it",
                option.option_id.0
            ),
        ),
        (None, _) => (
            RequestPermissionOutcome::Cancelled,
            "cancelled: the agent offered no option of that kind".to_owned(),
        ),
    };
    (
        RequestPermissionResponse::new(outcome),
        format!("reprise: permission for {tool}: {answer}"),
    )
}

/// The infrastructure kind an error answer names, from its words.
fn kind_of(error: &agent_client_protocol::Error) -> InfraKind {
    let data = error
        .data
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    kind_from_error_text(&format!("{} {data}", error.message)).unwrap_or(InfraKind::ApiError)
}

fn said(method: &str, error: &agent_client_protocol::Error) -> String {
    let data = error
        .data
        .as_ref()
        .map(|data| format!(" {data}"))
        .unwrap_or_default();
    one_line(
        &format!(
            "acp agent answered {method} with error {}: {}{data}",
            error.code, error.message
        ),
        300,
    )
}

/// What a finished conversation comes to, written into `report`.
fn read_finished(
    report: &mut AttemptReport,
    request: &AttemptRequest,
    finished: &Finished,
    heard: &Heard,
) {
    report.elapsed = finished.elapsed;
    let mut stderr = finished.stderr.clone();
    for line in &heard.permissions {
        if !stderr.is_empty() && !stderr.ends_with(b"\n") {
            stderr.push(b'\n');
        }
        stderr.extend_from_slice(line.as_bytes());
        stderr.push(b'\n');
    }
    report.streams = Streams::kept(&finished.stdout, &stderr);
    report.session_id.clone_from(&heard.session_id);
    report.cli_version.clone_from(&heard.agent);
    report.cost_micro_usd = match (heard.cost_before, heard.cost_after) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before)),
        _ => None,
    };
    let stdout = String::from_utf8_lossy(&finished.stdout);
    let stderr = String::from_utf8_lossy(&finished.stderr);
    report.outcome = match finished.end {
        End::TimedOut => infra(
            InfraKind::Timeout,
            format!(
                "acp agent did not finish within {}; it was sent session/cancel and its process group was killed",
                describe_duration(request.timeout)
            ),
        ),
        End::Cancelled => infra(
            InfraKind::Cancelled,
            "cancelled; the acp agent was sent session/cancel and its process group was killed",
        ),
        End::OutputLimit | End::Idle => watch_outcome(finished.end, "acp agent", &request.watch),
        End::ParkIdle => {
            let (outcome, park) = park_idle("acp agent", &request.watch, &stdout, &stderr);
            report.park = Some(park);
            outcome
        }
        End::Exited | End::Talked => enforce_budget(
            outcome_of(heard, finished),
            report.cost_micro_usd,
            request.budget_micro_usd,
        ),
    };
}

/// The outcome of a conversation that ended by itself.
fn outcome_of(heard: &Heard, finished: &Finished) -> AttemptOutcome {
    if let Some((kind, detail)) = &heard.failure {
        return infra(*kind, detail.clone());
    }
    match heard.stop_reason {
        // The turn ended, or hit the agent's own bound on it: a reply for
        // the gates to judge.
        Some(StopReason::EndTurn | StopReason::MaxTokens | StopReason::MaxTurnRequests) => {
            AttemptOutcome::Replied {
                exit_code: 0,
                reply: heard.reply.clone(),
            }
        }
        Some(StopReason::Refusal) => AttemptOutcome::Replied {
            exit_code: 1,
            reply: heard.reply.clone(),
        },
        Some(StopReason::Cancelled) => infra(
            InfraKind::Cancelled,
            "the acp agent ended its turn as cancelled",
        ),
        Some(other) => infra(
            InfraKind::ApiError,
            format!("the acp agent ended its turn with stop reason {other:?}"),
        ),
        None if heard.handshook => infra(
            InfraKind::ApiError,
            format!(
                "the acp agent exited (code {}) before it answered the prompt: {}",
                finished.exit_code,
                crate::outcome::stderr_summary(&String::from_utf8_lossy(&finished.stderr))
            ),
        ),
        None => infra(
            InfraKind::ApiError,
            format!(
                "the acp agent exited (code {}) without answering initialize: {}",
                finished.exit_code,
                crate::outcome::stderr_summary(&String::from_utf8_lossy(&finished.stderr))
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::tests::request;

    /// An adapter running the scripted peer (`testdata/acp/peer.js`) on
    /// node, declaring `declare` and asking for a tool of `kind`.
    fn peer(declare: &str, kind: &str, allowed: &[&str]) -> AcpAdapter {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/acp/peer.js");
        AcpAdapter::new(vec!["node".into(), script.display().to_string()])
            .with_env(vec![
                ("PEER_DECLARE".into(), declare.into()),
                ("PEER_TOOL_KIND".into(), kind.into()),
            ])
            .with_allowed_tools(allowed.iter().map(|tool| (*tool).to_owned()).collect())
    }

    fn replied(report: &AttemptReport) -> &str {
        match &report.outcome {
            AttemptOutcome::Replied {
                exit_code: 0,
                reply,
            } => reply,
            other => panic!("expected a reply: {other:?} {report:?}"),
        }
    }

    #[test]
    fn a_new_session_is_prompted_and_a_listed_tool_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let adapter = peer("{}", "edit", &["edit"]);
        let report = adapter.run(
            &request(SessionMode::New { session_id: None }, dir.path()),
            &CancelToken::new(),
        );
        assert_eq!(replied(&report), "opened by new; permission yes");
        assert_eq!(report.session_id.as_deref(), Some("s-new"));
        assert_eq!(report.cli_version.as_deref(), Some("peer 1.0"));
        // The session's cost went from nothing to $0.375 over the prompt.
        assert_eq!(report.cost_micro_usd, Some(375_000));
        assert!(
            report.streams.stderr.contains(
                "reprise: permission for tool call call-1 (name \"\", kind \"edit\", title \"Writing to a.txt\"): allowed (yes), as agents.acp.allowed_tools lists \"edit\""
            ),
            "{}",
            report.streams.stderr
        );
        assert!(report.streams.stdout.contains("session/request_permission"));
        // It declared nothing about sessions: no retry continues them.
        assert_eq!(adapter.strategy(), ResumeStrategy::Unsupported);
    }

    #[test]
    fn a_tool_not_listed_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let report = peer("{}", "execute", &["edit"]).run(
            &request(SessionMode::New { session_id: None }, dir.path()),
            &CancelToken::new(),
        );
        assert_eq!(replied(&report), "opened by new; permission no");
        assert!(
            report
                .streams
                .stderr
                .contains("rejected (no): agents.acp.allowed_tools does not list it"),
            "{}",
            report.streams.stderr
        );
    }

    #[test]
    fn a_warm_retry_resumes_where_declared_else_loads_and_the_replay_is_not_the_reply() {
        let dir = tempfile::tempdir().unwrap();
        let warm = SessionMode::Resume {
            session_id: "s-old".into(),
        };
        for (declare, method, strategy) in [
            (
                r#"{"loadSession": true, "sessionCapabilities": {"resume": {}}}"#,
                "session/resume",
                ResumeStrategy::Native,
            ),
            (
                r#"{"loadSession": true}"#,
                "session/load",
                ResumeStrategy::Native,
            ),
        ] {
            let adapter = peer(declare, "edit", &["edit"]);
            let report = adapter.run(&request(warm.clone(), dir.path()), &CancelToken::new());
            assert_eq!(
                replied(&report),
                format!("opened by {method}; permission yes")
            );
            assert_eq!(report.session_id.as_deref(), Some("s-old"));
            // $0.25 before the prompt (reported while loading), $0.375 after.
            assert_eq!(report.cost_micro_usd, Some(125_000));
            assert_eq!(adapter.strategy(), strategy);
        }
        // An agent that declares neither cannot be continued.
        let report = peer("{}", "edit", &[]).run(&request(warm, dir.path()), &CancelToken::new());
        assert!(
            matches!(
                &report.outcome,
                AttemptOutcome::Infra { kind: InfraKind::SessionUnavailable, detail } if detail.contains("retry cold")
            ),
            "{report:?}"
        );
    }

    #[test]
    fn a_fork_runs_only_where_declared() {
        let dir = tempfile::tempdir().unwrap();
        let fork = SessionMode::Fork {
            from: "s-old".into(),
            new_session_id: None,
        };
        let adapter = peer(
            r#"{"loadSession": true, "sessionCapabilities": {"fork": {}}}"#,
            "edit",
            &["edit"],
        );
        let report = adapter.run(&request(fork.clone(), dir.path()), &CancelToken::new());
        assert_eq!(
            replied(&report),
            "opened by session/fork of s-old; permission yes"
        );
        assert_eq!(report.session_id.as_deref(), Some("s-fork"));
        // No cost of the forked session was heard before the prompt.
        assert_eq!(report.cost_micro_usd, None);
        assert_eq!(adapter.strategy(), ResumeStrategy::NativeForkable);
        let report = peer(r#"{"loadSession": true}"#, "edit", &[])
            .run(&request(fork, dir.path()), &CancelToken::new());
        assert!(
            matches!(
                &report.outcome,
                AttemptOutcome::Infra { kind: InfraKind::ApiError, detail } if detail.contains("fork unsupported")
            ),
            "{report:?}"
        );
    }

    #[test]
    fn a_handshake_alone_learns_the_strategy() {
        let dir = tempfile::tempdir().unwrap();
        let adapter = peer(
            r#"{"sessionCapabilities": {"resume": {}, "fork": {}}}"#,
            "edit",
            &[],
        );
        assert_eq!(adapter.strategy(), ResumeStrategy::Unsupported);
        assert!(adapter.learns_strategy());
        let said = adapter
            .handshake(
                &request(SessionMode::New { session_id: None }, dir.path()),
                &CancelToken::new(),
            )
            .expect("a handshake");
        assert_eq!(said.agent.as_deref(), Some("peer 1.0"));
        assert_eq!(
            said.describe(),
            "retry capability fork (warm by session/resume, fork by session/fork)"
        );
        assert_eq!(adapter.strategy(), ResumeStrategy::NativeForkable);
        assert!(!adapter.learns_strategy());
    }

    #[test]
    fn a_timed_out_prompt_is_cancelled_then_killed() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("peer.log");
        let adapter = peer("{}", "edit", &[]).with_env(vec![
            ("PEER_HANG".into(), "1".into()),
            ("PEER_LOG".into(), log.display().to_string()),
        ]);
        let mut hung = request(SessionMode::New { session_id: None }, dir.path());
        hung.timeout = Duration::from_secs(3);
        let report = adapter.run(&hung, &CancelToken::new());
        assert!(
            matches!(
                &report.outcome,
                AttemptOutcome::Infra { kind: InfraKind::Timeout, detail } if detail.contains("session/cancel")
            ),
            "{report:?}"
        );
        let heard = fs_read(&log);
        assert_eq!(
            heard.lines().collect::<Vec<_>>(),
            [
                "initialize",
                "session/new",
                "session/prompt",
                "session/cancel"
            ],
        );
        assert!(report.elapsed < Duration::from_secs(20), "{report:?}");
    }

    #[test]
    fn a_missing_program_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let report = AcpAdapter::new(vec!["no-such-acp-agent".into()]).run(
            &request(SessionMode::New { session_id: None }, dir.path()),
            &CancelToken::new(),
        );
        assert!(
            matches!(
                &report.outcome,
                AttemptOutcome::Infra { kind: InfraKind::MissingBinary, detail } if detail.contains("fix agents.acp.command")
            ),
            "{report:?}"
        );
    }

    fn fs_read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_default()
    }

    #[test]
    fn its_state_paths_are_the_plan_s_dirs_under_the_child_s_home_else_gemini_s() {
        let made = Path::new("/runs/r/homes/t");
        let declared = AcpAdapter::new(vec!["node".into(), "peer.js".into()])
            .with_state_dirs(Some(vec![AgentStateDir::InHome(PathBuf::from(".peer"))]));
        assert_eq!(
            declared.state_paths(Some(Path::new("/ignored")), Some(made)),
            StatePaths {
                dirs: vec![made.join(".peer")],
                files: Vec::new(),
            }
        );
        let plan_home =
            AcpAdapter::new(vec!["/opt/bin/gemini".into(), "--acp".into()]).with_env(vec![
                ("HOME".into(), "/plan-home".into()),
                // Empty is unset, whatever the test runner's own says.
                ("GEMINI_CLI_HOME".into(), String::new()),
            ]);
        assert_eq!(
            plan_home.state_paths(None, Some(made)).dirs,
            [PathBuf::from("/plan-home/.gemini")],
            "the plan's HOME is the child's"
        );
        assert_eq!(
            AcpAdapter::new(vec!["node".into()])
                .state_paths(None, Some(made))
                .dirs,
            Vec::<PathBuf>::new()
        );
    }
}

//! Where a task's evidence goes besides its journal. On a host that holds
//! the audit key (a local run, a fleet's coordinator) the spine and the
//! audit chain are written beside the journal rows that call for them. A
//! fleet worker holds no key: it writes its own copy of the journal only,
//! and ships each row's exact bytes (and what only the key's holder can
//! write, as a typed intent) to an outbox; the coordinator's `ingest`
//! appends the same bytes to its journal and writes the spine and audit
//! rows from them with the same functions a local run uses.

use std::sync::mpsc::Sender;

use reprise_core::TaskKey;
use reprise_core::digest::Digest;
use reprise_core::record::Head;
use reprise_core::retry::DecisionRecord;
use reprise_core::rows::{
    AgentCheckpointBound, CheckpointRestored, DecisionBinding, Resource, RestoredBinding,
    ResumeBody, RetryDecision, RowBody, SuspendBody, body_of,
};
use reprise_store::audit::{AuditLog, seal_journal_after};
use reprise_store::journal::{Journal, RowTap, Spine};
use reprise_store::key::KeyFile;
use reprise_store::state::{StateDir, now_rfc3339};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{EngineError, Result};

/// What a worker ships for one task, in the order it wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "shipment", rename_all = "snake_case")]
pub enum Shipment {
    /// A journal row: the line as stored, newline included.
    Row { line: String },
    /// A record only the holder of the audit key writes.
    Intent { intent: AuditIntent },
    /// A session's transcript as the worker preserved it after an attempt,
    /// so another host (a takeover, a park's resume on the coordinator)
    /// can resume the session warm. Evidence of nothing: the journal's
    /// rows say which session an attempt ran in.
    Session(ShippedSession),
    /// A park's agent checkpoint (`checkpoint.json`), whose own hash the
    /// `task.agent_checkpoint` row shipped before it binds.
    AgentCheckpoint {
        checkpoint: reprise_store::agent_checkpoint::AgentCheckpoint,
    },
    /// What the agent asked when it parked, kept beside the chain (its
    /// `task.suspend` row holds the text's hash).
    AgentText { run_id: String, text: String },
}

/// A session's preserved transcript, travelling between hosts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShippedSession {
    /// The adapter whose CLI keeps the session (`claude`, `sim`, ...).
    pub adapter: String,
    pub session_id: String,
    /// The transcript's bytes (the CLIs write UTF-8 JSON lines; one that is
    /// not UTF-8 does not travel).
    pub transcript: String,
}

/// The largest transcript that travels; a longer one stays on its host
/// and a retry elsewhere goes cold (`session_on_other_host`).
pub(crate) const SHIPPED_TRANSCRIPT_MAX_BYTES: usize = 64 * 1024 * 1024;

impl ShippedSession {
    /// Whether its names can be used as file names (they arrive from
    /// another host): an adapter reprise has, and a session id fit to name
    /// a file.
    pub fn well_named(&self) -> bool {
        reprise_core::plan::AgentKind::ALL
            .iter()
            .any(|kind| kind.as_str() == self.adapter)
            && reprise_agents::is_file_safe_session_id(&self.session_id)
    }

    /// Keeps the transcript where this host preserves its own
    /// (`sessions/<adapter>/<id>.jsonl`), so a warm retry here restores it
    /// as it would one of its own. An ill-named or oversized one is
    /// refused.
    pub fn keep(&self, state: &StateDir) -> Result<()> {
        if !self.well_named() || self.transcript.len() > SHIPPED_TRANSCRIPT_MAX_BYTES {
            return Err(EngineError::ShippedRow {
                task: self.session_id.clone(),
                reason: format!(
                    "a shipped transcript of adapter {:?} session {:?} is ill-named or larger than {SHIPPED_TRANSCRIPT_MAX_BYTES} bytes",
                    self.adapter, self.session_id
                ),
            });
        }
        let dir = state.sessions_dir(&self.adapter);
        std::fs::create_dir_all(&dir).map_err(|source| reprise_store::StoreError::Io {
            path: dir.clone(),
            source,
        })?;
        reprise_store::write_atomic(
            &dir.join(format!("{}.jsonl", self.session_id)),
            self.transcript.as_bytes(),
            0o600,
        )?;
        Ok(())
    }

    /// The copy this host preserved of `adapter`'s session `session_id`,
    /// to travel with an order; `None` when there is none it can send.
    pub fn preserved(state: &StateDir, adapter: &str, session_id: &str) -> Option<Self> {
        let session = Self {
            adapter: adapter.to_owned(),
            session_id: session_id.to_owned(),
            transcript: String::new(),
        };
        if !session.well_named() {
            return None;
        }
        let path = state
            .sessions_dir(adapter)
            .join(format!("{session_id}.jsonl"));
        let bytes = reprise_store::read_no_follow(&path).ok()??;
        if bytes.len() > SHIPPED_TRANSCRIPT_MAX_BYTES {
            return None;
        }
        Some(Self {
            transcript: String::from_utf8(bytes).ok()?,
            ..session
        })
    }
}

/// What a worker asks the coordinator to sign, where the rows alone do not
/// say it. (A retry decision's spine row and binding, a rollback's binding
/// and a park's receipt follow from their journal rows and travel as
/// nothing more.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditIntent {
    /// Seal the journal's head: the task ended and its journal is whole.
    Seal,
    /// A resource the park at `park` gave back on the worker (already
    /// done), recorded against that park's receipt.
    Release {
        park: Digest,
        resource: Resource,
        detail: Value,
    },
}

/// Where a worker's shipments go: the transport's side of its task, and
/// the git remote the trees it leaves go to.
#[derive(Debug, Clone)]
pub struct Outbox {
    sender: Sender<Shipment>,
    remote: Option<String>,
}

impl Outbox {
    pub fn new(sender: Sender<Shipment>) -> Self {
        Self {
            sender,
            remote: None,
        }
    }

    /// The same outbox, with trees going to `remote`.
    pub(crate) fn with_remote(self, remote: Option<String>) -> Self {
        Self { remote, ..self }
    }

    fn ship(&self, shipment: Shipment) -> Result<()> {
        self.sender
            .send(shipment)
            .map_err(|_| EngineError::OutboxClosed)
    }

    /// A tap for the task's journal: each appended row, shipped.
    fn tap(&self) -> RowTap {
        let sender = self.sender.clone();
        RowTap::new(move |line| {
            // A closed outbox is caught at the next intent or the task's end:
            // the transport then reports the task lost.
            let _ = sender.send(Shipment::Row {
                line: String::from_utf8_lossy(line).into_owned(),
            });
        })
    }
}

/// Who signs a task's evidence: this host, with the key, or the
/// coordinator a worker ships to.
#[derive(Debug, Clone)]
pub(crate) enum Signing {
    Key(KeyFile),
    Worker(Outbox),
}

impl Signing {
    /// The key, where this host holds one.
    pub(crate) fn key(&self) -> Option<&KeyFile> {
        match self {
            Self::Key(key) => Some(key),
            Self::Worker(_) => None,
        }
    }

    /// The git remote a worker's trees go to; none on a host with the key.
    pub(crate) fn remote(&self) -> Option<&str> {
        match self {
            Self::Key(_) => None,
            Self::Worker(outbox) => outbox.remote.as_deref(),
        }
    }

    /// Sends a preserved transcript on to the coordinator, from a worker;
    /// a host with the key keeps its own and sends nothing.
    pub(crate) fn ship_session(&self, session: ShippedSession) {
        if let Self::Worker(outbox) = self {
            // A closed outbox is caught at the task's next intent or end.
            let _ = outbox.ship(Shipment::Session(session));
        }
    }

    /// The task's journal and its signer, open: a worker's journal ships
    /// every row it appends.
    pub(crate) fn open(&self, state: &StateDir, task: &TaskKey) -> Result<(Journal, Signer)> {
        let mut journal = Journal::open(state, task)?;
        let signer = match self {
            Self::Key(key) => Signer::Local {
                spine: Spine::open(state, task)?,
                audit: AuditLog::open(state, key.clone())?,
            },
            Self::Worker(outbox) => {
                journal.tap(outbox.tap());
                Signer::Worker(outbox.clone())
            }
        };
        Ok((journal, signer))
    }
}

/// The spine and audit chain beside a task's journal, or the outbox that
/// carries what they would record to the coordinator.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one per running task, and the local variant is the common one"
)]
pub(crate) enum Signer {
    Local { spine: Spine, audit: AuditLog },
    Worker(Outbox),
}

impl Signer {
    /// Checks, before a row that calls for them is appended, that the spine
    /// and the audit chain would take theirs: a decision is then in all
    /// three chains or (with a failure here) in none.
    pub(crate) fn ready(&mut self) -> Result<()> {
        if let Self::Local { spine, audit } = self {
            spine.ready()?;
            audit.ready()?;
        }
        Ok(())
    }

    /// Writes what `kind`'s row at `head` calls for in the spine and the
    /// audit chain. A worker writes nothing: its journal's tap shipped the
    /// row, and the coordinator derives the same records from it.
    pub(crate) fn countersign(
        &mut self,
        task: &TaskKey,
        kind: &str,
        body: &Value,
        head: Head,
    ) -> Result<()> {
        match self {
            Self::Local { spine, audit } => countersign(spine, audit, task, kind, body, head),
            Self::Worker(_) => Ok(()),
        }
    }

    /// Seals the journal's head (here, or by asking the coordinator to).
    pub(crate) fn seal(
        &mut self,
        state: &StateDir,
        task: &TaskKey,
        prior_seals: &[Head],
    ) -> Result<()> {
        match self {
            Self::Local { audit, .. } => {
                seal_journal_after(state, audit, task, &now_rfc3339(), prior_seals)?;
                Ok(())
            }
            Self::Worker(outbox) => outbox.ship(Shipment::Intent {
                intent: AuditIntent::Seal,
            }),
        }
    }

    /// The receipt of the park whose `task.suspend` row is at `suspend`:
    /// written here, or (`None`) by the coordinator when it takes the row.
    pub(crate) fn park_receipt(
        &mut self,
        task: &TaskKey,
        body: &SuspendBody,
        suspend: Head,
    ) -> Result<Option<Digest>> {
        match self {
            Self::Local { audit, .. } => Ok(Some(crate::park::write_receipt(
                audit, task, body, suspend,
            )?)),
            Self::Worker(_) => Ok(None),
        }
    }

    /// Records a resource the park at `park` gave back (already done),
    /// against its receipt: here, or by asking the coordinator to.
    pub(crate) fn park_release(
        &mut self,
        (task, run_id): (&TaskKey, &str),
        (park, receipt): (Digest, Option<Digest>),
        resource: Resource,
        detail: Value,
    ) -> Result<()> {
        match (self, receipt) {
            (Self::Local { audit, .. }, Some(receipt)) => {
                crate::park::write_release(audit, task, run_id, park, receipt, resource, detail)
            }
            (Self::Local { .. }, None) => Err(EngineError::Park(format!(
                "the park of {task} has no receipt to record its release against"
            ))),
            (Self::Worker(outbox), _) => outbox.ship(Shipment::Intent {
                intent: AuditIntent::Release {
                    park,
                    resource,
                    detail,
                },
            }),
        }
    }

    /// Sends what a park keeps beside the chain (its agent checkpoint, the
    /// agent's question) on to the coordinator, from a worker.
    pub(crate) fn ship_kept(&mut self, shipment: Shipment) -> Result<()> {
        match self {
            Self::Local { .. } => Ok(()),
            Self::Worker(outbox) => outbox.ship(shipment),
        }
    }

    /// The audit chain where this host holds it.
    pub(crate) fn local_audit(&mut self) -> Option<&mut AuditLog> {
        match self {
            Self::Local { audit, .. } => Some(audit),
            Self::Worker(_) => None,
        }
    }
}

/// The spine and audit records a journal row of `kind` at `head` calls for:
/// a retry decision's spine row and binding, a rollback's binding. The one
/// place they are derived, for a local run and for the coordinator's ingest.
fn countersign(
    spine: &mut Spine,
    audit: &mut AuditLog,
    task: &TaskKey,
    kind: &str,
    body: &Value,
    head: Head,
) -> Result<()> {
    if let Some(decision) = body_of::<RetryDecision>(kind, body) {
        bind_decision(spine, audit, task, &decision.decision, head)?;
    } else if let Some(restored) = body_of::<CheckpointRestored>(kind, body) {
        bind_restored(audit, task, &restored, head)?;
    } else if let Some(suspend) = body_of::<SuspendBody>(kind, body) {
        // A local park writes its receipt itself, between its row and its
        // agent checkpoint; only a worker's park reaches here, by ingest.
        crate::park::write_receipt(audit, task, &suspend, head)?;
    }
    Ok(())
}

/// A decision's spine seal (at its journal row's seq), then the audit row
/// binding both.
fn bind_decision(
    spine: &mut Spine,
    audit: &mut AuditLog,
    task: &TaskKey,
    record: &DecisionRecord,
    head: Head,
) -> Result<()> {
    let spine_head = spine.append(RetryDecision::KIND.as_str(), &record.to_value(), head.seq)?;
    // The binding names the plan too: task ids are unique only per plan, and
    // verification matches a spine to the bindings of its own plan's task.
    let binding = DecisionBinding::of(&task.plan, record, head.digest, spine_head.digest)?;
    audit.append_row(&now_rfc3339(), &binding)?;
    Ok(())
}

/// A rollback's binding in the audit chain.
pub(crate) fn bind_restored(
    audit: &mut AuditLog,
    task: &TaskKey,
    restored: &CheckpointRestored,
    head: Head,
) -> Result<()> {
    audit.append_row(
        &now_rfc3339(),
        &RestoredBinding {
            plan: task.plan.clone(),
            task_id: task.task.clone(),
            checkpoint: restored.checkpoint.clone(),
            journal_seq: head.seq,
            journal_hash: head.digest,
            workspace_hash: restored.workspace_hash,
        },
    )?;
    Ok(())
}

/// What one `ingest` appended and signed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ingested {
    pub rows: u64,
    pub sealed: bool,
    /// Rows the journal already held, byte for byte, at their `seq`: a
    /// continued coordinator reads again what its workers shipped while it
    /// was down, and takes each row once.
    pub already_held: u64,
    /// Transcripts kept as this host's preserved copies.
    pub sessions: u64,
}

/// On the coordinator: appends what a worker shipped for `task` to the
/// task's journal byte for byte (a row that does not link to the journal's
/// head, or whose hash is wrong, is refused, and nothing after it is
/// taken), and writes the spine and audit records and the seal as a local
/// run does. `prior_seals` are the audit chain's seals of the task before
/// this run (see `seal_journal_after`).
///
/// Taking shipments again is a no-op: a row the journal already holds at
/// its `seq` with the same bytes is skipped (with other bytes it is
/// refused), and a seal of a head already sealed is not made twice.
pub fn ingest(
    state: &StateDir,
    key: &KeyFile,
    task: &TaskKey,
    prior_seals: &[Head],
    shipments: &[Shipment],
) -> Result<Ingested> {
    let (mut journal, mut signer) = Signing::Key(key.clone()).open(state, task)?;
    let mut ingested = Ingested::default();
    let mut held: Option<Vec<Vec<u8>>> = None;
    let mut head = journal.head()?;
    for shipment in shipments {
        match shipment {
            Shipment::Row { line } => {
                let row: reprise_core::record::JournalRow =
                    serde_json::from_str(line).map_err(|err| EngineError::ShippedRow {
                        task: task.to_string(),
                        reason: err.to_string(),
                    })?;
                if head.is_some_and(|head| row.seq <= head.seq) {
                    let lines = match &mut held {
                        Some(lines) => lines,
                        None => held.insert(journal_lines(journal.path())?),
                    };
                    if lines.get(row.seq as usize).map(Vec::as_slice) != Some(line.as_bytes()) {
                        return Err(EngineError::ShippedRow {
                            task: task.to_string(),
                            reason: format!(
                                "row {} differs from the row the journal holds there",
                                row.seq
                            ),
                        });
                    }
                    ingested.already_held += 1;
                    continue;
                }
                let resume = body_of::<ResumeBody>(&row.kind, &row.body);
                if let Some(resume) = &resume {
                    check_shipped_resume(state, key, task, resume)?;
                }
                let appended = journal.append_shipped(line.as_bytes())?;
                head = Some(appended);
                signer.countersign(task, &row.kind, &row.body, appended)?;
                if let (Some(resume), Some(audit)) = (&resume, signer.local_audit()) {
                    let receipt =
                        crate::task::bind_resume_in_audit(audit, task, resume, appended.digest)?;
                    crate::task::mark_resumed(state, task, resume.park, receipt)?;
                }
                ingested.rows += 1;
            }
            Shipment::Intent {
                intent: AuditIntent::Seal,
            } => {
                if head.is_some_and(|head| prior_seals.contains(&head)) {
                    continue;
                }
                signer.seal(state, task, prior_seals)?;
                ingested.sealed = true;
            }
            Shipment::Session(session) => {
                session.keep(state)?;
                ingested.sessions += 1;
            }
            Shipment::Intent {
                intent:
                    AuditIntent::Release {
                        park,
                        resource,
                        detail,
                    },
            } => {
                let audit = signer
                    .local_audit()
                    .expect("ingest signs with the key it was given");
                release_shipped((state, key, audit), task, (*park, *resource), detail)?;
            }
            Shipment::AgentCheckpoint { checkpoint } => {
                keep_agent_checkpoint(state, &journal, task, checkpoint)?;
            }
            Shipment::AgentText { run_id, text } => {
                reprise_store::replies::keep_agent_text(state, run_id, &task.task, text)?;
            }
        }
    }
    Ok(ingested)
}

/// A worker's resume, checked where the key is before its row is taken:
/// the park it names is the task's latest, unsettled, with the receipt it
/// names, and its approval (if any) is the one the chain binds
/// (`resume::recheck_before_resume`, as a local resume checks).
fn check_shipped_resume(
    state: &StateDir,
    key: &KeyFile,
    task: &TaskKey,
    resume: &ResumeBody,
) -> Result<()> {
    let refused = |reason: String| EngineError::ShippedRow {
        task: task.to_string(),
        reason,
    };
    let mut point = crate::resume::latest_park_at(state, key, task, resume.park)?
        .filter(|point| point.receipt == Some(resume.receipt))
        .ok_or_else(|| {
            refused(format!(
                "a resume of park {}, which is not the task's latest park with that receipt",
                resume.park
            ))
        })?;
    point.approval = resume.approval_digest.map(|digest| (digest, None));
    crate::resume::recheck_before_resume(state, key, task, &point)
        .map_err(|refusal| refused(refusal.to_string()))
}

/// A worker's release of the park at `park`, recorded in `audit` against
/// the receipt the coordinator wrote when it took the park's row; a park it
/// holds no receipt of is refused.
fn release_shipped(
    (state, key, audit): (&StateDir, &KeyFile, &mut AuditLog),
    task: &TaskKey,
    (park, resource): (Digest, Resource),
    detail: &Value,
) -> Result<()> {
    let point = crate::resume::latest_park_at(state, key, task, park)?.ok_or_else(|| {
        EngineError::ShippedRow {
            task: task.to_string(),
            reason: format!("a release of park {park} that is not the task's latest park"),
        }
    })?;
    let receipt = point.receipt.ok_or_else(|| EngineError::ShippedRow {
        task: task.to_string(),
        reason: format!("a release of park {park}, whose receipt is not written"),
    })?;
    if point
        .released
        .iter()
        .any(|release| release.resource == resource)
    {
        // Taken again after a continued coordinator read it anew.
        return Ok(());
    }
    crate::park::write_release(
        audit,
        task,
        &point.run_id,
        park,
        receipt,
        resource,
        detail.clone(),
    )
}

/// A worker's park's `checkpoint.json`, kept when its own hash is the one
/// the journal's latest `task.agent_checkpoint` row binds for its park.
fn keep_agent_checkpoint(
    state: &StateDir,
    journal: &Journal,
    task: &TaskKey,
    checkpoint: &reprise_store::agent_checkpoint::AgentCheckpoint,
) -> Result<()> {
    let refused = |reason: String| EngineError::ShippedRow {
        task: task.to_string(),
        reason,
    };
    let own = checkpoint
        .own_hash()
        .map_err(|err| refused(format!("an agent checkpoint that does not encode: {err}")))?;
    let bound = journal_lines(journal.path())?
        .iter()
        .rev()
        .filter_map(|line| serde_json::from_slice::<reprise_core::record::JournalRow>(line).ok())
        .find_map(|row| body_of::<AgentCheckpointBound>(&row.kind, &row.body));
    match bound {
        Some(bound) if bound.checkpoint == own && bound.park == checkpoint.park => {
            reprise_store::agent_checkpoint::write_checkpoint(state, task, checkpoint)
                .map_err(|err| refused(err.to_string()))
        }
        _ => Err(refused(
            "an agent checkpoint no task.agent_checkpoint row binds".to_owned(),
        )),
    }
}

/// A journal's rows as stored, each with its newline.
fn journal_lines(path: &std::path::Path) -> Result<Vec<Vec<u8>>> {
    let bytes = reprise_store::read_no_follow(path)?.unwrap_or_default();
    Ok(bytes
        .split_inclusive(|byte| *byte == b'\n')
        .map(<[u8]>::to_vec)
        .collect())
}

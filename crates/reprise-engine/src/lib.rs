//! The run loop: plans in, attempts through agents, gates on their work, and
//! checkpointed retries decided by `reprise_core::retry::decide`, each
//! decision recorded in the task journal, its spine and the audit chain.
//!
//! The engine never prints: it reports progress as `Event`s to a sink the CLI
//! provides, and writes the run's state to `runs/<run>/state.json`.

#![forbid(unsafe_code)]

mod budget;
mod checkpoint_binding;
mod checkpoints;
mod control;
mod delivery;
mod error;
mod events;
mod evidence;
mod gate_files;
mod gates;
mod leftovers;
mod linkage;
mod liveness;
mod messages;
mod park;
mod pool;
pub mod preflight;
mod records;
mod recovery;
mod resume;
mod run;
mod sandbox;
mod settings;
mod state;
mod stop;
mod task;
mod text;
mod walls;

pub use budget::{plan_criteria, resolve_budget};
pub use checkpoint_binding::{
    Recorded, StoreCheck, TakenRow, Unbound, bind as bind_checkpoint, check_store, check_stores,
    object_intact, recorded_checkpoints,
};
pub use checkpoints::{
    FAILED_TREE_LABEL, RESTORED_KIND, Restored, TAKEN_KIND, held_checkpoints,
    restore as restore_checkpoint, task_snapshots,
};
pub use control::{CONTROL_VERSION, ControlOp, ask as ask_run, requester_of, socket_path};
pub use delivery::{
    ApplyPlan, ApplyTarget, CleanItem, CleanPlan, CleanScope, DeliveryError, DiffReport,
    FailedTree, KeptBranch, apply, clean, diff, leaf_results, plan_apply, plan_clean,
};
pub use error::{EngineError, Result};
pub use events::{Event, EventSink, Phase};
pub use evidence::{AuditIntent, Ingested, Outbox, Shipment, ShippedSession, ingest};
pub use liveness::{
    Liveness, TaskProgress, attempts_of, catch_up, liveness, progress_of, task_lifecycle,
};
pub use park::{
    ParkRequest, Parked, ParkedAnswer, ReleasedResource, complete_cut_parks, complete_park,
    park_directly,
};
pub use records::{DecisionRow, read_decisions};
pub use resume::{ParkPoint, Refusal, check_resume, latest_park};
pub use run::adapters::{acp_adapter, cli_state_dirs};
pub use run::fleet::{
    ForwardedPark, InProcessHost, InProcessTransport, Report, ShippedResult, TaskOrder, Transport,
    WorkerControl, WorkerHost, run_order,
};
pub use run::{
    AgentSetup, Continuing, Fleet, Resume, RunOptions, Supervisor, load_plan, lock_tasks,
    new_run_id, run_plan, run_plan_on_fleet,
};
pub use sandbox::{TaskOutput, Workspace, result_branch};
pub use state::{
    AttemptSummary, GateVerdict, Outcome, RunState, TaskRecord, TaskStatus, WaitReason, Waiting,
    latest_run, load_run, run_ids,
};

//! The fleet's tables in the `reprise_fleet` schema and their migrations.
//!
//! Each migration is a version and its statements, applied in order inside
//! one transaction that holds an advisory lock, and recorded in
//! `reprise_fleet.migrations`: `init` on a database already at the latest
//! version changes nothing, two hosts running `init` at once apply each
//! migration once, and a database at a newer version than this build knows
//! is refused rather than written.

use sqlx::{PgPool, Row};

use crate::error::{FleetError, Result};

/// The schema every fleet table lives in.
pub const SCHEMA: &str = "reprise_fleet";

/// The channel a submit notifies: workers waiting for work listen on it.
pub(crate) const WORK_CHANNEL: &str = "reprise_fleet_work";
/// The channel every write the coordinator collects notifies, with the run
/// id as payload.
pub(crate) const COLLECT_CHANNEL: &str = "reprise_fleet_collect";

/// The advisory lock key (an arbitrary constant) `init` holds while it
/// migrates.
const MIGRATION_LOCK: i64 = 0x7265_7072_6973_6531;

/// Every migration, oldest first; the version is the position plus one.
const MIGRATIONS: &[&str] = &[
    // 1: workers, runs, tasks, and what travels from workers to the coordinator.
    r"
    create table reprise_fleet.workers (
        host_id text primary key,
        capacity integer not null check (capacity > 0),
        heartbeat_at timestamptz not null default now(),
        draining boolean not null default false,
        registered_at timestamptz not null default now()
    );
    create table reprise_fleet.runs (
        run_id text primary key,
        plan_id text not null,
        coordinator_host text not null,
        remote text not null,
        state text not null default 'running' check (state in ('running', 'finished')),
        -- The last collect position handed out: shipped rows and outcomes of
        -- the run take their positions from it under the run row's lock, so
        -- positions commit in order and a cursor never skips one.
        collect_position bigint not null default 0,
        created_at timestamptz not null default now()
    );
    create table reprise_fleet.tasks (
        run_id text not null references reprise_fleet.runs (run_id),
        task_id text not null,
        state text not null check (state in ('queued', 'running', 'parked', 'done')),
        holder text,
        lease_epoch bigint not null default 0,
        lease_expires_at timestamptz,
        affinity_host text,
        affinity_until timestamptz,
        payload jsonb not null,
        since timestamptz not null default now(),
        result jsonb,
        snapshot jsonb,
        primary key (run_id, task_id),
        check ((state = 'running') = (holder is not null and lease_expires_at is not null))
    );
    create index tasks_claimable on reprise_fleet.tasks (since) where state = 'queued';
    create index tasks_held on reprise_fleet.tasks (holder) where state = 'running';
    create table reprise_fleet.shipped_rows (
        run_id text not null references reprise_fleet.runs (run_id),
        position bigint not null,
        task_id text not null,
        lease_epoch bigint not null,
        seq bigint not null,
        bytes bytea not null,
        primary key (run_id, position),
        unique (run_id, task_id, lease_epoch, seq)
    );
    create table reprise_fleet.outcomes (
        run_id text not null references reprise_fleet.runs (run_id),
        position bigint not null,
        task_id text not null,
        lease_epoch bigint not null,
        kind text not null check (kind in ('completed', 'parked', 'released', 'lost')),
        holder text not null,
        body jsonb,
        primary key (run_id, position)
    );
    ",
    // 2: a run its coordinator stops: workers stop its tasks, and no claim
    // takes one.
    r"
    alter table reprise_fleet.runs drop constraint runs_state_check;
    alter table reprise_fleet.runs add constraint runs_state_check
        check (state in ('running', 'stopping', 'finished'));
    ",
    // 3: a request the coordinator passes to the worker holding a task (a
    // park asked of it), taken by that worker's heartbeat.
    r"
    alter table reprise_fleet.tasks add column control jsonb;
    ",
];

/// The version this build migrates to.
pub const LATEST_VERSION: i32 = MIGRATIONS.len() as i32;

/// What `migrate` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migrated {
    /// The version the database was at before.
    pub from: i32,
    /// The version it is at now.
    pub to: i32,
}

/// Brings the schema to `LATEST_VERSION`, applying only what is missing.
pub(crate) async fn migrate(pool: &PgPool) -> Result<Migrated> {
    let mut tx = pool.begin().await?;
    sqlx::query("select pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await?;
    sqlx::query("create schema if not exists reprise_fleet")
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "create table if not exists reprise_fleet.migrations (
            version integer primary key,
            applied_at timestamptz not null default now())",
    )
    .execute(&mut *tx)
    .await?;
    let from: i32 =
        sqlx::query("select coalesce(max(version), 0) as v from reprise_fleet.migrations")
            .fetch_one(&mut *tx)
            .await?
            .get("v");
    if from > LATEST_VERSION {
        return Err(FleetError::NewerSchema {
            found: from,
            known: LATEST_VERSION,
        });
    }
    for (index, statements) in MIGRATIONS.iter().enumerate().skip(from as usize) {
        sqlx::raw_sql(*statements).execute(&mut *tx).await?;
        sqlx::query("insert into reprise_fleet.migrations (version) values ($1)")
            .bind(index as i32 + 1)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(Migrated {
        from,
        to: LATEST_VERSION,
    })
}

/// The version the database is at, 0 when it has no fleet schema; a newer
/// one than this build knows is refused.
pub(crate) async fn check_version(pool: &PgPool) -> Result<()> {
    let exists: bool =
        sqlx::query("select to_regclass('reprise_fleet.migrations') is not null as e")
            .fetch_one(pool)
            .await?
            .get("e");
    let version: i32 = if exists {
        sqlx::query("select coalesce(max(version), 0) as v from reprise_fleet.migrations")
            .fetch_one(pool)
            .await?
            .get("v")
    } else {
        0
    };
    match version {
        0 => Err(FleetError::NotInitialised),
        found if found > LATEST_VERSION => Err(FleetError::NewerSchema {
            found,
            known: LATEST_VERSION,
        }),
        found if found < LATEST_VERSION => Err(FleetError::OlderSchema {
            found,
            known: LATEST_VERSION,
        }),
        _ => Ok(()),
    }
}

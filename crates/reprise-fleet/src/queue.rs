//! The fleet's operations on PostgreSQL, async.
//!
//! The fence: every write a lease holder makes (renewal, shipped rows,
//! completion, park, release) is an `update ... where run_id = $1 and
//! task_id = $2 and lease_epoch = $3 and state = 'running' and
//! lease_expires_at >= now()`. A claim bumps the epoch in the statement
//! that takes the task (`for update skip locked`), so a holder whose lease
//! was taken, or expired, touches zero rows: `Fenced`. An expired lease is
//! lost even before anyone takes it, so "expired" and "lost" never differ.
//!
//! Shipped rows and outcomes take their collect positions from the run's
//! row under its lock (`take_positions`), so positions commit in the order
//! they were handed out and the coordinator's cursor never passes a row
//! that commits later.

use std::str::FromStr;
use std::time::Duration;

use reprise_core::{TaskId, check_run_id};
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{PgPool, Postgres, Row, Transaction};

use crate::error::{FleetError, Result};
use crate::retry::with_retries;
use crate::schema::{self, COLLECT_CHANNEL, Migrated, WORK_CHANNEL};
use crate::types::{
    Affinity, Collected, FleetStatus, Lease, LeaseKey, OutcomeKind, RunSpec, ShippedRow,
    TaskStatus, Timings, WorkerStatus,
};

/// A collect's select of `$table` (`$columns`, one of the two lists below)
/// for `run_id = $1`, positions `$2 < position <= $3`, `$of` (on `$4`),
/// in position order, at most `$5`.
macro_rules! collect_sql {
    ($table:literal, ROW_COLUMNS, $of:literal) => {
        collect_sql!(@ $table, "position, task_id, lease_epoch, seq, bytes", $of)
    };
    ($table:literal, OUTCOME_COLUMNS, $of:literal) => {
        collect_sql!(@ $table, "position, task_id, lease_epoch, kind, holder, body", $of)
    };
    (@ $table:literal, $columns:literal, $of:literal) => {
        concat!(
            "select ", $columns, " from reprise_fleet.", $table,
            " where run_id = $1 and position > $2 and position <= $3 and ", $of,
            " order by position limit $5"
        )
    };
}

/// A connection pool to the fleet's database and the timings it runs by.
#[derive(Debug, Clone)]
pub struct Fleet {
    pool: PgPool,
    timings: Timings,
    /// host:port/database, for messages (never the password).
    target: String,
}

impl Fleet {
    /// A pool for `url`; nothing is sent until the first call.
    pub fn connect_lazy(url: &str, timings: Timings) -> Result<Self> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(FleetError::BadUrl {
                url: redact(url),
                reason: "it does not start with postgres:// or postgresql://".to_owned(),
            });
        }
        let options = PgConnectOptions::from_str(url).map_err(|error| FleetError::BadUrl {
            url: redact(url),
            reason: error.to_string(),
        })?;
        let target = format!(
            "{}:{}/{}",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or("")
        );
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(
                timings
                    .retry_for
                    .clamp(Duration::from_millis(200), Duration::from_secs(2)),
            )
            .connect_lazy_with(options);
        Ok(Self {
            pool,
            timings,
            target,
        })
    }

    /// Where this fleet's database is, for messages.
    pub fn target(&self) -> &str {
        &self.target
    }

    pub fn timings(&self) -> Timings {
        self.timings
    }

    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    async fn retried<T>(&self, call: impl AsyncFnMut() -> Result<T>) -> Result<T> {
        with_retries(&self.target, self.timings.retry_for, call).await
    }

    /// Creates or migrates the schema: a no-op at the latest version.
    pub async fn init(&self) -> Result<Migrated> {
        self.retried(async || schema::migrate(&self.pool).await)
            .await
    }

    /// Refuses a database without the schema this build needs.
    pub async fn check_schema(&self) -> Result<()> {
        self.retried(async || schema::check_version(&self.pool).await)
            .await
    }

    /// Registers (or re-registers) worker `host` with `capacity` seats; it
    /// is live and not draining.
    pub async fn register_worker(&self, host: &str, capacity: u32) -> Result<()> {
        check_host(host)?;
        let capacity = i32::try_from(capacity.max(1)).unwrap_or(i32::MAX);
        self.retried(async || {
            sqlx::query(
                "insert into reprise_fleet.workers (host_id, capacity) values ($1, $2)
                 on conflict (host_id) do update
                 set capacity = excluded.capacity, heartbeat_at = now(), draining = false",
            )
            .bind(host)
            .bind(capacity)
            .execute(&self.pool)
            .await?;
            Ok(())
        })
        .await
    }

    /// Marks worker `host` as draining: it claims nothing more.
    pub async fn drain(&self, host: &str) -> Result<()> {
        self.retried(async || {
            sqlx::query("update reprise_fleet.workers set draining = true where host_id = $1")
                .bind(host)
                .execute(&self.pool)
                .await?;
            Ok(())
        })
        .await
    }

    /// Renews, in one statement, every lease in `held` that worker `host`
    /// still holds, and records its heartbeat. Returns the leases of `held`
    /// it lost: taken by another worker, expired, or ended. The worker stops
    /// those agents. A lease the worker does not list is not renewed, so
    /// one whose claim it never heard of expires.
    pub async fn heartbeat(&self, host: &str, held: &[LeaseKey]) -> Result<Vec<LeaseKey>> {
        let runs: Vec<&str> = held.iter().map(|key| key.run_id.as_str()).collect();
        let tasks: Vec<&str> = held.iter().map(|key| key.task_id.as_str()).collect();
        let epochs: Vec<i64> = held.iter().map(|key| key.epoch).collect();
        let window = self.timings.heartbeat.min(self.timings.retry_for);
        let renewed: Vec<LeaseKey> = with_retries(&self.target, window, async || {
            let rows = sqlx::query(
                "with renewed as (
                    update reprise_fleet.tasks t
                    set lease_expires_at = now() + $5 * interval '1 millisecond'
                    from unnest($2::text[], $3::text[], $4::bigint[]) as h(run_id, task_id, epoch)
                    where t.run_id = h.run_id and t.task_id = h.task_id
                      and t.lease_epoch = h.epoch and t.holder = $1
                      and t.state = 'running' and t.lease_expires_at >= now()
                    returning t.run_id, t.task_id, t.lease_epoch),
                 beat as (
                    update reprise_fleet.workers set heartbeat_at = now() where host_id = $1)
                 select run_id, task_id, lease_epoch from renewed",
            )
            .bind(host)
            .bind(&runs)
            .bind(&tasks)
            .bind(&epochs)
            .bind(millis(self.timings.lease_timeout))
            .fetch_all(&self.pool)
            .await?;
            Ok(rows.iter().map(lease_key).collect())
        })
        .await?;
        Ok(held
            .iter()
            .filter(|key| !renewed.contains(key))
            .cloned()
            .collect())
    }

    /// Opens a run: the coordinator does this before it submits the run's
    /// tasks. Opening it again changes nothing.
    pub async fn open_run(&self, run: &RunSpec) -> Result<()> {
        check_run_id(&run.run_id).map_err(|error| FleetError::BadId(error.to_string()))?;
        self.retried(async || {
            sqlx::query(
                "insert into reprise_fleet.runs (run_id, plan_id, coordinator_host, remote)
                 values ($1, $2, $3, $4)
                 on conflict (run_id) do update set state = 'running'",
            )
            .bind(&run.run_id)
            .bind(&run.plan_id)
            .bind(&run.coordinator_host)
            .bind(&run.remote)
            .execute(&self.pool)
            .await?;
            Ok(())
        })
        .await
    }

    /// Marks a run finished; its tasks stay for `status`.
    pub async fn finish_run(&self, run: &str) -> Result<()> {
        self.retried(async || {
            sqlx::query("update reprise_fleet.runs set state = 'finished' where run_id = $1")
                .bind(run)
                .execute(&self.pool)
                .await?;
            Ok(())
        })
        .await
    }

    /// Queues task `task` of run `run` with `payload`, or queues it again
    /// (a retry, a parked task's resume) with a new payload. A task a worker
    /// holds is refused (`Held`). Waiting workers are woken.
    pub async fn submit(
        &self,
        run: &str,
        task: &str,
        payload: &Value,
        affinity: &Affinity,
    ) -> Result<()> {
        TaskId::parse(task).map_err(|error| FleetError::BadId(error.to_string()))?;
        let (host, hard_for) = match affinity {
            Affinity::Any => (None, 0),
            Affinity::Host { host, hard_for } => (Some(host.as_str()), millis(*hard_for)),
        };
        self.retried(async || {
            let mut tx = self.pool.begin().await?;
            let queued = sqlx::query(
                "insert into reprise_fleet.tasks
                    (run_id, task_id, state, payload, affinity_host, affinity_until)
                 values ($1, $2, 'queued', $3, $4,
                    case when $4::text is null then null
                         else now() + $5 * interval '1 millisecond' end)
                 on conflict (run_id, task_id) do update
                 set state = 'queued', payload = excluded.payload,
                     affinity_host = excluded.affinity_host,
                     affinity_until = excluded.affinity_until,
                     since = now(), result = null, snapshot = null
                 where reprise_fleet.tasks.state <> 'running'",
            )
            .bind(run)
            .bind(task)
            .bind(payload)
            .bind(host)
            .bind(hard_for)
            .execute(&mut *tx)
            .await
            .map_err(|error| unknown_run(error, run))?;
            if queued.rows_affected() == 0 {
                return Err(FleetError::Held {
                    run: run.to_owned(),
                    task: task.to_owned(),
                });
            }
            notify(&mut tx, WORK_CHANNEL, run).await?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    /// Claims up to `max` claimable tasks for worker `host`: queued ones and
    /// running ones whose lease expired (their attempt is recorded lost).
    /// Each claim bumps the task's epoch. A task with a hard affinity to
    /// another host is left alone until its deadline; after it, its host
    /// still comes first.
    pub async fn claim(&self, host: &str, max: u32) -> Result<Vec<Lease>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        self.retried(async || {
            let mut tx = self.pool.begin().await?;
            let rows = sqlx::query(
                "with candidates as (
                    select run_id, task_id, state as old_state, holder as old_holder,
                           lease_epoch as old_epoch
                    from reprise_fleet.tasks
                    where (state = 'queued' or (state = 'running' and lease_expires_at < now()))
                      and (affinity_host is null or affinity_host = $1 or affinity_until <= now())
                      and not exists (select 1 from reprise_fleet.workers w
                                      where w.host_id = $1 and w.draining)
                      and not exists (select 1 from reprise_fleet.runs r
                                      where r.run_id = tasks.run_id and r.state = 'stopping')
                    order by coalesce(affinity_host = $1, false) desc, since, run_id, task_id
                    limit $2
                    for update skip locked)
                 update reprise_fleet.tasks t
                 set state = 'running', holder = $1, lease_epoch = t.lease_epoch + 1,
                     lease_expires_at = now() + $3 * interval '1 millisecond', since = now()
                 from candidates c
                 where t.run_id = c.run_id and t.task_id = c.task_id
                 returning t.run_id, t.task_id, t.lease_epoch, t.payload,
                           c.old_state, c.old_holder, c.old_epoch",
            )
            .bind(host)
            .bind(i64::from(max))
            .bind(millis(self.timings.lease_timeout))
            .fetch_all(&mut *tx)
            .await?;
            let lost: Vec<(LeaseKey, String)> = rows
                .iter()
                .filter(|row| row.get::<String, _>("old_state") == "running")
                .map(|row| {
                    let key = LeaseKey {
                        run_id: row.get("run_id"),
                        task_id: row.get("task_id"),
                        epoch: row.get("old_epoch"),
                    };
                    (key, row.get::<String, _>("old_holder"))
                })
                .collect();
            record_lost(&mut tx, &lost).await?;
            tx.commit().await?;
            Ok(rows
                .iter()
                .map(|row| Lease {
                    key: lease_key(row),
                    payload: row.get("payload"),
                })
                .collect())
        })
        .await
    }

    /// Ships `rows` under `lease` in one transaction with the lease check:
    /// all of them or, when the lease is no longer held, none (`Fenced`).
    /// A row already shipped under this lease (a retry whose answer was
    /// lost) is skipped.
    pub async fn ship(&self, lease: &LeaseKey, rows: &[ShippedRow]) -> Result<()> {
        let seqs: Vec<i64> = rows.iter().map(|row| row.seq).collect();
        let bytes: Vec<&[u8]> = rows.iter().map(|row| row.bytes.as_slice()).collect();
        self.retried(async || {
            let mut tx = self.pool.begin().await?;
            fence(&mut tx, lease).await?;
            let first = take_positions(&mut tx, &lease.run_id, seqs.len()).await?;
            sqlx::query(
                "insert into reprise_fleet.shipped_rows
                    (run_id, position, task_id, lease_epoch, seq, bytes)
                 select $1, $2 + r.ordinal - 1, $3, $4, r.seq, r.bytes
                 from unnest($5::bigint[], $6::bytea[]) with ordinality as r(seq, bytes, ordinal)
                 on conflict (run_id, task_id, lease_epoch, seq) do nothing",
            )
            .bind(&lease.run_id)
            .bind(first)
            .bind(&lease.task_id)
            .bind(lease.epoch)
            .bind(&seqs)
            .bind(&bytes)
            .execute(&mut *tx)
            .await?;
            notify(&mut tx, COLLECT_CHANNEL, &lease.run_id).await?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    /// Completes the task under `lease` with `result`.
    pub async fn complete(&self, lease: &LeaseKey, result: &Value) -> Result<()> {
        self.end_lease(lease, OutcomeKind::Completed, Some(result))
            .await
    }

    /// Parks the task under `lease` with `snapshot`, which any host can
    /// resume from once the coordinator submits it again.
    pub async fn park(&self, lease: &LeaseKey, snapshot: &Value) -> Result<()> {
        self.end_lease(lease, OutcomeKind::Parked, Some(snapshot))
            .await
    }

    /// Gives the task under `lease` back to the queue unfinished (a drain).
    pub async fn release(&self, lease: &LeaseKey) -> Result<()> {
        self.end_lease(lease, OutcomeKind::Released, None).await
    }

    /// Ends a lease, fenced, and records the outcome for the coordinator.
    /// Sent again after a commit whose answer was lost, it finds its own
    /// outcome recorded and succeeds.
    async fn end_lease(
        &self,
        lease: &LeaseKey,
        kind: OutcomeKind,
        body: Option<&Value>,
    ) -> Result<()> {
        let state = match kind {
            OutcomeKind::Completed => "done",
            OutcomeKind::Parked => "parked",
            OutcomeKind::Released | OutcomeKind::Lost => "queued",
        };
        self.retried(async || {
            let mut tx = self.pool.begin().await?;
            let holder = match fence(&mut tx, lease).await {
                Ok(holder) => holder,
                Err(FleetError::Fenced { .. }) => {
                    drop(tx);
                    return self.already_ended(lease, kind).await;
                }
                Err(error) => return Err(error),
            };
            sqlx::query(
                "update reprise_fleet.tasks
                 set state = $4, holder = null, lease_expires_at = null, since = now(),
                     result = case when $5 = 'completed' then $6 else result end,
                     snapshot = case when $5 = 'parked' then $6 else snapshot end
                 where run_id = $1 and task_id = $2 and lease_epoch = $3 and state = 'running'",
            )
            .bind(&lease.run_id)
            .bind(&lease.task_id)
            .bind(lease.epoch)
            .bind(state)
            .bind(kind.as_str())
            .bind(body)
            .execute(&mut *tx)
            .await?;
            let position = take_positions(&mut tx, &lease.run_id, 1).await?;
            insert_outcome(&mut tx, position, lease, kind, &holder, body).await?;
            notify(&mut tx, COLLECT_CHANNEL, &lease.run_id).await?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    /// `Ok` when `kind` is already recorded for exactly this lease (the
    /// answer to an earlier try was lost), else `Fenced`.
    async fn already_ended(&self, lease: &LeaseKey, kind: OutcomeKind) -> Result<()> {
        let recorded: bool = sqlx::query(
            "select exists (select 1 from reprise_fleet.outcomes
                            where run_id = $1 and task_id = $2 and lease_epoch = $3 and kind = $4) as e",
        )
        .bind(&lease.run_id)
        .bind(&lease.task_id)
        .bind(lease.epoch)
        .bind(kind.as_str())
        .fetch_one(&self.pool)
        .await?
        .get("e");
        if recorded { Ok(()) } else { Err(fenced(lease)) }
    }

    /// Makes every expired lease's task claimable again and records each
    /// lost attempt for the coordinator. Returns the leases that expired.
    pub async fn expire_leases(&self) -> Result<Vec<LeaseKey>> {
        self.retried(async || {
            let mut tx = self.pool.begin().await?;
            let rows = sqlx::query(
                "with expired as (
                    select run_id, task_id, holder as old_holder
                    from reprise_fleet.tasks
                    where state = 'running' and lease_expires_at < now()
                    for update skip locked)
                 update reprise_fleet.tasks t
                 set state = 'queued', holder = null, lease_expires_at = null, since = now()
                 from expired e
                 where t.run_id = e.run_id and t.task_id = e.task_id
                 returning t.run_id, t.task_id, t.lease_epoch, e.old_holder",
            )
            .fetch_all(&mut *tx)
            .await?;
            let lost: Vec<(LeaseKey, String)> = rows
                .iter()
                .map(|row| (lease_key(row), row.get::<String, _>("old_holder")))
                .collect();
            record_lost(&mut tx, &lost).await?;
            if !lost.is_empty() {
                notify(&mut tx, WORK_CHANNEL, "expired").await?;
            }
            tx.commit().await?;
            Ok(lost.into_iter().map(|(key, _)| key).collect())
        })
        .await
    }

    /// What run `run` has collected past `after`, in order, at most `limit`
    /// items: shipped rows and lease outcomes.
    pub async fn collect(&self, run: &str, after: i64, limit: u32) -> Result<Vec<Collected>> {
        self.collect_where(run, None, (after, i64::MAX), limit)
            .await
    }

    /// Everything shipped for task `task` of run `run` up to position
    /// `through`, in order: one task's history, read without the others'.
    pub async fn collect_task(
        &self,
        run: &str,
        task: &str,
        through: i64,
    ) -> Result<Vec<Collected>> {
        self.collect_where(run, Some(task), (0, through), u32::MAX)
            .await
    }

    /// The run's items (of one task, when given) with positions in
    /// `after < position <= through`, at most `limit`.
    async fn collect_where(
        &self,
        run: &str,
        task: Option<&str>,
        (after, through): (i64, i64),
        limit: u32,
    ) -> Result<Vec<Collected>> {
        let limit = i64::from(limit.max(1));
        // $4, the task, is null for the whole run.
        let (rows_sql, outcomes_sql) = if task.is_some() {
            (
                collect_sql!("shipped_rows", ROW_COLUMNS, "task_id = $4"),
                collect_sql!("outcomes", OUTCOME_COLUMNS, "task_id = $4"),
            )
        } else {
            (
                collect_sql!("shipped_rows", ROW_COLUMNS, "$4::text is null"),
                collect_sql!("outcomes", OUTCOME_COLUMNS, "$4::text is null"),
            )
        };
        self.retried(async || {
            // Both lists from one snapshot: read apart, a row committed
            // between the two reads would be missing from the first while
            // an outcome after it shows in the second, and the cursor would
            // pass it for good.
            let mut tx = self.pool.begin().await?;
            sqlx::query("set transaction isolation level repeatable read, read only")
                .execute(&mut *tx)
                .await?;
            let mut lists = Vec::with_capacity(2);
            for sql in [rows_sql, outcomes_sql] {
                let list = sqlx::query(sql)
                    .bind(run)
                    .bind(after)
                    .bind(through)
                    .bind(task)
                    .bind(limit)
                    .fetch_all(&mut *tx)
                    .await?;
                lists.push(list);
            }
            tx.commit().await?;
            Ok(merge(&lists[0], &lists[1], limit as usize))
        })
        .await
    }

    /// Forgets what run `run` collected up to `through`: those rows are in
    /// the coordinator's chains now.
    pub async fn prune(&self, run: &str, through: i64) -> Result<()> {
        self.retried(async || {
            let mut tx = self.pool.begin().await?;
            for statement in [
                "delete from reprise_fleet.shipped_rows where run_id = $1 and position <= $2",
                "delete from reprise_fleet.outcomes where run_id = $1 and position <= $2",
            ] {
                sqlx::query(statement)
                    .bind(run)
                    .bind(through)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    /// Every worker and every task, for `reprise fleet status`.
    pub async fn status(&self) -> Result<FleetStatus> {
        self.check_schema().await?;
        self.retried(async || {
            let workers = sqlx::query(
                r#"select host_id, capacity, draining,
                    to_char(heartbeat_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
                      as heartbeat_at
                 from reprise_fleet.workers order by host_id"#,
            )
            .fetch_all(&self.pool)
            .await?;
            let tasks = sqlx::query(
                r#"select run_id, task_id, state, holder, lease_epoch,
                    to_char(since at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as since
                 from reprise_fleet.tasks order by run_id, task_id"#,
            )
            .fetch_all(&self.pool)
            .await?;
            Ok(FleetStatus {
                workers: workers.iter().map(worker_status).collect(),
                tasks: tasks.iter().map(task_status).collect(),
            })
        })
        .await
    }
}

impl Fleet {
    /// Stops run `run`: its workers are told to stop its running tasks
    /// (`stopping`), and each task no worker has claimed yet ends here,
    /// with `withdrawn` as its result, an outcome the coordinator collects.
    /// Opening the run again (a continued coordinator) lets it go on.
    pub async fn stop_run(&self, run: &str, withdrawn: &Value) -> Result<()> {
        self.retried(async || {
            let mut tx = self.pool.begin().await?;
            sqlx::query(
                "update reprise_fleet.runs set state = 'stopping'
                 where run_id = $1 and state = 'running'",
            )
            .bind(run)
            .execute(&mut *tx)
            .await?;
            let queued = sqlx::query(
                "update reprise_fleet.tasks
                 set state = 'done', result = $2, since = now()
                 where run_id = $1 and state = 'queued'
                 returning run_id, task_id, lease_epoch",
            )
            .bind(run)
            .bind(withdrawn)
            .fetch_all(&mut *tx)
            .await?;
            if !queued.is_empty() {
                let first = take_positions(&mut tx, run, queued.len()).await?;
                for (offset, row) in queued.iter().enumerate() {
                    let key = lease_key(row);
                    let position = first + offset as i64;
                    insert_outcome(
                        &mut tx,
                        position,
                        &key,
                        OutcomeKind::Completed,
                        "",
                        Some(withdrawn),
                    )
                    .await?;
                }
                notify(&mut tx, COLLECT_CHANNEL, run).await?;
            }
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    /// The last collect position run `run` handed out: what a coordinator
    /// that opens the run again has already been shipped.
    pub async fn collect_position(&self, run: &str) -> Result<i64> {
        self.retried(async || {
            let row =
                sqlx::query("select collect_position from reprise_fleet.runs where run_id = $1")
                    .bind(run)
                    .fetch_optional(&self.pool)
                    .await?
                    .ok_or_else(|| FleetError::UnknownRun {
                        run: run.to_owned(),
                    })?;
            Ok(row.get("collect_position"))
        })
        .await
    }

    /// Which of `held` belong to a run its coordinator stopped.
    pub async fn stopping(&self, held: &[LeaseKey]) -> Result<Vec<LeaseKey>> {
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let runs: Vec<&str> = held.iter().map(|key| key.run_id.as_str()).collect();
        let stopping: Vec<String> = self
            .retried(async || {
                let rows = sqlx::query(
                    "select run_id from reprise_fleet.runs
                     where run_id = any($1::text[]) and state = 'stopping'",
                )
                .bind(&runs)
                .fetch_all(&self.pool)
                .await?;
                Ok(rows.iter().map(|row| row.get("run_id")).collect())
            })
            .await?;
        Ok(held
            .iter()
            .filter(|key| stopping.contains(&key.run_id))
            .cloned()
            .collect())
    }

    /// Deletes the rows shipped for run `run` up to position `through` (what
    /// its coordinator has taken into its journals) of tasks no worker holds
    /// and none waits to claim: their coordinator holds them, and no
    /// takeover or attach reads them again. Returns how many went.
    pub async fn prune_collected(&self, run: &str, through: i64) -> Result<u64> {
        self.retried(async || {
            let done = sqlx::query(
                "delete from reprise_fleet.shipped_rows s
                 using reprise_fleet.tasks t
                 where s.run_id = $1 and s.position <= $2
                   and t.run_id = s.run_id and t.task_id = s.task_id
                   and t.state not in ('queued', 'running')",
            )
            .bind(run)
            .bind(through)
            .execute(&self.pool)
            .await?;
            Ok(done.rows_affected())
        })
        .await
    }

    /// Leaves `request` for the worker holding task `task` of run `run`:
    /// `false` when no worker holds it now, or a request waits for it
    /// already.
    pub async fn request_control(&self, run: &str, task: &str, request: &Value) -> Result<bool> {
        self.retried(async || {
            let done = sqlx::query(
                "update reprise_fleet.tasks set control = $3
                 where run_id = $1 and task_id = $2 and state = 'running' and control is null",
            )
            .bind(run)
            .bind(task)
            .bind(request)
            .execute(&self.pool)
            .await?;
            Ok(done.rows_affected() == 1)
        })
        .await
    }

    /// Takes the requests left for the leases in `held` (each once, and
    /// only under the lease it was left for).
    pub async fn take_controls(&self, held: &[LeaseKey]) -> Result<Vec<(LeaseKey, Value)>> {
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let runs: Vec<&str> = held.iter().map(|key| key.run_id.as_str()).collect();
        let tasks: Vec<&str> = held.iter().map(|key| key.task_id.as_str()).collect();
        let epochs: Vec<i64> = held.iter().map(|key| key.epoch).collect();
        self.retried(async || {
            let rows = sqlx::query(
                "with held as (
                     select * from unnest($1::text[], $2::text[], $3::bigint[])
                         as h(run_id, task_id, epoch)
                 ), taken as (
                     select t.run_id, t.task_id, t.lease_epoch, t.control
                     from reprise_fleet.tasks t
                     join held h on h.run_id = t.run_id and h.task_id = t.task_id
                         and h.epoch = t.lease_epoch
                     where t.state = 'running' and t.control is not null
                     for update of t
                 )
                 update reprise_fleet.tasks t set control = null
                 from taken
                 where t.run_id = taken.run_id and t.task_id = taken.task_id
                 returning taken.run_id, taken.task_id, taken.lease_epoch, taken.control",
            )
            .bind(&runs)
            .bind(&tasks)
            .bind(&epochs)
            .fetch_all(&self.pool)
            .await?;
            Ok(rows
                .iter()
                .map(|row| {
                    (
                        LeaseKey {
                            run_id: row.get("run_id"),
                            task_id: row.get("task_id"),
                            epoch: row.get("lease_epoch"),
                        },
                        row.get::<Value, _>("control"),
                    )
                })
                .collect())
        })
        .await
    }

    /// Task `task` of run `run` as the queue holds it, if it does.
    pub async fn task_status(&self, run: &str, task: &str) -> Result<Option<TaskStatus>> {
        self.retried(async || {
            let row = sqlx::query(
                r#"select run_id, task_id, state, holder, lease_epoch,
                    to_char(since at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as since
                 from reprise_fleet.tasks where run_id = $1 and task_id = $2"#,
            )
            .bind(run)
            .bind(task)
            .fetch_optional(&self.pool)
            .await?;
            Ok(row.as_ref().map(task_status))
        })
        .await
    }
}

fn worker_status(row: &PgRow) -> WorkerStatus {
    WorkerStatus {
        host_id: row.get("host_id"),
        capacity: row.get("capacity"),
        heartbeat_at: row.get("heartbeat_at"),
        draining: row.get("draining"),
    }
}

fn task_status(row: &PgRow) -> TaskStatus {
    TaskStatus {
        run_id: row.get("run_id"),
        task_id: row.get("task_id"),
        state: row.get("state"),
        holder: row.get("holder"),
        lease_epoch: row.get("lease_epoch"),
        since: row.get("since"),
    }
}

/// The two position-ordered lists as one, cut at `limit`: each list holds
/// everything of its kind up to its own last position, so the first `limit`
/// of the merge are whole.
fn merge(rows: &[PgRow], outcomes: &[PgRow], limit: usize) -> Vec<Collected> {
    let mut items: Vec<Collected> = rows
        .iter()
        .map(|row| Collected::Row {
            position: row.get("position"),
            task_id: row.get("task_id"),
            epoch: row.get("lease_epoch"),
            row: ShippedRow {
                seq: row.get("seq"),
                bytes: row.get("bytes"),
            },
        })
        .chain(outcomes.iter().filter_map(|row| {
            Some(Collected::Outcome {
                position: row.get("position"),
                task_id: row.get("task_id"),
                epoch: row.get("lease_epoch"),
                kind: OutcomeKind::parse(row.get("kind"))?,
                holder: row.get("holder"),
                body: row.get("body"),
            })
        }))
        .collect();
    items.sort_by_key(Collected::position);
    items.truncate(limit);
    items
}

/// Locks the task's row if `lease` still holds it and returns its holder,
/// else `Fenced`.
async fn fence(tx: &mut Transaction<'_, Postgres>, lease: &LeaseKey) -> Result<String> {
    let held = sqlx::query(
        "select holder from reprise_fleet.tasks
         where run_id = $1 and task_id = $2 and lease_epoch = $3
           and state = 'running' and lease_expires_at >= now()
         for update",
    )
    .bind(&lease.run_id)
    .bind(&lease.task_id)
    .bind(lease.epoch)
    .fetch_optional(&mut **tx)
    .await?;
    match held {
        Some(row) => Ok(row.get("holder")),
        None => Err(fenced(lease)),
    }
}

/// Hands out `count` consecutive collect positions of run `run`; the run's
/// row stays locked until the transaction ends. The first is returned.
async fn take_positions(
    tx: &mut Transaction<'_, Postgres>,
    run: &str,
    count: usize,
) -> Result<i64> {
    let count = i64::try_from(count).unwrap_or(i64::MAX);
    let last: i64 = sqlx::query(
        "update reprise_fleet.runs set collect_position = collect_position + $2
         where run_id = $1 returning collect_position",
    )
    .bind(run)
    .bind(count)
    .fetch_optional(&mut **tx)
    .await?
    .ok_or_else(|| FleetError::UnknownRun {
        run: run.to_owned(),
    })?
    .get("collect_position");
    Ok(last - count + 1)
}

async fn insert_outcome(
    tx: &mut Transaction<'_, Postgres>,
    position: i64,
    lease: &LeaseKey,
    kind: OutcomeKind,
    holder: &str,
    body: Option<&Value>,
) -> Result<()> {
    sqlx::query(
        "insert into reprise_fleet.outcomes
            (run_id, position, task_id, lease_epoch, kind, holder, body)
         values ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(&lease.run_id)
    .bind(position)
    .bind(&lease.task_id)
    .bind(lease.epoch)
    .bind(kind.as_str())
    .bind(holder)
    .bind(body)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Records each lost attempt (a lease that expired) as an outcome the
/// coordinator collects, and wakes it.
async fn record_lost(
    tx: &mut Transaction<'_, Postgres>,
    lost: &[(LeaseKey, String)],
) -> Result<()> {
    for (lease, holder) in lost {
        let position = take_positions(tx, &lease.run_id, 1).await?;
        insert_outcome(tx, position, lease, OutcomeKind::Lost, holder, None).await?;
        notify(tx, COLLECT_CHANNEL, &lease.run_id).await?;
    }
    Ok(())
}

async fn notify(tx: &mut Transaction<'_, Postgres>, channel: &str, payload: &str) -> Result<()> {
    sqlx::query("select pg_notify($1, $2)")
        .bind(channel)
        .bind(payload)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

fn lease_key(row: &PgRow) -> LeaseKey {
    LeaseKey {
        run_id: row.get("run_id"),
        task_id: row.get("task_id"),
        epoch: row.get("lease_epoch"),
    }
}

fn fenced(lease: &LeaseKey) -> FleetError {
    FleetError::Fenced {
        run: lease.run_id.clone(),
        task: lease.task_id.clone(),
        epoch: lease.epoch,
    }
}

/// A foreign-key failure on the run is `UnknownRun`; anything else as is.
fn unknown_run(error: sqlx::Error, run: &str) -> FleetError {
    match &error {
        sqlx::Error::Database(database) if database.code().as_deref() == Some("23503") => {
            FleetError::UnknownRun {
                run: run.to_owned(),
            }
        }
        _ => FleetError::Database(error),
    }
}

fn check_host(host: &str) -> Result<()> {
    let valid = !host.is_empty()
        && host.len() <= 255
        && host
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'));
    if valid {
        Ok(())
    } else {
        Err(FleetError::BadId(format!(
            "host id {host:?} is not 1-255 letters, digits, '-', '_' or '.': give another --host-id"
        )))
    }
}

pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// `url` without its password (`postgres://me:secret@db/x` is
/// `postgres://me@db/x`), for messages and for a URL kept on disk.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) => {
            let user = user_info
                .split_once(':')
                .map_or(user_info, |(user, _)| user);
            format!("{scheme}://{user}@{host}{path}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_reaches_a_message() {
        assert_eq!(
            redact("postgres://me:secret@db:5432/x"),
            "postgres://me@db:5432/x"
        );
        assert_eq!(redact("postgres://db/x"), "postgres://db/x");
        assert_eq!(
            redact("postgres://me:s3cr@t@db:5432/fleet?sslmode=disable"),
            "postgres://me@db:5432/fleet?sslmode=disable"
        );
        assert_eq!(
            redact("postgresql://me@db/fleet?x=a@b"),
            "postgresql://me@db/fleet?x=a@b"
        );
    }

    #[test]
    fn host_ids_are_checked_not_sanitised() {
        assert!(check_host("worker-1.example").is_ok());
        assert!(check_host("").is_err());
        assert!(check_host("a b").is_err());
        assert!(check_host("a/b").is_err());
    }
}

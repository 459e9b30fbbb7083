//! The blocking facade the threaded engine and the CLI use: each call runs
//! the async operation on the client's own small runtime, so any thread may
//! call it. Waiters block on LISTEN/NOTIFY with a polling fallback.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sqlx::postgres::PgListener;
use tokio::runtime::Runtime;
use tokio::sync::Notify;

use crate::error::Result;
use crate::queue::Fleet;
use crate::schema::{COLLECT_CHANNEL, Migrated, WORK_CHANNEL};
use crate::types::{
    Affinity, Collected, FleetStatus, Lease, LeaseKey, RunSpec, ShippedRow, TaskStatus, Timings,
};

/// A blocking handle on the fleet's database; cheap to clone and share
/// between threads.
#[derive(Debug, Clone)]
pub struct FleetClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    runtime: Runtime,
    fleet: Fleet,
}

impl Drop for Inner {
    /// Closes the pool on the runtime: its connections need a tokio context
    /// to go.
    fn drop(&mut self) {
        let pool = self.fleet.pool().clone();
        self.runtime.block_on(pool.close());
    }
}

impl FleetClient {
    /// A client for `url`: nothing is sent until the first call.
    pub fn connect(url: &str, timings: Timings) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("reprise-fleet")
            .enable_all()
            .build()
            .map_err(|error| crate::error::FleetError::Unavailable {
                target: "the fleet client's runtime".to_owned(),
                reason: error.to_string(),
            })?;
        let fleet = {
            let _entered = runtime.enter();
            Fleet::connect_lazy(url, timings)?
        };
        Ok(Self {
            inner: Arc::new(Inner { runtime, fleet }),
        })
    }

    fn block<T>(&self, call: impl AsyncFnOnce(&Fleet) -> T) -> T {
        self.inner.runtime.block_on(call(&self.inner.fleet))
    }

    pub fn timings(&self) -> Timings {
        self.inner.fleet.timings()
    }

    pub fn target(&self) -> &str {
        self.inner.fleet.target()
    }

    pub fn init(&self) -> Result<Migrated> {
        self.block(async |fleet| fleet.init().await)
    }

    pub fn check_schema(&self) -> Result<()> {
        self.block(async |fleet| fleet.check_schema().await)
    }

    pub fn register_worker(&self, host: &str, capacity: u32) -> Result<()> {
        self.block(async |fleet| fleet.register_worker(host, capacity).await)
    }

    pub fn drain(&self, host: &str) -> Result<()> {
        self.block(async |fleet| fleet.drain(host).await)
    }

    pub fn heartbeat(&self, host: &str, held: &[LeaseKey]) -> Result<Vec<LeaseKey>> {
        self.block(async |fleet| fleet.heartbeat(host, held).await)
    }

    pub fn open_run(&self, run: &RunSpec) -> Result<()> {
        self.block(async |fleet| fleet.open_run(run).await)
    }

    pub fn finish_run(&self, run: &str) -> Result<()> {
        self.block(async |fleet| fleet.finish_run(run).await)
    }

    pub fn submit(
        &self,
        run: &str,
        task: &str,
        payload: &Value,
        affinity: &Affinity,
    ) -> Result<()> {
        self.block(async |fleet| fleet.submit(run, task, payload, affinity).await)
    }

    pub fn claim(&self, host: &str, max: u32) -> Result<Vec<Lease>> {
        self.block(async |fleet| fleet.claim(host, max).await)
    }

    pub fn ship(&self, lease: &LeaseKey, rows: &[ShippedRow]) -> Result<()> {
        self.block(async |fleet| fleet.ship(lease, rows).await)
    }

    pub fn complete(&self, lease: &LeaseKey, result: &Value) -> Result<()> {
        self.block(async |fleet| fleet.complete(lease, result).await)
    }

    pub fn park(&self, lease: &LeaseKey, snapshot: &Value) -> Result<()> {
        self.block(async |fleet| fleet.park(lease, snapshot).await)
    }

    pub fn release(&self, lease: &LeaseKey) -> Result<()> {
        self.block(async |fleet| fleet.release(lease).await)
    }

    pub fn expire_leases(&self) -> Result<Vec<LeaseKey>> {
        self.block(async |fleet| fleet.expire_leases().await)
    }

    pub fn collect(&self, run: &str, after: i64, limit: u32) -> Result<Vec<Collected>> {
        self.block(async |fleet| fleet.collect(run, after, limit).await)
    }

    pub fn collect_task(&self, run: &str, task: &str, through: i64) -> Result<Vec<Collected>> {
        self.block(async |fleet| fleet.collect_task(run, task, through).await)
    }

    pub fn prune(&self, run: &str, through: i64) -> Result<()> {
        self.block(async |fleet| fleet.prune(run, through).await)
    }

    pub fn stop_run(&self, run: &str, withdrawn: &Value) -> Result<()> {
        self.block(async |fleet| fleet.stop_run(run, withdrawn).await)
    }

    pub fn collect_position(&self, run: &str) -> Result<i64> {
        self.block(async |fleet| fleet.collect_position(run).await)
    }

    pub fn stopping(&self, held: &[LeaseKey]) -> Result<Vec<LeaseKey>> {
        self.block(async |fleet| fleet.stopping(held).await)
    }

    pub fn prune_collected(&self, run: &str, through: i64) -> Result<u64> {
        self.block(async |fleet| fleet.prune_collected(run, through).await)
    }

    pub fn request_control(&self, run: &str, task: &str, request: &Value) -> Result<bool> {
        self.block(async |fleet| fleet.request_control(run, task, request).await)
    }

    pub fn take_controls(&self, held: &[LeaseKey]) -> Result<Vec<(LeaseKey, Value)>> {
        self.block(async |fleet| fleet.take_controls(held).await)
    }

    pub fn task_status(&self, run: &str, task: &str) -> Result<Option<TaskStatus>> {
        self.block(async |fleet| fleet.task_status(run, task).await)
    }

    pub fn status(&self) -> Result<FleetStatus> {
        self.block(async |fleet| fleet.status().await)
    }

    /// A waiter woken when work is submitted (or a lease expires).
    pub fn work_waiter(&self) -> Waiter {
        Waiter::new(self.clone(), WORK_CHANNEL)
    }

    /// A waiter woken when anything is shipped or a lease ends.
    pub fn collect_waiter(&self) -> Waiter {
        Waiter::new(self.clone(), COLLECT_CHANNEL)
    }

    /// What run `run` has past `after`, waiting up to `timeout` for
    /// something to arrive: woken by NOTIFY, looking again at least every
    /// `Timings::poll` in case a notification was missed.
    pub fn collect_wait(
        &self,
        waiter: &mut Waiter,
        run: &str,
        after: i64,
        timeout: Duration,
    ) -> Result<Vec<Collected>> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let items = self.collect(run, after, 1_000)?;
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if !items.is_empty() || left.is_zero() {
                return Ok(items);
            }
            waiter.wait(left);
        }
    }
}

/// Blocks until a notification on its channel, a local wake-up, or a
/// timeout, whichever comes first. It listens from the moment it is made,
/// so a notification sent between a look and the wait is not missed. When
/// the listening connection is lost it waits by polling until it is back.
#[derive(Debug)]
pub struct Waiter {
    client: FleetClient,
    channel: &'static str,
    listener: Option<PgListener>,
    wake: Arc<Notify>,
}

impl Waiter {
    fn new(client: FleetClient, channel: &'static str) -> Self {
        let mut waiter = Self {
            client,
            channel,
            listener: None,
            wake: Arc::new(Notify::new()),
        };
        waiter.listen();
        waiter
    }

    /// A handle other threads use to end a wait early.
    pub fn waker(&self) -> Waker {
        Waker(self.wake.clone())
    }

    fn listen(&mut self) {
        if self.listener.is_some() {
            return;
        }
        let channel = self.channel;
        let pool = self.client.inner.fleet.pool().clone();
        self.listener = self.client.inner.runtime.block_on(async move {
            let mut listener = PgListener::connect_with(&pool).await.ok()?;
            listener.listen(channel).await.ok()?;
            Some(listener)
        });
    }

    /// Waits up to `timeout` (and at most `Timings::poll`): true when woken
    /// by a notification or a waker, false on a timeout.
    pub fn wait(&mut self, timeout: Duration) -> bool {
        self.listen();
        let timeout = timeout.min(self.client.timings().poll);
        let wake = self.wake.clone();
        let runtime = &self.client.inner.runtime;
        let listener = &mut self.listener;
        let (woken, lost) = runtime.block_on(async {
            let notified = async {
                match listener.as_mut() {
                    Some(listening) => match listening.try_recv().await {
                        Ok(Some(_)) => (true, false),
                        Ok(None) | Err(_) => (false, true),
                    },
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                answer = notified => answer,
                () = wake.notified() => (true, false),
                () = tokio::time::sleep(timeout) => (false, false),
            }
        });
        if lost {
            // The connection dropped: notifications sent meanwhile are gone,
            // so the caller looks again now and the next wait listens anew.
            let _entered = self.client.inner.runtime.enter();
            self.listener = None;
            return true;
        }
        woken
    }
}

impl Drop for Waiter {
    /// The listening connection goes back on the runtime it came from.
    fn drop(&mut self) {
        let _entered = self.client.inner.runtime.enter();
        self.listener.take();
    }
}

/// Ends a `Waiter`'s current or next wait from another thread.
#[derive(Debug, Clone)]
pub struct Waker(Arc<Notify>);

impl Waker {
    pub fn wake(&self) {
        self.0.notify_one();
    }
}

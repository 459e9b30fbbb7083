//! The run's money pool shared by the coordinator (task envelopes) and the
//! task threads (attempts of tasks without an envelope): the arithmetic is
//! `reprise_core::pool`; this adds the lock and the waiting.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

use reprise_agents::CancelToken;
use reprise_core::plan::Task;
use reprise_core::pool::{Claim, Hold, Pool, Reservation};

/// How often a waiting attempt looks at its cancel token.
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// The pool behind a lock, with a signal for attempts waiting on it.
#[derive(Debug)]
pub(crate) struct SharedPool {
    pool: Mutex<Pool>,
    settled: Condvar,
}

impl SharedPool {
    pub(crate) fn new(limit_micro_usd: Option<u64>) -> Self {
        Self {
            pool: Mutex::new(Pool::new(limit_micro_usd)),
            settled: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reserves `task`'s envelope. `Err` when it can never fit, `Ok(None)`
    /// when it must wait for headroom to come back.
    pub(crate) fn reserve(&self, task: &Task) -> Result<Option<Option<u64>>, String> {
        match self.lock().reserve(task.budget_micro_usd) {
            Reservation::Granted(envelope) => Ok(Some(envelope)),
            Reservation::Wait => Ok(None),
            Reservation::Exhausted {
                envelope_micro_usd,
                free_micro_usd,
            } => Err(format!(
                "budget_exhausted: its envelope of {} micro-dollars exceeds the {} left in the pool",
                envelope_micro_usd, free_micro_usd
            )),
        }
    }

    /// What the pool holds free (`None`: the run has no pool).
    pub(crate) fn free(&self) -> Option<u64> {
        self.lock().free_micro_usd()
    }

    /// Reserves a resumed task's envelope: what it had left when it was
    /// parked. `Ok(None)` when it must wait for headroom.
    pub(crate) fn reserve_left(&self, left: Option<u64>) -> Option<Option<u64>> {
        match self.lock().reserve(left) {
            Reservation::Granted(envelope) => Some(envelope),
            Reservation::Wait | Reservation::Exhausted { .. } => None,
        }
    }

    /// A task ended: its envelope (if any) is settled with what it spent.
    /// A task without an envelope settled each attempt as it went.
    pub(crate) fn settle(&self, envelope: Option<u64>, spent: u64) {
        if envelope.is_some() {
            self.lock().settle(envelope, spent);
            self.settled.notify_all();
        }
    }

    /// Sets how many drawing tasks could hold a share now (the coordinator
    /// counts them before it starts the tasks of a round).
    pub(crate) fn set_contenders(&self, contenders: u32) {
        self.lock().set_contenders(contenders);
    }

    /// The budget of one attempt of a task without an envelope, as it
    /// `claim`s it (`reprise_core::pool::Claim`): a share, or all that is
    /// free, held until the returned guard is dropped; or what is free,
    /// held by nobody, for an agent that cannot be held to a budget. Waits
    /// while it must, calling `on_wait` once when it starts to; `Some(0)`
    /// when nothing is left; `None` when the run has no pool. An envelope's
    /// own `remaining` is passed through untouched (it is reserved already).
    pub(crate) fn attempt_budget(
        &self,
        envelope_remaining: Option<u64>,
        claim: Claim,
        cancel: &CancelToken,
        on_wait: impl FnOnce(),
    ) -> AttemptHold<'_> {
        if envelope_remaining.is_some() {
            return AttemptHold::untouched(self, envelope_remaining, false);
        }
        let mut on_wait = Some(on_wait);
        let mut pool = self.lock();
        loop {
            match pool.hold(claim) {
                Hold::Unlimited => return AttemptHold::untouched(self, None, false),
                Hold::Granted(held) => {
                    return AttemptHold {
                        pool: self,
                        held: Some(held),
                        budget: Some(held),
                        spent: 0,
                        draws: true,
                    };
                }
                Hold::Unheld(free) => return AttemptHold::untouched(self, Some(free), true),
                Hold::Exhausted => return AttemptHold::untouched(self, Some(0), true),
                Hold::Wait if cancel.is_cancelled() => {
                    return AttemptHold::untouched(self, Some(0), true);
                }
                Hold::Wait => {
                    if let Some(on_wait) = on_wait.take() {
                        // Told without the lock held: it sends an event.
                        drop(pool);
                        on_wait();
                        pool = self.lock();
                        continue;
                    }
                    pool = self
                        .settled
                        .wait_timeout(pool, WAIT_SLICE)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
        }
    }
}

/// What one attempt holds of the pool; dropping it gives back what the
/// attempt did not spend.
#[derive(Debug)]
pub(crate) struct AttemptHold<'a> {
    pool: &'a SharedPool,
    held: Option<u64>,
    budget: Option<u64>,
    spent: u64,
    /// The task has no envelope: its spend is the pool's.
    draws: bool,
}

impl<'a> AttemptHold<'a> {
    fn untouched(pool: &'a SharedPool, budget: Option<u64>, draws: bool) -> Self {
        Self {
            pool,
            held: None,
            budget,
            spent: 0,
            draws,
        }
    }

    /// Gives back what the attempt did not spend, and says whether the
    /// pool may yet give more than it held: an attempt stopped at its hold
    /// was then stopped by its share, not by the pool's end.
    pub(crate) fn release(mut self) -> bool {
        self.settle()
    }

    /// Settles the attempt once: a hold gives back what was not spent; a
    /// spend with nothing held (an agent that cannot be held to a budget,
    /// or a zero budget one went past) leaves the pool. Whether the pool
    /// may yet give more than was held.
    fn settle(&mut self) -> bool {
        let mut pool = self.pool.lock();
        let more = match self.held.take() {
            Some(held) => {
                pool.release(held, self.spent);
                pool.may_give_more_than(held)
            }
            None => {
                if self.draws && self.spent > 0 {
                    pool.settle(None, self.spent);
                }
                false
            }
        };
        self.draws = false;
        drop(pool);
        self.pool.settled.notify_all();
        more
    }

    /// The attempt's budget.
    pub(crate) fn budget(&self) -> Option<u64> {
        self.budget
    }

    /// What the attempt spent, settled when the hold is dropped.
    pub(crate) fn spent(&mut self, spent_micro_usd: u64) {
        self.spent = spent_micro_usd;
    }
}

impl Drop for AttemptHold<'_> {
    fn drop(&mut self) {
        self.settle();
    }
}

//! The run's money pool (`budget_usd` at the top of a plan): a cap on what
//! the whole run spends, with or without task envelopes.
//!
//! A task with an envelope (`budget_usd` on the task or in `defaults`)
//! reserves it from the pool when it starts and gives back what it did not
//! spend when it ends. A task without one draws from the pool as it goes:
//! each of its attempts holds everything not yet reserved, is given that as
//! its budget, and returns what it did not spend when it ends. So the pool
//! can never be overspent, whatever mix of tasks runs; the price is that
//! attempts of tasks without envelopes take turns (an attempt waits while
//! another holds the pool), and envelopes are how tasks share a pool side
//! by side. An attempt that finds nothing left and nothing held that could
//! come back gets a budget of zero, which stops it as `budget_exhausted`.
//!
//! Pure arithmetic: the engine keeps it behind a lock and does the waiting.

/// The pool's state. `None` limit: no pool, nothing is counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    limit_micro_usd: Option<u64>,
    /// Not reserved by an envelope nor held by an attempt.
    free_micro_usd: u64,
    /// Envelopes and attempt holds not yet settled: money that may come back.
    outstanding: u32,
}

/// What reserving a task's envelope came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Reservation {
    /// The task may start with this envelope (`None`: it has none, or there
    /// is no pool).
    Granted(Option<u64>),
    /// Not now: what is reserved or held may come back.
    Wait,
    /// Never: the envelope is more than the pool can ever give back.
    Exhausted {
        envelope_micro_usd: u64,
        free_micro_usd: u64,
    },
}

/// What an attempt of a task without an envelope may spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Hold {
    /// No pool: no limit from it.
    Unlimited,
    /// This much is held for the attempt; settle it with what it spent.
    Granted(u64),
    /// Another attempt or envelope holds the rest; wait for it to settle.
    Wait,
    /// Nothing is left and nothing can come back.
    Exhausted,
}

impl Pool {
    /// A pool of `limit_micro_usd` (`None`: no pool).
    pub fn new(limit_micro_usd: Option<u64>) -> Self {
        Self {
            limit_micro_usd,
            free_micro_usd: limit_micro_usd.unwrap_or(0),
            outstanding: 0,
        }
    }

    /// Whether the run has a pool at all.
    pub fn is_limited(&self) -> bool {
        self.limit_micro_usd.is_some()
    }

    /// What is neither reserved nor held.
    pub fn free_micro_usd(&self) -> Option<u64> {
        self.limit_micro_usd.map(|_| self.free_micro_usd)
    }

    /// Reserves a task's envelope before it starts.
    pub fn reserve(&mut self, envelope_micro_usd: Option<u64>) -> Reservation {
        let (Some(_), Some(envelope)) = (self.limit_micro_usd, envelope_micro_usd) else {
            return Reservation::Granted(envelope_micro_usd);
        };
        if self.free_micro_usd >= envelope {
            self.free_micro_usd -= envelope;
            self.outstanding += 1;
            Reservation::Granted(Some(envelope))
        } else if self.outstanding > 0 {
            Reservation::Wait
        } else {
            Reservation::Exhausted {
                envelope_micro_usd: envelope,
                free_micro_usd: self.free_micro_usd,
            }
        }
    }

    /// A task with an envelope ended having spent `spent_micro_usd`: the
    /// unspent part comes back; spend beyond it (an agent that reports its
    /// cost only when done) still leaves the pool.
    pub fn settle(&mut self, envelope_micro_usd: Option<u64>, spent_micro_usd: u64) {
        if self.limit_micro_usd.is_none() {
            return;
        }
        match envelope_micro_usd {
            Some(envelope) => {
                self.outstanding = self.outstanding.saturating_sub(1);
                self.free_micro_usd =
                    (self.free_micro_usd + envelope).saturating_sub(spent_micro_usd);
            }
            None => self.free_micro_usd = self.free_micro_usd.saturating_sub(spent_micro_usd),
        }
    }

    /// Holds the free part of the pool for one attempt of a task without
    /// an envelope.
    pub fn hold(&mut self) -> Hold {
        if self.limit_micro_usd.is_none() {
            return Hold::Unlimited;
        }
        if self.free_micro_usd > 0 {
            let held = self.free_micro_usd;
            self.free_micro_usd = 0;
            self.outstanding += 1;
            Hold::Granted(held)
        } else if self.outstanding > 0 {
            Hold::Wait
        } else {
            Hold::Exhausted
        }
    }

    /// The attempt that held `held_micro_usd` spent `spent_micro_usd`.
    pub fn release(&mut self, held_micro_usd: u64, spent_micro_usd: u64) {
        if self.limit_micro_usd.is_none() {
            return;
        }
        self.outstanding = self.outstanding.saturating_sub(1);
        if spent_micro_usd <= held_micro_usd {
            self.free_micro_usd += held_micro_usd - spent_micro_usd;
        } else {
            // Spend past the hold (a cost reported only at the end) still
            // leaves the pool.
            self.free_micro_usd = self
                .free_micro_usd
                .saturating_sub(spent_micro_usd - held_micro_usd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_without_envelopes_draw_from_the_pool_until_it_is_empty() {
        let mut pool = Pool::new(Some(50_000));
        assert_eq!(pool.hold(), Hold::Granted(50_000));
        // While one attempt holds the pool, another waits.
        assert_eq!(pool.hold(), Hold::Wait);
        pool.release(50_000, 30_000);
        assert_eq!(pool.free_micro_usd(), Some(20_000));
        assert_eq!(pool.hold(), Hold::Granted(20_000));
        pool.release(20_000, 20_000);
        assert_eq!(pool.hold(), Hold::Exhausted);
    }

    #[test]
    fn envelopes_are_reserved_and_their_headroom_comes_back() {
        let mut pool = Pool::new(Some(100));
        assert_eq!(pool.reserve(Some(60)), Reservation::Granted(Some(60)));
        assert_eq!(pool.reserve(Some(60)), Reservation::Wait);
        // An attempt without an envelope gets only what is not reserved.
        assert_eq!(pool.hold(), Hold::Granted(40));
        pool.release(40, 0);
        pool.settle(Some(60), 10);
        assert_eq!(pool.free_micro_usd(), Some(90));
        assert_eq!(
            pool.reserve(Some(95)),
            Reservation::Exhausted {
                envelope_micro_usd: 95,
                free_micro_usd: 90
            }
        );
        assert_eq!(pool.reserve(None), Reservation::Granted(None));
    }

    #[test]
    fn without_a_pool_nothing_is_limited() {
        let mut pool = Pool::new(None);
        assert_eq!(pool.hold(), Hold::Unlimited);
        assert_eq!(pool.reserve(Some(5)), Reservation::Granted(Some(5)));
        assert_eq!(pool.free_micro_usd(), None);
    }
}

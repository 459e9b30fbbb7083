//! The run's money pool (`budget_usd` at the top of a plan): a cap on what
//! the whole run spends, with or without task envelopes.
//!
//! A task with an envelope (`budget_usd` on the task or in `defaults`)
//! reserves it from the pool when it starts and gives back what it did not
//! spend when it ends. A task without one draws from the pool as it goes.
//! How it draws depends on whether its agent can be held to a budget:
//!
//! - An agent that can (Claude Code's `--max-budget-usd`, the sim) holds a
//!   fair share for each attempt: what is not reserved nor held, divided
//!   among the drawing tasks that could hold a share now and do not
//!   (`contenders`, which the coordinator sets: the running drawing tasks
//!   and the ready ones that have a seat). The attempt is bounded by its
//!   share and gives back what it did not spend. So tasks run side by side
//!   up to the run's seats and the pool stays the cap.
//!   An attempt stopped at its share while the pool had more claims the
//!   whole of what is free for its retry, once no other attempt holds one.
//! - An agent that cannot (Codex and Gemini report no cost; a command may
//!   print one only when it is done) holds nothing: its attempt is told
//!   what is free, and what it reports having spent leaves the pool after.
//!
//! An attempt that finds nothing free waits while something held or
//! reserved may come back, and gets a budget of zero (which stops it as
//! `budget_exhausted`) when nothing can.
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
    /// How much those hold.
    outstanding_micro_usd: u64,
    /// Attempt holds not yet settled (a part of `outstanding`).
    holding: u32,
    /// The drawing tasks that could hold a share now, holding or not.
    contenders: u32,
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

/// How an attempt of a task without an envelope draws on the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Its agent can be held to a budget: it holds a fair share.
    Share,
    /// Its last attempt was stopped at its share while the pool had more:
    /// it waits until no other attempt holds a share, then holds all that
    /// is free, so a task that needs more than a share is not starved.
    Whole,
    /// Its agent cannot be held to a budget: it holds nothing, is told what
    /// is free, and pays after.
    Unbounded,
}

/// What an attempt of a task without an envelope may spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Hold {
    /// No pool: no limit from it.
    Unlimited,
    /// This much is held for the attempt; settle it with what it spent.
    Granted(u64),
    /// Nothing is held: the attempt may spend up to this (what is free),
    /// and what it spent is settled after.
    Unheld(u64),
    /// Nothing is free and something held or reserved may come back.
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
            outstanding_micro_usd: 0,
            holding: 0,
            contenders: 1,
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

    /// How many drawing tasks could hold a share now, holding or not: the
    /// divisor of the next share (with those already holding taken out).
    pub fn set_contenders(&mut self, contenders: u32) {
        self.contenders = contenders;
    }

    /// The share the next holding attempt gets of `free`: an equal part
    /// for each contender not holding yet (itself among them), rounded up so
    /// a few micro-dollars left are not lost to rounding.
    pub fn share_micro_usd(&self) -> u64 {
        let takers = self.contenders.saturating_sub(self.holding).max(1);
        self.free_micro_usd.div_ceil(u64::from(takers))
    }

    /// Whether the pool may yet give an attempt more than `held_micro_usd`:
    /// what is free and what others hold (which may come back) is more. An
    /// attempt stopped at its hold when this is true was stopped by its
    /// share, not by the pool's end.
    pub fn may_give_more_than(&self, held_micro_usd: u64) -> bool {
        self.limit_micro_usd.is_some()
            && self.free_micro_usd + self.outstanding_micro_usd > held_micro_usd
    }

    /// Reserves a task's envelope before it starts.
    pub fn reserve(&mut self, envelope_micro_usd: Option<u64>) -> Reservation {
        let (Some(_), Some(envelope)) = (self.limit_micro_usd, envelope_micro_usd) else {
            return Reservation::Granted(envelope_micro_usd);
        };
        if self.free_micro_usd >= envelope {
            self.free_micro_usd -= envelope;
            self.outstanding += 1;
            self.outstanding_micro_usd += envelope;
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
                self.outstanding_micro_usd = self.outstanding_micro_usd.saturating_sub(envelope);
                self.free_micro_usd =
                    (self.free_micro_usd + envelope).saturating_sub(spent_micro_usd);
            }
            None => self.free_micro_usd = self.free_micro_usd.saturating_sub(spent_micro_usd),
        }
    }

    /// What one attempt of a task without an envelope may spend, as it
    /// `claim`s it.
    pub fn hold(&mut self, claim: Claim) -> Hold {
        if self.limit_micro_usd.is_none() {
            return Hold::Unlimited;
        }
        if self.free_micro_usd == 0 {
            return if self.outstanding > 0 {
                Hold::Wait
            } else {
                Hold::Exhausted
            };
        }
        let held = match claim {
            Claim::Unbounded => return Hold::Unheld(self.free_micro_usd),
            Claim::Share => self.share_micro_usd(),
            // Its turn comes when no other attempt holds a share.
            Claim::Whole if self.holding > 0 => return Hold::Wait,
            Claim::Whole => self.free_micro_usd,
        };
        self.free_micro_usd -= held;
        self.outstanding += 1;
        self.outstanding_micro_usd += held;
        self.holding += 1;
        Hold::Granted(held)
    }

    /// The attempt that held `held_micro_usd` spent `spent_micro_usd`.
    pub fn release(&mut self, held_micro_usd: u64, spent_micro_usd: u64) {
        if self.limit_micro_usd.is_none() {
            return;
        }
        self.outstanding = self.outstanding.saturating_sub(1);
        self.outstanding_micro_usd = self.outstanding_micro_usd.saturating_sub(held_micro_usd);
        self.holding = self.holding.saturating_sub(1);
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
        assert_eq!(pool.hold(Claim::Share), Hold::Granted(50_000));
        // While one attempt holds the whole pool, another waits.
        assert_eq!(pool.hold(Claim::Share), Hold::Wait);
        pool.release(50_000, 30_000);
        assert_eq!(pool.free_micro_usd(), Some(20_000));
        assert_eq!(pool.hold(Claim::Share), Hold::Granted(20_000));
        pool.release(20_000, 20_000);
        assert_eq!(pool.hold(Claim::Share), Hold::Exhausted);
    }

    #[test]
    fn envelopes_are_reserved_and_their_headroom_comes_back() {
        let mut pool = Pool::new(Some(100));
        assert_eq!(pool.reserve(Some(60)), Reservation::Granted(Some(60)));
        assert_eq!(pool.reserve(Some(60)), Reservation::Wait);
        // An attempt without an envelope gets only what is not reserved.
        assert_eq!(pool.hold(Claim::Share), Hold::Granted(40));
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
        assert_eq!(pool.hold(Claim::Share), Hold::Unlimited);
        assert_eq!(pool.hold(Claim::Unbounded), Hold::Unlimited);
        assert_eq!(pool.reserve(Some(5)), Reservation::Granted(Some(5)));
        assert_eq!(pool.free_micro_usd(), None);
    }

    #[test]
    fn contenders_hold_equal_shares_side_by_side() {
        let mut pool = Pool::new(Some(1_000_000));
        pool.set_contenders(3);
        assert_eq!(pool.hold(Claim::Share), Hold::Granted(333_334));
        assert_eq!(pool.hold(Claim::Share), Hold::Granted(333_333));
        assert_eq!(pool.hold(Claim::Share), Hold::Granted(333_333));
        assert_eq!(pool.free_micro_usd(), Some(0));
        // A fourth waits for one of them to settle.
        assert_eq!(pool.hold(Claim::Share), Hold::Wait);
        pool.release(333_334, 100_000);
        // The first's retry is the only one not holding: it gets what came back.
        assert_eq!(pool.hold(Claim::Share), Hold::Granted(233_334));
        for held in [333_333, 333_333, 233_334] {
            pool.release(held, held);
        }
        assert_eq!(pool.free_micro_usd(), Some(0));
        assert_eq!(pool.hold(Claim::Share), Hold::Exhausted);
    }

    #[test]
    fn a_share_leaves_room_for_contenders_not_holding_yet() {
        let mut pool = Pool::new(Some(900));
        pool.set_contenders(3);
        assert_eq!(pool.hold(Claim::Share), Hold::Granted(300));
        // A contender fewer (a task ended): the one left not holding gets the rest.
        pool.set_contenders(2);
        assert_eq!(pool.hold(Claim::Share), Hold::Granted(600));
        assert_eq!(pool.free_micro_usd(), Some(0));
    }

    #[test]
    fn agents_that_cannot_be_bounded_hold_nothing_and_pay_after() {
        let mut pool = Pool::new(Some(100));
        pool.set_contenders(2);
        assert_eq!(pool.hold(Claim::Unbounded), Hold::Unheld(100));
        assert_eq!(pool.hold(Claim::Unbounded), Hold::Unheld(100));
        assert_eq!(pool.free_micro_usd(), Some(100));
        pool.settle(None, 70);
        assert_eq!(pool.hold(Claim::Share), Hold::Granted(15));
        pool.release(15, 15);
        pool.settle(None, 30);
        assert_eq!(pool.hold(Claim::Unbounded), Hold::Exhausted);
    }

    #[test]
    fn an_attempt_stopped_at_its_share_takes_the_whole_pool_in_its_turn() {
        let mut pool = Pool::new(Some(1_000));
        pool.set_contenders(2);
        assert_eq!(pool.hold(Claim::Share), Hold::Granted(500));
        assert_eq!(pool.hold(Claim::Share), Hold::Granted(500));
        // The first was stopped at its share before it spent anything (an
        // agent that refuses a step past its budget).
        pool.release(500, 0);
        // Its share ran out, not the pool: a retry may be given more.
        assert!(pool.may_give_more_than(500));
        // The second still holds one: the whole claim waits for it.
        assert_eq!(pool.hold(Claim::Whole), Hold::Wait);
        pool.release(500, 100);
        assert_eq!(pool.hold(Claim::Whole), Hold::Granted(900));
        assert_eq!(pool.hold(Claim::Share), Hold::Wait);
        pool.release(900, 900);
        // Stopped at all there was: the pool's end.
        assert!(!pool.may_give_more_than(900));
    }

    #[test]
    fn a_retry_given_no_more_than_it_had_is_the_pool_s_end() {
        let mut pool = Pool::new(Some(1_000));
        pool.set_contenders(2);
        assert_eq!(pool.hold(Claim::Share), Hold::Granted(500));
        assert_eq!(pool.hold(Claim::Share), Hold::Granted(500));
        // The first spent its whole share: what may come back (the other's
        // 500) is no more than it had, so it is not retried for a share.
        pool.release(500, 500);
        assert!(!pool.may_give_more_than(500));
    }
}

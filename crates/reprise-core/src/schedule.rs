//! The coordinator's scheduling decisions: whether a queued task is
//! settled without running (a stop, a dependency that ended without a
//! result), whether it may take a seat or what it waits for, how many tasks
//! contend for the pool's shared part, and what the coordinator waits for
//! when nothing more can start.
//!
//! Pure: the engine says where each task stands and how many seats are
//! taken; the clock is read there and the time left until a park's wake
//! comes in as a duration. The engine acts on each answer (ledger rows,
//! the run's record, starting the task on a seat).

use std::time::Duration;

/// Where a task stands, as scheduling sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Standing {
    /// Not started (or queued again): waits for its dependencies, a seat or
    /// its envelope.
    Queued,
    /// Holds a seat.
    Running,
    /// Parked: holds no seat, has not ended, and is not ready to run.
    Parked,
    /// Ended with a result its dependents build on.
    Delivered,
    /// Ended blocked: it never ran or was stopped before it could.
    Blocked,
    /// Ended without a result: failed or cancelled.
    Undelivered,
}

impl Standing {
    /// Whether the task has ended without a result its dependents can use.
    pub fn ended_without_result(self) -> bool {
        matches!(self, Self::Blocked | Self::Undelivered)
    }
}

/// A queued task settled before anything runs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Settle<D> {
    /// The run was stopped: what has not started is cancelled
    /// (`run --continue` starts it).
    Cancel,
    /// A dependency ended without a result: the task is blocked. `blocked`
    /// says whether that dependency was itself blocked.
    Block { dependency: D, blocked: bool },
}

/// Whether a queued task is settled without running: a stop cancels it
/// first; otherwise the first dependency (in the order given) that ended
/// without a result blocks it. `None`: it stays queued.
pub fn settle<D>(
    stopped: bool,
    dependencies: impl IntoIterator<Item = (D, Standing)>,
) -> Option<Settle<D>> {
    if stopped {
        return Some(Settle::Cancel);
    }
    dependencies
        .into_iter()
        .find(|(_, standing)| standing.ended_without_result())
        .map(|(dependency, standing)| Settle::Block {
            dependency,
            blocked: standing == Standing::Blocked,
        })
}

/// Whether a queued task takes a seat now, or what it waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Admission<D> {
    /// The first dependency (in the order given) without a result yet.
    AwaitDependency(D),
    /// Every seat is taken.
    AwaitSeat,
    /// It may start: its base and its envelope are the engine's to find.
    Seat,
}

/// Whether a queued task may start: every dependency delivered and a seat
/// free (`running < seats`).
pub fn admit<D>(
    dependencies: impl IntoIterator<Item = (D, Standing)>,
    seats: usize,
    running: usize,
) -> Admission<D> {
    if let Some((dependency, _)) = dependencies
        .into_iter()
        .find(|(_, standing)| *standing != Standing::Delivered)
    {
        return Admission::AwaitDependency(dependency);
    }
    if running >= seats {
        return Admission::AwaitSeat;
    }
    Admission::Seat
}

/// One task as the pool's contention count sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contender {
    /// Whether it draws on the pool's shared part: no envelope of its own,
    /// and an agent that can be held to a budget.
    pub draws_on_pool: bool,
    pub standing: Standing,
    /// Every dependency delivered.
    pub dependencies_delivered: bool,
}

/// How many tasks drawing on the pool could hold a share this round: those
/// running, and those ready to start that the free seats will take.
pub fn contenders(tasks: impl IntoIterator<Item = Contender>, seats: usize, running: usize) -> u32 {
    let mut at_work = 0usize;
    let mut ready = 0usize;
    for task in tasks.into_iter().filter(|task| task.draws_on_pool) {
        match task.standing {
            Standing::Running => at_work += 1,
            Standing::Queued if task.dependencies_delivered => ready += 1,
            _ => {}
        }
    }
    u32::try_from(at_work + ready.min(seats.saturating_sub(running))).unwrap_or(u32::MAX)
}

/// The longest the coordinator waits at once for a park's wake time, so a
/// stop signal is seen while it waits.
pub const WAKE_SLICE: Duration = Duration::from_millis(200);

/// What the coordinator does when it has started what it could.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Idle {
    /// Nothing runs and no park waits for its time: the run is over.
    Finished,
    /// The run was stopped and nothing runs: the timed parks stay parked
    /// (`run --continue` wakes them after their time) and are forgotten.
    ForgetTimedParks,
    /// Wait this long for a message, then wake the parks whose time came
    /// (unless the run was stopped meanwhile).
    AwaitWake(Duration),
    /// Wait for a task's message (or a held-back save's time).
    AwaitMessage,
}

/// What to wait for, from the seats taken, the time left until the
/// earliest timed park's wake (`None`: no timed park), and whether the run
/// was stopped.
pub fn idle(running: usize, next_wake_in: Option<Duration>, stopped: bool) -> Idle {
    match next_wake_in {
        None if running == 0 => Idle::Finished,
        None => Idle::AwaitMessage,
        Some(_) if stopped && running == 0 => Idle::ForgetTimedParks,
        Some(left) => Idle::AwaitWake(left.min(WAKE_SLICE)),
    }
}

/// The parks whose wake time has come, in the order given.
pub fn due<K: Clone, T: PartialOrd + Copy>(
    wakes: impl IntoIterator<Item = (K, T)>,
    now: T,
) -> Vec<K> {
    wakes
        .into_iter()
        .filter(|(_, at)| *at <= now)
        .map(|(key, _)| key)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ALL: [Standing; 6] = [
        Standing::Queued,
        Standing::Running,
        Standing::Parked,
        Standing::Delivered,
        Standing::Blocked,
        Standing::Undelivered,
    ];

    fn standing() -> impl Strategy<Value = Standing> {
        proptest::sample::select(ALL.to_vec())
    }

    fn dependencies() -> impl Strategy<Value = Vec<(usize, Standing)>> {
        proptest::collection::vec(standing(), 0..6)
            .prop_map(|standings| standings.into_iter().enumerate().collect())
    }

    #[test]
    fn a_stop_cancels_before_any_dependency_is_looked_at() {
        let blocked = [(0, Standing::Blocked)];
        assert_eq!(settle(true, blocked), Some(Settle::Cancel));
        assert_eq!(
            settle(false, blocked),
            Some(Settle::Block {
                dependency: 0,
                blocked: true
            })
        );
        assert_eq!(
            settle(false, [(0, Standing::Running), (1, Standing::Undelivered)]),
            Some(Settle::Block {
                dependency: 1,
                blocked: false
            })
        );
        assert_eq!(settle(false, [(0, Standing::Parked)]), None);
    }

    #[test]
    fn a_seat_is_taken_only_when_one_is_free_and_every_dependency_delivered() {
        assert_eq!(admit::<usize>([], 1, 0), Admission::Seat);
        assert_eq!(admit::<usize>([], 1, 1), Admission::AwaitSeat);
        assert_eq!(
            admit([(7, Standing::Delivered), (8, Standing::Running)], 4, 0),
            Admission::AwaitDependency(8)
        );
        // A missing dependency is waited for before a seat is.
        assert_eq!(
            admit([(7, Standing::Queued)], 1, 1),
            Admission::AwaitDependency(7)
        );
    }

    #[test]
    fn contenders_count_the_running_and_the_ready_the_free_seats_take() {
        let task = |draws_on_pool, standing, dependencies_delivered| Contender {
            draws_on_pool,
            standing,
            dependencies_delivered,
        };
        let tasks = [
            task(true, Standing::Running, true),
            task(true, Standing::Queued, true),
            task(true, Standing::Queued, true),
            task(true, Standing::Queued, false),
            task(false, Standing::Queued, true),
            task(false, Standing::Running, true),
            task(true, Standing::Parked, true),
        ];
        // Two seats, two running: no ready task can start this round.
        assert_eq!(contenders(tasks, 2, 2), 1);
        assert_eq!(contenders(tasks, 3, 2), 2);
        assert_eq!(contenders(tasks, 8, 2), 3);
        assert_eq!(contenders([], 8, 0), 0);
    }

    #[test]
    fn idle_decisions_cover_every_case() {
        let long = Duration::from_secs(60);
        let short = Duration::from_millis(5);
        for stopped in [false, true] {
            assert_eq!(idle(0, None, stopped), Idle::Finished);
            assert_eq!(idle(2, None, stopped), Idle::AwaitMessage);
            assert_eq!(idle(1, Some(long), stopped), Idle::AwaitWake(WAKE_SLICE));
            assert_eq!(idle(1, Some(short), stopped), Idle::AwaitWake(short));
        }
        assert_eq!(idle(0, Some(long), true), Idle::ForgetTimedParks);
        assert_eq!(idle(0, Some(long), false), Idle::AwaitWake(WAKE_SLICE));
        assert_eq!(
            idle(0, Some(Duration::ZERO), false),
            Idle::AwaitWake(Duration::ZERO)
        );
    }

    #[test]
    fn due_keeps_the_parks_whose_time_has_come_in_order() {
        let wakes = [("a", 5), ("b", 1), ("c", 9), ("d", 5)];
        assert_eq!(due(wakes, 5), vec!["a", "b", "d"]);
        assert_eq!(due(wakes, 0), Vec::<&str>::new());
    }

    proptest! {
        #[test]
        fn settle_blocks_exactly_on_the_first_dependency_that_ended_without_a_result(
            stopped in any::<bool>(),
            dependencies in dependencies(),
        ) {
            let first = dependencies.iter().find(|(_, standing)| standing.ended_without_result());
            let expected = if stopped {
                Some(Settle::Cancel)
            } else {
                first.map(|(index, standing)| Settle::Block {
                    dependency: *index,
                    blocked: *standing == Standing::Blocked,
                })
            };
            prop_assert_eq!(settle(stopped, dependencies.clone()), expected);
        }

        #[test]
        fn admit_seats_a_task_only_when_all_is_ready(
            dependencies in dependencies(),
            seats in 1usize..5,
            running in 0usize..6,
        ) {
            let admission = admit(dependencies.clone(), seats, running);
            let waiting_on = dependencies
                .iter()
                .find(|(_, standing)| *standing != Standing::Delivered)
                .map(|(index, _)| *index);
            match admission {
                Admission::Seat => {
                    prop_assert!(waiting_on.is_none());
                    prop_assert!(running < seats);
                }
                Admission::AwaitSeat => {
                    prop_assert!(waiting_on.is_none());
                    prop_assert!(running >= seats);
                }
                Admission::AwaitDependency(index) => prop_assert_eq!(Some(index), waiting_on),
            }
        }

        #[test]
        fn contenders_stay_between_the_running_and_every_drawing_task(
            tasks in proptest::collection::vec(
                (any::<bool>(), standing(), any::<bool>()).prop_map(
                    |(draws_on_pool, standing, dependencies_delivered)| Contender {
                        draws_on_pool,
                        standing,
                        dependencies_delivered,
                    },
                ),
                0..12,
            ),
            seats in 1usize..6,
            running in 0usize..6,
        ) {
            let count = contenders(tasks.clone(), seats, running) as usize;
            let drawing = tasks.iter().filter(|task| task.draws_on_pool);
            let at_work = drawing.clone().filter(|task| task.standing == Standing::Running).count();
            let ready = drawing
                .clone()
                .filter(|task| task.standing == Standing::Queued && task.dependencies_delivered)
                .count();
            prop_assert!(count >= at_work);
            prop_assert!(count <= at_work + ready);
            prop_assert!(count - at_work <= seats.saturating_sub(running));
            // Seats to spare: every ready drawing task is counted.
            if ready <= seats.saturating_sub(running) {
                prop_assert_eq!(count, at_work + ready);
            }
        }

        #[test]
        fn idle_finishes_only_with_nothing_running_and_no_timed_park(
            running in 0usize..4,
            wake_ms in proptest::option::of(0u64..1_000),
            stopped in any::<bool>(),
        ) {
            let decision = idle(running, wake_ms.map(Duration::from_millis), stopped);
            prop_assert_eq!(decision == Idle::Finished, running == 0 && wake_ms.is_none());
            if let Idle::AwaitWake(wait) = decision {
                prop_assert!(wait <= WAKE_SLICE);
                prop_assert!(wake_ms.is_some());
            }
            if decision == Idle::ForgetTimedParks {
                prop_assert!(stopped && running == 0);
            }
        }
    }
}

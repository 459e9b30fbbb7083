//! What `reprise watch` shows and in what order: every watched task as one
//! row, and the attention list in front of it, the tasks that wait on a
//! person or on something outside the run, each with what wakes it.
//!
//! The board is updated one task at a time: an update re-files only that
//! task (`O(log n)` in the number of tasks), so a watcher of a run with
//! hundreds of tasks pays for what changed, not for what it shows. The
//! selection follows its task when the task moves between the lists.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::plan::Spend;

/// Why a task needs attention. The order of the variants is the order of
/// the attention list: what only a person can wake first, what wakes by
/// itself next, what ended badly last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Flag {
    /// Parked until someone approves it (`reprise approve`), not approved yet.
    Approval,
    /// Parked while its agent waits on a permission or a question, until
    /// someone approves it (the engine parks these until approval); once
    /// approved it is [`Flag::Parked`].
    Permission { question: Option<String> },
    /// Parked until a resume: by request, or approved and not resumed yet.
    Parked {
        approved: bool,
        reason: Option<String>,
    },
    /// Parked by a usage limit until the limit resets.
    UsageLimit { resets_at: String },
    /// Parked by request until a time.
    UntilTime { at: String },
    /// It ran out of attempts, or could not run.
    Failed { reason: Option<String> },
    /// A task it depends on did not deliver.
    Blocked { reason: Option<String> },
}

impl Flag {
    /// Its place in the attention list (lower first).
    pub fn rank(&self) -> u8 {
        match self {
            Self::Approval => 0,
            Self::Permission { .. } => 1,
            Self::Parked { .. } => 2,
            Self::UsageLimit { .. } => 3,
            Self::UntilTime { .. } => 4,
            Self::Failed { .. } => 5,
            Self::Blocked { .. } => 6,
        }
    }

    /// A word for the list's first column.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Approval => "approval",
            Self::Permission { .. } => "permission",
            Self::Parked { .. } => "parked",
            Self::UsageLimit { .. } => "usage limit",
            Self::UntilTime { .. } => "parked",
            Self::Failed { .. } => "failed",
            Self::Blocked { .. } => "blocked",
        }
    }

    /// What it waits for, in words: the question, the reset time, the
    /// reason.
    pub fn detail(&self) -> Option<String> {
        match self {
            Self::Approval => None,
            Self::Permission { question } => question.as_ref().map(|q| format!("asks: {q}")),
            Self::Parked { approved, reason } => match (approved, reason) {
                (true, _) => Some("approved".to_owned()),
                (false, Some(reason)) => Some(reason.clone()),
                (false, None) => None,
            },
            Self::UsageLimit { resets_at } => Some(format!("resets at {resets_at}")),
            Self::UntilTime { at } => Some(format!("until {at}")),
            Self::Failed { reason } | Self::Blocked { reason } => reason.clone(),
        }
    }

    /// What wakes it, with the watch's key where one does it.
    pub fn wakes(&self, run_id: &str) -> String {
        match self {
            Self::Approval | Self::Permission { .. } => "approve (a), then resume (r)".to_owned(),
            Self::Parked { .. } => "a resume (r)".to_owned(),
            Self::UsageLimit { resets_at } => {
                format!("wakes by itself at {resets_at}; sooner: resume (r)")
            }
            Self::UntilTime { at } => format!("wakes by itself at {at}; sooner: resume (r)"),
            Self::Failed { .. } => format!("reprise run --retry-failed {run_id}"),
            Self::Blocked { .. } => {
                format!("its dependency passing: reprise run --retry-failed {run_id}")
            }
        }
    }
}

/// One watched task, as the board shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskView {
    pub run_id: String,
    pub plan: String,
    pub task_id: String,
    /// Where it is: `running`, `judging`, `queued`, `waiting (seat)`,
    /// `paused`, `suspended`, `passed`, ...
    pub phase: String,
    /// The latest attempt started (0: none yet).
    pub attempt: u32,
    /// When that attempt started, as Unix milliseconds, while it runs.
    pub attempt_started_ms: Option<i64>,
    /// What its attempts reported they cost.
    pub spent_known_micro_usd: u64,
    /// How many of its attempts reported no cost (one running counts).
    pub costs_unknown: u64,
    /// The host it runs on.
    pub host: String,
    /// Why it needs attention, if it does.
    pub flag: Option<Flag>,
    /// Whether its run is live (a process drives it).
    pub live: bool,
}

impl TaskView {
    pub fn key(&self) -> RowKey {
        RowKey {
            run_id: self.run_id.clone(),
            plan: self.plan.clone(),
            task_id: self.task_id.clone(),
        }
    }

    pub fn spend(&self) -> Spend {
        Spend {
            known_micro_usd: self.spent_known_micro_usd,
            unknown: self.costs_unknown,
        }
    }

    /// How long its running attempt has taken at `now_ms`.
    pub fn elapsed_ms(&self, now_ms: i64) -> Option<u64> {
        self.attempt_started_ms
            .map(|started| u64::try_from(now_ms.saturating_sub(started)).unwrap_or(0))
    }

    fn order(&self) -> Order {
        Order {
            rank: self.flag.as_ref().map_or(UNFLAGGED, Flag::rank),
            key: self.key(),
        }
    }
}

/// A task of a run.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct RowKey {
    pub run_id: String,
    pub plan: String,
    pub task_id: String,
}

const UNFLAGGED: u8 = u8::MAX;

/// A row's place on the board: flagged rows first, by rank, then by task.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Order {
    rank: u8,
    key: RowKey,
}

/// Every watched task, the attention list in front, and the selection.
#[derive(Debug, Clone, Default)]
pub struct Board {
    rows: BTreeMap<RowKey, TaskView>,
    order: BTreeSet<Order>,
    selected: Option<RowKey>,
}

impl Board {
    pub fn new() -> Self {
        Self::default()
    }

    /// Puts `view` on the board in place of its task's earlier row; returns
    /// whether anything changed. The first row on the board is selected
    /// when nothing is.
    pub fn update(&mut self, view: TaskView) -> bool {
        let key = view.key();
        if let Some(old) = self.rows.get(&key) {
            if *old == view {
                return false;
            }
            self.order.remove(&old.order());
        }
        self.order.insert(view.order());
        self.rows.insert(key, view);
        self.keep_selection();
        true
    }

    /// Takes a task off the board.
    pub fn remove(&mut self, key: &RowKey) -> bool {
        let Some(old) = self.rows.remove(key) else {
            return false;
        };
        self.order.remove(&old.order());
        if self.selected.as_ref() == Some(key) {
            self.selected = None;
        }
        self.keep_selection();
        true
    }

    /// The first row selected when none is.
    fn keep_selection(&mut self) {
        if self.selected.is_none() {
            self.selected = self.order.first().map(|order| order.key.clone());
        }
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn get(&self, key: &RowKey) -> Option<&TaskView> {
        self.rows.get(key)
    }

    /// The attention list, in order.
    pub fn attention(&self) -> impl Iterator<Item = &TaskView> {
        self.order
            .iter()
            .take_while(|order| order.rank != UNFLAGGED)
            .filter_map(|order| self.rows.get(&order.key))
    }

    /// How many tasks need attention.
    pub fn attention_len(&self) -> usize {
        self.attention().count()
    }

    /// Every task, by run, plan and id.
    pub fn tasks(&self) -> impl Iterator<Item = &TaskView> {
        self.rows.values()
    }

    /// The selected task.
    pub fn selected(&self) -> Option<&TaskView> {
        self.selected.as_ref().and_then(|key| self.rows.get(key))
    }

    pub fn selected_key(&self) -> Option<&RowKey> {
        self.selected.as_ref()
    }

    /// Selects the first row: the attention list's first entry, when it has
    /// one.
    pub fn select_first(&mut self) {
        self.selected = self.order.first().map(|order| order.key.clone());
    }

    /// Selects the next row: down the attention list, then the other tasks.
    pub fn select_next(&mut self) {
        self.step(true);
    }

    /// Selects the row before.
    pub fn select_previous(&mut self) {
        self.step(false);
    }

    fn step(&mut self, forward: bool) {
        let Some(current) = self.selected().map(TaskView::order) else {
            self.selected = self.order.first().map(|order| order.key.clone());
            return;
        };
        let next = if forward {
            self.order
                .range((
                    std::ops::Bound::Excluded(&current),
                    std::ops::Bound::Unbounded,
                ))
                .next()
        } else {
            self.order.range(..&current).next_back()
        };
        if let Some(next) = next {
            self.selected = Some(next.key.clone());
        }
    }

    /// Where the selection is in the board's order: in the attention list
    /// (its index there) or among the other tasks (its index by task).
    pub fn selected_place(&self) -> Option<Place> {
        let order = self.selected()?.order();
        if order.rank == UNFLAGGED {
            Some(Place::Task(self.rows.range(..&order.key).count()))
        } else {
            Some(Place::Attention(self.order.range(..&order).count()))
        }
    }
}

/// Where the selected row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Attention(usize),
    Task(usize),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(task: &str, flag: Option<Flag>) -> TaskView {
        TaskView {
            run_id: "R-1".to_owned(),
            plan: "p".to_owned(),
            task_id: task.to_owned(),
            phase: "running".to_owned(),
            attempt: 1,
            attempt_started_ms: Some(1_000),
            spent_known_micro_usd: 0,
            costs_unknown: 1,
            host: "here".to_owned(),
            flag,
            live: true,
        }
    }

    fn ids<'a>(views: impl Iterator<Item = &'a TaskView>) -> Vec<&'a str> {
        views.map(|view| view.task_id.as_str()).collect()
    }

    #[test]
    fn the_attention_list_puts_what_only_a_person_wakes_first() {
        let mut board = Board::new();
        board.update(view("a-running", None));
        board.update(view("b-failed", Some(Flag::Failed { reason: None })));
        board.update(view(
            "c-limit",
            Some(Flag::UsageLimit {
                resets_at: "2026-12-01T18:00:00Z".to_owned(),
            }),
        ));
        board.update(view("d-approval", Some(Flag::Approval)));
        board.update(view("e-blocked", Some(Flag::Blocked { reason: None })));
        board.update(view(
            "f-permission",
            Some(Flag::Permission {
                question: Some("may I push?".to_owned()),
            }),
        ));
        assert_eq!(
            ids(board.attention()),
            [
                "d-approval",
                "f-permission",
                "c-limit",
                "b-failed",
                "e-blocked"
            ]
        );
        assert_eq!(board.tasks().count(), 6);
        // The first row on the board is selected when it comes; the
        // watch's first frame selects the attention list's first entry.
        let mut fresh = Board::new();
        for task in board.tasks() {
            fresh.update(task.clone());
        }
        assert_eq!(fresh.selected().unwrap().task_id, "a-running");
        fresh.select_first();
        assert_eq!(fresh.selected().unwrap().task_id, "d-approval");
    }

    #[test]
    fn the_selection_walks_the_attention_list_then_the_tasks_and_follows_its_task() {
        let mut board = Board::new();
        board.update(view("park", Some(Flag::Approval)));
        board.update(view("a", None));
        board.update(view("b", None));
        assert_eq!(board.selected().unwrap().task_id, "park");
        assert_eq!(board.selected_place(), Some(Place::Attention(0)));
        board.select_previous();
        assert_eq!(board.selected().unwrap().task_id, "park");
        board.select_next();
        assert_eq!(board.selected().unwrap().task_id, "a");
        assert_eq!(board.selected_place(), Some(Place::Task(0)));
        board.select_next();
        board.select_next();
        assert_eq!(board.selected().unwrap().task_id, "b");
        assert_eq!(board.selected_place(), Some(Place::Task(1)));
        // Approved: still parked until a resume, and still selected where
        // it moved to.
        board.select_previous();
        board.select_previous();
        assert!(board.update(view(
            "park",
            Some(Flag::Parked {
                approved: true,
                reason: None
            })
        )));
        assert_eq!(board.selected().unwrap().task_id, "park");
        assert_eq!(
            board
                .selected()
                .unwrap()
                .flag
                .as_ref()
                .unwrap()
                .wakes("R-1"),
            "a resume (r)"
        );
        // Resumed: it leaves the attention list, the selection with it.
        board.update(view("park", None));
        assert_eq!(board.attention_len(), 0);
        assert_eq!(board.selected().unwrap().task_id, "park");
        assert_eq!(board.selected_place(), Some(Place::Task(2)));
        // The same row again changes nothing.
        assert!(!board.update(view("park", None)));
        assert!(board.remove(&view("park", None).key()));
        assert_eq!(board.selected().unwrap().task_id, "a");
    }

    #[test]
    fn an_unknown_cost_stays_unknown() {
        let running = view("a", None);
        assert_eq!(running.spend().total_micro_usd(), None);
        assert_eq!(running.elapsed_ms(4_500), Some(3_500));
    }
}

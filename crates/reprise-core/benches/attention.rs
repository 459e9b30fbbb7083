//! What `reprise watch`'s board costs as tasks change: one task's update
//! on a board of 200 (and 2,000) tasks, beside remaking the whole board
//! from its rows, the price a watch that re-read everything each tick
//! would pay; and a move of the selection.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use reprise_core::attention::{Board, Flag, TaskView};

fn view(n: usize, flagged: bool) -> TaskView {
    TaskView {
        run_id: "R-01J00000000000000000000000".to_owned(),
        plan: "bench".to_owned(),
        task_id: format!("task-{n:04}"),
        phase: "running".to_owned(),
        attempt: 1,
        attempt_started_ms: Some(1_000),
        spent_known_micro_usd: 10_000,
        costs_unknown: 1,
        host: "build-1".to_owned(),
        // One task in ten waits on someone.
        flag: n
            .is_multiple_of(10)
            .then_some(Flag::Approval)
            .filter(|_| flagged),
        live: true,
    }
}

fn board_of(tasks: usize) -> Board {
    let mut board = Board::new();
    for n in 0..tasks {
        board.update(view(n, true));
    }
    board.select_first();
    board
}

fn update(c: &mut Criterion) {
    let mut group = c.benchmark_group("watch_board");
    for tasks in [200, 2_000] {
        let mut board = board_of(tasks);
        let mut flip = false;
        group.bench_with_input(
            BenchmarkId::new("update_one_task", tasks),
            &tasks,
            |b, _| {
                b.iter(|| {
                    // The task moves in and out of the attention list.
                    flip = !flip;
                    board.update(view(7, flip))
                });
            },
        );
        let rows: Vec<TaskView> = (0..tasks).map(|n| view(n, true)).collect();
        group.bench_with_input(
            BenchmarkId::new("remake_whole_board", tasks),
            &tasks,
            |b, _| {
                b.iter(|| {
                    let mut board = Board::new();
                    for row in &rows {
                        board.update(row.clone());
                    }
                    board
                });
            },
        );
        let mut board = board_of(tasks);
        group.bench_with_input(BenchmarkId::new("select_next", tasks), &tasks, |b, _| {
            b.iter(|| board.select_next());
        });
    }
    group.finish();
}

criterion_group!(benches, update);
criterion_main!(benches);

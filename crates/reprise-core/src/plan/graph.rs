//! Dependency cycles: found by a depth-first walk in plan order, reported at
//! the `depends_on` entry that closes them.

/// A dependency cycle, found at the `depends_on` entry that closes it.
pub(super) struct CycleFound {
    /// The task whose entry closes the cycle.
    pub(super) task: usize,
    /// The index of that entry in the task's `depends_on`.
    pub(super) entry: usize,
    /// The cycle from `task` back to `task`, following dependencies.
    pub(super) tasks: Vec<usize>,
}

/// The first cycle a depth-first walk in plan order meets, if any.
///
/// Iterative, so a long chain of dependencies cannot overflow the stack.
pub(super) fn find_cycle(edges: &[Vec<usize>]) -> Option<CycleFound> {
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        Unvisited,
        OnPath,
        Done,
    }
    let mut state = vec![State::Unvisited; edges.len()];
    for start in 0..edges.len() {
        if state[start] != State::Unvisited {
            continue;
        }
        // Each frame: a task and the next of its edges to follow.
        let mut path: Vec<(usize, usize)> = vec![(start, 0)];
        state[start] = State::OnPath;
        while let Some(frame) = path.last_mut() {
            let (task, next) = *frame;
            let Some(&target) = edges[task].get(next) else {
                state[task] = State::Done;
                path.pop();
                continue;
            };
            frame.1 += 1;
            match state[target] {
                State::Unvisited => {
                    state[target] = State::OnPath;
                    path.push((target, 0));
                }
                State::OnPath => {
                    let from = path.iter().position(|&(on_path, _)| on_path == target)?;
                    let mut tasks = vec![task];
                    tasks.extend(
                        path[from..path.len() - 1]
                            .iter()
                            .map(|&(on_path, _)| on_path),
                    );
                    tasks.push(task);
                    return Some(CycleFound {
                        task,
                        entry: next,
                        tasks,
                    });
                }
                State::Done => {}
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_cycles_are_found_at_the_closing_entry() {
        // 0 -> 1 -> 2 -> 0
        let found = find_cycle(&[vec![1], vec![2], vec![0]]).unwrap();
        assert_eq!(
            (found.task, found.entry, found.tasks),
            (2, 0, vec![2, 0, 1, 2])
        );
        // 0 -> 1, 1 -> 2 and 1 -> 0 (second entry)
        let found = find_cycle(&[vec![1], vec![2, 0], vec![]]).unwrap();
        assert_eq!(
            (found.task, found.entry, found.tasks),
            (1, 1, vec![1, 0, 1])
        );
        // A diamond is not a cycle.
        assert!(find_cycle(&[vec![1, 2], vec![3], vec![3], vec![]]).is_none());
        // A long chain does not overflow the stack.
        let chain: Vec<Vec<usize>> = (0..100_000)
            .map(|i| if i == 0 { vec![] } else { vec![i - 1] })
            .collect();
        assert!(find_cycle(&chain).is_none());
    }
}

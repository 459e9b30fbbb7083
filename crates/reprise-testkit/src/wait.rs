//! Waits with a deadline. A test looks again and again at what it waits for
//! instead of sleeping for a guessed time, so a slow machine only makes it
//! slower, and a wait for something that never comes fails at its deadline
//! instead of hanging the suite.

use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

/// The pause after the first look; each later pause doubles, up to
/// `LONGEST_PAUSE`, so a quick answer is seen quickly and a slow one costs
/// little CPU.
const FIRST_PAUSE: Duration = Duration::from_millis(5);
const LONGEST_PAUSE: Duration = Duration::from_millis(100);
/// How often `holds_for` looks.
const WATCH_PAUSE: Duration = Duration::from_millis(20);

/// Looks at `probe` until it gives a value or `limit` has passed since the
/// call: the value, or `None` when the deadline came first. The last look is
/// at or after the deadline, so a probe that is already true is never missed.
pub fn wait_for<T>(limit: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    let mut pause = FIRST_PAUSE;
    loop {
        if let Some(value) = probe() {
            return Some(value);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// Looks at `probe` until it holds or `limit` has passed since the call:
/// whether it held before the deadline.
pub fn wait_until(limit: Duration, mut probe: impl FnMut() -> bool) -> bool {
    wait_for(limit, || probe().then_some(())).is_some()
}

/// Looks at `probe` again and again for the whole of `window`: whether it
/// held at every look. For a test that shows something does *not* happen
/// (a process stays alive, a file stays as it was): the window is the time
/// it is given to happen, and the test fails at the first look that sees it.
pub fn holds_for(window: Duration, mut probe: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + window;
    loop {
        if !probe() {
            return false;
        }
        let now = Instant::now();
        if now >= end {
            return true;
        }
        thread::sleep(WATCH_PAUSE.min(end - now));
    }
}

/// Waits (ten seconds at most, then panics) until the file system's clock
/// has moved on: a file written after this returns has a later modification
/// and change time than any file written before it was called. File times
/// come from a coarse clock that ticks every few milliseconds, so a test
/// that needs two writes to be told apart by their times waits for the tick
/// here rather than sleeping a guess. `dir` is where a scratch file is
/// written (and removed); it should be on the same file system as the files
/// the test compares.
pub fn wait_for_the_file_clock_to_tick(dir: &Path) {
    let scratch = dir.join(".reprise-testkit-clock");
    let stamp = || -> SystemTime {
        fs::write(&scratch, b"tick")
            .and_then(|()| fs::metadata(&scratch)?.modified())
            .unwrap_or_else(|err| panic!("cannot stamp {}: {err}", scratch.display()))
    };
    let before = stamp();
    assert!(
        wait_until(Duration::from_secs(10), || stamp() > before),
        "the file clock in {} did not move in ten seconds",
        dir.display()
    );
    fs::remove_file(&scratch)
        .unwrap_or_else(|err| panic!("cannot remove {}: {err}", scratch.display()));
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[test]
    fn a_probe_that_holds_at_once_is_not_waited_for() {
        let started = Instant::now();
        assert!(wait_until(Duration::from_secs(60), || true));
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn the_value_is_the_first_one_the_probe_gives() {
        let looks = Cell::new(0);
        let found = wait_for(Duration::from_secs(60), || {
            looks.set(looks.get() + 1);
            (looks.get() == 3).then_some("third")
        });
        assert_eq!((found, looks.get()), (Some("third"), 3));
    }

    #[test]
    fn a_probe_that_never_holds_gives_up_at_the_deadline_after_a_last_look() {
        let looks = Cell::new(0);
        let limit = Duration::from_millis(30);
        let started = Instant::now();
        assert!(!wait_until(limit, || {
            looks.set(looks.get() + 1);
            false
        }));
        assert!(started.elapsed() >= limit);
        assert!(looks.get() >= 2, "{} looks", looks.get());
    }

    #[test]
    fn holds_for_fails_at_the_first_look_that_sees_a_change() {
        let looks = Cell::new(0);
        assert!(!holds_for(Duration::from_secs(60), || {
            looks.set(looks.get() + 1);
            looks.get() < 3
        }));
        assert_eq!(looks.get(), 3);
        assert!(holds_for(Duration::from_millis(30), || true));
    }

    #[test]
    fn after_the_tick_a_new_file_is_newer_than_an_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("old");
        fs::write(&old, "x").unwrap();
        wait_for_the_file_clock_to_tick(dir.path());
        let new = dir.path().join("new");
        fs::write(&new, "y").unwrap();
        let modified = |path: &Path| fs::metadata(path).unwrap().modified().unwrap();
        assert!(modified(&new) > modified(&old));
        assert!(!dir.path().join(".reprise-testkit-clock").exists());
    }
}

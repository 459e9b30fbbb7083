//! Retrying a call through a transient connection error: a lost or refused
//! connection, a server restarting. Each write the fleet makes is safe to
//! send again (see `queue.rs`: ships skip rows already taken, outcomes
//! already recorded answer as done), so a retry after a commit whose answer
//! was lost changes nothing.

use std::time::{Duration, Instant};

use crate::error::{FleetError, Result};

/// The first pause after a transient error; each later one doubles, up to
/// `LONGEST_PAUSE`.
const FIRST_PAUSE: Duration = Duration::from_millis(25);
const LONGEST_PAUSE: Duration = Duration::from_millis(500);

/// The pause before retry number `retry` (0 for the first): doubling from
/// `FIRST_PAUSE`, capped at `LONGEST_PAUSE`, and never past what is left of
/// the window.
#[must_use]
pub(crate) fn pause_before(retry: u32, left: Duration) -> Duration {
    let doubled = FIRST_PAUSE.saturating_mul(1u32 << retry.min(16));
    doubled.min(LONGEST_PAUSE).min(left)
}

/// Runs `call` until it succeeds, fails for good, or `window` has passed
/// since the first try; a transient error past the window becomes
/// `Unavailable` naming `target`.
pub(crate) async fn with_retries<T>(
    target: &str,
    window: Duration,
    mut call: impl AsyncFnMut() -> Result<T>,
) -> Result<T> {
    let started = Instant::now();
    let mut retry = 0;
    loop {
        match call().await {
            Err(error) if error.is_transient() => {
                let left = window.saturating_sub(started.elapsed());
                if left.is_zero() {
                    return Err(FleetError::Unavailable {
                        target: target.to_owned(),
                        reason: error.to_string(),
                    });
                }
                tokio::time::sleep(pause_before(retry, left)).await;
                retry += 1;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_cap_and_never_pass_the_window() {
        let long = Duration::from_secs(60);
        assert_eq!(pause_before(0, long), Duration::from_millis(25));
        assert_eq!(pause_before(1, long), Duration::from_millis(50));
        assert_eq!(pause_before(3, long), Duration::from_millis(200));
        assert_eq!(pause_before(10, long), LONGEST_PAUSE);
        assert_eq!(pause_before(40, long), LONGEST_PAUSE);
        assert_eq!(
            pause_before(10, Duration::from_millis(7)),
            Duration::from_millis(7)
        );
    }
}

//! `rate wait`'s loop: `RateLimit::wait_timeout`'s, keeping the last denial so that a timed-out
//! `--json` wait prints it as `check --json` prints a denial.

use clusterlimit::{Decision, Error, RateLimit};
use std::time::Duration;
use tokio::time::Instant;

/// Shortest pause between checks (a denial's `retry_after` can be a few ns).
const MIN_STEP: Duration = Duration::from_millis(1);
/// A `retry_after` this long means never (the quota was lowered to one the cost cannot pass),
/// the library wait's bound.
const NEVER: Duration = Duration::from_secs(1000 * 24 * 3600);

/// How a wait ended.
pub enum Waited {
    /// Admitted: the decision that consumed the cost.
    Admitted(Decision),
    /// The next chance lies past the timeout: the last denial (nothing consumed by it, unless
    /// the quota has a ban, which it starts).
    TimedOut(Decision),
}

/// Checks `cost` for `key` until admitted or the next chance is past `timeout` (none: no end).
pub async fn wait(
    rl: &RateLimit,
    key: &str,
    cost: u64,
    timeout: Option<Duration>,
) -> Result<Waited, Error> {
    // A timeout too long to represent is no timeout.
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    // Bounded by the deadline (or by admission): each round sleeps at least MIN_STEP.
    loop {
        let d = match deadline {
            // A store that does not answer by the deadline ends the wait there (exit 69).
            Some(dl) => match rl
                .check_within(key, cost, dl.saturating_duration_since(Instant::now()))
                .await
            {
                Err(Error::Timeout) => {
                    return Err(Error::store("the store did not answer within --timeout"))
                }
                other => other?,
            },
            None => rl.check_n(key, cost).await?,
        };
        if d.allowed {
            return Ok(Waited::Admitted(d));
        }
        let step = d.retry_after.unwrap_or(MIN_STEP).max(MIN_STEP);
        let Some(wake) = Instant::now().checked_add(step).filter(|_| step < NEVER) else {
            return Err(Error::invalid(format!(
                "cost {cost} can never be admitted by the quota now stored ({})",
                crate::common::quota_print::quota_text(&rl.quota())
            )));
        };
        if deadline.is_some_and(|dl| wake > dl) {
            return Ok(Waited::TimedOut(d));
        }
        tokio::time::sleep_until(wake).await;
    }
}

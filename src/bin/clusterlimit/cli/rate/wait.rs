//! `rate wait`'s wait: the library's one wait ([`RateLimit::wait_until`]) with the command's
//! answers: the last denial kept so that a timed-out `--json` wait prints it as `check --json`
//! prints a denial, a store that does not answer by `--timeout` a store failure (exit 69).

use crate::common::quota_print::quota_text;
use clusterlimit::{CheckOptions, Decision, Error, RateLimit, Waited};
use std::time::Duration;
use tokio::time::Instant;

/// Waits until a check of `options` (cost, class, flow) for `key` is admitted
/// ([`Waited::Admitted`]) or its next chance lies past `timeout` ([`Waited::Denied`], the last
/// denial; none: no end).
pub async fn wait(
    rl: &RateLimit,
    key: &str,
    options: CheckOptions,
    timeout: Option<Duration>,
) -> Result<Waited<Decision>, Error> {
    let cost = options.cost_of();
    // A timeout too long to represent is no timeout.
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    let options = match deadline {
        Some(d) => options.within(d.saturating_duration_since(Instant::now())),
        None => options,
    };
    let waited = rl.wait_with(key, options).await;
    match waited {
        // A store that does not answer by the deadline ends the wait there (exit 69).
        Err(Error::Timeout) => Err(Error::store("the store did not answer within --timeout")),
        Ok(Waited::Never(_)) => Err(Error::invalid(format!(
            "cost {cost} can never be admitted by the quota now stored ({})",
            quota_text(&rl.quota())
        ))),
        other => other,
    }
}

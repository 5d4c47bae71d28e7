//! `run`'s one line when it has to wait: `clusterlimit: waiting for a permit on NAME: 2
//! holders (3 of 3 permits used), 1 other request waiting`. A permit granted at once costs no
//! store request for it: the status is read only once the acquire has not finished after
//! `AFTER`, concurrently with it (polled in the same `select!`, so it never delays the grant
//! or an exit, and it is dropped with them), bounded by the request timeout; a failed or slow
//! read prints nothing.

use crate::common::out::err_line;
use clusterlimit::{Limiter, Semaphore, Status};
use std::time::Duration;

/// How long an acquire may take before `run` says it waits: longer than a grant's round trip
/// to a healthy store, short enough that a person sees why nothing happens.
pub const AFTER: Duration = Duration::from_millis(200);

/// Prints the line once, `AFTER` from now, then never completes: race it with the acquire.
pub async fn announce(sem: &Semaphore) -> std::convert::Infallible {
    tokio::time::sleep(AFTER).await;
    match tokio::time::timeout(Limiter::DEFAULT_REQUEST_TIMEOUT, sem.status()).await {
        Ok(Ok(status)) => err_line!("clusterlimit: {}", line(&status)),
        Ok(Err(e)) => tracing::debug!(error = %e, "reading the status for the waiting line"),
        Err(_) => tracing::debug!("the status for the waiting line took too long"),
    }
    std::future::pending().await
}

/// The line, from a status read while this request waits (so one of the waiting is this one).
fn line(st: &Status) -> String {
    let holders = st.holders.len();
    let others = st.waiting.saturating_sub(1);
    format!(
        "waiting for a permit on {}: {holders} {} ({} of {} permits used), {others} other {} \
         waiting",
        st.name,
        plural(holders, "holder", "holders"),
        st.used,
        st.capacity,
        plural(others, "request", "requests"),
    )
}

fn plural(n: usize, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 {
        one
    } else {
        many
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clusterlimit::Holder;

    #[test]
    fn says_who_holds_and_how_many_wait() {
        let holder = Holder::new("a", 1, 1, 0);
        let mut st = Status::from_queue("jobs", 2, vec![holder.clone(); 2], vec![holder; 4]);
        assert_eq!(
            line(&st),
            "waiting for a permit on jobs: 2 holders (2 of 2 permits used), 3 other requests waiting"
        );
        st.holders.truncate(1);
        st.waiting = 1;
        assert_eq!(
            line(&st),
            "waiting for a permit on jobs: 1 holder (2 of 2 permits used), 0 other requests waiting"
        );
    }
}

//! The one retry policy of a store call, shared by every backend: a call (all its attempts) is
//! bounded by twice the request timeout, and the pauses between attempts double from
//! [`FIRST_PAUSE`] up to [`MAX_PAUSE`]. Which failures are worth another attempt, and how long
//! one attempt may take, is the store's business; when to stop is decided here.

use std::time::Duration;
use tokio::time::Instant;

/// Pause after the first failed attempt.
pub(crate) const FIRST_PAUSE: Duration = Duration::from_millis(25);
/// Cap of the pause between attempts: after a failover, the first retry that reaches the new
/// leader comes at most this long after the store can take writes again.
pub(crate) const MAX_PAUSE: Duration = Duration::from_millis(250);
/// A whole call may take this many request timeouts.
pub(crate) const CALL_TIMEOUTS: u32 = 2;
// A paused retry never sleeps through a keepalive interval (a third of the shortest TTL).
const _: () = assert!(MAX_PAUSE.as_millis() < crate::timing::MIN_SESSION_TTL.as_millis() / 3);

/// The attempts of one call.
#[derive(Debug)]
pub(crate) struct Attempts {
    deadline: Instant,
    pause: Duration,
    made: u32,
}

impl Attempts {
    /// Starts a call now, bounded by [`CALL_TIMEOUTS`] × `request_timeout`.
    pub(crate) fn new(request_timeout: Duration) -> Attempts {
        Attempts {
            deadline: Instant::now() + request_timeout * CALL_TIMEOUTS,
            pause: FIRST_PAUSE,
            made: 0,
        }
    }

    /// When the whole call must be over.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Attempts made so far (counted by [`again`](Self::again)).
    pub(crate) fn made(&self) -> u32 {
        self.made
    }

    /// After a failed attempt: pauses (unless `pause` is false: after an attempt that timed
    /// out, the time is spent already) and returns true for another attempt, or returns false
    /// at once when the pause would end past the deadline.
    pub(crate) async fn again(&mut self, pause: bool) -> bool {
        self.made += 1;
        let wait = if pause { self.pause } else { Duration::ZERO };
        if Instant::now() + wait >= self.deadline {
            return false;
        }
        if pause {
            tokio::time::sleep(wait).await;
            self.pause = (self.pause * 2).min(MAX_PAUSE);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn pauses_double_up_to_the_cap_and_stop_at_the_deadline() {
        let start = Instant::now();
        let mut a = Attempts::new(Duration::from_millis(500));
        let mut pauses = Vec::new();
        let mut last = Instant::now();
        while a.again(true).await {
            pauses.push(last.elapsed().as_millis());
            last = Instant::now();
            assert!(a.made() < 100, "bounded");
        }
        assert_eq!(&pauses[..4], &[25, 50, 100, 200]);
        assert!(pauses[4..].iter().all(|&p| p == 250), "{pauses:?}");
        assert!(
            start.elapsed() <= Duration::from_millis(1000),
            "within 2 × the timeout"
        );
        // Without pauses, only the deadline stops it.
        let mut quick = Attempts::new(Duration::from_millis(10));
        assert!(quick.again(false).await);
    }
}

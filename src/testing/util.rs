//! Bounded waiting helpers: every wait here has a deadline and a cap on iterations, and panics
//! with a message that says what was awaited and what was seen last.

use super::harness::{Harness, LimiterOptions};
pub use super::within::within;
use crate::{Error, Limiter, Permit, Semaphore, Status};
use std::any::type_name;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// Interval between two polls of the store.
pub const POLL: Duration = Duration::from_millis(10);

/// Bound on one `queue_entries` call of a harness.
const QUEUE_READ_LIMIT: Duration = Duration::from_secs(5);

/// Asserts that `$result` is `Err($pattern)`, printing what it was otherwise.
macro_rules! assert_err {
    ($result:expr, $pattern:pat $(,)?) => {
        assert_err!($result, $pattern, "")
    };
    ($result:expr, $pattern:pat, $($context:tt)+) => {
        match $result {
            Err($pattern) => {}
            other => panic!(
                "expected Err({}), got {:?} {}",
                stringify!($pattern),
                other,
                format_args!($($context)+)
            ),
        }
    };
}
pub(crate) use assert_err;

/// Milliseconds as a `Duration`.
pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// How many polls fit in `limit` (plus slack), so poll loops are bounded in count too.
fn max_polls(limit: Duration) -> usize {
    usize::try_from(limit.as_millis() / POLL.as_millis()).unwrap_or(usize::MAX / 2) + 3
}

/// Awaits a spawned task within `limit`; re-raises its panic so the test shows the real cause.
pub async fn join<T>(what: &str, limit: Duration, handle: JoinHandle<T>) -> T {
    match within(what, limit, handle).await {
        Ok(v) => v,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("{what}: task failed: {e}"),
    }
}

/// Polls `sem.status()` until `pred` holds and returns that status; panics after `limit` with
/// the last status seen.
pub async fn wait_status(
    sem: &Semaphore,
    what: &str,
    limit: Duration,
    pred: impl Fn(&Status) -> bool,
) -> Status {
    let start = Instant::now();
    let mut last = String::from("(no answer)");
    for _ in 0..max_polls(limit) {
        match tokio::time::timeout(limit, sem.status()).await {
            Ok(Ok(st)) if pred(&st) => return st,
            Ok(Ok(st)) => last = format!("{st:?}"),
            Ok(Err(e)) => last = format!("status() failed: {e}"),
            Err(_) => last = format!("status() hung for {limit:?}"),
        }
        if start.elapsed() >= limit {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    panic!("{what}: not seen within {limit:?}; last status: {last}");
}

/// Polls the store's raw queue of `sem` ([`Harness::queue_entries`]) until it holds exactly
/// `n` entries; panics after `limit` with the last count seen.
pub async fn wait_entries<H: Harness>(h: &H, sem: &str, n: usize, limit: Duration) {
    let start = Instant::now();
    let mut last = None;
    for _ in 0..max_polls(limit) {
        let got = within("queue_entries", QUEUE_READ_LIMIT, h.queue_entries(sem)).await;
        if got == n {
            return;
        }
        last = Some(got);
        if start.elapsed() >= limit {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    panic!("queue of {sem:?} not back to {n} entries within {limit:?}; last count {last:?}");
}

/// Spawns `sem.acquire_many(permits)` as a task (a waiter that can be observed and joined).
pub fn spawn_acquire(sem: &Semaphore, permits: u32) -> JoinHandle<crate::Result<Permit>> {
    let sem = sem.clone();
    tokio::spawn(async move { sem.acquire_many(permits).await })
}

/// Asserts a spawned waiter is still waiting after `period`.
pub async fn assert_still_waiting<T>(what: &str, handle: &JoinHandle<T>, period: Duration) {
    tokio::time::sleep(period).await;
    assert!(
        !handle.is_finished(),
        "{what}: finished within {period:?}, but it should still be waiting"
    );
}

/// A tiny deterministic PRNG (xorshift64*), so the load case needs no extra dependency.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// A number in `0..n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// Number of queue entries (holders and waiters) of `sem` as `status()` through `limiter`
/// reports them, 0 if the semaphore does not exist; closes `limiter`.
///
/// For a [`Harness::queue_entries`] whose store cannot be read more directly (an in-process
/// store): it trusts the backend's `status`, so a store that can be read directly (keys,
/// znodes, rows) should count there instead.
pub async fn entries_via_status(limiter: Limiter, sem: &str) -> usize {
    let n = match within(
        "open_semaphore",
        QUEUE_READ_LIMIT,
        limiter.open_semaphore(sem),
    )
    .await
    {
        Ok(s) => {
            let st = within("status", QUEUE_READ_LIMIT, s.status())
                .await
                .unwrap_or_else(|e| panic!("status of {sem:?} for queue_entries: {e}"));
            st.holders.len() + st.waiting
        }
        Err(Error::NotFound(_)) => 0,
        Err(e) => panic!("queue_entries({sem:?}): open_semaphore failed: {e}"),
    };
    within("close", QUEUE_READ_LIMIT, limiter.close())
        .await
        .unwrap_or_else(|e| panic!("close the Limiter of queue_entries: {e}"));
    n
}

/// Bound on anything that should happen "at once" on a healthy store.
pub(super) const PROMPT: Duration = Duration::from_secs(5);

/// A Limiter of the harness with `opts`, connected promptly.
pub(super) async fn connect<H: Harness>(h: &H, opts: LimiterOptions) -> Limiter {
    let what = format!("connect [{}] with {opts:?}", type_name::<H>());
    within(&what, PROMPT, h.connect(opts))
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Opens `name`, which must exist, promptly.
pub(super) async fn open(limiter: &Limiter, name: &str) -> Semaphore {
    within("open_semaphore()", PROMPT, limiter.open_semaphore(name))
        .await
        .unwrap_or_else(|e| panic!("open_semaphore({name:?}): {e}"))
}

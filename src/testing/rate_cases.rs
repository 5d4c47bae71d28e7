//! The rate-limit contract: what a cluster-wide rate limit means on any store, one `pub async
//! fn` per case over a [`Harness`], run by [`rate_contract_suite!`](crate::rate_contract_suite)
//! on each backend that keeps rate limits. The algorithms' arithmetic is tested without a store
//! (`src/rate`, `tests/rate_model.rs`); these cases check what the store and the generic layer
//! add: sharing between Limiters, atomicity, quota storage and changes, costs, and bad input.
//! Over 600 lines by choice, like `cases.rs`: a catalogue of independent cases read as one
//! contract.
//!
//! Quotas here are slow (per minute, or windows of a year) so that a loaded CI machine cannot
//! turn a planned denial into an admission.

use super::harness::{Harness, LimiterOptions};
use super::rate_history::{assert_gcra_exact, unix_ns, Admitted};
use super::rate_store_cases::{key_write, store_of};
use super::util::{assert_err, ms};
use crate::backend::{Current, KeyOutcome, KeyWrite, RateStore, Versioned};
use crate::{Algorithm, Error, KeyCheck, Limiter, Quota, RateLimit, RequestStats};
use std::time::Duration;

const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

async fn limiter(h: &impl Harness) -> Limiter {
    h.connect(LimiterOptions::new())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

async fn open(l: &Limiter, name: &str, q: Quota) -> RateLimit {
    l.rate_limit(name, q)
        .await
        .unwrap_or_else(|e| panic!("rate_limit({name}, {q}): {e}"))
}

async fn check(rl: &RateLimit, key: &str, cost: u64) -> crate::Decision {
    rl.check_n(key, cost)
        .await
        .unwrap_or_else(|e| panic!("check_n({key:?}, {cost}) on {}: {e}", rl.name()))
}

fn requests(l: &Limiter, since: &RequestStats) -> u64 {
    l.stats().since(since).total()
}

/// GCRA as redis-cell answers: burst at once, then one per emission interval; `limit`,
/// `remaining`, `retry_after` (Some iff denied), `reset_after`.
pub async fn rate_gcra_decisions(h: &impl Harness) {
    let l = limiter(h).await;
    let rl = open(&l, "gcra", Quota::per_minute(60).burst(3)).await;
    for remaining in [2, 1, 0] {
        let d = check(&rl, "k", 1).await;
        assert!(d.allowed, "{d:?}");
        assert_eq!((d.limit, d.remaining, d.retry_after), (3, remaining, None));
        assert!(d.reset_after <= Duration::from_secs(3 - remaining), "{d:?}");
        assert!(d.reset_after > Duration::from_secs(2 - remaining), "{d:?}");
    }
    let denied = check(&rl, "k", 1).await;
    assert!(!denied.allowed && denied.remaining == 0, "{denied:?}");
    let retry = denied.retry_after.expect("a denial says when to retry");
    assert!(
        retry > ms(500) && retry <= Duration::from_secs(1),
        "{denied:?}"
    );
    // Keys are independent.
    assert_eq!(check(&rl, "other", 1).await.remaining, 2);
    // After retry_after, admitted again.
    tokio::time::sleep(retry + ms(20)).await;
    assert!(check(&rl, "k", 1).await.allowed);
}

/// Two Limiters share every key: what one consumes, the other cannot.
pub async fn rate_shared_between_limiters(h: &impl Harness) {
    let a = limiter(h).await;
    let b = limiter(h).await;
    let q = Quota::per_minute(60).burst(4);
    let ra = open(&a, "shared", q).await;
    let rb = b.open_rate_limit("shared").await.expect("open_rate_limit");
    assert_eq!(rb.quota(), q);
    let mut admitted = 0;
    for i in 0..8 {
        let rl = if i % 2 == 0 { &ra } else { &rb };
        admitted += u32::from(check(rl, "k", 1).await.allowed);
    }
    assert_eq!(admitted, 4, "burst 4 across both Limiters");
}

/// Cost: all or nothing; 0 peeks; above the burst is refused.
pub async fn rate_costs(h: &impl Harness) {
    let l = limiter(h).await;
    let rl = open(&l, "costs", Quota::per_minute(60).burst(5)).await;
    let peek = check(&rl, "k", 0).await;
    assert!(peek.allowed && peek.remaining == 5, "{peek:?}");
    assert_eq!(check(&rl, "k", 4).await.remaining, 1);
    let d = check(&rl, "k", 2).await;
    assert!(!d.allowed && d.remaining == 1, "all or nothing: {d:?}");
    assert!(
        check(&rl, "k", 1).await.allowed,
        "the denied cost took nothing"
    );
    let peek = check(&rl, "k", 0).await;
    assert!(!peek.allowed && peek.retry_after.is_some(), "{peek:?}");
    assert_err!(rl.check_n("k", 6).await, Error::InvalidArgument(_));
    let windows = open(
        &l,
        "costs-w",
        Quota::new(3, YEAR).algorithm(Algorithm::FixedWindow),
    )
    .await;
    assert_err!(windows.check_n("k", 4).await, Error::InvalidArgument(_));
    assert!(check(&windows, "k", 3).await.allowed);
}

/// Fixed and sliding windows: at most `limit` per window, `remaining` counts down,
/// `reset_after` within the window.
pub async fn rate_windows(h: &impl Harness) {
    let l = limiter(h).await;
    for (name, algorithm) in [
        ("fixed", Algorithm::FixedWindow),
        ("sliding", Algorithm::SlidingWindow),
    ] {
        let q = Quota::new(3, YEAR).algorithm(algorithm);
        let rl = open(&l, name, q).await;
        for remaining in [2, 1, 0] {
            let d = check(&rl, "k", 1).await;
            assert!(
                d.allowed && d.remaining == remaining && d.limit == 3,
                "{name}: {d:?}"
            );
            assert!(d.reset_after <= YEAR * 2, "{name}: {d:?}");
        }
        let d = check(&rl, "k", 1).await;
        assert!(!d.allowed, "{name}: {d:?}");
        assert!(
            d.retry_after.is_some_and(|r| r <= YEAR * 2),
            "{name}: {d:?}"
        );
    }
}

/// A denial bans the key for `ban`, whatever the meter says.
pub async fn rate_ban(h: &impl Harness) {
    let l = limiter(h).await;
    let rl = open(
        &l,
        "ban",
        Quota::per_minute(60).burst(1).ban(Duration::from_secs(30)),
    )
    .await;
    assert!(check(&rl, "k", 1).await.allowed);
    let d = check(&rl, "k", 1).await;
    assert!(!d.allowed, "the bucket of 1 refills in 1 s: {d:?}");
    let retry = d.retry_after.expect("denied");
    assert!(retry > Duration::from_secs(25), "the ban says so: {d:?}");
    tokio::time::sleep(ms(1100)).await; // the bucket is full again; the ban holds
    let again = check(&rl, "k", 1).await;
    assert!(
        !again.allowed && again.retry_after > Some(Duration::from_secs(25)),
        "{again:?}"
    );
    // Another Limiter sees the ban too (it is stored).
    let other = limiter(h).await;
    let ro = other.open_rate_limit("ban").await.expect("open");
    assert!(!check(&ro, "k", 1).await.allowed);
    assert!(check(&ro, "k2", 1).await.allowed, "bans are per key");
}

/// Stored quotas: created once, a different one is a mismatch, open reads it, list names it.
pub async fn rate_quota_storage(h: &impl Harness) {
    let l = limiter(h).await;
    let q = Quota::per_hour(100).burst(7);
    open(&l, "stored", q).await;
    let other = Quota::per_hour(100);
    match l.rate_limit("stored", other).await {
        Err(Error::QuotaMismatch { stored, requested }) => {
            assert_eq!((*stored, *requested), (q, other));
        }
        r => panic!("expected QuotaMismatch, got {r:?}"),
    }
    assert_eq!(
        open(&l, "stored", q).await.quota(),
        q,
        "the same quota opens"
    );
    assert_eq!(
        l.open_rate_limit("stored").await.map(|r| r.quota()).ok(),
        Some(q)
    );
    assert_err!(l.open_rate_limit("absent").await, Error::NotFound(_));
    open(&l, "a-first", Quota::per_second(1)).await;
    let names = l.rate_limits().await.expect("rate_limits");
    assert_eq!(names, vec!["a-first".to_string(), "stored".to_string()]);
}

/// A quota with a warm-up round-trips through the store (another Limiter opens it by name), a
/// cold key paces slower for every Limiter sharing it, its state is stored as text (`1 w …`),
/// and the quota without the warm-up reads that state as plain GCRA on the same `tat`.
pub async fn rate_warm_up(h: &impl Harness) {
    let a = limiter(h).await;
    let b = limiter(h).await;
    // T = 1 s, τ = 10 s; cold: each of the first units costs ~3 s (f × T), so 3 pass at once
    // (2.997 + 2.990 + 2.983 = 8.970 s), the 4th (2.977 s more) 1.947 s later. Plain: 10.
    let q = Quota::per_minute(60)
        .burst(10)
        .warmup(Duration::from_secs(600));
    let ra = open(&a, "warm", q).await;
    let rb = b.open_rate_limit("warm").await.expect("open_rate_limit");
    assert_eq!(rb.quota(), q, "the warm-up round-trips through the store");
    let peek = check(&ra, "k", 0).await;
    assert!(peek.allowed && peek.remaining == 10, "{peek:?}");
    for (i, rl) in [&ra, &rb, &ra].into_iter().enumerate() {
        let d = check(rl, "k", 1).await;
        assert!(d.allowed, "cold admission {i}: {d:?}");
    }
    for rl in [&ra, &rb] {
        let d = check(rl, "k", 1).await;
        assert!(!d.allowed && d.remaining == 0, "{d:?}");
        let retry = d.retry_after.expect("a denial says when to retry");
        assert!(
            retry > Duration::from_millis(1500) && retry <= Duration::from_millis(1947),
            "{d:?}"
        );
    }
    // Another key of the same limit is cold too; a plain quota would take the whole burst.
    assert!(check(&rb, "other", 3).await.allowed);
    assert!(!check(&rb, "other", 1).await.allowed);
    let state = stored(store_of(&a), "warm", "k")
        .await
        .expect("the key is stored");
    let text = String::from_utf8_lossy(&state.value).into_owned();
    assert!(text.starts_with("1 w "), "{text}");
    // Opening with the quota without its warm-up is a mismatch naming both.
    let plain = Quota::per_minute(60).burst(10);
    match b.rate_limit("warm", plain).await {
        Err(Error::QuotaMismatch { stored, requested }) => {
            assert_eq!((*stored, *requested), (q, plain));
        }
        r => panic!("expected QuotaMismatch, got {r:?}"),
    }
    // Without the warm-up: plain GCRA on the stored tat (~9 s owed of 10: 1 more passes),
    // written back as a plain state.
    ra.set_quota(plain).await.expect("set_quota");
    let d = check(&ra, "k", 1).await;
    assert!(d.allowed, "{d:?}");
    let state = stored(store_of(&a), "warm", "k")
        .await
        .expect("the key is stored");
    let text = String::from_utf8_lossy(&state.value).into_owned();
    assert!(text.starts_with("1 g "), "{text}");
    // Bad warm-ups are refused before any store sees them.
    for bad in [
        Quota::per_minute(60).warmup(Duration::from_secs(1)),
        Quota::per_minute(60)
            .warmup(Duration::from_secs(600))
            .cold_factor(20),
        Quota::new(3, YEAR)
            .algorithm(Algorithm::FixedWindow)
            .warmup(Duration::from_secs(600)),
    ] {
        assert_err!(
            a.rate_limit("warm-bad", bad).await,
            Error::InvalidArgument(_)
        );
    }
    assert_err!(a.open_rate_limit("warm-bad").await, Error::NotFound(_));
}

/// `set_quota` reaches every Limiter: at its next write, or within a second of checks.
pub async fn rate_set_quota_is_live(h: &impl Harness) {
    let a = limiter(h).await;
    let b = limiter(h).await;
    let ra = open(&a, "live", Quota::per_minute(60).burst(1)).await;
    let rb = b.open_rate_limit("live").await.expect("open");
    assert!(check(&ra, "k", 1).await.allowed);
    assert!(!check(&rb, "k", 1).await.allowed);
    let bigger = Quota::per_minute(60).burst(5);
    rb.set_quota(bigger).await.expect("set_quota");
    assert_eq!(rb.quota(), bigger);
    assert!(
        check(&rb, "k", 1).await.allowed,
        "b writes with the new quota"
    );
    let started = std::time::Instant::now();
    loop {
        let d = check(&ra, "k", 1).await;
        if d.allowed {
            assert_eq!(ra.quota(), bigger);
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "a still denies under the old quota: {d:?}"
        );
        tokio::time::sleep(ms(100)).await;
    }
    assert_err!(
        rb.set_quota(Quota::per_second(0)).await,
        Error::InvalidArgument(_)
    );
}

/// `reset` forgets a key for everyone.
pub async fn rate_reset(h: &impl Harness) {
    let a = limiter(h).await;
    let b = limiter(h).await;
    let ra = open(&a, "reset", Quota::per_minute(60).burst(1)).await;
    let rb = b.open_rate_limit("reset").await.expect("open");
    assert!(check(&ra, "k", 1).await.allowed);
    assert!(!check(&ra, "k", 1).await.allowed);
    assert!(!check(&rb, "k", 1).await.allowed);
    ra.reset("k").await.expect("reset");
    assert!(check(&ra, "k", 0).await.allowed, "a forgot it at once");
    let started = std::time::Instant::now();
    while !check(&rb, "k", 0).await.allowed {
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "b never saw the reset"
        );
        tokio::time::sleep(ms(100)).await;
    }
    ra.reset("never-seen")
        .await
        .expect("resetting an absent key succeeds");
}

/// `wait` shapes; `wait_timeout` gives up at once when the wait cannot fit, consuming nothing.
pub async fn rate_wait(h: &impl Harness) {
    let l = limiter(h).await;
    let rl = open(&l, "wait", Quota::per_minute(60).burst(1)).await;
    assert!(check(&rl, "k", 1).await.allowed);
    let started = std::time::Instant::now();
    assert_err!(rl.wait_timeout("k", 1, ms(100)).await, Error::Timeout);
    assert!(
        started.elapsed() < ms(90),
        "no point waiting 100 ms for a 1 s refill"
    );
    let peek = check(&rl, "k", 0).await;
    assert!(
        peek.retry_after
            .is_some_and(|r| r <= Duration::from_secs(1)),
        "the timeout consumed nothing: {peek:?}"
    );
    let d = rl.wait("k").await.expect("wait");
    assert!(
        d.allowed && started.elapsed() >= ms(800),
        "{d:?} after {:?}",
        started.elapsed()
    );
    let d = rl
        .wait_timeout("k", 1, Duration::from_secs(5))
        .await
        .expect("fits in 5 s");
    assert!(d.allowed);
    assert_err!(rl.wait_n("k", 0).await, Error::InvalidArgument(_));
    let d = rl.wait_timeout("fresh", 1, Duration::MAX).await;
    assert!(
        d.is_ok_and(|d| d.allowed),
        "an unrepresentable timeout is no timeout"
    );
}

/// `check_all`: all or nothing across limits and keys, in order for repeated keys. The keys
/// of one call share a hash tag (`{t}`), so a sharded store keeps them on one cluster.
pub async fn rate_check_all(h: &impl Harness) {
    let l = limiter(h).await;
    let user = open(&l, "user", Quota::per_minute(60).burst(10)).await;
    let global = open(&l, "global", Quota::per_minute(60).burst(2)).await;
    let both = |key: &'static str| {
        [
            KeyCheck::new(&user, key, 1),
            KeyCheck::new(&global, "{t}all", 1),
        ]
    };
    for _ in 0..2 {
        let ds = l.check_all(&both("{t}u1")).await.expect("check_all");
        assert!(ds.iter().all(|d| d.allowed), "{ds:?}");
    }
    let ds = l.check_all(&both("{t}u1")).await.expect("check_all");
    assert!(ds.iter().all(|d| !d.allowed), "global is spent: {ds:?}");
    assert!(ds.iter().all(|d| d.retry_after.is_some()), "{ds:?}");
    assert_eq!(ds[0].remaining, 8, "u1 was not charged");
    assert_eq!(check(&user, "{t}u1", 0).await.remaining, 8);
    let ds = l
        .check_all(&[KeyCheck::new(&user, "u2", 3), KeyCheck::new(&user, "u2", 4)])
        .await
        .expect("same key twice");
    assert_eq!((ds[0].remaining, ds[1].remaining), (7, 3), "{ds:?}");
    // The same key twice, the second over: nothing is charged, though the first alone fits.
    let ds = l
        .check_all(&[KeyCheck::new(&user, "u3", 6), KeyCheck::new(&user, "u3", 6)])
        .await
        .expect("same key, over");
    assert!(ds.iter().all(|d| !d.allowed), "{ds:?}");
    assert_eq!(check(&user, "u3", 0).await.remaining, 10, "nothing charged");
    let banning = open(
        &l,
        "banning",
        Quota::per_minute(60).burst(2).ban(Duration::from_secs(30)),
    )
    .await;
    let ds = l
        .check_all(&[
            KeyCheck::new(&banning, "b", 1),
            KeyCheck::new(&banning, "b", 2),
        ])
        .await
        .expect("a ban from check_all");
    assert!(ds.iter().all(|d| !d.allowed), "{ds:?}");
    let d = check(&banning, "b", 1).await;
    assert!(
        !d.allowed && d.retry_after > Some(Duration::from_secs(25)),
        "the denial's ban holds, and nothing else was charged: {d:?}"
    );
    let other = limiter(h).await;
    let foreign = open(&other, "user", Quota::per_minute(60).burst(10)).await;
    assert_err!(
        l.check_all(&[KeyCheck::new(&foreign, "u", 1)]).await,
        Error::InvalidArgument(_)
    );
    assert_err!(l.check_all(&[]).await, Error::InvalidArgument(_));
    assert_err!(
        l.check_all(&[KeyCheck::new(&user, "u", 11)]).await,
        Error::InvalidArgument(_)
    );
}

/// Bad names, quotas and keys are refused before any request; any UTF-8 key up to 512 bytes
/// works.
pub async fn rate_bad_input(h: &impl Harness) {
    let l = limiter(h).await;
    let before = l.stats();
    assert_err!(
        l.rate_limit("a/b", Quota::per_second(1)).await,
        Error::InvalidArgument(_)
    );
    assert_err!(
        l.rate_limit("ok", Quota::per_second(0)).await,
        Error::InvalidArgument(_)
    );
    assert_err!(l.open_rate_limit("").await, Error::InvalidArgument(_));
    assert_eq!(requests(&l, &before), 0, "refused before any request");
    let rl = open(&l, "keys", Quota::per_minute(60).burst(2)).await;
    let before = l.stats();
    assert_err!(rl.check("").await, Error::InvalidArgument(_));
    assert_err!(rl.check(&"x".repeat(513)).await, Error::InvalidArgument(_));
    assert_err!(rl.reset("").await, Error::InvalidArgument(_));
    assert_eq!(requests(&l, &before), 0);
    let long = "é".repeat(256);
    for key in [
        "a/b",
        ".",
        "..",
        " spaced key ",
        "ключ",
        "\u{0}nul",
        "\u{1}\u{7f}",
        "%2F",
        "GET /v1/users",
        "192.168.0.1",
        &long,
    ] {
        let d = check(&rl, key, 2).await;
        assert!(d.allowed && d.remaining == 0, "{key:?}: {d:?}");
        assert!(!check(&rl, key, 1).await.allowed, "{key:?} is its own key");
    }
}

/// Costs in store requests: a first touch and an uncontended admission take one each (no read
/// before the write); a denial the last state proves takes none; concurrent checks of one key
/// in one Limiter share writes.
pub async fn rate_request_counts(h: &impl Harness) {
    let l = limiter(h).await;
    // Slow (one per hour): no key expires, so no store clean-up runs while we count.
    let rl = open(&l, "counts", Quota::per_day(24).burst(2)).await;
    let before = l.stats();
    assert!(check(&rl, "k", 1).await.allowed);
    assert_eq!(requests(&l, &before), 1, "first touch: one write");
    let before = l.stats();
    assert!(check(&rl, "k", 1).await.allowed);
    assert_eq!(requests(&l, &before), 1, "uncontended: one write");
    let before = l.stats();
    for _ in 0..20 {
        assert!(!check(&rl, "k", 1).await.allowed);
    }
    assert_eq!(requests(&l, &before), 0, "provable denials: no request");
    assert_eq!(l.stats().since(&before).rate_local_answers, 20);
    let hot = open(&l, "counts-hot", Quota::per_minute(6000).burst(1000)).await;
    let before = l.stats();
    let checks = (0..64).map(|_| hot.check("hot"));
    let ds = futures::future::join_all(checks).await;
    assert!(
        ds.iter().all(|d| d.as_ref().is_ok_and(|d| d.allowed)),
        "{ds:?}"
    );
    let since = l.stats().since(&before);
    let used = since.total();
    // One write per batch; a store slow enough to make the client resend a request (a loaded
    // machine) may add one.
    assert!(
        used <= since.rate_batches + 1 && since.rate_batches < 64,
        "64 concurrent checks of one key: {used} requests in {} batches: {since:?}",
        since.rate_batches
    );
}

/// After `close`, calls fail with `Closed`.
pub async fn rate_closed(h: &impl Harness) {
    let l = limiter(h).await;
    let rl = open(&l, "closed", Quota::per_second(10)).await;
    l.close().await.expect("close");
    assert_err!(rl.check("k").await, Error::Closed);
    assert_err!(l.rate_limit("x", Quota::per_second(1)).await, Error::Closed);
    assert_err!(l.rate_limits().await, Error::Closed);
}

/// Several Limiters hammering one key never admit more than the quota allows in any
/// interval, and admit close to it over the run (the long version is
/// `tests/rate_exactness.rs`).
pub async fn rate_exact_under_contention(h: &impl Harness) {
    let quota = Quota::per_second(100).burst(10);
    let run = Duration::from_millis(1500);
    let mut limiters = Vec::new();
    for _ in 0..3 {
        limiters.push(limiter(h).await);
    }
    open(&limiters[0], "hot", quota).await;
    let mut tasks = Vec::new();
    for l in &limiters {
        let rl = l.open_rate_limit("hot").await.expect("open");
        for _ in 0..8 {
            let rl = rl.clone();
            tasks.push(tokio::spawn(async move {
                let stop = std::time::Instant::now() + run;
                let mut admitted = Vec::new();
                let mut calls = 0u32;
                while std::time::Instant::now() < stop && calls < 100_000 {
                    calls += 1;
                    let start = unix_ns();
                    let d = rl.check("hot").await.expect("check");
                    if d.allowed {
                        admitted.push(Admitted {
                            start,
                            end: unix_ns(),
                            cost: 1,
                        });
                    } else {
                        let pause = d.retry_after.unwrap_or(ms(1)).min(ms(5));
                        tokio::time::sleep(pause).await;
                    }
                }
                admitted
            }));
        }
    }
    let mut events = Vec::new();
    for t in tasks {
        events.extend(t.await.expect("caller task"));
    }
    assert_gcra_exact(&events, &quota, 0.0);
    let floor = 100.0 * 1.2;
    assert!(
        events.len() as f64 >= floor,
        "only {} admitted in {run:?} at 100/s",
        events.len()
    );
}

/// Each outcome of `write_each`, or a panic naming the write that failed.
fn outcomes(what: &str, got: Vec<crate::Result<KeyOutcome>>, n: usize) -> Vec<KeyOutcome> {
    assert_eq!(got.len(), n, "{what}: one outcome per write: {got:?}");
    got.into_iter()
        .enumerate()
        .map(|(i, o)| o.unwrap_or_else(|e| panic!("{what}: write {i} failed: {e}")))
        .collect()
}

fn written_version(what: &str, o: &KeyOutcome) -> u64 {
    match o {
        KeyOutcome::Written(v) => *v,
        KeyOutcome::Conflict(c) => panic!("{what}: expected Written, got a conflict: {c:?}"),
    }
}

fn conflict(what: &str, o: &KeyOutcome) -> Current {
    match o {
        KeyOutcome::Conflict(c) => c.clone(),
        KeyOutcome::Written(v) => panic!("{what}: expected a conflict, written at version {v}"),
    }
}

/// The key's value and version as the store reads it (`None`: absent).
async fn stored(store: &dyn RateStore, limit: &str, key: &str) -> Option<Versioned> {
    store
        .read_key(limit, key)
        .await
        .unwrap_or_else(|e| panic!("read_key({limit}, {key}): {e}"))
        .key
}

/// `RateStore::write_each` (the writes of different keys one request carries, see
/// `rate_limit/combine.rs`): each write applies or fails on its own conditions alone; absent
/// keys are created together; the outcomes come in the order of the writes; a conflict brings
/// the key's current value and the quota.
pub async fn rate_write_each(h: &impl Harness) {
    let l = limiter(h).await;
    let store = store_of(&l);
    let quota = Quota::per_minute(60).burst(5).encode();
    let q = store
        .ensure_limit("each", Some(&quota))
        .await
        .unwrap_or_else(|e| panic!("ensure_limit: {e}"));
    let qv = q.version;
    assert!(store.write_each(&[]).await.is_empty(), "nothing to write");

    // Absent keys (`expected: None`) of several keys: all apply in one call, in order.
    let keys: Vec<String> = (0..6).map(|i| format!("k{i}")).collect();
    let first: Vec<KeyWrite> = keys
        .iter()
        .map(|k| key_write("each", qv, k, None, &format!("{k}=1")))
        .collect();
    let got = outcomes("absent keys", store.write_each(&first).await, keys.len());
    let mut versions = Vec::new();
    for (k, o) in keys.iter().zip(&got) {
        let v = written_version(&format!("create {k}"), o);
        let read = stored(store, "each", k).await;
        assert_eq!(
            read,
            Some(Versioned {
                value: format!("{k}=1").into_bytes(),
                version: v,
            }),
            "{k}: the version write_each reported is the one read_key reads, with its value"
        );
        versions.push(v);
    }

    // Two keys, one with a wrong expected version: the other applies; the wrong one conflicts
    // with the key's current value and the quota, and changes nothing.
    let wrong = versions[1] + 1_000_000;
    let got = outcomes(
        "one wrong version",
        store
            .write_each(&[
                key_write("each", qv, "k0", Some(versions[0]), "k0=2"),
                key_write("each", qv, "k1", Some(wrong), "k1=2"),
            ])
            .await,
        2,
    );
    let v0 = written_version("k0 with its version", &got[0]);
    assert_ne!(v0, versions[0], "a write makes a new version");
    let read0 = stored(store, "each", "k0").await;
    assert_eq!(
        read0,
        Some(Versioned {
            value: b"k0=2".to_vec(),
            version: v0,
        })
    );
    let found = conflict("k1 with a wrong version", &got[1]);
    assert_eq!(
        found.key,
        Some(Versioned {
            value: b"k1=1".to_vec(),
            version: versions[1],
        }),
        "the conflict brings k1 as it is"
    );
    assert_eq!(found.quota, Some(q.clone()), "and the quota as it is");
    assert_eq!(
        stored(store, "each", "k1").await.map(|k| k.version),
        Some(versions[1]),
        "the failed write changed nothing"
    );
    // An absent key expected present, and a present key expected absent, conflict alone too.
    let got = outcomes(
        "presence",
        store
            .write_each(&[
                key_write("each", qv, "never", Some(versions[2]), "x"),
                key_write("each", qv, "k2", None, "x"),
                key_write("each", qv, "k3", Some(versions[3]), "k3=2"),
            ])
            .await,
        3,
    );
    assert_eq!(conflict("absent expected present", &got[0]).key, None);
    assert_eq!(
        conflict("present expected absent", &got[1])
            .key
            .map(|k| k.version),
        Some(versions[2])
    );
    written_version("k3 between them", &got[2]);
    assert_eq!(stored(store, "each", "never").await, None);

    // A write whose quota version is stale conflicts alone (after a quota change).
    let changed = Quota::per_minute(60).burst(9).encode();
    let qv2 = store
        .put_limit("each", &changed)
        .await
        .unwrap_or_else(|e| panic!("put_limit: {e}"));
    assert_ne!(qv2, qv, "a new quota has a new version");
    let got = outcomes(
        "a stale quota version",
        store
            .write_each(&[
                key_write("each", qv2, "k4", Some(versions[4]), "k4=2"),
                key_write("each", qv, "k5", Some(versions[5]), "k5=2"),
                key_write("each", qv2, "fresh", None, "fresh=1"),
            ])
            .await,
        3,
    );
    let v4 = written_version("k4 with the new quota version", &got[0]);
    let found = conflict("k5 with the old quota version", &got[1]);
    assert_eq!(
        found.quota,
        Some(Versioned {
            value: changed.clone(),
            version: qv2,
        }),
        "the conflict brings the quota as it is now"
    );
    assert_eq!(
        found.key.map(|k| (k.value, k.version)),
        Some((b"k5=1".to_vec(), versions[5]))
    );
    let vf = written_version("a new key with the new quota version", &got[2]);
    assert_eq!(
        stored(store, "each", "k4").await.map(|k| k.version),
        Some(v4)
    );
    assert_eq!(
        stored(store, "each", "fresh").await.map(|k| k.version),
        Some(vf)
    );
    assert_eq!(
        stored(store, "each", "k5").await.map(|k| k.value),
        Some(b"k5=1".to_vec()),
        "k5 unchanged"
    );

    // The outcomes follow the writes' order, not the keys': alternate successes and
    // conflicts over keys written in reverse.
    let mut writes = Vec::new();
    let mut expect_written = Vec::new();
    for (i, k) in keys.iter().enumerate().rev() {
        let current = stored(store, "each", k).await.map(|v| v.version);
        let ok = i % 2 == 0;
        let expected = if ok {
            current
        } else {
            current.map(|v| v + 1_000_000)
        };
        writes.push(key_write("each", qv2, k, expected, &format!("{k}=order")));
        expect_written.push((k.clone(), ok, current));
    }
    let got = outcomes("order", store.write_each(&writes).await, writes.len());
    for ((k, ok, before), o) in expect_written.iter().zip(&got) {
        match o {
            KeyOutcome::Written(v) if *ok => {
                assert_eq!(stored(store, "each", k).await.map(|s| s.version), Some(*v));
            }
            KeyOutcome::Conflict(c) if !*ok => {
                assert_eq!(
                    c.key.as_ref().map(|s| s.version),
                    *before,
                    "{k}: the conflict in its place brings {k}'s own version"
                );
            }
            other => panic!("{k}: expected written = {ok}, got {other:?}"),
        }
    }
    l.close().await.expect("close");
}

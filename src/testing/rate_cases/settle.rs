//! Costs known only afterwards: reservations settled at the real cost, charges into debt and
//! refunds, on the store, seen by every Limiter; refused as they must be; exact under
//! contention (`settle_history.rs` checks what callers saw).

use super::setup::{limiter, open, requests, YEAR};
use crate::testing::harness::Harness;
use crate::testing::rate_history::unix_ns;
use crate::testing::settle_history::{assert_settlements_exact, Settled};
use crate::testing::util::{assert_err, ms, Rng};
use crate::{Algorithm, Balance, CheckOptions, Error, Quota, RateLimit, MAX_CHARGE};
use std::time::Duration;

/// A day per 1,000 units: one unit is 86.4 s, so nothing a test does is paid off by time.
fn daily() -> Quota {
    Quota::per_day(1000)
}

async fn balance(rl: &RateLimit, key: &str) -> Balance {
    rl.balance(key)
        .await
        .unwrap_or_else(|e| panic!("balance({key}) on {}: {e}", rl.name()))
}

/// `got` is `want`, or one unit more (time paid one off: a slow machine).
fn about(got: u64, want: u64, what: &str) {
    assert!(got == want || got == want + 1, "{what}: {got}, not {want}");
}

/// Reserve and settle lower, equal and higher; a charge into debt from another Limiter,
/// which the first sees; a refund out of it; requests per settlement.
pub async fn rate_settle(h: &impl Harness) {
    let (a, b) = (limiter(h).await, limiter(h).await);
    let ra = open(&a, "settle", daily()).await;
    let rb = b.open_rate_limit("settle").await.expect("open");
    let r = ra.reserve("t", 400).await.expect("reserve");
    assert!(r.allowed() && r.decision().remaining == 600, "{r:?}");
    let bal = r.settle(100).await.expect("settle lower");
    assert_eq!(bal.debt, 0);
    about(bal.remaining, 900, "after a settlement 300 lower");
    // Settled at the estimate: no request at all.
    let r = ra.reserve("t", 50).await.expect("reserve");
    let before = a.stats();
    r.settle(50).await.expect("settle equal");
    assert_eq!(requests(&a, &before), 0, "settle == estimate: no request");
    // Lower again: one write.
    let r = ra.reserve("t", 20).await.expect("reserve");
    let before = a.stats();
    let bal = r.settle(0).await.expect("settle to 0");
    assert_eq!(requests(&a, &before), 1, "a refund: one write");
    about(bal.remaining, 850, "nothing used: all given back");
    // Another Limiter charges 1,500 it has not seen the key for: 650 over.
    let bal = rb.charge("t", 1500).await.expect("charge");
    assert_eq!(bal.remaining, 0);
    assert!((649..=650).contains(&bal.debt), "{bal:?}");
    let d = ra.check("t").await.expect("check");
    let unit = Duration::from_millis(86_400);
    assert!(!d.allowed, "in debt, the first Limiter denies: {d:?}");
    assert!(
        d.retry_after.is_some_and(|r| r > unit * 650),
        "the debt is in retry_after: {d:?}"
    );
    assert!((649..=650).contains(&balance(&ra, "t").await.debt));
    let bal = ra.refund("t", 700).await.expect("refund");
    assert_eq!(bal.debt, 0, "{bal:?}");
    about(bal.remaining, 50, "650 owed, 700 given back");
    // Never past full.
    let bal = rb.refund("t", MAX_CHARGE).await.expect("refund everything");
    assert_eq!((bal.remaining, bal.debt), (1000, 0), "{bal:?}");
    // A settlement above the estimate charges the rest, into debt.
    let r = rb.reserve("t", 1000).await.expect("reserve");
    let bal = r.settle(1200).await.expect("settle higher");
    assert!((199..=200).contains(&bal.debt), "{bal:?}");
    assert!(!ra.check("t").await.expect("check").allowed);
}

/// What cannot be settled is refused with the reason and changes nothing: a denied
/// reservation, one past its time limit, bad amounts and keys. A charge whose caller stopped
/// waiting still applies.
pub async fn rate_settle_refusals(h: &impl Harness) {
    let l = limiter(h).await;
    let rl = open(&l, "settle-refused", daily()).await;
    assert!(rl.check_n("k", 990).await.expect("check").allowed);
    let denied = rl.reserve("k", 500).await.expect("reserve");
    assert!(!denied.allowed());
    assert_err!(denied.settle(0).await, Error::InvalidArgument(_));
    let short = CheckOptions::new().cost(10).settle_within(ms(50));
    let late = rl.reserve_with("k", short).await.expect("reserve");
    assert!(late.allowed());
    tokio::time::sleep(ms(120)).await;
    assert_eq!(late.time_left(), Duration::ZERO);
    assert_err!(late.settle(0).await, Error::InvalidArgument(_));
    about(
        balance(&rl, "k").await.remaining,
        0,
        "settled at its estimate",
    );
    let zero = CheckOptions::new().cost(1).settle_within(Duration::ZERO);
    assert_err!(rl.reserve_with("k", zero).await, Error::InvalidArgument(_));
    assert_err!(rl.charge("", 1).await, Error::InvalidArgument(_));
    assert_err!(
        rl.charge("k", MAX_CHARGE + 1).await,
        Error::InvalidArgument(_)
    );
    assert_err!(
        rl.refund("k", MAX_CHARGE + 1).await,
        Error::InvalidArgument(_)
    );
    assert_err!(rl.reserve("k", 1001).await, Error::InvalidArgument(_));
    let r = rl.refund("k", 1000).await.expect("refund");
    assert_eq!(r.remaining, 1000);
    let big = rl.reserve("k", 1).await.expect("reserve");
    assert_err!(big.settle(MAX_CHARGE + 2).await, Error::InvalidArgument(_));
    // keep(): settled at the estimate, no request.
    let kept = rl.reserve("k", 5).await.expect("reserve");
    let before = l.stats();
    kept.keep();
    assert_eq!(requests(&l, &before), 0);
    // Dropped after its first poll: the charge is queued, and applies.
    let _ = tokio::time::timeout(Duration::ZERO, rl.charge("k", 100)).await;
    let mut polls = 0;
    while balance(&rl, "k").await.remaining > 894 {
        polls += 1;
        assert!(polls < 500, "a dropped charge never applied");
        tokio::time::sleep(ms(10)).await;
    }
}

/// Windows: a charge past the limit is a debt carried into the next windows; a refund takes
/// it off; another Limiter sees both.
pub async fn rate_debt_windows(h: &impl Harness) {
    let (a, b) = (limiter(h).await, limiter(h).await);
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        let name = format!("debt-{algorithm:?}").to_lowercase();
        let ra = open(&a, &name, Quota::new(100, YEAR).algorithm(algorithm)).await;
        let rb = b.open_rate_limit(&name).await.expect("open");
        let r = ra.reserve("k", 80).await.expect("reserve");
        assert_eq!(r.settle(30).await.expect("settle").remaining, 70);
        let bal = rb.charge("k", 100).await.expect("charge");
        assert_eq!((bal.remaining, bal.debt), (0, 30), "{algorithm:?}: {bal:?}");
        let d = ra.check("k").await.expect("check");
        assert!(!d.allowed, "{algorithm:?}: {d:?}");
        // A window of a year: the debt is carried into the next one, not forgiven at its end.
        assert!(
            d.reset_after > d.retry_after.unwrap_or_default(),
            "{algorithm:?}: {d:?}"
        );
        let bal = ra.refund("k", 40).await.expect("refund");
        assert_eq!((bal.remaining, bal.debt), (10, 0), "{algorithm:?}: {bal:?}");
        // The other Limiter denied from what it saw last: it sees the refund within a
        // second (as a reset elsewhere), without a request until then.
        let mut tries = 0;
        while !rb.check_n("k", 10).await.expect("check").allowed {
            tries += 1;
            assert!(
                tries < 300,
                "{algorithm:?}: the refund is not seen elsewhere"
            );
            tokio::time::sleep(ms(10)).await;
        }
    }
}

/// Several Limiters reserving and settling on one key: the estimates they kept never exceed
/// what GCRA allows in any interval (refunds give back no more than was taken), and with
/// settlements above the estimates everything settled is within the quota plus what the key
/// still owes at the end.
pub async fn rate_settle_exact_under_contention(h: &impl Harness) {
    let quota = Quota::per_second(200).burst(20);
    let mut limiters = Vec::new();
    for _ in 0..3 {
        limiters.push(limiter(h).await);
    }
    open(&limiters[0], "settle-hot", quota).await;
    for (key, over) in [("lower", false), ("higher", true)] {
        let began = unix_ns();
        let events = hammer(&limiters, key, over, Duration::from_millis(1500)).await;
        let rl = limiters[0]
            .open_rate_limit("settle-hot")
            .await
            .expect("open");
        let run_ns = unix_ns() - began;
        let debt = balance(&rl, key).await.debt;
        assert_settlements_exact(&events, &quota, run_ns, debt);
        let settled: u64 = events.iter().map(|e| e.actual).sum();
        assert!(
            settled >= 120,
            "{key}: only {settled} settled in 1.5 s at 200/s"
        );
    }
}

/// 6 callers per Limiter reserving 1–10 and settling at 0..=estimate (or 0..=2×estimate when
/// `over`) for `run`; the settled reservations.
async fn hammer(
    limiters: &[crate::Limiter],
    key: &'static str,
    over: bool,
    run: Duration,
) -> Vec<Settled> {
    let mut tasks = Vec::new();
    for (i, l) in limiters.iter().enumerate() {
        let rl = l.open_rate_limit("settle-hot").await.expect("open");
        for j in 0..6u64 {
            let rl = rl.clone();
            let mut rng = Rng::new(i as u64 * 100 + j + 1);
            tasks.push(tokio::spawn(async move {
                let stop = std::time::Instant::now() + run;
                let mut settled = Vec::new();
                let mut calls = 0u32;
                while std::time::Instant::now() < stop && calls < 20_000 {
                    calls += 1;
                    let estimate = 1 + rng.below(10);
                    let actual = rng.below(if over { 2 * estimate } else { estimate } + 1);
                    let start = unix_ns();
                    let r = rl.reserve(key, estimate).await.expect("reserve");
                    if !r.allowed() {
                        let pause = r.decision().retry_after.unwrap_or(ms(1)).min(ms(5));
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                    r.settle(actual).await.expect("settle");
                    settled.push(Settled {
                        start,
                        end: unix_ns(),
                        estimate,
                        actual,
                    });
                }
                settled
            }));
        }
    }
    let mut events = Vec::new();
    for t in tasks {
        events.extend(t.await.expect("caller task"));
    }
    events
}

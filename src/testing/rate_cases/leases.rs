//! Hot keys served from leases (`rate_limit/lease_book.rs`, `rate/lease.rs`): several Limiters
//! hammering one key admit from slices they took in one write each, never more than the quota
//! in any interval (GCRA) or window, with a handful of writes a second per Limiter; a lowered
//! quota takes over within a lease's time; a reservation never spends a lease.

use super::setup::open;
use crate::testing::harness::{Harness, LimiterOptions};
use crate::testing::rate_history::{assert_gcra_exact, unix_ns, window_excess, Admitted};
use crate::testing::util::ms;
use crate::{Algorithm, Limiter, Quota, RateLimit, RequestStats};
use std::time::{Duration, Instant};

const LIMITERS: usize = 3;
const CALLERS: usize = 8;

/// What a hammering run saw: every admission, and each Limiter's requests in it.
pub(super) struct Run {
    pub(super) events: Vec<Admitted>,
    pub(super) used: Vec<RequestStats>,
    pub(super) secs: f64,
}

impl Run {
    pub(super) fn all(&self) -> RequestStats {
        self.used.iter().copied().sum()
    }

    /// The most requests a second one Limiter sent.
    fn worst_requests_per_sec(&self) -> f64 {
        let most = self.used.iter().map(RequestStats::total).max().unwrap_or(0);
        most as f64 / self.secs
    }

    /// The most writes a second one Limiter sent (a write that lost to another writer and
    /// was sent again counts twice).
    pub(super) fn worst_writes_per_sec(&self) -> f64 {
        let most = self.used.iter().map(|u| u.put + u.txn).max().unwrap_or(0);
        most as f64 / self.secs
    }
}

/// `CALLERS` callers per Limiter check `key` of `name` back to back for `run` (a denied one
/// pauses for its `retry_after`, at most 5 ms); `from` only keeps admissions that started
/// after it.
pub(super) async fn hammer(limiters: &[Limiter], name: &str, run: Duration) -> Run {
    let before: Vec<RequestStats> = limiters.iter().map(Limiter::stats).collect();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for l in limiters {
        let rl = l.open_rate_limit(name).await.expect("open");
        for _ in 0..CALLERS {
            tasks.push(tokio::spawn(call_until(rl.clone(), started + run)));
        }
    }
    let mut events = Vec::new();
    for t in tasks {
        events.extend(t.await.expect("caller task"));
    }
    let secs = started.elapsed().as_secs_f64();
    let used = limiters
        .iter()
        .zip(&before)
        .map(|(l, b)| l.stats().since(b))
        .collect();
    Run { events, used, secs }
}

async fn call_until(rl: RateLimit, stop: Instant) -> Vec<Admitted> {
    let mut admitted = Vec::new();
    let mut calls = 0u32;
    while Instant::now() < stop && calls < 2_000_000 {
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
            tokio::time::sleep(d.retry_after.unwrap_or(ms(1)).min(ms(5))).await;
        }
    }
    admitted
}

/// A Limiter with leases of hot keys on.
async fn limiter(h: &impl Harness) -> Limiter {
    h.connect(LimiterOptions::new().hot_key_leases(true))
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

async fn limiters(h: &impl Harness) -> Vec<Limiter> {
    let mut all = Vec::new();
    for _ in 0..LIMITERS {
        all.push(limiter(h).await);
    }
    all
}

/// 3 Limiters × 8 callers on a key of 2,000/s: exact in every interval (GCRA) and window, most
/// admissions from leases, a few requests a second per Limiter, and most of the quota used.
pub async fn rate_leases_exact_under_contention(h: &impl Harness) {
    let all = limiters(h).await;
    let run = Duration::from_millis(2_500);
    let quota = Quota::per_second(2_000);
    open(&all[0], "leased", quota).await;
    let out = hammer(&all, "leased", run).await;
    let used = out.all();
    let admitted = out.events.len() as f64;
    println!(
        "leases: {admitted} admitted in {:.2} s ({:.0}/s), {} from leases, {} leases of {} units \
         ({} returned, {} lost), at most {:.1} writes/s and {:.1} requests/s per Limiter",
        out.secs,
        admitted / out.secs,
        used.rate_lease_admitted,
        used.rate_leases,
        used.rate_leased_units,
        used.rate_lease_returned_units,
        used.rate_lease_lost_units,
        out.worst_writes_per_sec(),
        out.worst_requests_per_sec()
    );
    assert_gcra_exact(&out.events, &quota, 0.0);
    assert!(
        used.rate_lease_admitted as f64 >= 0.5 * admitted,
        "a hot key is served from leases: {used:?}"
    );
    // 10 lease writes a second, a retry when two Limiters collide, the per-check writes
    // before the key is seen hot, in a run of 2.5 s (ZooKeeper reads after a conflict
    // besides); the steady state is the benchmark's (`benches/leases.rs`).
    assert!(
        out.worst_writes_per_sec() <= 40.0 && out.worst_requests_per_sec() <= 50.0,
        "a leased key costs a few writes a second per Limiter: {:?}",
        out.used
    );
    // The first lease gives up its hold (300 ms of an idle key); the rest is the quota's.
    assert!(
        admitted >= 0.75 * 2_000.0 * out.secs,
        "{admitted} admitted in {:.2} s at 2,000/s",
        out.secs
    );

    let windowed = Quota::per_second(2_000).algorithm(Algorithm::FixedWindow);
    open(&all[0], "leased-window", windowed).await;
    let out = hammer(&all, "leased-window", run).await;
    let (most, window) = window_excess(&out.events, &windowed);
    assert!(most <= 2_000, "{most} admitted in window {window}");
    assert!(out.all().rate_lease_admitted > 0, "{:?}", out.all());
}

/// A quota lowered while the key is leased: within a lease's time and the write that tells
/// the Limiter, the key admits by the new quota.
pub async fn rate_leases_follow_the_quota(h: &impl Harness) {
    let all = limiters(h).await;
    let old = Quota::per_second(2_000);
    let new = Quota::per_second(400);
    let rl = open(&all[0], "leased-lowered", old).await;
    let hot = hammer(&all, "leased-lowered", Duration::from_millis(800));
    let lower = async {
        tokio::time::sleep(ms(300)).await;
        rl.set_quota(new).await.expect("set_quota");
        unix_ns()
    };
    let (out, lowered) = tokio::join!(hot, lower);
    assert!(out.all().rate_leases > 0, "{:?}", out.all());
    // A lease's time (300 ms), the Limiters' next write (≤ 100 ms) and the check's own
    // latency: from then on, the new quota's bound.
    let settled = lowered + 700 * 1_000_000;
    let after: Vec<Admitted> = out
        .events
        .iter()
        .copied()
        .filter(|e| e.start >= settled)
        .collect();
    assert_gcra_exact(&after, &new, 0.0);
}

/// A reservation on a key its Limiter leases is taken in the store, never from the lease (a
/// refund gives it back where it was taken).
pub async fn rate_leases_spare_reservations(h: &impl Harness) {
    let l = limiter(h).await;
    let rl = open(&l, "leased-reserved", Quota::per_second(5_000)).await;
    // Hot: a lease is taken.
    let stop = Instant::now() + Duration::from_secs(5);
    while l.stats().rate_lease_admitted < 50 && Instant::now() < stop {
        let checks = (0..20).map(|_| rl.check("hot"));
        futures::future::join_all(checks).await;
    }
    assert!(l.stats().rate_lease_admitted >= 50, "{:?}", l.stats());
    let before = l.stats();
    for _ in 0..5 {
        // Admitted or not (the leases may hold every unit), never from a lease.
        let r = rl.reserve("hot", 3).await.expect("reserve");
        if r.allowed() {
            r.settle(1).await.expect("settle");
        }
    }
    let since = l.stats().since(&before);
    assert_eq!(since.rate_lease_admitted, 0, "{since:?}");
}

/// A check dearer than a lease takes, on a key its Limiter leases, goes to the store whole:
/// admitted while the key has the units, never denied for want of a lease.
pub async fn rate_leases_spare_big_checks(h: &impl Harness) {
    let l = limiter(h).await;
    let rl = open(&l, "leased-big", Quota::per_second(100_000)).await;
    let stop = Instant::now() + Duration::from_secs(5);
    while l.stats().rate_leases == 0 && Instant::now() < stop {
        let checks = (0..20).map(|_| rl.check("hot"));
        futures::future::join_all(checks).await;
    }
    assert!(l.stats().rate_leases > 0, "{:?}", l.stats());
    // The leases hold at most a quarter of what the key can lease, and its burst is 100,000.
    let d = rl.check_n("hot", 20_000).await.expect("check");
    assert!(d.allowed, "{d:?} {:?}", l.stats());
}

/// A Limiter that closes gives back what its leases have left (one write per key) before it
/// lets go of the store: every leased unit is then spent, given back or counted lost, and a
/// lone Limiter (the key's last writer) loses none of the last lease.
pub async fn rate_leases_given_back_on_close(h: &impl Harness) {
    let l = limiter(h).await;
    let quota = Quota::per_second(5_000);
    let rl = open(&l, "leased-closed", quota).await;
    let stop = Instant::now() + Duration::from_secs(5);
    while l.stats().rate_leases == 0 && Instant::now() < stop {
        let checks = (0..20).map(|_| rl.check("hot"));
        futures::future::join_all(checks).await;
    }
    let held = l.stats();
    assert!(held.rate_leases > 0, "a hot key is leased: {held:?}");
    // What this Limiter holds, as the live view shows it: the units its leases have left
    // (less than leased and not spent once a lease ended and was given back).
    let left: u64 = l.leased_keys().iter().map(|k| k.units_left).sum();
    assert!(left <= held.rate_leased_units - held.rate_lease_admitted);
    for k in l.leased_keys() {
        assert_eq!((k.limit.as_str(), k.key.as_str()), ("leased-closed", "hot"));
    }
    l.close().await.expect("close");
    assert!(l.leased_keys().is_empty(), "{:?}", l.leased_keys());
    let s = l.stats();
    let unspent = s.rate_leased_units - s.rate_lease_admitted;
    assert!(
        s.rate_lease_returned_units > 0,
        "given back on close: {s:?}"
    );
    assert_eq!(
        s.rate_lease_returned_units + s.rate_lease_lost_units,
        unspent,
        "every leased unit spent, given back or lost: {s:?}"
    );
    // Closed: leasing again is refused like any call.
    assert!(rl.check("hot").await.is_err());
    // The key took the units back: another Limiter sees them (the first lease's hold, 300
    // ms of the key, stays given up until time brings it back).
    let other = h.connect(LimiterOptions::new()).await.expect("connect");
    let rl = other.open_rate_limit("leased-closed").await.expect("open");
    let d = rl.check_n("hot", 0).await.expect("peek");
    let hold_units = 1_500;
    assert!(
        d.remaining + s.rate_lease_admitted + s.rate_lease_lost_units + hold_units >= 5_000,
        "{d:?} after {s:?}"
    );
}

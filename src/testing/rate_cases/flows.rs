//! Fair flows: a quota with `fair_flows` is stored so (every client agrees), and under
//! contention from several Limiters the flows checking a key split it max-min fairly, the
//! whole quota and never more.

use super::setup::{limiter, open, YEAR};
use crate::testing::harness::Harness;
use crate::testing::util::assert_err;
use crate::{Algorithm, CheckOptions, Error, KeyCheck, Limiter, Quota, RateLimit, Waited};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::Barrier;

/// A denial this long is the quota's (the next unit is days away), not pacing turning a check
/// away for a moment on a hot key.
const FOR_GOOD: Duration = Duration::from_secs(3600);

/// The quota and the flows round-trip through the store: another Limiter decides with them
/// (`check_with`, `wait_with`, `check_all`); a flow that asked and was denied is kept its
/// share by every other client; a flow on a quota without fair flows is ignored; a bad flow
/// name is refused before any request.
pub async fn rate_flows_stored(h: &impl Harness) {
    let (a, b, c) = (limiter(h).await, limiter(h).await, limiter(h).await);
    let q = Quota::new(100, YEAR)
        .algorithm(Algorithm::FixedWindow)
        .fair_flows();
    clear_of_window_end(YEAR).await;
    let ra = open(&a, "flows-stored", q).await;
    let rb = b.open_rate_limit("flows-stored").await.expect("open");
    let rc = c.open_rate_limit("flows-stored").await.expect("open");
    assert_eq!(rb.quota(), q, "fair flows round-trip through the store");
    let mut plain = q;
    plain.fair_flows = false;
    match b.rate_limit("flows-stored", plain).await {
        Err(Error::QuotaMismatch { stored, requested }) => {
            assert_eq!((*stored, *requested), (q, plain));
        }
        r => panic!("expected QuotaMismatch, got {r:?}"),
    }
    // h1 alone takes 60; light asks 50 with 40 left: denied, and counted for every client.
    assert!(flow_check(&ra, "h1", 60).await.allowed);
    assert!(!flow_check(&rb, "light", 50).await.allowed);
    // h2 may take 20 only: light is kept the other 20 (h1 already took more than its share).
    let mut h2 = 0;
    for _ in 0..100 {
        let d = flow_check(&rc, "h2", 1).await;
        if !d.allowed {
            assert!(d.retry_after.is_some_and(|r| r >= FOR_GOOD), "{d:?}");
            break;
        }
        h2 += 1;
    }
    assert_eq!(h2, 20, "h2 stops where light's share starts");
    let d = flow_check(&rb, "light", 20).await;
    assert!(d.allowed && d.remaining == 0, "light gets its 20: {d:?}");
    assert!(!flow_check(&ra, "h1", 1).await.allowed, "the quota is used");

    calls_and_refusals(&b, &c).await;
}

/// `check_all` and `wait_with` with flows; a flow on a quota without fair flows ignored; bad
/// flow names refused before any request.
async fn calls_and_refusals(b: &Limiter, c: &Limiter) {
    // check_all with flows, all or nothing (keys tagged: one cluster of a sharded store).
    let j = open(b, "flows-joint", Quota::new(10, YEAR).fair_flows()).await;
    let call = |flow: &str, cost: u64| {
        [
            KeyCheck::new(&j, "{f}j1", cost).flow(flow),
            KeyCheck::new(&j, "{f}j2", 1).flow(flow),
        ]
    };
    let ds = b.check_all(&call("x", 6)).await.expect("check_all");
    assert!(ds.iter().all(|d| d.allowed), "{ds:?}");
    let ds = b.check_all(&call("y", 5)).await.expect("check_all");
    assert!(ds.iter().all(|d| !d.allowed), "only 4 left on j1: {ds:?}");
    assert_eq!(ds[1].remaining, 9, "nothing consumed: {ds:?}");
    // y asked 5 on j1 (counted): x must leave it 4 of them.
    let ds = b.check_all(&call("x", 1)).await.expect("check_all");
    assert!(ds.iter().all(|d| !d.allowed), "x keeps y's share: {ds:?}");
    let ds = b.check_all(&call("y", 4)).await.expect("check_all");
    assert!(ds.iter().all(|d| d.allowed), "y gets it: {ds:?}");

    // A wait of a flow: admitted within its share, then denied at once past its budget.
    let w = open(c, "flows-wait", Quota::new(4, YEAR).fair_flows()).await;
    let soon = |flow: &str| {
        CheckOptions::new()
            .flow(flow)
            .within(Duration::from_millis(200))
    };
    for _ in 0..4 {
        let r = w.wait_with("k", soon("p")).await.expect("wait_with");
        assert!(matches!(r, Waited::Admitted(_)), "{r:?}");
    }
    let r = w.wait_with("k", soon("p")).await.expect("wait_with");
    assert!(matches!(r, Waited::Denied(_)), "{r:?}");

    // A flow on a quota without fair flows is ignored; a bad name is refused, no request.
    let plain = open(c, "flows-plain", Quota::new(4, YEAR)).await;
    assert!(flow_check(&plain, "a", 3).await.allowed);
    assert!(!flow_check(&plain, "b", 2).await.allowed);
    // With fair flows a would now keep 1 for b; without, it takes it.
    assert!(flow_check(&plain, "a", 1).await.allowed);
    let before = c.stats();
    let bad = CheckOptions::new().flow("");
    assert_err!(plain.check_with("k", bad).await, Error::InvalidArgument(_));
    let bad = CheckOptions::new().flow("a\u{7}b");
    assert_err!(
        w.check_with("k", bad.clone()).await,
        Error::InvalidArgument(_)
    );
    assert_err!(w.wait_with("k", bad).await, Error::InvalidArgument(_));
    let lone = [KeyCheck::new(&j, "{f}j3", 1).flow("x".repeat(129))];
    assert_err!(c.check_all(&lone).await, Error::InvalidArgument(_));
    assert_eq!(
        c.stats().since(&before).total(),
        0,
        "refused before any request"
    );
}

/// Several Limiters on one key with fair flows (a quota of 100 per year: nothing comes back
/// during the run): a light flow asks 10 among the heavy flows' first checks; then the two
/// heavy flows, 9 clients each, make 80 checks each (a denied one is not retried). The light
/// flow gets all it asked and exactly 100 are admitted in all, whatever the order the
/// Limiters' batches land in. (Within one window the heavy flows are served as they come
/// until the key runs short: what a flow has not asked yet is not kept for it.
/// [`rate_flows_steady_split`] checks their split.) For a fixed window and GCRA.
pub async fn rate_flows_share_under_contention(h: &impl Harness) {
    let mut limiters = Vec::new();
    for _ in 0..3 {
        limiters.push(limiter(h).await);
    }
    for (name, algorithm) in [
        ("flows-fixed", Algorithm::FixedWindow),
        ("flows-gcra", Algorithm::Gcra),
    ] {
        let quota = Quota::new(100, YEAR).algorithm(algorithm).fair_flows();
        open(&limiters[0], name, quota).await;
        clear_of_window_end(YEAR).await;
        let got = demand(&limiters, name, None).await;
        println!("{quota}: light, h1, h2 got {got:?}");
        let [light, h1, h2] = got;
        assert_eq!(
            light, 10,
            "{quota}: the light flow gets all it asked: {got:?}"
        );
        assert_eq!(
            h1 + h2,
            90,
            "{quota}: the heavy flows take the rest: {got:?}"
        );
    }
}

/// The same demands in two fairness windows running (a fixed window of 5 s): in the second,
/// each flow gets its max-min share whatever the order its checks land in: the light flow
/// its 10, each heavy flow 45 (±1), exactly 100 in all. The windows are the Unix epoch's:
/// the run starts at the start of one, and is run again (at most twice more) if a window
/// ended before its checks did.
pub async fn rate_flows_steady_split(h: &impl Harness) {
    let mut limiters = Vec::new();
    for _ in 0..3 {
        limiters.push(limiter(h).await);
    }
    let period = Duration::from_secs(5);
    let quota = Quota::new(100, period)
        .algorithm(Algorithm::FixedWindow)
        .fair_flows();
    for attempt in 0..3 {
        let name = format!("flows-steady-{attempt}");
        open(&limiters[0], &name, quota).await;
        let first = next_window(period).await;
        demand(&limiters, &name, Some(first + 1)).await;
        if window_of(period) != first {
            continue;
        }
        next_window(period).await;
        let got = demand(&limiters, &name, Some(first + 2)).await;
        if window_of(period) != first + 1 {
            continue;
        }
        println!("{quota}: second window: light, h1, h2 got {got:?}");
        let [light, h1, h2] = got;
        assert_eq!(light, 10, "{quota}: the light flow's share: {got:?}");
        assert!(
            h1.abs_diff(45) <= 1 && h2.abs_diff(45) <= 1,
            "{quota}: the heavy flows' max-min share: {got:?}"
        );
        assert_eq!(light + h1 + h2, 100, "{quota}: the whole quota: {got:?}");
        return;
    }
    panic!("{quota}: three runs in a row outlasted their 5 s window");
}

/// Light: 10 clients over the Limiters, one check of 1 each; heavy h1 and h2: 3 clients per
/// Limiter each, 80 checks of 1 per flow in all. Every client's first check goes at once
/// (a barrier), then the heavy ones go on. A check turned away for a moment (pacing) is
/// retried, a denial is not; clients stop at the start of window `until` if given. What each
/// flow got.
async fn demand(limiters: &[Limiter], name: &str, until: Option<u64>) -> [u64; 3] {
    const LIGHT: u64 = 10;
    const HEAVY: u64 = 80;
    const PER_LIMITER: usize = 3;
    let clients = LIGHT as usize + limiters.len() * PER_LIMITER * 2;
    let barrier = Arc::new(Barrier::new(clients));
    let mut handles = Vec::new();
    for l in limiters {
        handles.push(l.open_rate_limit(name).await.expect("open_rate_limit"));
    }
    let asked: [Arc<AtomicU64>; 3] = Default::default();
    let mut running = Vec::new();
    let mut spawn = |f: usize, rl: &RateLimit, most: u64| {
        let client = Client {
            rl: rl.clone(),
            flow: ["light", "h1", "h2"][f],
            asked: asked[f].clone(),
            most,
            barrier: barrier.clone(),
            until,
        };
        running.push((f, tokio::spawn(client.run())));
    };
    for i in 0..LIGHT as usize {
        spawn(0, &handles[i % handles.len()], LIGHT);
    }
    for rl in &handles {
        for _ in 0..PER_LIMITER {
            spawn(1, rl, HEAVY);
            spawn(2, rl, HEAVY);
        }
    }
    let mut got = [0u64; 3];
    for (f, t) in running {
        got[f] += t.await.expect("checking client");
    }
    got
}

/// One client of a flow: checks of 1 on key "hot" while its flow has made fewer than `most`
/// checks (shared by the flow's clients through `asked`).
struct Client {
    rl: RateLimit,
    flow: &'static str,
    asked: Arc<AtomicU64>,
    most: u64,
    barrier: Arc<Barrier>,
    until: Option<u64>,
}

impl Client {
    /// How many of its checks were admitted.
    async fn run(self) -> u64 {
        let period = self.rl.quota().period;
        let mut admitted = 0u64;
        let mut first = true;
        for _ in 0..10_000 {
            if self.asked.fetch_add(1, Ordering::SeqCst) >= self.most
                || self.until.is_some_and(|w| window_of(period) >= w)
            {
                if first {
                    self.barrier.wait().await;
                }
                return admitted;
            }
            let d = loop {
                let d = self
                    .rl
                    .check_with("hot", CheckOptions::new().flow(self.flow))
                    .await
                    .expect("check_with");
                // Turned away by pacing for a moment: not a decision of the key.
                if d.allowed
                    || d.retry_after
                        .is_some_and(|r| r >= Duration::from_millis(100))
                {
                    break d;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            };
            admitted += u64::from(d.allowed);
            if std::mem::take(&mut first) {
                self.barrier.wait().await;
            }
            // Independent clients: one check at a time each, whatever the runtime's order.
            tokio::task::yield_now().await;
        }
        panic!("{}: 10,000 checks", self.flow);
    }
}

/// The fairness window (`now / period`, Unix epoch) the clock is in.
fn window_of(period: Duration) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    u64::try_from(now / period.as_nanos()).unwrap_or(u64::MAX)
}

/// Sleeps until 50 ms into the next window (at most one period and 50 ms); its index.
async fn next_window(period: Duration) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let left = period.as_nanos() - now % period.as_nanos();
    let wait = Duration::from_nanos(u64::try_from(left).unwrap_or(0)) + Duration::from_millis(50);
    tokio::time::sleep(wait).await;
    window_of(period)
}

/// Fairness windows are the quota's period, aligned to the Unix epoch: a run that crossed a
/// window's end would start the shares afresh. Within 2 minutes of one, wait until it has
/// passed (at most 2 minutes, then the run has the whole window).
async fn clear_of_window_end(period: Duration) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let left = period.as_nanos() - now % period.as_nanos();
    let margin = Duration::from_secs(120);
    if left < margin.as_nanos() {
        let wait = Duration::from_nanos(u64::try_from(left).unwrap_or(0));
        tokio::time::sleep(wait + Duration::from_secs(1)).await;
    }
}

/// One check of `cost` of `flow` on key "k", which must not fail.
async fn flow_check(rl: &RateLimit, flow: &str, cost: u64) -> crate::Decision {
    rl.check_with("k", CheckOptions::new().flow(flow).cost(cost))
        .await
        .unwrap_or_else(|e| panic!("check_with(k, {flow}, {cost}) on {}: {e}", rl.name()))
}

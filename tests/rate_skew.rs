//! Clock skew (issue 15): half of the 8 Limiters of the hot-key hammer read a clock off by Δ
//! (+200 ms, then −200 ms) and join 1 s after the others, on memory, etcd and ZooKeeper.
//! Admitted checks are timed on the TRUE clock.
//!
//! The bound. `decide` clamps a check's time to the key's stamp (the latest time any writer
//! used), so the time a key's decisions are made at — its effective clock `e` — never runs
//! backwards, and with every clock within Δ of the true time `t`, `t − Δ ≤ e ≤ t + Δ` (ahead
//! clocks: `t ≤ e ≤ t + Δ`; behind: `t − Δ ≤ e ≤ t`). GCRA on `e` admits at most
//! `burst + (e(b) − e(a)) / T` in any stretch, so in a true interval `[a, b]` at most
//! `burst + (b − a + Δ) / T`: a skew of Δ over-admits at most `Δ × limit / period` (here
//! 200 ms × 500/s = 100), once, not per interval (+1 for rounding). A clock ahead reaches it
//! (it sees Δ more refill the moment it joins a bucket the true clocks keep empty). A clock
//! behind that joins a busy key is clamped to the true writers' stamp, so it decides at the
//! true time or earlier: it cannot admit what a true clock would not; only a lull in the true
//! writers' writes (the stamp falling behind `t`) lets `e` jump forward later, by at most that
//! lull.

use crate::rate_hammer;

use clusterlimit::testing::rate_history::assert_gcra_exact;
use clusterlimit::{Clock, Quota};
use rate_hammer::{hammer, serial, Hammer, Server};
use std::time::{Duration, SystemTime};

const RUN: Duration = Duration::from_secs(4);
const SKEW: Duration = Duration::from_millis(200);
const JOIN_AFTER: Duration = Duration::from_secs(1);

fn skewed(ahead: bool) -> Clock {
    if ahead {
        Clock::new(|| SystemTime::now() + SKEW)
    } else {
        Clock::new(|| SystemTime::now() - SKEW)
    }
}

async fn skew(server: Server) {
    let quota = Quota::per_second(500).burst(50);
    // Δ × limit / period, + 1 for rounding.
    let slack = SKEW.as_secs_f64() * quota.limit as f64 / quota.period.as_secs_f64() + 1.0;
    for (ahead, limit) in [(true, "skew-ahead"), (false, "skew-behind")] {
        let mut h = Hammer::new(limit, quota, RUN);
        h.clocks = (0..h.limiters)
            .map(|i| (i >= h.limiters / 2).then(|| skewed(ahead)))
            .collect();
        h.late = Some((h.limiters / 2, JOIN_AFTER));
        let out = hammer(&server, &h).await;
        out.print(limit);
        let exact = assert_gcra_exact(&out.events, &quota, slack);
        println!(
            "[{limit} {}] Δ = {}{} ms: worst excess over the skew-free bound {:.3} (derived bound: \
             {slack}), {} admitted in {:.3} ms",
            out.store,
            if ahead { "+" } else { "−" },
            SKEW.as_millis(),
            exact.over + slack,
            exact.admitted,
            (exact.to - exact.from) as f64 / 1e6
        );
        assert!(
            out.errors.is_empty(),
            "{}: {} checks failed, first: {:?}",
            out.store,
            out.errors.len(),
            out.errors.first()
        );
    }
}

#[test]
fn memory_skew() {
    serial(async { skew(Server::memory().await).await });
}

#[test]
fn etcd_skew() {
    serial(async { skew(Server::etcd()).await });
}

#[test]
fn zk_skew() {
    serial(async { skew(Server::zk()).await });
}

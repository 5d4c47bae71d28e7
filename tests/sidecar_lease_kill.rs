//! A sidecar SIGKILLed while it holds a lease of a hot key (issue 43): two `clusterlimit serve`
//! with `--hot-key-leases` on one real etcd share the key, hammered over HTTP on both; one is
//! killed with leased units in hand. The other keeps serving, the history of every answer
//! either gave never admits more than the quota in any interval, and the units the dead one
//! held (its last scrape before the kill) are fewer than one lease can ever take.

use crate::binary;
use crate::sidecar_hot_keys::{
    admitted_of, counters, exact_flags, hammer_http, hot_quota, put_hot_quota, Counters, BURST,
    RATE,
};
use crate::support;

use binary::{eventually, http_client, signal, Sidecar};
use clusterlimit::testing::rate_history::{assert_gcra_exact, unix_ns};
use std::time::Duration;
use support::EtcdCluster;

/// How long the clients check: the kill comes about `BEFORE_KILL` in.
const RUN: Duration = Duration::from_millis(3500);
const BEFORE_KILL: Duration = Duration::from_millis(1500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_killed_holding_a_lease_never_lets_the_key_over_its_quota() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("lease-kill");
    let flags = exact_flags(&url, true);
    let (victim, survivor) = tokio::join!(Sidecar::start(&flags), Sidecar::start(&flags));
    let c = http_client();
    put_hot_quota(&c, &victim.url, "hot-kill").await;
    let bases = [victim.url.clone(), survivor.url.clone()];
    let hammer = tokio::spawn(async move { hammer_http(&bases, "hot-kill", RUN).await });
    tokio::time::sleep(BEFORE_KILL).await;
    // The last scrape before the kill, once it shows leased units in hand.
    let held: Counters = eventually(
        "the victim holding leased units",
        Duration::from_secs(1),
        || async {
            let now = counters(&c, &victim.url).await;
            (now.held() > 0.0).then_some(now)
        },
    )
    .await;
    signal(victim.pid(), "KILL");
    let killed_at = unix_ns();
    let seen = hammer.await.expect("the clients' task");
    let after = counters(&c, &survivor.url).await;

    // The victim's clients stop at their first check without an answer; the survivor's never do.
    for s in &seen[0] {
        assert!(
            s.failed.is_some(),
            "a client of the victim ran on after the kill"
        );
    }
    for s in &seen[1] {
        assert_eq!(s.failed, None, "a check of the survivor failed");
    }
    let events = admitted_of(&seen);
    let worst = assert_gcra_exact(&events, &hot_quota(), 0.0);
    let late: Vec<_> = seen[1]
        .iter()
        .flat_map(|s| &s.admitted)
        .filter(|e| e.start > killed_at)
        .collect();
    let after_kill = RUN.saturating_sub(BEFORE_KILL).as_secs_f64();
    let allowed = BURST as f64 + RATE as f64 * RUN.as_secs_f64();
    // What one lease may take at most: the units that end within the burst's tolerance once
    // its 300 ms of spending are past (rate/lease.rs), whatever the sizing.
    let one_lease = BURST as f64 - RATE as f64 * 0.3;
    println!(
        "[kill] {} admitted of {allowed:.0} the quota allows over {RUN:?} ({} by the survivor \
         after the kill); the victim held {:.0} leased units at its last scrape ({held:?}); \
         survivor {after:?}; worst excess {:.3} (≤ 0: never over)",
        events.len(),
        late.len(),
        held.held(),
        worst.over
    );
    assert!(
        held.held() <= one_lease,
        "the victim held {:.0} units, more than one lease takes ({one_lease})",
        held.held()
    );
    assert!(
        late.len() as f64 >= 0.25 * RATE as f64 * after_kill,
        "the survivor admitted only {} checks in the {after_kill} s after the kill",
        late.len()
    );
    assert!(after.leases > 0.0, "the survivor took no lease: {after:?}");
}

//! Failover of one cluster of a sharded store (`URL;URL`): two real single-member etcd
//! clusters; the first one (which also holds the semaphores and the reference copy of every
//! quota) is SIGKILLed. Keys on the second keep being checked, exactly (every key admits its
//! burst and not one more, from two Limiters); keys on the killed one fail with a store error
//! naming it; after a restart they answer again, their states intact, still exact.
//!
//! `one_cluster_down_fails_only_its_keys` has one member per cluster, so that killing the
//! member (its leader) takes the cluster down for as long as the test wants.
//! `a_leader_kill_in_one_cluster_leaves_the_other_answering` has three members per cluster and
//! kills the first cluster's leader: the other cluster never notices, and the first one's keys
//! answer again after its re-election, never over their burst.

use crate::support;

use clusterlimit::{Error, Limiter, Quota, RateLimit};
use std::time::{Duration, Instant};

/// Each key admits this many checks over the test (one more per hour: none in the test).
const BURST: u64 = 5;
const KEYS: usize = 24;

fn key(i: usize) -> String {
    format!("key-{i:03}-end")
}

async fn connect(url: &str) -> Limiter {
    Limiter::builder(url)
        .request_timeout(Duration::from_millis(800))
        .connect()
        .await
        .expect("connect the sharded store")
}

/// Checks `key` `n` times on each limit handle, concurrently; the number admitted.
async fn admitted(handles: &[&RateLimit], key: &str, n: usize) -> u64 {
    let calls = handles
        .iter()
        .flat_map(|h| (0..n).map(move |_| h.check(key)));
    let mut got = 0;
    for d in futures::future::join_all(calls).await {
        let d = d.unwrap_or_else(|e| panic!("{key} on the live cluster: {e}"));
        got += u64::from(d.allowed);
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_cluster_down_fails_only_its_keys() {
    let mut first = support::EtcdCluster::single();
    let second = support::EtcdCluster::single();
    let url = format!("{};{}", first.url("t"), second.url("t"));
    let (a, b) = (connect(&url).await, connect(&url).await);
    let quota = Quota::per_day(24).burst(BURST);
    // (Last, the second cluster misses a quota change while down and is repaired.)
    let ra = a.rate_limit("f", quota).await.expect("rate_limit");
    let rb = b.open_rate_limit("f").await.expect("open");

    // One check per key, then where each key is, read from the stores themselves.
    for i in 0..KEYS {
        assert!(ra.check(&key(i)).await.expect("check").allowed);
    }
    let mut on_first = Vec::new();
    let mut on_second = Vec::new();
    for i in 0..KEYS {
        let prefix = format!("t/rk/f/{}", key(i));
        let here = support::count_keys(&first.endpoints(), &prefix).await;
        let there = support::count_keys(&second.endpoints(), &prefix).await;
        assert_eq!(here + there, 1, "{} is on exactly one cluster", key(i));
        if here == 1 {
            on_first.push(key(i));
        } else {
            on_second.push(key(i));
        }
    }
    assert!(
        !on_first.is_empty() && !on_second.is_empty(),
        "keys on both clusters: {on_first:?} / {on_second:?}"
    );

    first.kill(0);
    let killed_at = Instant::now();

    // The second cluster's keys: every call answers, each key admits exactly its burst.
    for k in &on_second {
        let got = admitted(&[&ra, &rb], k, BURST as usize).await;
        assert_eq!(
            got,
            BURST - 1,
            "{k}: the burst less the first check, no more"
        );
    }
    // The first cluster's keys fail with a store error naming their cluster, in bounded time.
    let named = first.endpoints()[0].clone();
    for k in on_first.iter().take(4) {
        let started = Instant::now();
        match ra.check(k).await {
            Err(Error::Store(e)) => {
                let msg = e.to_string();
                assert!(msg.contains(&named), "{k}: {msg} does not name {named}");
            }
            other => panic!("{k} on the killed cluster: {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{k} took {:?} to fail",
            started.elapsed()
        );
    }
    // Still answering after the failed calls: no shared state was poisoned.
    for k in &on_second {
        let d = rb.check(k).await.expect("the second cluster still answers");
        assert!(!d.allowed, "{k} is spent");
    }
    eprintln!(
        "{} keys checked on the live cluster while the other was down ({:?})",
        on_second.len(),
        killed_at.elapsed()
    );

    // Back: the killed cluster's keys answer again, their first check remembered.
    first.restart(0);
    let deadline = Instant::now() + Duration::from_secs(20);
    for k in &on_first {
        loop {
            match ra.check_n(k, 0).await {
                Ok(_) => break,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("{k} not back yet: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("{k} never came back: {e}"),
            }
        }
        let got = admitted(&[&ra, &rb], k, BURST as usize).await;
        assert_eq!(
            got,
            BURST - 1,
            "{k}: its state survived the outage, no over-admission"
        );
    }

    // A quota change while the second cluster is down: refused naming it, kept by the first
    // cluster, and given to the second cluster once it is back (its copy is repaired).
    let mut second = second;
    second.kill(0);
    let bigger = Quota::per_day(24).burst(BURST + 3);
    match ra.set_quota(bigger).await {
        Err(Error::Store(e)) => {
            let msg = e.to_string();
            let down = &second.endpoints()[0];
            assert!(
                msg.contains(down) && msg.contains("stored on the first cluster"),
                "{msg}"
            );
        }
        other => panic!("set_quota with the second cluster down: {other:?}"),
    }
    second.restart(0);
    // Opening the limit (as a new process does) repairs the copy once the cluster answers.
    let deadline = Instant::now() + Duration::from_secs(20);
    let alone = connect(&second.url("t")).await;
    loop {
        let reopened = b.open_rate_limit("f").await.map(|r| r.quota());
        let copy = alone.open_rate_limit("f").await.map(|r| r.quota());
        match (reopened, copy) {
            (Ok(q), Ok(c)) if q == bigger && c == bigger => break,
            other if Instant::now() < deadline => {
                eprintln!("not repaired yet: {other:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => panic!("the second cluster's copy was never repaired: {other:?}"),
        }
    }
    alone.close().await.expect("close");
    // Every client now writes under the new quota on both clusters (a learns it from a
    // conflict, as after any quota change).
    let mut on_repaired = 0;
    for i in 0..KEYS {
        let k = format!("fresh-{i:03}-end");
        let first_check = loop {
            match rb.check(&k).await {
                Ok(d) => break u64::from(d.allowed),
                Err(e) if Instant::now() < deadline => {
                    eprintln!("{k} not back yet: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("{k} never came back: {e}"),
            }
        };
        let got = first_check + admitted(&[&ra, &rb], &k, BURST as usize + 3).await;
        assert_eq!(got, BURST + 3, "{k}: the new quota, wherever the key lives");
        on_repaired += support::count_keys(&second.endpoints(), &format!("t/rk/f/{k}")).await;
    }
    assert!(on_repaired > 0, "some fresh key is on the repaired cluster");
    a.close().await.expect("close");
    b.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_kill_in_one_cluster_leaves_the_other_answering() {
    let mut first = support::EtcdCluster::start(3);
    let second = support::EtcdCluster::start(3);
    let url = format!("{};{}", first.url("t"), second.url("t"));
    let (a, b) = (connect(&url).await, connect(&url).await);
    let ra = a
        .rate_limit("f", Quota::per_day(24).burst(BURST))
        .await
        .expect("rate_limit");
    let rb = b.open_rate_limit("f").await.expect("open");
    let mut on_first = Vec::new();
    let mut on_second = Vec::new();
    for i in 0..KEYS {
        assert!(ra.check(&key(i)).await.expect("check").allowed);
        let prefix = format!("t/rk/f/{}", key(i));
        if support::count_keys(&first.endpoints(), &prefix).await == 1 {
            on_first.push(key(i));
        } else {
            on_second.push(key(i));
        }
    }
    assert!(!on_first.is_empty() && !on_second.is_empty());

    let leader = support::etcd::leader(&first).await;
    first.kill(leader);
    // The other cluster: every call answers, exactly, while the first one elects a leader.
    for k in &on_second {
        let got = admitted(&[&ra, &rb], k, BURST as usize).await;
        assert_eq!(got, BURST - 1, "{k}");
    }
    // The first cluster's keys: answered again after the election, never over their burst
    // (a write whose reply was lost in the kill is recognised when retried, never counted
    // twice, so at most the burst is admitted; checks that failed may have consumed).
    let deadline = Instant::now() + Duration::from_secs(20);
    for k in &on_first {
        let mut allowed = 1;
        let mut answered = 0;
        while answered < 2 * BURST {
            match ra.check(k).await {
                Ok(d) => {
                    answered += 1;
                    allowed += u64::from(d.allowed);
                }
                Err(e) if Instant::now() < deadline => {
                    eprintln!("{k} during the election: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("{k} never answered again: {e}"),
            }
        }
        assert!(allowed <= BURST, "{k}: {allowed} admitted, burst {BURST}");
    }
    a.close().await.expect("close");
    b.close().await.expect("close");
}

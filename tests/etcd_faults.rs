//! etcd-specific failure behaviour against real servers: leader loss, member restart, watch
//! resumption across compaction, a hung server, an unreachable endpoint, a permit key deleted
//! behind its holder's back, and an enqueue whose view of the semaphore lags, was compacted or
//! whose reply was lost. (The store-neutral semantics are in tests/contract.rs.)

use crate::support;

use clusterlimit::{Error, Limiter, Semaphore};
use std::time::Duration;
use support::{eventually, hold_and_queue, EtcdCluster, FaultProxy};
use tokio::time::{timeout, Instant};

/// Retries a raw etcd call (a member may just have died) at most 20 times in 10 s.
async fn with_retries<T, F, Fut>(what: &str, mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    let mut last = None;
    for _ in 0..20 {
        match timeout(Duration::from_millis(500), op()).await {
            Ok(Ok(v)) => return v,
            Ok(Err(e)) => last = Some(e.to_string()),
            Err(_) => last = Some("timed out".into()),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("raw etcd {what} kept failing: {last:?}");
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "kill {sig} {pid} failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_kill_keeps_holders_and_wakes_waiters() {
    let mut cluster = EtcdCluster::start(3);
    let url = cluster.url("failover");
    let a = Limiter::builder(&url).owner("a").connect().await.unwrap();
    let b = Limiter::builder(&url).owner("b").connect().await.unwrap();
    let (sa, held, waiter) = hold_and_queue(&a, &b).await;

    let l = support::etcd::leader(&cluster).await;
    cluster.kill(l);
    // The release goes through once a new leader is elected; the waiter's watch resumes.
    timeout(Duration::from_secs(10), held.release())
        .await
        .expect("release bounded")
        .expect("release after failover");
    let granted = timeout(Duration::from_secs(10), waiter)
        .await
        .expect("waiter woken after leader loss")
        .unwrap()
        .expect("waiter granted");
    assert!(!granted.is_lost(), "a leader change must not lose permits");
    drop(granted);

    cluster.restart(l);
    for _ in 0..5 {
        let p = timeout(Duration::from_secs(10), sa.acquire())
            .await
            .unwrap()
            .unwrap();
        p.release().await.unwrap();
    }
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_resumes_watch_across_member_restart_and_compaction() {
    let mut cluster = EtcdCluster::start(3);
    let eps = cluster.endpoints();
    // The waiter talks to member 0 only, so killing it breaks its watch stream.
    let waiter_url = format!("etcd://{}/compact", eps[0].trim_start_matches("http://"));
    let others_url = format!(
        "etcd://{},{}/compact",
        eps[1].trim_start_matches("http://"),
        eps[2].trim_start_matches("http://")
    );
    let holder = Limiter::connect(&others_url).await.unwrap();
    let hs = holder.semaphore("s", 1).await.unwrap();
    let held = hs.acquire().await.unwrap();
    let w = Limiter::connect(&waiter_url).await.unwrap();
    let ws = w.semaphore("s", 1).await.unwrap();
    let waiter = tokio::spawn(async move { ws.acquire().await });
    eventually("waiter queued", Duration::from_secs(5), || async {
        hs.status().await.map(|s| s.waiting == 1).unwrap_or(false)
    })
    .await;

    cluster.kill(0);
    // While the waiter's member is down: write, release, and compact past its watch revision.
    let raw = support::connect(&eps[1..]).await;
    let mut rev = 0;
    for i in 0..20 {
        rev = with_retries("put", || {
            let mut c = raw.clone();
            async move { c.put(format!("noise/{i}"), "x", None).await }
        })
        .await
        .header()
        .unwrap()
        .revision();
    }
    held.release().await.unwrap();
    with_retries("compact", || {
        let mut c = raw.clone();
        async move { c.compact(rev, None).await }
    })
    .await;
    cluster.restart(0);

    let granted = timeout(Duration::from_secs(10), waiter)
        .await
        .expect("waiter woken after its watch start revision was compacted")
        .unwrap()
        .expect("granted");
    assert!(!granted.is_lost());
    assert!(
        w.stats().range >= 1,
        "the compacted watch re-read the semaphore"
    );
    granted.release().await.unwrap();
    holder.close().await.unwrap();
    w.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_server_is_bounded_and_recovers() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("hung");
    let ttl = Duration::from_secs(2);
    let connect = |owner: &'static str| {
        Limiter::builder(&url)
            .session_ttl(ttl)
            .request_timeout(Duration::from_secs(1))
            .owner(owner)
            .connect()
    };
    let a = connect("a").await.unwrap();
    let b = connect("b").await.unwrap();
    let (sa, held, waiter) = hold_and_queue(&a, &b).await;

    let pid = cluster.pid(0).expect("etcd running");
    signal(pid, "-STOP");
    let stopped = Instant::now();
    // The holder learns its permit is no longer safe by the TTL, without any answer from etcd.
    timeout(ttl + Duration::from_secs(1), held.lost())
        .await
        .expect("lost() fires within the TTL of a hung server");
    let lost_after = stopped.elapsed();
    let w = timeout(ttl + Duration::from_secs(3), waiter)
        .await
        .expect("a wait on a hung server ends")
        .unwrap();
    assert!(matches!(w, Err(Error::SessionLost)), "waiter got {w:?}");
    // New calls fail in bounded time rather than hang.
    let t = Instant::now();
    let r = timeout(Duration::from_secs(15), sa.acquire())
        .await
        .expect("acquire bounded");
    assert!(r.is_err(), "acquire on a hung server: {r:?}");
    println!(
        "hung etcd: lost() after {lost_after:?}, new acquire failed after {:?}",
        t.elapsed()
    );

    signal(pid, "-CONT");
    // After the server wakes up, the same Limiter works again with a new lease.
    let mut ok = None;
    for _ in 0..50 {
        if let Ok(Ok(p)) = timeout(
            Duration::from_secs(5),
            sa.acquire_timeout(Duration::from_secs(4)),
        )
        .await
        {
            ok = Some(p);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let p = ok.expect("acquire works again after the server resumes");
    assert!(!p.is_lost());
    drop(held);
    p.release().await.unwrap();
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_endpoint_fails_fast() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t = Instant::now();
    let r = Limiter::builder(&format!("etcd://127.0.0.1:{port}/x"))
        .request_timeout(Duration::from_secs(1))
        .connect()
        .await;
    assert!(matches!(r, Err(Error::Store(_))), "got {r:?}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_key_deleted_behind_its_back_fires_lost() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("gone");
    let a = Limiter::connect(&url).await.unwrap();
    let sa = a.semaphore("s", 1).await.unwrap();
    let held = sa.acquire().await.unwrap();
    // A second request from the same Limiter waits, so the Limiter watches the semaphore.
    let sa2 = sa.clone();
    let waiter = tokio::spawn(async move { sa2.acquire().await });
    eventually("waiter queued", Duration::from_secs(5), || async {
        sa.status().await.map(|s| s.waiting == 1).unwrap_or(false)
    })
    .await;
    // An operator deletes the holder's key (the oldest entry).
    let mut raw = support::connect(&cluster.endpoints()).await;
    let opts = etcd_client::GetOptions::new()
        .with_prefix()
        .with_sort(
            etcd_client::SortTarget::Create,
            etcd_client::SortOrder::Ascend,
        )
        .with_limit(1);
    let oldest = raw.get("gone/s/s/q/", Some(opts)).await.unwrap();
    let key = oldest.kvs()[0].key().to_vec();
    raw.delete(key, None).await.unwrap();
    timeout(Duration::from_secs(2), held.lost())
        .await
        .expect("lost() after the key vanished");
    let next = timeout(Duration::from_secs(2), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(!next.is_lost());
    assert!(next.fencing_token() > held.fencing_token());
    a.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_longer_than_a_default_grpc_reply_still_works() {
    // ~6 MiB of queue: every enqueue reads the whole queue, above tonic's 4 MiB default limit.
    const ENTRIES: usize = 10_000;
    let cluster = EtcdCluster::single();
    let limiter = Limiter::connect(&cluster.url("long")).await.unwrap();
    let sem = limiter.semaphore("s", 1).await.unwrap();
    let raw = support::connect(&cluster.endpoints()).await;
    let value = format!(
        r#"{{"permits":1,"owner":"{}","since_unix_ms":0}}"#,
        "o".repeat(500)
    );
    for chunk in 0..ENTRIES / 100 {
        let puts: Vec<etcd_client::TxnOp> = (0..100)
            .map(|i| {
                etcd_client::TxnOp::put(
                    format!("long/s/s/q/bulk{chunk:04}{i:03}"),
                    value.clone(),
                    None,
                )
            })
            .collect();
        with_retries("bulk put", || {
            let mut c = raw.clone();
            let txn = etcd_client::Txn::new().and_then(puts.clone());
            async move { c.txn(txn).await }
        })
        .await;
    }
    let refused = timeout(Duration::from_secs(20), sem.try_acquire())
        .await
        .expect("bounded");
    assert!(matches!(refused, Err(Error::NoPermits)), "got {refused:?}");
    let st = sem.status().await.expect("status of a long queue");
    assert_eq!((st.used, st.waiting), (1, ENTRIES - 1));
    limiter.close().await.unwrap();
}

/// What a hung member does with an enqueue it held in its socket buffer: it applies the stale
/// Txn after the request finished elsewhere, writing the request's key again under the
/// Limiter's live lease. Written here with a raw client (same key shape, same lease), the
/// entry is found — by the watch of a waiting Limiter, or by the queue its next enqueue reads —
/// and removed, without losing the session; one that is not the Limiter's lease is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_written_late_under_our_lease_is_removed() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("late");
    let a = Limiter::connect(&url).await.unwrap();
    let sem = a.semaphore("s", 1).await.unwrap();
    let held = sem.acquire().await.unwrap();
    let mut raw = support::connect(&cluster.endpoints()).await;
    let ours = raw
        .get(
            "late/s/s/q/",
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    let lease = ours.kvs()[0].lease();
    let entry = |id: &str| format!("late/s/s/q/{id}");
    let value = r#"{"permits":1,"owner":"late","since_unix_ms":0}"#;
    let count = || async { support::count_keys(&cluster.endpoints(), "late/s/s/q/").await };

    // 1. No watch yet: the next enqueue's read finds it.
    let put = etcd_client::PutOptions::new().with_lease(lease);
    raw.put(entry("stale1"), value, Some(put.clone()))
        .await
        .unwrap();
    assert!(matches!(sem.try_acquire().await, Err(Error::NoPermits)));
    eventually(
        "the stray found by a read is removed",
        Duration::from_secs(5),
        || async { count().await == 1 },
    )
    .await;

    // 2. A waiter of the same Limiter watches the semaphore: the watch finds it.
    let sem2 = sem.clone();
    let waiter = tokio::spawn(async move { sem2.acquire().await });
    eventually("waiter queued", Duration::from_secs(5), || async {
        count().await == 2
    })
    .await;
    raw.put(entry("stale2"), value, Some(put)).await.unwrap();
    eventually(
        "the stray seen by the watch is removed",
        Duration::from_secs(5),
        || async { count().await == 2 },
    )
    .await;

    // 3. Another Limiter's entry is not ours to remove.
    let b = Limiter::connect(&url).await.unwrap();
    let theirs = b.semaphore("s", 1).await.unwrap();
    let theirs = tokio::spawn(async move { theirs.acquire().await });
    eventually(
        "the other Limiter queued",
        Duration::from_secs(5),
        || async { count().await == 3 },
    )
    .await;
    assert_eq!(sem.status().await.unwrap().waiting, 2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(count().await, 3, "the other Limiter's entry stays");

    assert!(!held.is_lost(), "finding a stray loses nothing");
    assert_eq!(a.stats().removal_session_ends, 0);
    held.release().await.unwrap();
    let next = timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    next.release().await.unwrap();
    let last = timeout(Duration::from_secs(5), theirs)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    last.release().await.unwrap();
    assert_eq!(count().await, 0);
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// Two proxies in front of the one member, and a URL listing both: a Limiter sends its
/// requests and its watch through the first until that fails, then through the second.
fn two_ways(cluster: &EtcdCluster, prefix: &str) -> (FaultProxy, FaultProxy, String) {
    let member = cluster.endpoints()[0].clone();
    let (p1, p2) = (
        FaultProxy::start(member.as_str()),
        FaultProxy::start(member.as_str()),
    );
    let url = format!(
        "etcd://{},{}/{prefix}",
        p1.connect_string(),
        p2.connect_string()
    );
    (p1, p2, url)
}

/// Acquires and releases until the Limiter decides its acquires from its view of the
/// semaphore (set up by its second acquire): one put and no read per acquire.
async fn until_decided_from_the_view(limiter: &Limiter, sem: &Semaphore) {
    eventually(
        "acquire decided from the view",
        Duration::from_secs(10),
        || async {
            let before = limiter.stats();
            sem.acquire().await.unwrap().release().await.unwrap();
            let c = limiter.stats().since(&before);
            (c.txn, c.put, c.range, c.watch, c.view_decisions) == (0, 1, 0, 0, 1)
        },
    )
    .await;
}

/// A view that stops getting events (its member's link is cut) decides nothing: the enqueue
/// reads the semaphore instead, so a permit taken meanwhile by another Limiter, which the stale
/// view does not show, is not granted twice; and once that permit is released, the acquire
/// works (the watch moves to the other way in).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lagging_view_falls_back_to_a_read_and_never_grants_from_it() {
    let cluster = EtcdCluster::single();
    let (p1, p2, url) = two_ways(&cluster, "lag");
    // The view and the requests must be on one way in when it is held. A Limiter starts on
    // either way (a fleet spreads over the members), and a loaded machine can time out a short
    // attempt and move it to the other way while its view is set up (then the hold might lag
    // nothing): such a Limiter is closed and a fresh one tried, a bounded number of times.
    let mut on_one_way = None;
    for _ in 0..5 {
        let w = Limiter::connect(&url).await.unwrap();
        let ws = w.semaphore("s", 1).await.unwrap();
        let before = (p1.client_bytes(), p2.client_bytes());
        until_decided_from_the_view(&w, &ws).await;
        let used = (p1.client_bytes() > before.0, p2.client_bytes() > before.1);
        if used.0 != used.1 {
            let (in_use, other_way) = if used.0 { (&p1, &p2) } else { (&p2, &p1) };
            on_one_way = Some((w, ws, in_use, other_way));
            break;
        }
        println!("the Limiter used both ways in while its view was set up; a fresh one");
        w.close().await.unwrap();
    }
    let (w, ws, in_use, other_way) =
        on_one_way.expect("a Limiter that stays on one way in (5 tries)");
    let other_before = other_way.client_bytes();

    // Nothing through the way in use, the connection kept open: the watch gets no events
    // and sees no error.
    in_use.hold();
    let other = Limiter::connect(&cluster.url("lag")).await.unwrap();
    let held = other
        .semaphore("s", 1)
        .await
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let before = w.stats();
    let refused = timeout(Duration::from_secs(10), ws.try_acquire())
        .await
        .expect("try_acquire bounded");
    assert!(matches!(refused, Err(Error::NoPermits)), "got {refused:?}");
    let cost = w.stats().since(&before);
    println!("enqueue with a lagging view: {cost:?}");
    assert!(
        cost.range >= 1,
        "the lagging view made the enqueue read: {cost:?}"
    );
    assert!(
        other_way.client_bytes() > other_before,
        "requests moved to the other way in"
    );

    held.release().await.unwrap();
    let p = timeout(Duration::from_secs(10), ws.acquire())
        .await
        .expect("acquire bounded")
        .expect("granted once the other permit is released");
    assert!(!p.is_lost());
    p.release().await.unwrap();
    // The watch resumed on the other way in: acquires decide from the view again.
    until_decided_from_the_view(&w, &ws).await;
    in_use.pass();
    other.close().await.unwrap();
    w.close().await.unwrap();
}

/// The view's watch is cut while another Limiter takes and releases permits and etcd compacts
/// past the view's revision: when the link heals, the watch cannot resume and the view is read
/// anew; no acquire is decided from the old view meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compacted_view_is_read_anew() {
    let cluster = EtcdCluster::single();
    let proxy = FaultProxy::start(cluster.endpoints()[0].as_str());
    let url = format!("etcd://{}/compacted", proxy.connect_string());
    let w = Limiter::connect(&url).await.unwrap();
    let ws = w.semaphore("s", 1).await.unwrap();
    until_decided_from_the_view(&w, &ws).await;

    proxy.blackhole();
    let other = Limiter::connect(&cluster.url("compacted")).await.unwrap();
    let os = other.semaphore("s", 1).await.unwrap();
    for _ in 0..5 {
        os.acquire().await.unwrap().release().await.unwrap();
    }
    let held = os.acquire().await.unwrap();
    support::etcd::compact_to_current(&cluster.endpoints()).await;
    let ranges = w.stats().range;
    proxy.pass();

    let refused = timeout(Duration::from_secs(10), ws.try_acquire())
        .await
        .expect("try_acquire bounded");
    assert!(matches!(refused, Err(Error::NoPermits)), "got {refused:?}");
    held.release().await.unwrap();
    let p = timeout(Duration::from_secs(10), ws.acquire())
        .await
        .expect("acquire bounded")
        .expect("granted after the other permit's release");
    assert!(!p.is_lost());
    p.release().await.unwrap();
    eventually(
        "the compacted view read anew",
        Duration::from_secs(10),
        || async { w.stats().range > ranges },
    )
    .await;
    until_decided_from_the_view(&w, &ws).await;
    other.close().await.unwrap();
    w.close().await.unwrap();
}

/// An enqueue decided from the view whose reply is lost (etcd applied the put): the retry
/// finds its own entry instead of writing a second one, and the permit's fencing token is that
/// entry's create revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_enqueue_reply_with_a_view_is_retried_once() {
    let cluster = EtcdCluster::single();
    let (p1, p2, url) = two_ways(&cluster, "lostreply");
    let w = Limiter::connect(&url).await.unwrap();
    let ws = w.semaphore("s", 2).await.unwrap();
    let mut raw = support::connect(&cluster.endpoints()).await;
    // A keepalive that fails first moves the Limiter to the other way in before the enqueue
    // is sent: then try again, a bounded number of times.
    let mut retried = false;
    for _ in 0..5 {
        until_decided_from_the_view(&w, &ws).await;
        let sent = (p1.client_bytes(), p2.client_bytes());
        until_decided_from_the_view(&w, &ws).await;
        let in_use = if p1.client_bytes() > sent.0 { &p1 } else { &p2 };
        in_use.drop_replies();
        let before = w.stats();
        let p = timeout(Duration::from_secs(10), ws.acquire())
            .await
            .expect("acquire bounded")
            .expect("granted after its reply was lost");
        let cost = w.stats().since(&before);
        println!("enqueue whose reply was lost: {cost:?}");
        let entries = raw
            .get(
                "lostreply/s/s/q/",
                Some(etcd_client::GetOptions::new().with_prefix()),
            )
            .await
            .unwrap();
        assert_eq!(entries.kvs().len(), 1, "one entry for one acquire");
        assert_eq!(
            p.fencing_token(),
            entries.kvs()[0].create_revision() as u64,
            "the token is the first put's revision"
        );
        p.release().await.unwrap();
        in_use.pass();
        if cost.put >= 2 {
            retried = true;
            break;
        }
    }
    assert!(retried, "no enqueue reply was lost in 5 tries");
    let left = support::count_keys(&cluster.endpoints(), "lostreply/s/s/q/").await;
    assert_eq!(left, 0);
    w.close().await.unwrap();
}

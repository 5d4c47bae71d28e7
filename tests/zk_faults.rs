//! ZooKeeper-specific failure behaviour against real servers: connection blips, a partition
//! longer than the session timeout, a create whose reply was lost, an ensemble leader killed
//! under load, a hung server, a node deleted behind its holder's back, and an unreachable
//! server. (The store-neutral semantics are in tests/contract.rs.) Clients that must be cut off
//! reach the server through an in-process fault proxy.

use crate::support;

use clusterlimit::{Error, Limiter};
use std::time::Duration;
use support::{eventually, hold_and_queue, FaultProxy, ZkCluster};
use tokio::time::{timeout, Instant};

const PROMPT: Duration = Duration::from_secs(5);

async fn connect(url: &str, session: Duration) -> Limiter {
    let b = Limiter::builder(url).session_ttl(session);
    timeout(PROMPT, b.connect())
        .await
        .expect("connect in time")
        .unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

/// `zk://<proxy>/chroot`: a client whose traffic the proxy controls.
fn proxied_url(proxy: &FaultProxy, chroot: &str) -> String {
    format!("zk://{}{chroot}", proxy.connect_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_blips_keep_permits_and_waiters() {
    let zk = ZkCluster::single();
    let (pa, pb) = (
        FaultProxy::start(zk.client_addr(0)),
        FaultProxy::start(zk.client_addr(0)),
    );
    let session = Duration::from_secs(4);
    let a = connect(&proxied_url(&pa, "/blip"), session).await;
    let b = connect(&proxied_url(&pb, "/blip"), session).await;
    let (sa, held, mut waiter) = hold_and_queue(&a, &b).await;

    // A 0.5 s partition of both clients (requests in flight are lost and their connections
    // reset), then a reset of every connection: sessions survive, nothing is lost or granted.
    pa.blackhole();
    pb.blackhole();
    tokio::time::sleep(Duration::from_millis(500)).await;
    pa.pass();
    pb.pass();
    tokio::time::sleep(Duration::from_millis(300)).await;
    pa.reset();
    pb.reset();
    tokio::time::sleep(Duration::from_millis(200)).await;
    pa.pass();
    pb.pass();
    // Longer than the 4 s session: a lost session would show by now.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!held.is_lost(), "a short blip lost the holder's permit");
    assert!(
        !waiter.is_finished(),
        "the waiter finished during the blips"
    );
    let st = sa.status().await.expect("status after the blips");
    assert_eq!((st.used, st.waiting), (1, 1), "{st:?}");
    assert_eq!(st.holders[0].fencing_token, held.fencing_token());
    assert!(
        pa.reset_connections() >= 1 && pb.reset_connections() >= 1,
        "the blips did not cut the connections"
    );

    // The waiter's watch survived: a release still wakes it.
    held.release().await.expect("release after the blips");
    let p = timeout(PROMPT, &mut waiter)
        .await
        .expect("waiter granted after the blips")
        .unwrap()
        .expect("waiter's acquire");
    assert!(!p.is_lost());
    p.release().await.unwrap();
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_longer_than_the_session_fires_lost_before_anyone_is_granted() {
    let zk = ZkCluster::single();
    let proxy = FaultProxy::start(zk.client_addr(0));
    let session = Duration::from_secs(2);
    let a = connect(&proxied_url(&proxy, "/part"), session).await;
    let b = connect(&zk.url("/part"), Duration::from_secs(10)).await;
    let (_sa, held, waiter) = hold_and_queue(&a, &b).await;

    let cut = Instant::now();
    proxy.blackhole();
    let lost_at = timeout(session * 2, async {
        held.lost().await;
        Instant::now()
    })
    .await
    .expect("lost() fires within the session timeout");
    let granted = timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter is granted once the server expired the holder's session")
        .unwrap()
        .expect("waiter's acquire");
    let granted_at = Instant::now();
    println!(
        "partition: lost() after {:?}, other client granted after {:?} (margin {:?})",
        lost_at - cut,
        granted_at - cut,
        granted_at - lost_at
    );
    assert!(lost_at < granted_at, "granted before the holder knew");
    assert!(
        lost_at - cut <= session,
        "lost() later than the session timeout"
    );

    // Healed: the partitioned client works again, on a new session.
    proxy.pass();
    let sa = a.open_semaphore("s").await.expect("open after healing");
    let again = tokio::spawn(async move { sa.acquire_timeout(Duration::from_secs(10)).await });
    granted.release().await.unwrap();
    let p = timeout(Duration::from_secs(12), again)
        .await
        .expect("acquire after healing")
        .unwrap()
        .expect("acquire after healing");
    assert!(!p.is_lost());
    p.release().await.unwrap();
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_whose_reply_was_lost_is_found_again_not_duplicated() {
    let zk = ZkCluster::single();
    let proxy = FaultProxy::start(zk.client_addr(0));
    let a = connect(&proxied_url(&proxy, "/lostreply"), Duration::from_secs(6)).await;
    let sem = a.semaphore("s", 2).await.unwrap();
    let path = "/lostreply/s/s";

    // The create reaches the server; its reply does not.
    proxy.drop_replies();
    let s2 = sem.clone();
    let acquire = tokio::spawn(async move { s2.acquire().await });
    eventually("the create was applied on the server", PROMPT, || async {
        support::count_children(&zk.connect_string(), path).await == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!acquire.is_finished(), "acquire answered without a reply");
    // Heal: the connection is reset, the client reconnects with its session and finds its node.
    proxy.pass();
    let p = timeout(Duration::from_secs(10), acquire)
        .await
        .expect("acquire completes after the reconnect")
        .unwrap()
        .expect("acquire whose create reply was lost");
    let nodes = support::list_children(&zk.connect_string(), path).await;
    assert_eq!(nodes.len(), 1, "the create was sent twice: {nodes:?}");
    assert!(
        nodes[0].ends_with(&format!("{:010}", p.fencing_token() - 1)),
        "permit token {} is not the node's sequence + 1: {nodes:?}",
        p.fencing_token()
    );
    assert!(!p.is_lost());
    p.release().await.unwrap();
    assert_eq!(support::count_children(&zk.connect_string(), path).await, 0);

    // The same loss under a caller that gives up: the node is removed once it shows up.
    proxy.drop_replies();
    let r = sem.acquire_timeout(Duration::from_millis(300)).await;
    assert!(matches!(r, Err(Error::Timeout)), "{r:?}");
    proxy.pass();
    eventually(
        "the abandoned request's node is removed",
        Duration::from_secs(10),
        || async { support::count_children(&zk.connect_string(), path).await == 0 },
    )
    .await;
    let p = timeout(PROMPT, sem.acquire_many(2))
        .await
        .expect("both permits free again")
        .unwrap();
    p.release().await.unwrap();
    a.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensemble_leader_kill_keeps_holders_and_wakes_waiters() {
    let mut zk = ZkCluster::start(3);
    let url = zk.url("/failover");
    let session = Duration::from_secs(10);
    let a = connect(&url, session).await;
    let b = connect(&url, session).await;
    let (_sa, held, waiter) = hold_and_queue(&a, &b).await;

    let leader = zk.wait_leader(PROMPT);
    zk.kill(leader);
    let new_leader = zk.wait_leader(Duration::from_secs(10));
    assert_ne!(leader, new_leader);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !held.is_lost(),
        "the holder lost its permit in a leader failover"
    );
    assert!(
        !waiter.is_finished(),
        "the waiter finished during the failover"
    );

    let start = Instant::now();
    timeout(Duration::from_secs(10), held.release())
        .await
        .expect("release after the failover in time")
        .expect("release after the failover");
    let p = timeout(Duration::from_secs(10), waiter)
        .await
        .expect("waiter granted after the failover")
        .unwrap()
        .expect("waiter's acquire");
    println!("leader killed: release→grant took {:?}", start.elapsed());
    assert!(!p.is_lost());
    // New clients and new acquisitions work with one member down.
    let c = connect(&url, session).await;
    let sc = c.open_semaphore("s").await.unwrap();
    let waiting = tokio::spawn(async move { sc.acquire_timeout(Duration::from_secs(10)).await });
    p.release().await.unwrap();
    let q = timeout(Duration::from_secs(12), waiting)
        .await
        .expect("third client granted")
        .unwrap()
        .expect("third client's acquire");
    q.release().await.unwrap();
    for l in [a, b, c] {
        l.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_server_is_bounded_and_recovers() {
    let mut zk = ZkCluster::single();
    let session = Duration::from_secs(3);
    let l = timeout(
        PROMPT,
        Limiter::builder(&zk.url("/hung"))
            .session_ttl(session)
            .request_timeout(Duration::from_secs(1))
            .connect(),
    )
    .await
    .unwrap()
    .unwrap();
    let sem = l.semaphore("s", 2).await.unwrap();
    let held = sem.acquire().await.unwrap();

    zk.pause(0);
    let start = Instant::now();
    let r = timeout(Duration::from_secs(10), sem.try_acquire()).await;
    let took = start.elapsed();
    assert!(r.is_ok(), "try_acquire hung on a stopped server");
    assert!(
        r.unwrap().is_err(),
        "try_acquire succeeded on a stopped server"
    );
    assert!(took < Duration::from_secs(4), "try_acquire took {took:?}");
    timeout(session + Duration::from_secs(1), held.lost())
        .await
        .expect("lost() fires within the session timeout of a hung server");
    let st = timeout(Duration::from_secs(10), sem.status()).await;
    assert!(
        matches!(st, Ok(Err(_))),
        "status on a stopped server: {st:?}"
    );

    zk.resume(0);
    let p = timeout(Duration::from_secs(15), async {
        loop {
            match sem.acquire_timeout(Duration::from_secs(2)).await {
                Ok(p) => return p,
                Err(e) => {
                    println!("after SIGCONT: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    })
    .await
    .expect("acquire works again after the server resumes");
    assert!(!p.is_lost());
    p.release().await.unwrap();
    drop(held);
    l.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_node_deleted_behind_its_back_fires_lost() {
    let zk = ZkCluster::single();
    let l = connect(&zk.url("/deleted"), Duration::from_secs(10)).await;
    let sem = l.semaphore("s", 1).await.unwrap();
    let p = sem.acquire().await.unwrap();
    let nodes = support::list_children(&zk.connect_string(), "/deleted/s/s").await;
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    let raw = support::zk_connect(&zk.connect_string()).await;
    raw.delete(&format!("/deleted/s/s/{}", nodes[0]), None)
        .await
        .unwrap();
    timeout(Duration::from_secs(2), p.lost())
        .await
        .expect("lost() after the node was deleted");
    // The permit is free for others at once.
    let q = timeout(PROMPT, sem.acquire()).await.unwrap().unwrap();
    assert!(!q.is_lost());
    drop(p);
    q.release().await.unwrap();
    l.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_fails_fast() {
    // A port nobody listens on (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let start = Instant::now();
    let r = timeout(
        Duration::from_secs(10),
        Limiter::connect(&format!("zk://127.0.0.1:{port}/x")),
    )
    .await
    .expect("connect must not hang");
    assert!(matches!(r, Err(Error::Store(_))), "{r:?}");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "took {:?}",
        start.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_dropped_mid_request_still_frees_the_permit() {
    let zk = ZkCluster::single();
    let proxy = FaultProxy::start(zk.client_addr(0));
    let a = connect(&proxied_url(&proxy, "/dropped"), Duration::from_secs(10)).await;
    let sa = a.semaphore("s", 1).await.unwrap();
    let held = sa.acquire().await.unwrap();
    // The delete is lost on the wire and the caller gives up on release() (a timeout, a
    // select!): the entry must still be removed in the background once the link is back.
    proxy.blackhole();
    let gave_up = timeout(Duration::from_millis(300), held.release()).await;
    assert!(
        gave_up.is_err(),
        "release went through a blackhole: {gave_up:?}"
    );
    proxy.pass();
    let b = connect(&zk.url("/dropped"), Duration::from_secs(10)).await;
    let sb = b.open_semaphore("s").await.unwrap();
    let p = timeout(Duration::from_secs(8), sb.acquire())
        .await
        .expect("the permit of a dropped release() came back in time")
        .unwrap();
    p.release().await.unwrap();
    assert_eq!(
        support::count_children(&zk.connect_string(), "/dropped/s/s").await,
        0
    );
    for l in [a, b] {
        l.close().await.unwrap();
    }
}

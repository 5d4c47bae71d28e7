//! etcd connection handling against real servers: the library keeps to etcd's gRPC keepalive
//! policy (no `GOAWAY too_many_pings`), and after a leader kill it grants again about as soon
//! as etcd itself accepts writes.

mod support;

use clusterlimit::{Limiter, Semaphore};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{EtcdCluster, ProxyGroup};
use tokio::time::{timeout, Instant};
use tracing_subscriber::layer::SubscriberExt;

/// GOAWAY frames received by any HTTP/2 connection of this test process (h2 traces each one).
static GOAWAYS: AtomicUsize = AtomicUsize::new(0);
static GOAWAY_TEXT: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Counts h2's "recv GOAWAY" trace events (with their frame, e.g. `ENHANCE_YOUR_CALM`).
struct GoawayCounter;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for GoawayCounter {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, field: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={v:?} ", field.name()));
            }
        }
        let mut text = Text(String::new());
        event.record(&mut text);
        if text.0.contains("GOAWAY") {
            GOAWAYS.fetch_add(1, Ordering::SeqCst);
            if let Ok(mut t) = GOAWAY_TEXT.lock() {
                t.push(text.0);
            }
        }
    }
}

fn count_goaways() {
    let filter = tracing_subscriber::filter::Targets::new()
        .with_target("h2::proto::connection", tracing::Level::TRACE);
    let subscriber = tracing_subscriber::registry().with(tracing_subscriber::Layer::with_filter(
        GoawayCounter,
        filter,
    ));
    tracing::subscriber::set_global_default(subscriber).expect("one subscriber per test binary");
}

/// The failover suite's settings: the shortest TTL anyone uses here, so the most eager pings.
const TTL: Duration = Duration::from_secs(3);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// One acquire/hold/release round, bounded.
async fn cycle(sem: &Semaphore, hold: Duration) {
    let p = timeout(Duration::from_secs(10), sem.acquire())
        .await
        .expect("acquire bounded")
        .expect("acquire");
    tokio::time::sleep(hold).await;
    timeout(Duration::from_secs(10), p.release())
        .await
        .expect("release bounded")
        .expect("release");
}

/// etcd (default `--grpc-keepalive-min-time` 5 s, no pings without streams) closes a
/// connection with `GOAWAY too_many_pings` after 3 pings that break its policy. A Limiter that
/// sits idle with an open watch for 60 s and then works for 60 s must never get one. Two
/// signals: h2's own trace of a received GOAWAY, and the proxies in front of each member
/// counting connections (a GOAWAY closes one, the client opens another to the same member). The 3-member cluster
/// covers idle connections to members the Limiter does not use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_then_busy_limiter_gets_no_goaway() {
    count_goaways();
    let cluster = EtcdCluster::start(3);
    let proxies = ProxyGroup::start(&cluster.endpoints());
    let url = format!("etcd://{}/calm", proxies.connect_string());
    let limiter = Limiter::builder(&url)
        .session_ttl(TTL)
        .request_timeout(REQUEST_TIMEOUT)
        .connect()
        .await
        .expect("connect");
    let sem = limiter.semaphore("s", 1).await.expect("semaphore");
    // One contended wait opens the semaphore's watch, which then stays open while idle.
    let held = sem.acquire().await.expect("first acquire");
    let waiter = tokio::spawn({
        let sem = sem.clone();
        async move { cycle(&sem, Duration::ZERO).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.expect("release");
    timeout(Duration::from_secs(10), waiter)
        .await
        .expect("waiter bounded")
        .expect("waiter task");
    let opened = |p: &ProxyGroup| -> Vec<u64> {
        p.proxies()
            .iter()
            .map(support::FaultProxy::accepted_connections)
            .collect()
    };
    let before = opened(&proxies);

    tokio::time::sleep(Duration::from_secs(60)).await; // idle: lease keepalives only
    let after_idle = opened(&proxies);

    // Busy: two workers contend for the one permit (the watch carries the hand-offs).
    let end = Instant::now() + Duration::from_secs(60);
    let mut workers = Vec::new();
    for _ in 0..2 {
        let sem = sem.clone();
        workers.push(tokio::spawn(async move {
            let mut n = 0u32;
            while Instant::now() < end && n < 100_000 {
                cycle(&sem, Duration::from_millis(5)).await;
                n += 1;
            }
            n
        }));
    }
    let mut rounds = 0;
    for w in workers {
        rounds += w.await.expect("worker");
    }
    let after_busy = opened(&proxies);
    limiter.close().await.expect("close");

    let goaways = GOAWAYS.load(Ordering::SeqCst);
    println!(
        "connections opened per member: after set-up {before:?}, after 60 s idle \
         {after_idle:?}, after 60 s busy {after_busy:?}; {rounds} busy rounds; \
         GOAWAYs received: {goaways}"
    );
    let texts = GOAWAY_TEXT.lock().map(|t| t.clone()).unwrap_or_default();
    assert_eq!(goaways, 0, "etcd sent GOAWAY: {texts:?}");
    // Each member was probed once at connect (a TCP connection closed at once:
    // backend/reach.rs). The Limiter may move to another member (a slow answer), which opens
    // that member's connection once; a second connection to the same member is a reconnect.
    assert!(
        after_busy.iter().all(|&n| n <= 2),
        "a member's connection was re-opened: {after_busy:?}"
    );
    assert!(rounds > 100, "the busy phase did work ({rounds} rounds)");
}

/// Time from `killed` until a raw etcd-client put succeeds: etcd's own failover time. Each
/// surviving member gets its own client and short attempts, so this is as fast as etcd allows.
async fn store_failover(endpoints: &[String], killed: Instant) -> Duration {
    let (tx, mut rx) = tokio::sync::mpsc::channel(2);
    let mut probes = Vec::new();
    for ep in endpoints {
        let tx = tx.clone();
        let ep = ep.clone();
        probes.push(tokio::spawn(async move {
            let mut c = support::connect(std::slice::from_ref(&ep)).await;
            for _ in 0..1000 {
                let put = c.put("store-probe", "x", None);
                if let Ok(Ok(_)) = timeout(Duration::from_millis(100), put).await {
                    let _ = tx.send(killed.elapsed()).await;
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }
    drop(tx);
    let took = timeout(Duration::from_secs(15), rx.recv())
        .await
        .expect("etcd accepts writes again within 15 s")
        .expect("a probe answered");
    for p in probes {
        p.abort();
    }
    took
}

/// After a leader SIGKILL, the first grant on a contended semaphore comes within etcd's own
/// failover time (a raw put succeeding again, measured in the same run) + 0.5 s. Default
/// Limiter settings (TTL 10 s, request timeout 5 s): where the 1.7 s pause was seen.
///
/// Margin: the 0.5 s is the target itself; nothing is added for load. The library's share
/// is at most one 200 ms first attempt lost to the dead leader past etcd's recovery, plus the
/// waiter's watch event. Measured on the 2 shared cores at load average ~14: −92 to +219 ms
/// over 21 kills (before the fix: +1065 to +1355 ms, grants resuming ~1.7 s after the kill).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_grant_after_leader_kill_follows_the_store() {
    const KILLS: usize = 3;
    let mut cluster = EtcdCluster::start(3);
    let url = cluster.url("fast");
    let grants: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut limiters = Vec::new();
    let mut workers = Vec::new();
    for i in 0..4 {
        let limiter = Limiter::builder(&url)
            .owner(format!("w{i}"))
            .connect()
            .await
            .expect("connect");
        let sem = limiter.semaphore("s", 1).await.expect("semaphore");
        let (grants, stop) = (grants.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            // Bounded: ~3 rounds a ms at most, for at most a few minutes.
            for _ in 0..1_000_000 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                // Errors are allowed during a failover; the grant times are what is measured.
                if let Ok(Ok(p)) = timeout(Duration::from_secs(30), sem.acquire()).await {
                    grants.lock().expect("grants").push(Instant::now());
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    let _ = timeout(Duration::from_secs(30), p.release()).await;
                }
            }
        }));
        limiters.push(limiter);
    }
    let grants_since = |t: Instant| {
        grants
            .lock()
            .expect("grants")
            .iter()
            .filter(|g| **g > t)
            .count()
    };

    let mut rows = Vec::new();
    for k in 0..KILLS {
        let warm = Instant::now();
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(grants_since(warm) > 20, "grants flow before kill {k}");
        let leader = support::etcd::leader(&cluster).await;
        let survivors: Vec<String> = cluster
            .endpoints()
            .into_iter()
            .enumerate()
            .filter(|(i, _)| *i != leader)
            .map(|(_, e)| e)
            .collect();
        let killed = Instant::now();
        cluster.kill(leader);
        let store = store_failover(&survivors, killed).await;
        // Resumed: the end of the longest gap between grants from the kill on (a grant
        // can land just after the kill, from a release etcd committed before it).
        tokio::time::sleep(store + Duration::from_secs(3)).await;
        let first = {
            let g = grants.lock().expect("grants");
            let mut last = killed;
            let mut longest = (Duration::ZERO, killed);
            for t in g.iter().filter(|t| **t > killed) {
                if *t - last > longest.0 {
                    longest = (*t - last, *t);
                }
                last = *t;
            }
            assert!(
                last > killed,
                "no grant within 3 s after etcd took writes again (kill {k})"
            );
            longest.1 - killed
        };
        println!(
            "kill {k}: etcd accepts writes after {} ms, grants resume after {} ms ({:+} ms)",
            store.as_millis(),
            first.as_millis(),
            first.as_millis() as i64 - store.as_millis() as i64
        );
        rows.push((store, first));
        cluster.restart(leader);
    }
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        let _ = timeout(Duration::from_secs(40), w).await;
    }
    for l in &limiters {
        let _ = timeout(Duration::from_secs(10), l.close()).await;
    }
    for (k, (store, first)) in rows.iter().enumerate() {
        assert!(
            *first <= *store + Duration::from_millis(500),
            "kill {k}: first grant {first:?} after the kill, etcd itself took {store:?}"
        );
    }
}

/// With no HTTP/2 pings, a waiter whose member hangs (its connection open, nothing answered)
/// must still be granted: the quiet watch's progress request goes unanswered, the watch
/// resumes on another member, and the lease keepalive moves too, well within the TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_on_a_hung_member_is_still_granted() {
    let cluster = EtcdCluster::start(3);
    let holder = Limiter::builder(&cluster.url("hung"))
        .session_ttl(TTL)
        .request_timeout(REQUEST_TIMEOUT)
        .connect()
        .await
        .expect("holder connects");
    let proxies = ProxyGroup::start(&cluster.endpoints());
    let waiter = Limiter::builder(&format!("etcd://{}/hung", proxies.connect_string()))
        .session_ttl(TTL)
        .request_timeout(REQUEST_TIMEOUT)
        .connect()
        .await
        .expect("waiter connects");
    let sem = holder.semaphore("s", 1).await.expect("semaphore");
    let held = sem.acquire().await.expect("holder acquires");
    let wsem = waiter.open_semaphore("s").await.expect("open");
    let waiting = tokio::spawn(async move { wsem.acquire().await });
    support::eventually("the waiter is queued", Duration::from_secs(5), || async {
        sem.status().await.is_ok_and(|s| s.waiting == 1)
    })
    .await;
    // The waiter uses one member at a time: hang that one.
    let used: Vec<usize> = (0..proxies.len())
        .filter(|&i| proxies[i].live_connections() > 0)
        .collect();
    assert_eq!(used.len(), 1, "the waiter talks to one member: {used:?}");
    proxies[used[0]].hold();
    // Let the waiter's watch go quiet on the hung member first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    held.release().await.expect("release");
    let permit = timeout(Duration::from_secs(10), waiting)
        .await
        .expect("waiter granted within 10 s")
        .expect("waiter task")
        .expect("waiter's acquire");
    let took = released.elapsed();
    println!(
        "waiter on a hung member granted {} ms after the release",
        took.as_millis()
    );
    // Two quiet periods of the watch (2 × 500 ms) plus the resumed watch's catch-up.
    assert!(
        took < Duration::from_millis(2000),
        "granted only after {took:?}"
    );
    tokio::time::sleep(TTL).await;
    assert!(
        !permit.is_lost(),
        "the waiter's session survived its member hanging"
    );
    permit
        .release()
        .await
        .expect("release through another member");
    proxies[used[0]].pass();
    waiter.close().await.expect("close");
    holder.close().await.expect("close");
}

//! What is ZooKeeper's own about `Permit::shrink_to` (the shared cases are
//! `testing::cases::shrink` and `testing::fair_cases::fair_permit_shrink`): the lowered weight
//! lives in the entry's data while its name (token, place) stays; it costs one write, plus one
//! read per watching Limiter; a view started later reads it; shrinks racing releases and the
//! views' grants never put more than the capacity in hands, nor does a weight a lagging view
//! reads late beside a capacity lowered meanwhile; foreign data and a deleted entry keep the
//! weight.

use crate::support;

use clusterlimit::{AcquireOptions, Error, Limiter, Permit, Semaphore};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{zk_connect, ZkCluster};
use tokio::time::timeout;

/// Bound on each wait of these tests.
const PROMPT: Duration = Duration::from_secs(5);

/// The semaphore's only queue entry, read raw: `(node name, data)`.
async fn only_entry(zk: &ZkCluster, path: &str) -> (String, Vec<u8>) {
    let children = support::list_children(&zk.connect_string(), path).await;
    assert_eq!(children.len(), 1, "one entry in {path}: {children:?}");
    let raw = zk_connect(&zk.connect_string()).await;
    let (data, _) = raw
        .get_data(&format!("{path}/{}", children[0]))
        .await
        .unwrap();
    (children[0].clone(), data)
}

async fn take(sem: &Semaphore, permits: u32) -> Permit {
    timeout(
        PROMPT,
        sem.acquire_with(AcquireOptions::new().permits(permits)),
    )
    .await
    .expect("acquire in time")
    .expect("acquire")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_name_stays_and_the_data_states_the_lowered_weight() {
    let zk = ZkCluster::single();
    let limiter = Limiter::connect(&zk.url("/data")).await.unwrap();
    let sem = limiter.semaphore("s", 10).await.unwrap();
    let mut permit = take(&sem, 8).await;
    let token = permit.fencing_token();
    let (name, _) = only_entry(&zk, "/data/s/s").await;
    permit.shrink_to(5).await.unwrap();
    let (after, data) = only_entry(&zk, "/data/s/s").await;
    assert_eq!(after, name, "the node was renamed");
    assert!(
        name.starts_with("8-"),
        "the name keeps the first weight: {name}"
    );
    let data = String::from_utf8(data).unwrap();
    assert!(data.contains("\"permits\":5"), "{data}");
    assert_eq!((permit.permits(), permit.fencing_token()), (5, token));
    assert_eq!(sem.status().await.unwrap().used, 5);
    limiter.close().await.unwrap();
}

/// The shrinking Limiter sends one `setData`; each Limiter watching the semaphore (its own
/// included) reads the entry with the capacity once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shrink_costs_one_write_and_a_read_per_watching_limiter() {
    let zk = ZkCluster::single();
    let url = zk.url("/costs");
    let holder = Limiter::connect(&url).await.unwrap();
    let sem = holder.semaphore("s", 10).await.unwrap();
    let mut permit = take(&sem, 8).await;
    let other = Limiter::connect(&url).await.unwrap();
    let waiting = other.open_semaphore("s").await.unwrap();
    let waiter =
        tokio::spawn(async move { waiting.acquire_with(AcquireOptions::new().permits(5)).await });
    support::eventually("waiter queued", PROMPT, || async {
        sem.status().await.is_ok_and(|s| s.waiting == 1)
    })
    .await;
    let (before, other_before) = (holder.stats(), other.stats());
    permit.shrink_to(5).await.unwrap();
    let granted = timeout(PROMPT, waiter).await.expect("granted in time");
    let granted = granted.unwrap().unwrap();
    // The holder's own view reads the change too (asynchronously): wait for it.
    support::eventually("the holder's view read the change", PROMPT, || async {
        holder.stats().since(&before).range == 1
    })
    .await;
    let (mine, theirs) = (
        holder.stats().since(&before),
        other.stats().since(&other_before),
    );
    println!("shrink: holder {mine:?}, waiter {theirs:?}");
    assert_eq!((mine.put, mine.total()), (1, 2), "{mine:?}");
    // The waiter's Limiter: one read (the change), and nothing for its grant.
    assert_eq!((theirs.range, theirs.total()), (1, 1), "{theirs:?}");
    drop(granted);
    other.close().await.unwrap();
    holder.close().await.unwrap();
}

/// A Limiter that opens the semaphore after the shrink reads the lowered weight in its first
/// snapshot: 5 of 10 held, so 5 more are granted at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_started_after_the_shrink_reads_the_lowered_weight() {
    let zk = ZkCluster::single();
    let url = zk.url("/late");
    let holder = Limiter::connect(&url).await.unwrap();
    let sem = holder.semaphore("s", 10).await.unwrap();
    let mut permit = take(&sem, 8).await;
    permit.shrink_to(5).await.unwrap();
    let late = Limiter::connect(&url).await.unwrap();
    let late_sem = late.open_semaphore("s").await.unwrap();
    let got = late_sem.try_acquire_many(5).await;
    let got = got.unwrap_or_else(|e| panic!("5 of 10 free after the shrink, but: {e}"));
    let more = late_sem.try_acquire().await;
    assert!(
        matches!(more, Err(Error::NoPermits)),
        "granted past the capacity: {:?}",
        more.map(|p| p.permits())
    );
    drop((got, permit));
    late.close().await.unwrap();
    holder.close().await.unwrap();
}

/// Permits believed held across all Limiters, checked against the capacity at every grant.
#[derive(Clone, Default)]
struct Held(Arc<AtomicI64>);

impl Held {
    fn add(&self, n: u32, capacity: u32, what: &str) {
        let now = self.0.fetch_add(i64::from(n), Ordering::AcqRel) + i64::from(n);
        assert!(
            now <= i64::from(capacity),
            "{what}: {now} held of {capacity}"
        );
    }
    fn sub(&self, n: u32) {
        self.0.fetch_sub(i64::from(n), Ordering::AcqRel);
    }
}

/// Acquires `permits` on `sem` in a task; counts them held once granted.
fn spawn_waiter(
    sem: Semaphore,
    permits: u32,
    held: &Held,
) -> tokio::task::JoinHandle<clusterlimit::Result<Permit>> {
    let held = held.clone();
    tokio::spawn(async move {
        let p = sem
            .acquire_with(AcquireOptions::new().permits(permits))
            .await?;
        held.add(permits, CAPACITY, "waiter granted");
        Ok(p)
    })
}

const CAPACITY: u32 = 10;

/// Capacity 10, holders of 6 and 4 (on two Limiters), waiters of 5, 3 and 2 queued in that
/// order on three Limiters. At once: the 6 shrinks to 1 and the 4 is released. Whatever order
/// the views see the two changes in, 5 and 3 are granted (1 + 5 + 3 = 9) and 2 is not (11):
/// never more than the capacity believed held, checked at each grant and by a status reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shrinks_racing_releases_and_grants_never_exceed_the_capacity() {
    const ROUNDS: usize = 8;
    let zk = ZkCluster::single();
    let url = zk.url("/race");
    let mut limiters = Vec::new();
    for i in 0..4 {
        let l = Limiter::builder(&url)
            .owner(format!("l{i}"))
            .connect()
            .await
            .unwrap();
        limiters.push(l);
    }
    let mut sems = Vec::new();
    for l in &limiters {
        sems.push(l.semaphore("s", CAPACITY).await.unwrap());
    }
    let started = Instant::now();
    for round in 0..ROUNDS {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "round {round}: too slow"
        );
        race_once(&sems, round).await;
    }
    for l in limiters {
        l.close().await.unwrap();
    }
}

async fn race_once(sems: &[Semaphore], round: usize) {
    let held = Held::default();
    let mut big = take(&sems[0], 6).await;
    held.add(6, CAPACITY, "holder");
    let small = take(&sems[1], 4).await;
    held.add(4, CAPACITY, "holder");
    let mut waits = Vec::new();
    for (i, permits) in [(1, 5), (2, 3), (3, 2)] {
        waits.push(spawn_waiter(sems[i].clone(), permits, &held));
        let queued = waits.len();
        support::eventually("waiter queued", PROMPT, || async {
            sems[0].status().await.is_ok_and(|s| s.waiting == queued)
        })
        .await;
    }
    // The holder of 6 counts 1 from before its shrink is sent: what it promises to use.
    held.sub(5);
    held.sub(4);
    let (shrunk, released) = tokio::join!(big.shrink_to(1), small.release());
    shrunk.unwrap_or_else(|e| panic!("round {round}: shrink: {e}"));
    released.unwrap_or_else(|e| panic!("round {round}: release: {e}"));
    let last = waits.pop().expect("three waiters");
    let mut granted = Vec::new();
    for w in waits {
        let p = timeout(PROMPT, w).await;
        let p = p.unwrap_or_else(|_| panic!("round {round}: a waiter of 5 or 3 not granted"));
        granted.push(p.unwrap().unwrap());
    }
    let st = sems[0].status().await.unwrap();
    assert_eq!((st.used, st.waiting), (9, 1), "round {round}: {st:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !last.is_finished(),
        "round {round}: the waiter of 2 passed 1 + 5 + 3 of 10"
    );
    held.sub(1); // before the release is sent, as for the shrink
    drop(big);
    let p = timeout(PROMPT, last)
        .await
        .expect("the waiter of 2 in time");
    drop(p.unwrap().unwrap());
    drop(granted);
    support::eventually("all released", PROMPT, || async {
        sems[0]
            .status()
            .await
            .is_ok_and(|s| s.used == 0 && s.waiting == 0)
    })
    .await;
}

/// Data written over the entry by something else: the shrink reads it, cannot parse it, and
/// leaves it as it is; the weight stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shrink_of_an_unreadable_entry_keeps_the_weight() {
    let zk = ZkCluster::single();
    let limiter = Limiter::connect(&zk.url("/odd")).await.unwrap();
    let sem = limiter.semaphore("s", 4).await.unwrap();
    let mut permit = take(&sem, 4).await;
    let (node, _) = only_entry(&zk, "/odd/s/s").await;
    let raw = zk_connect(&zk.connect_string()).await;
    raw.set_data(&format!("/odd/s/s/{node}"), b"not json", None)
        .await
        .unwrap();
    let err = permit.shrink_to(2).await.unwrap_err();
    assert!(matches!(err, Error::Store(_)), "{err:?}");
    assert!(err.to_string().contains("unreadable"), "{err}");
    assert_eq!(permit.permits(), 4);
    let (_, data) = only_entry(&zk, "/odd/s/s").await;
    assert_eq!(data, b"not json", "the shrink wrote over data not ours");
    assert_eq!(sem.status().await.unwrap().used, 4);
    limiter.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shrink_of_a_deleted_entry_is_session_lost() {
    let zk = ZkCluster::single();
    let limiter = Limiter::connect(&zk.url("/gone")).await.unwrap();
    let sem = limiter.semaphore("s", 4).await.unwrap();
    let mut permit = take(&sem, 4).await;
    let (node, _) = only_entry(&zk, "/gone/s/s").await;
    let raw = zk_connect(&zk.connect_string()).await;
    raw.delete(&format!("/gone/s/s/{node}"), None)
        .await
        .unwrap();
    let result = timeout(PROMPT, permit.shrink_to(2)).await;
    assert!(matches!(result, Ok(Err(Error::SessionLost))), "{result:?}");
    assert!(
        permit.is_lost(),
        "a permit whose entry is gone reports lost"
    );
    assert_eq!(permit.permits(), 4);
    limiter.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shrink_on_a_fair_semaphore_is_one_write() {
    let zk = ZkCluster::single();
    let limiter = Limiter::connect(&zk.url("/fair")).await.unwrap();
    let classes = "critical=1,batch".parse().unwrap();
    let sem = limiter.fair_semaphore("s", 4, classes).await.unwrap();
    let mut permit = take(&sem, 4).await;
    let before = limiter.stats();
    permit.shrink_to(2).await.unwrap();
    let sent = limiter.stats().since(&before);
    assert_eq!(sent.put, 1, "one setData: {sent:?}");
    assert_eq!((permit.permits(), sem.status().await.unwrap().used), (2, 2));
    limiter.close().await.unwrap();
}

/// A view reads a lowered weight when it applies the entry's change, which may be after later
/// changes: holder 8 → 7, capacity 10 → 6 (the holder grandfathered), 7 → 5, in that order,
/// while the waiter's Limiter sees everything 100 ms late (a proxy's lag), so its read of the
/// first change lands after the last. A view combining the 5 with the capacity of 10 would
/// grant a waiter of 5 (10 of 6 held); it reads the capacity with the weight, so the waiter
/// waits until the holder leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weight_read_late_is_never_combined_with_an_older_capacity() {
    const ROUNDS: usize = 5;
    let zk = ZkCluster::single();
    let proxy = support::FaultProxy::start(zk.client_addr(0));
    let holding = Limiter::connect(&zk.url("/late-weight")).await.unwrap();
    let lagging = support::zookeeper::zk_url(&proxy.connect_string(), "/late-weight");
    let waiting = Limiter::connect(&lagging).await.unwrap();
    for round in 0..ROUNDS {
        let name = format!("s{round}");
        let sem = holding.semaphore(&name, 10).await.unwrap();
        let mut holder = take(&sem, 8).await;
        let other = waiting.open_semaphore(&name).await.unwrap();
        let waiter =
            tokio::spawn(async move { other.acquire_with(AcquireOptions::new().permits(5)).await });
        support::eventually("waiter queued", PROMPT, || async {
            sem.status().await.is_ok_and(|s| s.waiting == 1)
        })
        .await;
        proxy.lag(Duration::from_millis(100));
        holder.shrink_to(7).await.unwrap();
        sem.set_capacity(6).await.unwrap();
        holder.shrink_to(5).await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        proxy.pass();
        assert!(
            !waiter.is_finished(),
            "round {round}: a waiter of 5 granted beside 5 held of 6"
        );
        let st = sem.status().await.unwrap();
        assert_eq!(
            (st.capacity, st.used, st.waiting),
            (6, 5, 1),
            "round {round}: {st:?}"
        );
        holder.release().await.unwrap();
        let p = timeout(PROMPT, waiter)
            .await
            .expect("granted after the release");
        drop(p.unwrap().unwrap());
    }
    waiting.close().await.unwrap();
    holding.close().await.unwrap();
}

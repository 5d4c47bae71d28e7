//! A sharded store (`URL;URL`, `backend/sharded/`) under the contracts: the rate contract on
//! two in-process stores, on two real etcd clusters and on two chroots of one real ZooKeeper, the semaphore contract on two
//! in-process stores (semaphores live on the first cluster), and what only a sharded store
//! does: keys spread over both clusters, `check_all` across clusters refused naming the keys
//! (and served with a hash tag), a quota copy missing or stale on one cluster repaired from
//! the first.

use crate::support;

use clusterlimit::testing::{entries_via_status, DoomedHolder, Harness, LimiterOptions};
use clusterlimit::{Error, KeyCheck, Limiter, Quota, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A name unique to this test and process.
fn unique(what: &str) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let test: String = std::thread::current()
        .name()
        .unwrap_or("test")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!(
        "{what}-{test}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

// ---------------------------------------------------------------------------------------------
// Two in-process stores.

/// `memory://A;memory://B`; an anchor Limiter keeps both stores alive for the test.
struct ShardedMemory {
    names: [String; 2],
    _anchor: Limiter,
}

impl ShardedMemory {
    fn url(&self) -> String {
        format!("memory://{};memory://{}", self.names[0], self.names[1])
    }
}

impl Harness for ShardedMemory {
    const DEAD_HOLDER_FREED_WITHIN: Duration = Duration::from_secs(1);
    // memory:// lowers a held weight on a fair semaphore too (the fair rule grants it).
    const SHRINKS_FAIR_PERMITS: bool = true;

    async fn start() -> Self {
        let base = unique("sharded");
        let names = [format!("{base}-a"), format!("{base}-b")];
        let anchor = Limiter::connect(&format!("memory://{};memory://{}", names[0], names[1]))
            .await
            .expect("connect the anchor Limiter");
        ShardedMemory {
            names,
            _anchor: anchor,
        }
    }

    async fn connect(&self, opts: LimiterOptions) -> Result<Limiter> {
        opts.builder(&self.url()).connect().await
    }

    async fn revoke_sessions(&self) {
        let ended = clusterlimit::backend::memory::expire_sessions(&self.names[0]);
        assert!(ended > 0, "no session to expire in {:?}", self.names[0]);
    }

    async fn queue_entries(&self, sem: &str) -> usize {
        let fresh = Limiter::connect(&self.url()).await.expect("connect");
        entries_via_status(fresh, sem).await
    }

    async fn spawn_holder(&self, sem: &str) -> DoomedHolder {
        let limiter = Limiter::connect(&self.url()).await.expect("connect");
        DoomedHolder::hold_in_task(limiter, sem).await
    }
}

// ---------------------------------------------------------------------------------------------
// Two real etcd clusters (one member each).

/// `etcd://A/t;etcd://B/t`: two fresh single-member etcds per test. Rate cases only.
struct ShardedEtcd {
    clusters: [support::EtcdCluster; 2],
}

impl ShardedEtcd {
    fn url(&self) -> String {
        format!(
            "{};{}",
            self.clusters[0].url("t"),
            self.clusters[1].url("t")
        )
    }
}

impl Harness for ShardedEtcd {
    const DEAD_HOLDER_FREED_WITHIN: Duration = Duration::from_secs(5);

    async fn start() -> Self {
        ShardedEtcd {
            clusters: [
                support::EtcdCluster::single(),
                support::EtcdCluster::single(),
            ],
        }
    }

    async fn connect(&self, opts: LimiterOptions) -> Result<Limiter> {
        opts.builder(&self.url()).connect().await
    }

    async fn revoke_sessions(&self) {
        support::revoke_all_leases(&self.clusters[0].endpoints()).await;
    }

    async fn queue_entries(&self, sem: &str) -> usize {
        let n = support::count_keys(&self.clusters[0].endpoints(), &format!("t/s/{sem}/q/")).await;
        usize::try_from(n).expect("key count is not negative")
    }

    async fn spawn_holder(&self, sem: &str) -> DoomedHolder {
        let limiter = Limiter::connect(&self.url()).await.expect("connect");
        DoomedHolder::hold_in_task(limiter, sem).await
    }
}

// ---------------------------------------------------------------------------------------------
// One real ZooKeeper, two chroots: two clusters as far as the sharded store can tell (their
// identities differ), to run the store-neutral layer over ZooKeeper's versions (which restart
// on re-creation, see `RateStore::version_life`) at the cost of one server per test.

/// `zk://H/t1;zk://H/t2` on one fresh standalone ZooKeeper per test. Rate cases only.
struct ShardedZk {
    cluster: support::ZkCluster,
}

impl Harness for ShardedZk {
    const DEAD_HOLDER_FREED_WITHIN: Duration = Duration::from_secs(5);

    async fn start() -> Self {
        ShardedZk {
            cluster: support::ZkCluster::single(),
        }
    }

    async fn connect(&self, opts: LimiterOptions) -> Result<Limiter> {
        let hosts = self.cluster.connect_string();
        opts.builder(&format!("zk://{hosts}/t1;zk://{hosts}/t2"))
            .connect()
            .await
    }

    async fn revoke_sessions(&self) {
        unreachable!("rate cases only")
    }

    async fn queue_entries(&self, _sem: &str) -> usize {
        unreachable!("rate cases only")
    }

    async fn spawn_holder(&self, _sem: &str) -> DoomedHolder {
        unreachable!("rate cases only")
    }
}

clusterlimit::rate_contract_suite!(zk_rate, ShardedZk);
clusterlimit::rate_contract_suite!(memory_rate, ShardedMemory);
clusterlimit::contract_suite!(memory, ShardedMemory);
clusterlimit::fair_contract_suite!(memory_fair, ShardedMemory);
clusterlimit::rate_contract_suite!(etcd_rate, ShardedEtcd);

// ---------------------------------------------------------------------------------------------
// What only a sharded store does.

/// Keys of one limit land on both clusters, each key on one only.
#[tokio::test]
async fn keys_spread_over_both_clusters() {
    let h = ShardedMemory::start().await;
    let l = Limiter::connect(&h.url()).await.expect("connect");
    let rl = l
        .rate_limit("spread", Quota::per_minute(60).burst(1))
        .await
        .expect("rate_limit");
    for i in 0..200 {
        assert!(rl.check(&format!("k{i}")).await.expect("check").allowed);
    }
    let counts: Vec<usize> = h
        .names
        .iter()
        .map(|n| clusterlimit::backend::memory::rate_key_count(n))
        .collect();
    assert_eq!(
        counts.iter().sum::<usize>(),
        200,
        "each key on one cluster: {counts:?}"
    );
    assert!(
        counts.iter().all(|c| *c > 60),
        "both clusters take keys: {counts:?}"
    );
    // Every Limiter places a key alike: another one sees the spent keys.
    let other = Limiter::connect(&h.url()).await.expect("connect");
    let ro = other.open_rate_limit("spread").await.expect("open");
    for i in 0..200 {
        assert!(
            !ro.check(&format!("k{i}")).await.expect("check").allowed,
            "k{i}"
        );
    }
}

/// `check_all` over keys of two clusters is refused, naming the keys and clusters, and charges
/// nothing; with one hash tag the same checks are served all or nothing.
#[tokio::test]
async fn check_all_across_clusters_is_refused_and_hash_tags_serve_it() {
    let h = ShardedMemory::start().await;
    let l = Limiter::connect(&h.url()).await.expect("connect");
    let user = l
        .rate_limit("user", Quota::per_minute(60).burst(5))
        .await
        .expect("rate_limit");
    let global = l
        .rate_limit("global", Quota::per_minute(60).burst(2))
        .await
        .expect("rate_limit");
    // Find an untagged user key on the other cluster than global/all (the ring is fixed).
    let mut refused = None;
    for i in 0..64 {
        let key = format!("u{i}");
        let checks = [
            KeyCheck::new(&user, key.as_str(), 1),
            KeyCheck::new(&global, "all", 1),
        ];
        match l.check_all(&checks).await {
            Err(Error::InvalidArgument(m)) => {
                refused = Some((key, m));
                break;
            }
            Ok(_) => {}
            Err(e) => panic!("{e}"),
        }
    }
    let (key, message) = refused.expect("some user key is on the other cluster than global/all");
    for part in [
        format!("user/{key} on memory://"),
        "global/all on memory://".to_string(),
        "hash tag".to_string(),
    ] {
        assert!(message.contains(&part), "{part:?} not in {message}");
    }
    assert_eq!(
        user.check_n(&key, 0).await.expect("peek").remaining,
        5,
        "nothing was charged"
    );
    // One tag: both keys on one cluster, all or nothing as on one store.
    let tagged = |u: &'static str| {
        [
            KeyCheck::new(&user, u, 1),
            KeyCheck::new(&global, "{u7}all", 1),
        ]
    };
    for _ in 0..2 {
        let ds = l.check_all(&tagged("{u7}")).await.expect("tagged");
        assert!(ds.iter().all(|d| d.allowed), "{ds:?}");
    }
    let ds = l.check_all(&tagged("{u7}")).await.expect("tagged");
    assert!(ds.iter().all(|d| !d.allowed), "global spent: {ds:?}");
    assert_eq!(ds[0].remaining, 3, "the user key was not charged");
}

/// A quota copy missing on a cluster (the limit was made while it was not part of the
/// store) or stale there (a quota change it missed) is rewritten from the first cluster's
/// before any key of it is written.
#[tokio::test]
async fn quota_copies_are_repaired_from_the_first_cluster() {
    let h = ShardedMemory::start().await;
    let (a, b) = (&h.names[0], &h.names[1]);
    // Only the first cluster knows the limit, with burst 3; the second has burst 9.
    let first = Limiter::connect(&format!("memory://{a}"))
        .await
        .expect("connect");
    first
        .rate_limit("q", Quota::per_minute(60).burst(3))
        .await
        .expect("on the first");
    let second = Limiter::connect(&format!("memory://{b}"))
        .await
        .expect("connect");
    second
        .rate_limit("q", Quota::per_minute(60).burst(9))
        .await
        .expect("on the second");
    let l = Limiter::connect(&h.url()).await.expect("connect");
    let rl = l.open_rate_limit("q").await.expect("open");
    assert_eq!(
        rl.quota(),
        Quota::per_minute(60).burst(3),
        "the first cluster's"
    );
    let stored = second.open_rate_limit("q").await.expect("open").quota();
    assert_eq!(
        stored,
        Quota::per_minute(60).burst(3),
        "the copy was repaired"
    );
    // Keys on both clusters are held to burst 3.
    for i in 0..20 {
        let key = format!("k{i}");
        let admitted = {
            let mut n = 0;
            for _ in 0..5 {
                n += usize::from(rl.check(&key).await.expect("check").allowed);
            }
            n
        };
        assert_eq!(admitted, 3, "{key}");
    }
    // A change made on the first cluster alone reaches the other cluster's keys.
    first
        .open_rate_limit("q")
        .await
        .expect("open")
        .set_quota(Quota::per_minute(60).burst(6))
        .await
        .expect("set_quota on the first only");
    let fresh = Limiter::connect(&h.url()).await.expect("connect");
    let rf = fresh.open_rate_limit("q").await.expect("open");
    for i in 100..110 {
        let key = format!("k{i}");
        let mut n = 0;
        for _ in 0..8 {
            n += usize::from(rf.check(&key).await.expect("check").allowed);
        }
        assert_eq!(n, 6, "{key}");
    }
}

/// A sharded memory URL works from the command line like a plain one.
#[test]
fn sharded_urls_are_parsed_with_names() {
    match clusterlimit::StoreUrl::parse("memory://a;memory://b") {
        Ok(clusterlimit::StoreUrl::Sharded { clusters }) => assert_eq!(clusters.len(), 2),
        other => panic!("{other:?}"),
    }
}

/// A copy left stale on a cluster (here: a quota change made on the first cluster alone, as
/// when the second was down) is found by the background recheck of a client that only writes
/// that cluster's keys, and repaired: that client then decides with the first cluster's quota.
#[tokio::test]
async fn a_stale_copy_is_found_by_the_background_recheck() {
    use clusterlimit::backend::memory::MemoryBackend;
    use clusterlimit::backend::sharded::{Shard, ShardedBackend};
    let h = ShardedMemory::start().await;
    let shards = h
        .names
        .iter()
        .map(|n| Shard {
            id: format!("memory://{n}"),
            name: format!("memory://{n}"),
            backend: std::sync::Arc::new(MemoryBackend::open(n)),
        })
        .collect();
    let every = Duration::from_millis(200);
    let sharded = ShardedBackend::with_quota_recheck(shards, every).expect("two shards");
    let l = Limiter::from_backend(sharded.clone(), "recheck").expect("limiter");
    let old = Quota::per_day(24).burst(3);
    let new = Quota::per_day(24).burst(6);
    let rl = l.rate_limit("r", old).await.expect("rate_limit");
    // Keys kept by the second cluster only.
    let keys: Vec<String> = (0..400)
        .map(|i| format!("k{i}"))
        .filter(|k| sharded.cluster_of("r", k) == 1)
        .take(8)
        .collect();
    assert_eq!(keys.len(), 8);
    let first = Limiter::connect(&format!("memory://{}", h.names[0]))
        .await
        .expect("the first alone");
    first
        .open_rate_limit("r")
        .await
        .expect("open")
        .set_quota(new)
        .await
        .expect("set_quota on the first only");
    let second = Limiter::connect(&format!("memory://{}", h.names[1]))
        .await
        .expect("the second alone");
    let copy = || async { second.open_rate_limit("r").await.map(|r| r.quota()) };
    assert_eq!(copy().await.ok(), Some(old), "the second's copy is stale");
    let started = std::time::Instant::now();
    let mut i = 0;
    loop {
        // A fresh key of the second cluster, spent: its admissions show the quota in use.
        let k = &keys[i % keys.len()];
        i += 1;
        let mut admitted = 0;
        for _ in 0..7 {
            admitted += u64::from(rl.check(k).await.expect("check").allowed);
        }
        if admitted == 6 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(3) && i < keys.len(),
            "still deciding with the stale copy after {:?}",
            started.elapsed()
        );
        tokio::time::sleep(every).await;
    }
    assert_eq!(copy().await.ok(), Some(new), "the copy was repaired");
    assert_eq!(rl.quota(), new);
}

//! The contract suite (what a cluster-wide semaphore means, see `docs/design.md`) on every
//! backend of the crate. The cases, the `Harness` trait and the `contract_suite!` macro live in
//! `clusterlimit::testing` (feature `testing`), so a backend written outside the crate runs the
//! same cases (`tests/external_backend.rs`); this file holds the three store harnesses and
//! their instantiations: `memory::fifo_order`, `etcd::fifo_order`, …
//!
//! The holder-death case of network stores runs a real child process: this test binary
//! re-executes itself with `--exact contract::child_holder_process` (see
//! [`child_holder_process`]).

use crate::support;

use clusterlimit::testing::{entries_via_status, DoomedHolder, Harness, LimiterOptions, SHORT_TTL};
use clusterlimit::{Limiter, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// memory://

/// `memory://<unique name>`; an anchor Limiter keeps the in-process store alive for the whole
/// test, as a real store outlives its clients.
struct MemoryHarness {
    name: String,
    _anchor: Limiter,
}

impl MemoryHarness {
    fn url(&self) -> String {
        format!("memory://{}", self.name)
    }
}

impl Harness for MemoryHarness {
    const DEAD_HOLDER_FREED_WITHIN: Duration = Duration::from_secs(1);
    // memory:// lowers a held weight on a fair semaphore too (the fair rule grants it).
    const SHRINKS_FAIR_PERMITS: bool = true;

    async fn start() -> Self {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let test: String = std::thread::current()
            .name()
            .unwrap_or("test")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let name = format!(
            "contract-{test}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let anchor = Limiter::connect(&format!("memory://{name}"))
            .await
            .expect("connect the memory anchor Limiter");
        MemoryHarness {
            name,
            _anchor: anchor,
        }
    }

    async fn connect(&self, opts: LimiterOptions) -> Result<Limiter> {
        opts.builder(&self.url()).connect().await
    }

    async fn revoke_sessions(&self) {
        let ended = clusterlimit::backend::memory::expire_sessions(&self.name);
        assert!(ended > 0, "no memory session to expire in {:?}", self.name);
    }

    async fn queue_entries(&self, sem: &str) -> usize {
        let fresh = Limiter::connect(&self.url())
            .await
            .expect("connect a fresh memory Limiter");
        entries_via_status(fresh, sem).await
    }

    async fn spawn_holder(&self, sem: &str) -> DoomedHolder {
        let limiter = Limiter::connect(&self.url())
            .await
            .expect("connect the holder's Limiter");
        DoomedHolder::hold_in_task(limiter, sem).await
    }
}

// ---------------------------------------------------------------------------------------------
// etcd://

/// Key prefix of the etcd harness's URL (`etcd://127.0.0.1:PORT/t`).
const ETCD_PREFIX: &str = "t";

/// One fresh single-member etcd per test.
struct EtcdHarness {
    cluster: support::EtcdCluster,
}

impl Harness for EtcdHarness {
    const DEAD_HOLDER_FREED_WITHIN: Duration = Duration::from_secs(SHORT_TTL.as_secs() + 2);
    // etcd lowers a held weight on a fair semaphore too (the waiters' views grant).
    const SHRINKS_FAIR_PERMITS: bool = true;

    async fn start() -> Self {
        EtcdHarness {
            cluster: support::EtcdCluster::single(),
        }
    }

    async fn connect(&self, opts: LimiterOptions) -> Result<Limiter> {
        opts.builder(&self.cluster.url(ETCD_PREFIX)).connect().await
    }

    async fn revoke_sessions(&self) {
        support::revoke_all_leases(&self.cluster.endpoints()).await;
    }

    async fn queue_entries(&self, sem: &str) -> usize {
        let n = support::count_keys(
            &self.cluster.endpoints(),
            &format!("{ETCD_PREFIX}/s/{sem}/q/"),
        )
        .await;
        usize::try_from(n).expect("key count is not negative")
    }

    async fn spawn_holder(&self, sem: &str) -> DoomedHolder {
        spawn_child_holder(&self.cluster.url(ETCD_PREFIX), sem).await
    }
}

// ---------------------------------------------------------------------------------------------
// zk://

/// Chroot of the ZooKeeper harness's URL (`zk://127.0.0.1:PORT/t`).
const ZK_CHROOT: &str = "/t";
/// Longest session the harness's server grants: a revocation cuts clients off for this long
/// (plus a margin), so every session has expired on the server when it returns.
const ZK_MAX_SESSION: Duration = Duration::from_secs(4);

/// One fresh standalone ZooKeeper per test; Limiters reach it through a fault proxy, which is
/// how sessions are ended behind the library's back (ZooKeeper has no "revoke" call).
struct ZkHarness {
    cluster: support::ZkCluster,
    proxy: support::FaultProxy,
}

impl ZkHarness {
    fn url(&self) -> String {
        format!("zk://{}{ZK_CHROOT}", self.proxy.connect_string())
    }
}

impl Harness for ZkHarness {
    const DEAD_HOLDER_FREED_WITHIN: Duration = Duration::from_secs(SHORT_TTL.as_secs() + 2);
    // ZooKeeper lowers a held weight in the entry's data (its name keeps the token), on a
    // fair semaphore too (the waiters' views grant).
    const SHRINKS_FAIR_PERMITS: bool = true;

    async fn start() -> Self {
        let cluster = support::ZkCluster::builder()
            .session_timeout_range_ms(1_000, ZK_MAX_SESSION.as_millis() as u32)
            .start();
        let proxy = support::FaultProxy::start(cluster.client_addr(0));
        ZkHarness { cluster, proxy }
    }

    async fn connect(&self, opts: LimiterOptions) -> Result<Limiter> {
        opts.builder(&self.url()).connect().await
    }

    async fn revoke_sessions(&self) {
        // Nothing gets through until every session has timed out on the server; then clients
        // reconnect and learn that their session expired.
        self.proxy.blackhole();
        tokio::time::sleep(ZK_MAX_SESSION + self.cluster.tick_time() * 3).await;
        self.proxy.pass();
    }

    async fn queue_entries(&self, sem: &str) -> usize {
        support::count_queue_entries(
            &self.cluster.connect_string(),
            &format!("{ZK_CHROOT}/s/{sem}"),
        )
        .await
    }

    async fn spawn_holder(&self, sem: &str) -> DoomedHolder {
        spawn_child_holder(&self.url(), sem).await
    }
}

// ---------------------------------------------------------------------------------------------
// The child-process holder (any network store).

/// Re-executes this test binary as a holder of one permit of `sem` in the store at `url`;
/// returns once it holds it.
async fn spawn_child_holder(url: &str, sem: &str) -> DoomedHolder {
    support::holder_process::doomed(module_path!(), url, sem).await
}

/// Not a test of its own: the body of the child process of `*::holder_dies`. Returns at once
/// unless started by [`spawn_child_holder`].
#[test]
fn child_holder_process() {
    support::holder_process::hold_if_child();
}

// ---------------------------------------------------------------------------------------------
// Instantiation: every case of `clusterlimit::testing::cases` on each store.

clusterlimit::contract_suite!(memory, MemoryHarness);
clusterlimit::contract_suite!(etcd, EtcdHarness);
clusterlimit::contract_suite!(zookeeper, ZkHarness);

// Fair semaphores: memory://, etcd and ZooKeeper here (Redis: tests/redis_store.rs).
clusterlimit::fair_contract_suite!(memory_fair, MemoryHarness);
clusterlimit::fair_contract_suite!(etcd_fair, EtcdHarness);
clusterlimit::fair_contract_suite!(zookeeper_fair, ZkHarness);

// The rate-limit contract on the same stores (same harnesses).
clusterlimit::rate_contract_suite!(memory_rate, MemoryHarness);
clusterlimit::rate_contract_suite!(etcd_rate, EtcdHarness);
clusterlimit::rate_contract_suite!(zk_rate, ZkHarness);

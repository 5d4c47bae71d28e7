//! The contract suite: what a cluster-wide semaphore means (design.md §1–2), written once as
//! generic async functions over a small [`Harness`] and run on every backend.
//!
//! * `tests/contract/cases.rs` — the semantics tests, generic over the harness;
//! * `tests/contract/util.rs` — bounded polling and joining helpers;
//! * this file — the harness trait, one implementation per store, and the instantiations:
//!   `memory::fifo_order`, `etcd::fifo_order`, … A new backend joins with one impl and one
//!   `contract_suite!` line.
//!
//! The holder-death test of network stores runs a real child process: this test binary
//! re-executes itself with `--exact child_holder_process` (see [`child_holder_process`]).

mod support;

#[macro_use]
#[path = "contract/util.rs"]
mod util;

#[path = "contract/cases.rs"]
mod cases;

use clusterlimit::Limiter;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::task::JoinHandle;
use util::within;

/// Session TTL of Limiters in tests that depend on expiry (the shortest one accepted).
pub(crate) const SHORT_TTL: Duration = Duration::from_secs(2);

/// Upper bound for one whole contract test (a hang fails the test instead of the CI job).
const TEST_LIMIT: Duration = Duration::from_secs(90);

/// What a store must provide to run the contract suite. Deliberately small and store-neutral.
pub(crate) trait Harness: Sized {
    /// How soon the permits of a killed holder (see [`Harness::spawn_holder`]) must come back.
    const DEAD_HOLDER_FREED_WITHIN: Duration;

    /// A fresh, empty store for one test.
    async fn start() -> Self;

    /// The store URL for [`Limiter::connect`]; every call on one harness returns the same URL,
    /// and no other harness uses it.
    fn url(&self) -> String;

    /// Ends every session in the store behind the library's back (lease revocation, session
    /// expiry): every permit must report lost, every wait must fail.
    async fn revoke_sessions(&self);

    /// Number of queue entries (holders and waiters) of semaphore `sem`, read from the store
    /// as directly as the store allows; 0 if the semaphore does not exist.
    async fn queue_entries(&self, sem: &str) -> usize;

    /// Starts a holder of one permit of the existing semaphore `sem` that can be killed
    /// without any chance to clean up; returns once it holds.
    async fn spawn_holder(&self, sem: &str) -> DoomedHolder;
}

/// A holder that [`DoomedHolder::kill`] ends abruptly. Killed on drop as well.
pub(crate) struct DoomedHolder {
    /// Fencing token of the permit it holds.
    pub(crate) token: u64,
    victim: Option<Victim>,
}

enum Victim {
    /// In-process: a task owning its own Limiter and the permit.
    Task(JoinHandle<()>),
    /// A child process holding the permit; `kill_on_drop` is the guard for every path.
    Process(Box<support::holder_process::HolderProcess>),
}

impl DoomedHolder {
    /// Kills the holder: `JoinHandle::abort` for a task, SIGKILL for a process.
    pub(crate) async fn kill(mut self) {
        match self.victim.take().expect("killed once") {
            Victim::Task(task) => {
                task.abort();
                let res = within("aborted holder task ends", Duration::from_secs(5), task).await;
                assert!(
                    res.as_ref().is_err_and(|e| e.is_cancelled()),
                    "holder task was not cancelled: {res:?}"
                );
            }
            Victim::Process(mut holder) => {
                // tokio's Child::kill sends SIGKILL and reaps the child.
                within(
                    "SIGKILL holder child",
                    Duration::from_secs(5),
                    holder.child.kill(),
                )
                .await
                .expect("SIGKILL the holder child");
            }
        }
    }
}

impl Drop for DoomedHolder {
    fn drop(&mut self) {
        if let Some(Victim::Task(task)) = &self.victim {
            task.abort();
        }
        // Victim::Process: `kill_on_drop(true)` SIGKILLs the child.
    }
}

// ---------------------------------------------------------------------------------------------
// memory://

/// `memory://<unique name>`; an anchor Limiter keeps the in-process store alive for the whole
/// test, as a real store outlives its clients.
pub(crate) struct MemoryHarness {
    name: String,
    _anchor: Limiter,
}

impl Harness for MemoryHarness {
    const DEAD_HOLDER_FREED_WITHIN: Duration = Duration::from_secs(1);

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

    fn url(&self) -> String {
        format!("memory://{}", self.name)
    }

    async fn revoke_sessions(&self) {
        let ended = clusterlimit::backend::memory::expire_sessions(&self.name);
        assert!(ended > 0, "no memory session to expire in {:?}", self.name);
    }

    async fn queue_entries(&self, sem: &str) -> usize {
        let fresh = Limiter::connect(&self.url())
            .await
            .expect("connect a fresh memory Limiter");
        let n = match fresh.open_semaphore(sem).await {
            Ok(s) => {
                let st = s.status().await.expect("status for queue_entries");
                st.holders.len() + st.waiting
            }
            Err(clusterlimit::Error::NotFound(_)) => 0,
            Err(e) => panic!("queue_entries({sem:?}): open_semaphore failed: {e}"),
        };
        fresh.close().await.expect("close the fresh Limiter");
        n
    }

    async fn spawn_holder(&self, sem: &str) -> DoomedHolder {
        let url = self.url();
        let sem = sem.to_string();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let limiter = Limiter::connect(&url).await.expect("holder task: connect");
            let s = limiter
                .open_semaphore(&sem)
                .await
                .expect("holder task: open_semaphore");
            let permit = s.acquire().await.expect("holder task: acquire");
            let _ = tx.send(permit.fencing_token());
            // Hold until aborted; the permit and the Limiter are dropped with the task.
            std::future::pending::<()>().await;
            drop((permit, limiter));
        });
        // Built first, so the task is aborted if it never gets to hold.
        let mut holder = DoomedHolder {
            token: 0,
            victim: Some(Victim::Task(task)),
        };
        holder.token = within("in-process holder acquires", Duration::from_secs(5), rx)
            .await
            .expect("holder task died before holding");
        holder
    }
}

// ---------------------------------------------------------------------------------------------
// etcd://

/// Key prefix of the etcd harness's URL (`etcd://127.0.0.1:PORT/t`).
const ETCD_PREFIX: &str = "t";

/// One fresh single-member etcd per test.
pub(crate) struct EtcdHarness {
    cluster: support::EtcdCluster,
}

impl Harness for EtcdHarness {
    const DEAD_HOLDER_FREED_WITHIN: Duration = Duration::from_secs(SHORT_TTL.as_secs() + 2);

    async fn start() -> Self {
        EtcdHarness {
            cluster: support::EtcdCluster::single(),
        }
    }

    fn url(&self) -> String {
        self.cluster.url(ETCD_PREFIX)
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
        spawn_child_holder(&self.url(), sem).await
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
pub(crate) struct ZkHarness {
    cluster: support::ZkCluster,
    proxy: support::FaultProxy,
}

impl Harness for ZkHarness {
    const DEAD_HOLDER_FREED_WITHIN: Duration = Duration::from_secs(SHORT_TTL.as_secs() + 2);

    async fn start() -> Self {
        let cluster = support::ZkCluster::builder()
            .session_timeout_range_ms(1_000, ZK_MAX_SESSION.as_millis() as u32)
            .start();
        let proxy = support::FaultProxy::start(cluster.client_addr(0));
        ZkHarness { cluster, proxy }
    }

    fn url(&self) -> String {
        format!("zk://{}{ZK_CHROOT}", self.proxy.connect_string())
    }

    async fn revoke_sessions(&self) {
        // Nothing gets through until every session has timed out on the server; then clients
        // reconnect and learn that their session expired.
        self.proxy.blackhole();
        tokio::time::sleep(ZK_MAX_SESSION + self.cluster.tick_time() * 3).await;
        self.proxy.pass();
    }

    async fn queue_entries(&self, sem: &str) -> usize {
        support::count_children(
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
pub(crate) async fn spawn_child_holder(url: &str, sem: &str) -> DoomedHolder {
    let args = [
        "--exact",
        "child_holder_process",
        "--nocapture",
        "--test-threads=1",
    ];
    let holder = support::holder_process::spawn(&args, url, sem, 1, SHORT_TTL).await;
    DoomedHolder {
        token: holder.token,
        victim: Some(Victim::Process(Box::new(holder))),
    }
}

/// Not a test of its own: the body of the child process of `*::holder_dies`. Returns at once
/// unless started by [`spawn_child_holder`].
#[test]
fn child_holder_process() {
    support::holder_process::hold_if_child();
}

// ---------------------------------------------------------------------------------------------
// Instantiation.

/// `contract_suite!(module, Harness)` runs every contract case on one backend, as
/// `module::case`.
macro_rules! contract_suite {
    ($backend:ident, $harness:ty) => {
        mod $backend {
            use super::*;
            contract_suite!(@cases $harness;
                safety_under_load,
                fifo_order,
                weighted,
                try_acquire,
                timeouts,
                cancelled_waits_leave_nothing,
                capacity_mismatch,
                set_capacity,
                holder_dies,
                close,
                status_counts,
                bad_input,
                lost,
                request_counts,
                fencing_tokens,
                drop_releases,
            );
        }
    };
    (@cases $harness:ty; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let harness = <$harness as crate::Harness>::start().await;
                crate::util::within(
                    concat!(stringify!($case), " (whole test)"),
                    crate::TEST_LIMIT,
                    crate::cases::$case(&harness),
                )
                .await;
            }
        )*
    };
}

contract_suite!(memory, MemoryHarness);
contract_suite!(etcd, EtcdHarness);
contract_suite!(zookeeper, ZkHarness);

//! The contract suite on a backend written outside the crate, with the public API only.
//!
//! `Counted` is such a backend: a newtype defined in this test crate that implements
//! `clusterlimit::backend::Backend` by delegating every method to `MemoryBackend` and counting
//! the calls. `ExternalHarness` hands the suite Limiters built on it with
//! `Limiter::from_backend` (no URL), and `contract_suite!` runs every case on it, as
//! `counted_memory::fifo_order`, … `calls_go_through_the_wrapper` checks that the Limiters really
//! call the outside backend. See `docs/external-backends.md`.

use async_trait::async_trait;
use clusterlimit::backend::memory::{expire_sessions, MemoryBackend};
use clusterlimit::backend::{Backend, Enqueued, EntryRequest, OrphanSink, WaitOutcome};
use clusterlimit::testing::{self, entries_via_status, DoomedHolder, Harness, LimiterOptions};
use clusterlimit::{Limiter, LostSignal, RequestStats, Result, Status};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Calls per `Backend` method, shared by every backend of one harness.
#[derive(Debug, Default)]
struct Calls(Mutex<BTreeMap<&'static str, u64>>);

impl Calls {
    fn count(&self, method: &'static str) {
        // A poisoned lock only means another thread panicked mid-count: keep counting.
        let mut calls = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *calls.entry(method).or_default() += 1;
    }

    fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Adds these counts to `total`.
    fn add_to(&self, total: &mut BTreeMap<&'static str, u64>) {
        for (method, n) in self.snapshot() {
            *total.entry(method).or_default() += n;
        }
    }
}

/// The outside backend: delegates to `MemoryBackend`, counts every call.
#[derive(Debug)]
struct Counted {
    inner: MemoryBackend,
    calls: Arc<Calls>,
}

#[async_trait]
impl Backend for Counted {
    async fn ensure_semaphore(&self, name: &str, capacity: Option<u32>) -> Result<u32> {
        self.calls.count("ensure_semaphore");
        self.inner.ensure_semaphore(name, capacity).await
    }

    async fn enqueue(&self, req: &EntryRequest) -> Result<Enqueued> {
        self.calls.count("enqueue");
        self.inner.enqueue(req).await
    }

    async fn wait_outcome(&self, req: &EntryRequest, enq: &Enqueued) -> Result<WaitOutcome> {
        self.calls.count("wait_outcome");
        self.inner.wait_outcome(req, enq).await
    }

    async fn remove(&self, name: &str, id: &str) -> Result<()> {
        self.calls.count("remove");
        self.inner.remove(name, id).await
    }

    async fn status(&self, name: &str) -> Result<Status> {
        self.calls.count("status");
        self.inner.status(name).await
    }

    async fn set_capacity(&self, name: &str, capacity: u32) -> Result<()> {
        self.calls.count("set_capacity");
        self.inner.set_capacity(name, capacity).await
    }

    async fn list(&self) -> Result<Vec<String>> {
        self.calls.count("list");
        self.inner.list().await
    }

    async fn announce(&self, board: &str, id: &str, value: &[u8]) -> Result<()> {
        self.calls.count("announce");
        self.inner.announce(board, id, value).await
    }

    async fn announcements(&self, board: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.calls.count("announcements");
        self.inner.announcements(board).await
    }

    async fn withdraw(&self, board: &str, id: &str) -> Result<()> {
        self.calls.count("withdraw");
        self.inner.withdraw(board, id).await
    }

    fn stats(&self) -> RequestStats {
        self.calls.count("stats");
        self.inner.stats()
    }

    fn session_ttl(&self) -> Duration {
        self.calls.count("session_ttl");
        self.inner.session_ttl()
    }

    async fn session_signal(&self) -> Option<LostSignal> {
        self.calls.count("session_signal");
        self.inner.session_signal().await
    }

    async fn end_session(&self, session: &LostSignal) {
        self.calls.count("end_session");
        self.inner.end_session(session).await
    }

    fn set_orphan_sink(&self, sink: OrphanSink) {
        self.calls.count("set_orphan_sink");
        self.inner.set_orphan_sink(sink)
    }

    async fn close(&self) -> Result<()> {
        self.calls.count("close");
        self.inner.close().await
    }

    fn shutdown(&self) {
        self.calls.count("shutdown");
        self.inner.shutdown()
    }
}

/// A fresh in-process store per test, reached only through `Counted` backends; the anchor
/// keeps the store alive between Limiters, as a real store outlives its clients.
struct ExternalHarness {
    store: String,
    calls: Arc<Calls>,
    _anchor: MemoryBackend,
}

impl Harness for ExternalHarness {
    const DEAD_HOLDER_FREED_WITHIN: Duration = Duration::from_secs(1);
    // Its backend leaves `shrink_entry` to the trait's default, which refuses.
    const SHRINKS_PERMITS: bool = false;

    async fn start() -> Self {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let store = format!(
            "external-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        ExternalHarness {
            _anchor: MemoryBackend::open(&store),
            store,
            calls: Arc::default(),
        }
    }

    async fn connect(&self, opts: LimiterOptions) -> Result<Limiter> {
        // from_backend takes no TTL or request timeout: refuse what the builder would.
        opts.check()?;
        let backend = Counted {
            inner: MemoryBackend::open(&self.store),
            calls: self.calls.clone(),
        };
        let owner = opts.owner.unwrap_or_else(|| "external-harness".to_string());
        Limiter::from_backend(Arc::new(backend), owner)
    }

    async fn revoke_sessions(&self) {
        let ended = expire_sessions(&self.store);
        assert!(ended > 0, "no session to expire in {:?}", self.store);
    }

    async fn queue_entries(&self, sem: &str) -> usize {
        let limiter = self
            .connect(LimiterOptions::new())
            .await
            .expect("connect a fresh Limiter");
        entries_via_status(limiter, sem).await
    }

    async fn spawn_holder(&self, sem: &str) -> DoomedHolder {
        let limiter = self
            .connect(LimiterOptions::new())
            .await
            .expect("connect the holder's Limiter");
        DoomedHolder::hold_in_task(limiter, sem).await
    }
}

clusterlimit::contract_suite!(counted_memory, ExternalHarness);
// A backend that keeps no fair semaphores (the trait's defaults) refuses them clearly.
clusterlimit::fair_contract_suite!(counted_memory_fair, ExternalHarness, refused);

/// The suite's Limiters call the outside backend: four cases, each on a fresh harness,
/// reach every method the Limiter uses on a healthy store.
#[test]
fn calls_go_through_the_wrapper() {
    let limit = testing::TEST_LIMIT;
    let mut seen = BTreeMap::new();
    testing::block_on(async {
        let h = ExternalHarness::start().await;
        assert_eq!(h.calls.snapshot(), BTreeMap::new(), "calls before any case");
        testing::within("set_capacity case", limit, testing::cases::set_capacity(&h)).await;
        h.calls.add_to(&mut seen);
        let h = ExternalHarness::start().await;
        testing::within("close case", limit, testing::cases::close(&h)).await;
        h.calls.add_to(&mut seen);
        let h = ExternalHarness::start().await;
        let mismatch = testing::cases::capacity_mismatch(&h);
        testing::within("capacity_mismatch case", limit, mismatch).await;
        h.calls.add_to(&mut seen);
        let h = ExternalHarness::start().await;
        let boards = testing::cases::announcements(&h);
        testing::within("announcements case", limit, boards).await;
        h.calls.add_to(&mut seen);
    });
    for method in [
        "set_orphan_sink",
        "ensure_semaphore",
        "enqueue",
        "wait_outcome",
        "remove",
        "status",
        "set_capacity",
        "list",
        "announce",
        "announcements",
        "withdraw",
        "close",
    ] {
        assert!(
            seen.get(method).is_some_and(|n| *n > 0),
            "{method} never called: {seen:?}"
        );
    }
    println!("calls through the outside backend: {seen:?}");
}

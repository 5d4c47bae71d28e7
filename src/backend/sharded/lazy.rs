//! A cluster of a sharded store other than the first, connected in the background and on
//! use rather than before the Limiter opens.
//!
//! Only the first cluster is needed to open a sharded store (it keeps the semaphores, the
//! session and the reference copy of every quota); every other cluster keeps rate-limit keys
//! alone. So a cluster that does not answer when the Limiter opens fails its own keys, not
//! the whole store: its connection is started at once in the background, a call that finds it
//! unconnected tries again (one try at a time, then at most one per [`RETRY_PAUSE`]), and every
//! error names the cluster.

use crate::backend::{
    lock, Backend, Current, Enqueued, EntryRequest, KeyOutcome, KeyWrite, OrphanSink, RateStore,
    Versioned, WaitOutcome, WriteOutcome,
};
use crate::error::{Error, Result};
use crate::lost::LostSignal;
use crate::stats::RequestStats;
use crate::status::Status;
use async_trait::async_trait;
use futures::future::BoxFuture;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::OnceCell;
use tokio::time::Instant;

/// After a failed connection, calls fail at once (naming the failure) for this long before
/// one of them tries again: a cluster that is down costs its keys no wait per check.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Opens the cluster's backend (bounded in time by the caller who made it).
pub(crate) type Opener =
    Arc<dyn Fn() -> BoxFuture<'static, Result<Arc<dyn Backend>>> + Send + Sync>;

/// A cluster connected on first use (see the module's comment).
pub(crate) struct LazyBackend {
    /// How messages name the cluster.
    name: String,
    open: Opener,
    ready: OnceCell<Arc<dyn Backend>>,
    /// The last failed connection: when, and what it said.
    failed: Mutex<Option<(Instant, String)>>,
    /// What the opened backend will answer (needed before it is opened).
    version_life: Duration,
    session_ttl: Duration,
    stopped: AtomicBool,
}

impl std::fmt::Debug for LazyBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyBackend")
            .field("name", &self.name)
            .field("connected", &self.ready.initialized())
            .finish()
    }
}

impl LazyBackend {
    /// A cluster named `name`, opened by `open`, whose backend's rate store will answer
    /// `version_life` and whose sessions last `session_ttl`. Starts connecting now in the
    /// background when called within a runtime.
    pub(crate) fn start(
        name: String,
        open: Opener,
        version_life: Duration,
        session_ttl: Duration,
    ) -> Arc<LazyBackend> {
        let lazy = Arc::new(LazyBackend {
            name,
            open,
            ready: OnceCell::new(),
            failed: Mutex::new(None),
            version_life,
            session_ttl,
            stopped: AtomicBool::new(false),
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&lazy);
            runtime.spawn(async move {
                if let Some(lazy) = weak.upgrade() {
                    // Errors are logged by `get` and returned again to the keys' checks.
                    let _ = lazy.get().await;
                }
            });
        }
        lazy
    }

    /// Waits up to `grace` for the connection started in the background, so a store whose
    /// clusters all answer is opened whole (its first requests do not race the connections).
    pub(crate) async fn settle(&self, grace: Duration) {
        let _ = tokio::time::timeout(grace, self.get()).await;
    }

    /// The connected backend, connecting now if it is not (see the module's comment).
    async fn get(&self) -> Result<&Arc<dyn Backend>> {
        if let Some(b) = self.ready.get() {
            return Ok(b);
        }
        self.ready
            .get_or_try_init(|| async {
                if self.stopped.load(Ordering::Acquire) {
                    return Err(Error::Closed);
                }
                if let Some((at, why)) = lock(&self.failed).as_ref() {
                    let next = *at + RETRY_PAUSE;
                    if Instant::now() < next {
                        return Err(Error::store(format!(
                            "not connected ({why}); tried again within {} ms",
                            next.saturating_duration_since(Instant::now()).as_millis()
                        )));
                    }
                }
                match (self.open)().await {
                    Ok(backend) => {
                        if lock(&self.failed).take().is_some() {
                            tracing::info!(cluster = %self.name, "cluster of the sharded store connected; its keys are checked again");
                        }
                        Ok(backend)
                    }
                    Err(e) => {
                        let first = lock(&self.failed)
                            .replace((Instant::now(), e.to_string()))
                            .is_none();
                        if first {
                            tracing::warn!(
                                cluster = %self.name, error = %e,
                                "cannot connect to a cluster of the sharded store: its keys fail \
                                 (tried again at most once a second) while the other clusters' \
                                 keys are checked as usual"
                            );
                        }
                        Err(e)
                    }
                }
            })
            .await
    }

    fn rates(b: &Arc<dyn Backend>) -> Result<&dyn RateStore> {
        b.rate_store()
            .ok_or_else(|| Error::invalid("a cluster of a sharded store must keep rate limits"))
    }
}

#[async_trait]
impl Backend for LazyBackend {
    async fn ensure_semaphore(&self, name: &str, capacity: Option<u32>) -> Result<u32> {
        self.get().await?.ensure_semaphore(name, capacity).await
    }

    async fn enqueue(&self, req: &EntryRequest) -> Result<Enqueued> {
        self.get().await?.enqueue(req).await
    }

    async fn wait_outcome(&self, req: &EntryRequest, enq: &Enqueued) -> Result<WaitOutcome> {
        self.get().await?.wait_outcome(req, enq).await
    }

    async fn remove(&self, name: &str, id: &str) -> Result<()> {
        self.get().await?.remove(name, id).await
    }

    async fn shrink_entry(&self, name: &str, id: &str, permits: u32) -> Result<u32> {
        self.get().await?.shrink_entry(name, id, permits).await
    }

    async fn status(&self, name: &str) -> Result<Status> {
        self.get().await?.status(name).await
    }

    async fn set_capacity(&self, name: &str, capacity: u32) -> Result<()> {
        self.get().await?.set_capacity(name, capacity).await
    }

    async fn list(&self) -> Result<Vec<String>> {
        self.get().await?.list().await
    }

    async fn members(&self) -> Result<Vec<crate::members::StoreMember>> {
        self.get().await?.members().await
    }

    fn stats(&self) -> RequestStats {
        self.ready.get().map(|b| b.stats()).unwrap_or_default()
    }

    fn session_ttl(&self) -> Duration {
        self.session_ttl
    }

    async fn session_signal(&self) -> Option<LostSignal> {
        match self.ready.get() {
            Some(b) => b.session_signal().await,
            None => None,
        }
    }

    async fn end_session(&self, session: &LostSignal) {
        if let Some(b) = self.ready.get() {
            b.end_session(session).await
        }
    }

    /// Not kept: only the first cluster holds entries (and so orphans) of a sharded store.
    fn set_orphan_sink(&self, _sink: OrphanSink) {}

    fn rate_store(&self) -> Option<&dyn RateStore> {
        Some(self)
    }

    async fn close(&self) -> Result<()> {
        self.stopped.store(true, Ordering::Release);
        match self.ready.get() {
            Some(b) => b.close().await,
            None => Ok(()),
        }
    }

    fn shutdown(&self) {
        self.stopped.store(true, Ordering::Release);
        if let Some(b) = self.ready.get() {
            b.shutdown();
        }
    }
}

#[async_trait]
impl RateStore for LazyBackend {
    async fn ensure_limit(&self, name: &str, quota: Option<&[u8]>) -> Result<Versioned> {
        Self::rates(self.get().await?)?
            .ensure_limit(name, quota)
            .await
    }

    async fn put_limit(&self, name: &str, quota: &[u8]) -> Result<u64> {
        Self::rates(self.get().await?)?.put_limit(name, quota).await
    }

    async fn limits(&self) -> Result<Vec<String>> {
        Self::rates(self.get().await?)?.limits().await
    }

    async fn read_key(&self, limit: &str, key: &str) -> Result<Current> {
        Self::rates(self.get().await?)?.read_key(limit, key).await
    }

    async fn write_keys(&self, writes: &[KeyWrite]) -> Result<WriteOutcome> {
        Self::rates(self.get().await?)?.write_keys(writes).await
    }

    async fn write_each(&self, writes: &[KeyWrite]) -> Vec<Result<KeyOutcome>> {
        match self.get().await.and_then(Self::rates) {
            Ok(store) => store.write_each(writes).await,
            Err(e) => writes.iter().map(|_| Err(e.copy())).collect(),
        }
    }

    fn version_life(&self) -> Duration {
        self.version_life
    }

    async fn delete_key(&self, limit: &str, key: &str) -> Result<()> {
        Self::rates(self.get().await?)?.delete_key(limit, key).await
    }
}

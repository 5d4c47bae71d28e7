//! `redis://`, `redis+sentinel://`, `redis+cluster://` (and `rediss…://` over TLS): rate
//! limits and permits on Redis, at Redis's speed. Rate limits: exact per key (one script
//! checks and writes each batch atomically, see `rate.rs`), many keys per call, keys expired
//! by Redis itself. Permits: the same queue as every store (`crate::queue`), one script per
//! step on the semaphore's keys, sessions kept alive by the Limiter (`permits.rs`). Fair
//! semaphores too: a fair record beside the semaphore's keys, grants written by one script
//! that compares its version (`fair_record.rs`, `fair_grants.rs`).
//!
//! Redis replicates asynchronously: a write acknowledged by a primary that fails before its
//! replicas have it is lost in a failover (a key's count goes back by what that interval
//! admitted). etcd and ZooKeeper do not lose acknowledged writes; choose them where that
//! matters (see `docs/stores.md`).
//!
//! The same holds for permits: a grant (or a release) in the last replication lag before a
//! failover can be lost; the keepalive notices an entry that vanished and reports the
//! session lost, but a waiter granted on the new primary may hold at the same time meanwhile.
//! `docs/stores.md` says what holds. Announcements (the fleet view) are kept (`board.rs`).

mod board;
mod config;
mod describe;
mod entries;
mod fair_grants;
mod fair_record;
mod keeper;
mod keys;
mod link;
mod members;
mod notify;
mod permits;
mod rate;
mod reply;
mod scripts;
mod sem_keys;
mod sem_reply;
mod sem_scripts;
mod semaphore;
mod session;
mod tls;
mod watch;

pub use config::RedisConfig;

use crate::backend::{Backend, Enqueued, EntryRequest, RateStore, WaitOutcome};
use crate::error::Result;
use crate::lost::LostSignal;
use crate::stats::RequestStats;
use crate::status::Status;
use async_trait::async_trait;
use board::Board;
use keys::{Keys, CLUSTER_BUCKETS};
use link::Link;
use permits::Permits;
use scripts::Scripts;
use std::sync::Arc;
use std::time::Duration;

/// A connection to a Redis deployment that keeps rate limits and permits.
#[derive(Debug)]
pub struct RedisBackend {
    link: Arc<Link>,
    board: Arc<Board>,
    permits: Arc<Permits>,
    watches: watch::Watches,
    keys: Keys,
    scripts: Scripts,
    session_ttl: Duration,
}

impl RedisBackend {
    /// Connects (bounded by the request timeout): an unreachable deployment, refused
    /// credentials or a bad TLS file fail here, with a message naming the deployment.
    pub async fn connect(config: RedisConfig) -> Result<RedisBackend> {
        let session_ttl = config.session_ttl;
        let prefix = config.prefix.clone();
        let link = Arc::new(Link::connect(config).await?);
        let buckets = if link.is_cluster() {
            CLUSTER_BUCKETS
        } else {
            1
        };
        Ok(RedisBackend {
            board: Board::new(&link, &prefix, session_ttl),
            permits: Permits::new(link.clone(), &prefix, session_ttl),
            watches: watch::Watches::default(),
            keys: Keys::new(&prefix, buckets),
            link,
            scripts: Scripts::new(),
            session_ttl,
        })
    }
}

#[async_trait]
impl Backend for RedisBackend {
    async fn ensure_semaphore(&self, name: &str, capacity: Option<u32>) -> Result<u32> {
        self.permits.open(name, capacity).await
    }

    fn keeps_fair_semaphores(&self) -> bool {
        true
    }

    async fn ensure_fair_semaphore(
        &self,
        name: &str,
        capacity: Option<u32>,
        classes: Option<&crate::fair::Classes>,
    ) -> Result<u32> {
        self.permits.open_fair(name, capacity, classes).await
    }

    async fn enqueue(&self, req: &EntryRequest) -> Result<Enqueued> {
        self.permits.enqueue(req).await
    }

    async fn wait_outcome(&self, req: &EntryRequest, enq: &Enqueued) -> Result<WaitOutcome> {
        self.watches.wait_outcome(&self.permits, req, enq).await
    }

    async fn remove(&self, name: &str, id: &str) -> Result<()> {
        self.permits.remove(name, id).await
    }

    async fn shrink_entry(&self, name: &str, id: &str, permits: u32) -> Result<u32> {
        self.permits.shrink(name, id, permits).await
    }

    async fn status(&self, name: &str) -> Result<Status> {
        self.permits.status(name).await
    }

    async fn set_capacity(&self, name: &str, capacity: u32) -> Result<()> {
        self.permits.resize(name, capacity).await
    }

    async fn list(&self) -> Result<Vec<String>> {
        self.permits.list().await
    }

    fn stats(&self) -> RequestStats {
        self.link.stats.snapshot()
    }

    fn session_ttl(&self) -> Duration {
        self.session_ttl
    }

    async fn session_signal(&self) -> Option<LostSignal> {
        self.permits.session.live_signal().await
    }

    async fn end_session(&self, of: &LostSignal) {
        if let Some(session) = self.permits.session.end_if_current(of).await {
            self.permits.drop_session(&session).await;
        }
    }

    async fn announce(&self, board: &str, id: &str, value: &[u8]) -> Result<()> {
        // Bound to the session, as on the other stores: a lost session stops refreshing it.
        let session = self.permits.live_session().await?;
        self.board
            .announce(board, id, value, session.lost.clone())
            .await
    }

    async fn announcements(&self, board: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.board.read(board).await
    }

    async fn withdraw(&self, board: &str, id: &str) -> Result<()> {
        self.board.withdraw(board, id).await
    }

    async fn members(&self) -> Result<Vec<crate::members::StoreMember>> {
        let deadline = tokio::time::Instant::now() + self.link.request_timeout();
        let cluster = self.link.is_cluster();
        let text: String = self
            .link
            .run(
                crate::stats::RequestKind::Range,
                deadline,
                |mut c| async move {
                    match cluster {
                        true => redis::cmd("CLUSTER").arg("NODES").query_async(&mut c).await,
                        false => {
                            redis::cmd("INFO")
                                .arg("replication")
                                .query_async(&mut c)
                                .await
                        }
                    }
                },
            )
            .await?;
        Ok(match (cluster, self.link.server()) {
            (true, _) => members::from_cluster_nodes(&text),
            (false, server) => members::from_replication(
                &server.unwrap_or_else(|| self.link.shown().to_string()),
                &text,
            ),
        })
    }

    fn rate_store(&self) -> Option<&dyn RateStore> {
        Some(self)
    }

    async fn close(&self) -> Result<()> {
        self.permits.stop.stop();
        if let Some(session) = self.permits.session.end().await {
            self.permits.drop_session(&session).await;
        }
        self.board.close().await;
        Ok(())
    }

    fn shutdown(&self) {
        self.permits.stop.stop();
        if let Some(session) = self.permits.session.try_end() {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                let permits = self.permits.clone();
                handle.spawn(async move { permits.drop_session(&session).await });
            }
        }
        self.board.stop();
    }
}

/// What a Redis store's [`RateStore::version_life`] answers (needed before it is connected,
/// by a sharded store's later clusters).
pub(crate) const VERSION_LIFE: Duration = keys::GRACE;

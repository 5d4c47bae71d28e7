//! `redis://`, `redis+sentinel://`, `redis+cluster://` (and `rediss…://` over TLS): rate
//! limits on Redis, at Redis's speed. Exact per key (one script checks and writes each batch
//! atomically, see `rate.rs`), many keys per call, keys expired by Redis itself.
//!
//! Redis replicates asynchronously: a write acknowledged by a primary that fails before its
//! replicas have it is lost in a failover (a key's count goes back by what that interval
//! admitted). etcd and ZooKeeper do not lose acknowledged writes; choose them where that
//! matters (see `docs/stores.md`).
//!
//! Permits (semaphores) are not kept on Redis yet: their calls fail with `InvalidArgument`
//! saying so, and the store lists no semaphores. Announcements (the fleet view) are kept
//! (`board.rs`).

mod board;
mod config;
mod describe;
mod keys;
mod link;
mod members;
mod rate;
mod reply;
mod scripts;
mod tls;

pub use config::RedisConfig;

use crate::backend::{Backend, Enqueued, EntryRequest, RateStore, WaitOutcome};
use crate::error::{Error, Result};
use crate::lost::LostSignal;
use crate::stats::RequestStats;
use crate::status::Status;
use async_trait::async_trait;
use board::Board;
use keys::{Keys, CLUSTER_BUCKETS};
use link::Link;
use scripts::Scripts;
use std::sync::Arc;
use std::time::Duration;

/// A connection to a Redis deployment that keeps rate limits.
#[derive(Debug)]
pub struct RedisBackend {
    link: Arc<Link>,
    board: Arc<Board>,
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
            keys: Keys::new(&prefix, buckets),
            link,
            scripts: Scripts::new(),
            session_ttl,
        })
    }

    fn no_permits(&self) -> Error {
        Error::invalid(format!(
            "{} keeps rate limits only: permits (semaphores) are not available on Redis yet; use an etcd or ZooKeeper store for them",
            self.link.shown()
        ))
    }
}

#[async_trait]
impl Backend for RedisBackend {
    async fn ensure_semaphore(&self, _name: &str, _capacity: Option<u32>) -> Result<u32> {
        Err(self.no_permits())
    }

    async fn enqueue(&self, _req: &EntryRequest) -> Result<Enqueued> {
        Err(self.no_permits())
    }

    async fn wait_outcome(&self, _req: &EntryRequest, _enq: &Enqueued) -> Result<WaitOutcome> {
        Err(self.no_permits())
    }

    async fn remove(&self, _name: &str, _id: &str) -> Result<()> {
        // Nothing is ever enqueued here, so there is nothing to remove.
        Ok(())
    }

    async fn status(&self, name: &str) -> Result<Status> {
        Err(Error::NotFound(name.to_string()))
    }

    async fn set_capacity(&self, _name: &str, _capacity: u32) -> Result<()> {
        Err(self.no_permits())
    }

    async fn list(&self) -> Result<Vec<String>> {
        Ok(Vec::new())
    }

    fn stats(&self) -> RequestStats {
        self.link.stats.snapshot()
    }

    fn session_ttl(&self) -> Duration {
        self.session_ttl
    }

    async fn session_signal(&self) -> Option<LostSignal> {
        None
    }

    async fn end_session(&self, _session: &LostSignal) {}

    async fn announce(&self, board: &str, id: &str, value: &[u8]) -> Result<()> {
        self.board.announce(board, id, value).await
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
        self.board.close().await;
        Ok(())
    }

    fn shutdown(&self) {
        self.board.stop();
    }
}

/// What a Redis store's [`RateStore::version_life`] answers (needed before it is connected,
/// by a sharded store's later clusters).
pub(crate) const VERSION_LIFE: Duration = keys::GRACE;

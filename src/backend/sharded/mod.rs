//! Rate limits spread over several store clusters by key (`URL;URL;…`, see
//! `docs/rate-limits.md`, "Sharding"). Every key lives in exactly one cluster, chosen by a
//! consistent-hash ring (`ring.rs`), so each key is as exact as on one store; the clusters
//! never talk to each other, so a cluster that is down fails only its own keys.
//!
//! What lives where:
//! * Key states: on their key's cluster only. `write_each` sends one request per cluster, all
//!   at once; `write_keys` (all-or-nothing, for `check_all`) is refused when its keys are on
//!   different clusters: independent clusters cannot commit together without a two-phase
//!   protocol, and a half-applied `check_all` would break its promise. Hash tags (`{user}`)
//!   keep keys together.
//! * Quotas: on every cluster, the first cluster's copy being the truth (`rate.rs`,
//!   `quotas.rs`): a copy found different is rewritten from it.
//! * Semaphores, announcement boards and the session: on the first cluster only. A board
//!   stays with the session its values are bound to, so "the Limiter's session was lost" (its
//!   one loss signal) is exactly when its values went; every reader finds them there.
//!
//! Store-neutral: built from any [`Backend`]s that keep rate limits.

use super::{Backend, Enqueued, EntryRequest, OrphanSink, RateStore, WaitOutcome};
use crate::error::{Error, Result};
use crate::lost::LostSignal;
use crate::stats::RequestStats;
use crate::status::Status;
use async_trait::async_trait;
use std::sync::{Arc, Weak};
use std::time::Duration;

pub(crate) mod lazy;
mod quotas;
mod rate;
pub(crate) mod ring;

/// One cluster of a [`ShardedBackend`].
#[derive(Debug, Clone)]
pub struct Shard {
    /// What places the cluster on the ring: keys move when it changes. `URL;URL;…` uses the
    /// part's `shard=NAME` setting, else its scheme, sorted endpoints and prefix (see
    /// [`StoreUrl::ring_id`](crate::store_url::StoreUrl::ring_id)).
    pub id: String,
    /// How messages name the cluster (its URL, redacted).
    pub name: String,
    /// The cluster's store; it must keep rate limits.
    pub backend: Arc<dyn Backend>,
}

/// How often a client writing keys of a cluster compares that cluster's quota copies with
/// the first cluster's, in the background: a copy left stale (its cluster missed a quota
/// change while down) is repaired within about this long once both clusters answer.
pub const QUOTA_RECHECK: Duration = Duration::from_secs(10);

/// Several clusters as one [`Backend`]: rate-limit keys spread over all of them, semaphores
/// and the session on the first.
#[derive(Debug)]
pub struct ShardedBackend {
    shards: Vec<Shard>,
    ring: ring::Ring,
    known: quotas::Known,
    recheck_every: Duration,
    /// Itself, for the background quota rechecks.
    me: Weak<ShardedBackend>,
}

impl ShardedBackend {
    /// Composes `shards` (at least one, distinct identities, each keeping rate limits); the
    /// first one keeps the semaphores and is the reference for quotas.
    pub fn new(shards: Vec<Shard>) -> Result<Arc<ShardedBackend>> {
        Self::with_quota_recheck(shards, QUOTA_RECHECK)
    }

    /// [`new`](Self::new) with another interval than [`QUOTA_RECHECK`] (for tests).
    pub fn with_quota_recheck(shards: Vec<Shard>, every: Duration) -> Result<Arc<ShardedBackend>> {
        if shards.is_empty() {
            return Err(Error::invalid("a sharded store needs at least one cluster"));
        }
        for (i, s) in shards.iter().enumerate() {
            if s.backend.rate_store().is_none() {
                return Err(Error::invalid(format!(
                    "cluster {} does not keep rate limits, so it cannot be a shard",
                    s.name
                )));
            }
            if let Some(twin) = shards[..i].iter().find(|t| t.id == s.id) {
                return Err(Error::invalid(format!(
                    "clusters {} and {} have the same identity {:?} on the ring; give each a \
                     distinct shard=NAME",
                    twin.name, s.name, s.id
                )));
            }
        }
        let ids: Vec<String> = shards.iter().map(|s| s.id.clone()).collect();
        let ring = ring::Ring::new(&ids);
        Ok(Arc::new_cyclic(|me| ShardedBackend {
            ring,
            shards,
            known: quotas::Known::default(),
            recheck_every: every,
            me: me.clone(),
        }))
    }

    /// The index of the cluster that keeps `key` of `limit` (in the order given to
    /// [`new`](Self::new)).
    pub fn cluster_of(&self, limit: &str, key: &str) -> usize {
        self.ring.cluster(limit, key)
    }

    /// The clusters, in the order given.
    pub fn shards(&self) -> &[Shard] {
        &self.shards
    }

    fn first(&self) -> &dyn Backend {
        // `new` refuses an empty list.
        self.shards[0].backend.as_ref()
    }

    /// How messages name cluster `cluster`: its place in the URL and its URL.
    pub(crate) fn describe(&self, cluster: usize) -> String {
        format!(
            "cluster {} of {} ({})",
            cluster + 1,
            self.shards.len(),
            self.shards[cluster].name
        )
    }

    /// `e` with the cluster named, when it is the store's failure.
    fn at(&self, cluster: usize, e: Error) -> Error {
        match e {
            Error::Store(s) => Error::store(format!("{}: {s}", self.describe(cluster))),
            other => other,
        }
    }
}

#[async_trait]
impl Backend for ShardedBackend {
    async fn ensure_semaphore(&self, name: &str, capacity: Option<u32>) -> Result<u32> {
        self.first().ensure_semaphore(name, capacity).await
    }

    fn keeps_fair_semaphores(&self) -> bool {
        self.first().keeps_fair_semaphores()
    }

    async fn ensure_fair_semaphore(
        &self,
        name: &str,
        capacity: Option<u32>,
        classes: Option<&crate::fair::Classes>,
    ) -> Result<u32> {
        self.first()
            .ensure_fair_semaphore(name, capacity, classes)
            .await
    }

    async fn enqueue(&self, req: &EntryRequest) -> Result<Enqueued> {
        self.first().enqueue(req).await
    }

    async fn wait_outcome(&self, req: &EntryRequest, enq: &Enqueued) -> Result<WaitOutcome> {
        self.first().wait_outcome(req, enq).await
    }

    async fn remove(&self, name: &str, id: &str) -> Result<()> {
        self.first().remove(name, id).await
    }

    async fn shrink_entry(&self, name: &str, id: &str, permits: u32) -> Result<u32> {
        self.first().shrink_entry(name, id, permits).await
    }

    async fn status(&self, name: &str) -> Result<Status> {
        self.first().status(name).await
    }

    async fn set_capacity(&self, name: &str, capacity: u32) -> Result<()> {
        self.first().set_capacity(name, capacity).await
    }

    async fn list(&self) -> Result<Vec<String>> {
        self.first().list().await
    }

    async fn announce(&self, board: &str, id: &str, value: &[u8]) -> Result<()> {
        self.first().announce(board, id, value).await
    }

    async fn announcements(&self, board: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.first().announcements(board).await
    }

    async fn withdraw(&self, board: &str, id: &str) -> Result<()> {
        self.first().withdraw(board, id).await
    }

    /// Every cluster's members, each name prefixed with its cluster's, asked all at once; a
    /// cluster that does not answer is one member of role `unreachable` (its members are
    /// unknown), so one down cluster hides no other's. An error only when none answers.
    async fn members(&self) -> Result<Vec<crate::members::StoreMember>> {
        let asked = futures::future::join_all(self.shards.iter().map(|s| s.backend.members()));
        let mut all = Vec::new();
        let mut first_error = None;
        for ((i, shard), answer) in self.shards.iter().enumerate().zip(asked.await) {
            match answer {
                Ok(members) => all.extend(members.into_iter().map(|mut m| {
                    m.name = format!("{}/{}", shard.name, m.name);
                    m
                })),
                Err(e) => {
                    all.push(crate::members::StoreMember {
                        name: shard.name.clone(),
                        address: String::new(),
                        role: "unreachable".to_string(),
                    });
                    first_error.get_or_insert(self.at(i, e));
                }
            }
        }
        match first_error {
            Some(e) if all.iter().all(|m| m.role == "unreachable") => Err(e),
            _ => Ok(all),
        }
    }

    fn stats(&self) -> RequestStats {
        self.shards.iter().map(|s| s.backend.stats()).sum()
    }

    fn session_ttl(&self) -> Duration {
        self.first().session_ttl()
    }

    async fn session_signal(&self) -> Option<LostSignal> {
        self.first().session_signal().await
    }

    async fn end_session(&self, session: &LostSignal) {
        self.first().end_session(session).await
    }

    fn set_orphan_sink(&self, sink: OrphanSink) {
        self.first().set_orphan_sink(sink)
    }

    fn rate_store(&self) -> Option<&dyn RateStore> {
        Some(self)
    }

    async fn close(&self) -> Result<()> {
        let closed = futures::future::join_all(self.shards.iter().map(|s| s.backend.close()));
        let mut first_error = None;
        for (i, r) in closed.await.into_iter().enumerate() {
            if let Err(e) = r {
                first_error.get_or_insert(self.at(i, e));
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn shutdown(&self) {
        for s in &self.shards {
            s.backend.shutdown();
        }
    }
}

//! The clusters of a Limiter's store, as people and views see them: which cluster keeps a
//! key, and whether each one answers now. A store of one cluster (etcd, ZooKeeper, memory)
//! has one; a sharded store (`URL;URL;…`) one per part of its URL.

use crate::error::{Error, Result};
use crate::limiter::Limiter;
use std::time::Duration;
use tokio::time::Instant;

/// One cluster of a Limiter's store.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreCluster {
    /// Its place in the store URL, from 0 (a store of one cluster: 0).
    pub position: usize,
    /// How messages name it, e.g. `cluster 2 of 3 (etcd://10.0.0.2:2379/app)`; `None` for a
    /// store of one cluster, which is simply "the store".
    pub name: Option<String>,
}

impl StoreCluster {
    /// Its name, or "the store" for a store of one cluster.
    pub fn describe(&self) -> &str {
        self.name.as_deref().unwrap_or("the store")
    }
}

/// Whether one cluster answered a read just now (see [`Limiter::cluster_health`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterHealth {
    /// The cluster.
    pub cluster: StoreCluster,
    /// How long its answer took; `None` if it did not answer.
    pub answered_in: Option<Duration>,
    /// Why it did not answer, for people.
    pub error: Option<String>,
}

impl Limiter {
    /// The clusters of the store, in the URL's order: one for a store of one cluster.
    pub fn clusters(&self) -> Vec<StoreCluster> {
        let store = self.inner.backend.rate_store();
        let count = store.map_or(1, |s| s.parts());
        (0..count)
            .map(|position| StoreCluster {
                position,
                name: store.and_then(|s| s.part_name(position)),
            })
            .collect()
    }

    /// The cluster that keeps `key` of the rate limit `limit` (semaphores, the session and
    /// every quota's reference copy are on the first).
    pub fn cluster_of(&self, limit: &str, key: &str) -> StoreCluster {
        let store = self.inner.backend.rate_store();
        let position = store.map_or(0, |s| s.part_of(limit, key));
        StoreCluster {
            position,
            name: store.and_then(|s| s.part_name(position)),
        }
    }

    /// Asks every cluster for one small read at once, each within `timeout`: which answer,
    /// how fast, and why the others do not. For views that show each cluster's state.
    pub async fn cluster_health(&self, timeout: Duration) -> Result<Vec<ClusterHealth>> {
        self.inner.check_open()?;
        let asks = self.clusters().into_iter().map(|cluster| async move {
            let started = Instant::now();
            let read = async {
                match self.inner.backend.rate_store() {
                    Some(store) => store.ping_part(cluster.position).await,
                    None => self.inner.backend.list().await.map(|_| ()),
                }
            };
            let answered = tokio::time::timeout(timeout, read)
                .await
                .unwrap_or_else(|_| {
                    Err(Error::store(format!(
                        "no answer within {} ms",
                        timeout.as_millis()
                    )))
                });
            ClusterHealth {
                cluster,
                answered_in: answered.is_ok().then(|| started.elapsed()),
                error: answered.err().map(|e| e.to_string()),
            }
        });
        Ok(futures::future::join_all(asks).await)
    }
}

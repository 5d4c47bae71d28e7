//! The sharded [`RateStore`]: each key's reads and writes go to its cluster alone; quotas go
//! to every cluster, the first cluster's copy being the truth.
//!
//! Quota copies: `put_limit` writes the first cluster, then the others. Whenever a cluster
//! shows a quota version this client has not verified (at open, after a conflict, after
//! another client's change), and in the background every `QUOTA_RECHECK` while it writes
//! keys of a cluster, the first cluster's quota is read and the cluster's copy is compared
//! with it; a copy that differs (the cluster missed a change while down, or was
//! added since) or is missing is rewritten from the first cluster's before any write is made
//! against it. So no write is ever applied under a quota other than the one it was computed
//! with, and a stale copy lasts only until a client meets it.

use super::quotas::{present, shown};
use super::ShardedBackend;
use crate::backend::rate_store::{before_write, before_write_each, limit_found};
use crate::backend::{Current, KeyOutcome, KeyWrite, RateStore, Versioned, WriteOutcome};
use crate::error::{Error, Result};
use async_trait::async_trait;
use futures::future::join_all;
use std::time::Duration;
use tokio::task::JoinHandle;

/// How long opening a limit waits for its quota copies on the clusters after the first (they
/// go on in the background past it).
const COPY_GRACE: Duration = Duration::from_millis(250);

/// Most keys a refused `write_keys` names.
const NAMED_KEYS: usize = 8;

/// How a write to one cluster is sent.
enum Prepared {
    /// With this cluster version of the quota.
    Version(u64),
    /// Not at all: it was computed with another quota than the one stored now (shown as the
    /// rate layer sees it; `None`: the limit is gone).
    Stale(Option<Versioned>),
}

impl ShardedBackend {
    fn store(&self, cluster: usize) -> Result<&dyn RateStore> {
        self.shards[cluster]
            .backend
            .rate_store()
            .ok_or_else(|| Error::invalid("a shard lost its rate store"))
    }

    /// Makes `cluster`'s copy of `limit`'s quota the first cluster's (creating or rewriting it
    /// if needed) and records it as verified. Returns the first cluster's quota and the
    /// cluster's version of it. `NotFound` if the first cluster has no such limit.
    async fn reconcile(&self, limit: &str, cluster: usize) -> Result<(Versioned, u64)> {
        let first = self
            .store(0)?
            .ensure_limit(limit, None)
            .await
            .map_err(|e| self.at(0, e))?;
        self.known.learn(limit, 0, &first);
        if cluster == 0 {
            let version = first.version;
            return Ok((first, version));
        }
        let version = self.copy_quota(limit, cluster, &first.value).await?;
        Ok((first, version))
    }

    /// Makes `cluster` hold `quota` for `limit`; returns its version there.
    async fn copy_quota(&self, limit: &str, cluster: usize, quota: &[u8]) -> Result<u64> {
        let store = self.store(cluster)?;
        let there = store
            .ensure_limit(limit, Some(quota))
            .await
            .map_err(|e| self.at(cluster, e))?;
        let version = if there.value == quota {
            there.version
        } else {
            tracing::warn!(
                limit,
                cluster = %self.shards[cluster].name,
                "a cluster's copy of the quota differs from the first cluster's: rewriting it"
            );
            store
                .put_limit(limit, quota)
                .await
                .map_err(|e| self.at(cluster, e))?
        };
        let copy = Versioned {
            value: quota.to_vec(),
            version,
        };
        self.known.learn(limit, cluster, &copy);
        Ok(version)
    }

    /// A quota `cluster` answered with, as the rate layer must see it: verified (or made the
    /// first cluster's) first. `None`: the limit is gone.
    async fn shown_quota(
        &self,
        limit: &str,
        cluster: usize,
        quota: Option<Versioned>,
    ) -> Result<Option<Versioned>> {
        match quota {
            Some(q) if cluster == 0 => {
                self.known.learn(limit, 0, &q);
                Ok(Some(present(&q)))
            }
            Some(q) if self.known.verified(limit, cluster, q.version) => Ok(Some(present(&q))),
            _ => match self.reconcile(limit, cluster).await {
                Ok((first, _)) => Ok(Some(present(&first))),
                Err(Error::NotFound(_)) => Ok(None),
                Err(e) => Err(e),
            },
        }
    }

    /// `current` as read from `cluster`, with its quota as the rate layer must see it.
    async fn shown_current(
        &self,
        limit: &str,
        cluster: usize,
        current: Current,
    ) -> Result<Current> {
        Ok(Current {
            quota: self.shown_quota(limit, cluster, current.quota).await?,
            key: current.key,
        })
    }

    /// How to send a write computed with the quota shown as `shown_version` to `cluster`.
    async fn prepare(&self, limit: &str, cluster: usize, shown_version: u64) -> Result<Prepared> {
        if let Some(v) = self.known.version_for(limit, cluster, shown_version) {
            if cluster != 0 && self.known.recheck_due(limit, cluster, self.recheck_every) {
                self.recheck(limit, cluster);
            }
            return Ok(Prepared::Version(v));
        }
        match self.reconcile(limit, cluster).await {
            Ok((first, v)) if shown(&first.value) == shown_version => Ok(Prepared::Version(v)),
            Ok((first, _)) => Ok(Prepared::Stale(Some(present(&first)))),
            Err(Error::NotFound(_)) => Ok(Prepared::Stale(None)),
            Err(e) => Err(e),
        }
    }

    /// Compares `cluster`'s copy of `limit`'s quota with the first cluster's in a task of its
    /// own, repairing it if it differs (then writes made with the old copy conflict and their
    /// clients learn the first cluster's quota). Off the request path: a first cluster that
    /// does not answer delays nothing.
    fn recheck(&self, limit: &str, cluster: usize) {
        let (Some(me), Ok(runtime)) = (self.me.upgrade(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let limit = limit.to_string();
        runtime.spawn(async move {
            if let Err(e) = me.reconcile(&limit, cluster).await {
                tracing::debug!(limit, error = %e, "quota recheck failed; tried again later");
            }
        });
    }

    /// Copies `limit`'s quota to every cluster after the first in tasks of their own, so the
    /// first check of each cluster's keys costs one write; a cluster that does not answer
    /// delays nothing here and gets its copy at the first check of one of its keys.
    fn copy_in_background(&self, limit: &str, quota: &[u8]) -> Vec<JoinHandle<()>> {
        let (Some(me), Ok(runtime)) = (self.me.upgrade(), tokio::runtime::Handle::try_current())
        else {
            return Vec::new();
        };
        (1..self.shards.len())
            .map(|c| {
                let (me, limit, quota) = (me.clone(), limit.to_string(), quota.to_vec());
                runtime.spawn(async move {
                    if let Err(e) = me.copy_quota(&limit, c, &quota).await {
                        tracing::debug!(
                            limit, error = %e,
                            "could not copy the quota to a cluster now; its keys get it at their next check"
                        );
                    }
                })
            })
            .collect()
    }

    /// The conflict a stale write meets: the quota now and the key as it is on `cluster`.
    async fn stale(
        &self,
        cluster: usize,
        w: &KeyWrite,
        quota: Option<Versioned>,
    ) -> Result<Current> {
        let key = match self.store(cluster)?.read_key(&w.limit, &w.key).await {
            Ok(current) => current.key,
            Err(Error::NotFound(_)) => None,
            Err(e) => return Err(self.at(cluster, e)),
        };
        Ok(Current { quota, key })
    }

    /// `write_each` of the writes `which` (indexes into `writes`), all kept by `cluster`.
    async fn write_each_on(
        &self,
        cluster: usize,
        writes: &[KeyWrite],
        which: &[usize],
    ) -> Vec<(usize, Result<KeyOutcome>)> {
        let mut done = Vec::with_capacity(which.len());
        let mut ready: Vec<usize> = Vec::with_capacity(which.len());
        let mut sent: Vec<KeyWrite> = Vec::with_capacity(which.len());
        for &i in which {
            let w = &writes[i];
            match self.prepare(&w.limit, cluster, w.quota_version).await {
                Ok(Prepared::Version(v)) => {
                    ready.push(i);
                    sent.push(KeyWrite {
                        quota_version: v,
                        ..w.clone()
                    });
                }
                Ok(Prepared::Stale(q)) => {
                    let found = self.stale(cluster, w, q).await;
                    done.push((i, found.map(KeyOutcome::Conflict)));
                }
                Err(e) => done.push((i, Err(e))),
            }
        }
        if sent.is_empty() {
            return done;
        }
        let outcomes = match self.store(cluster) {
            Ok(store) => store.write_each(&sent).await,
            Err(e) => sent.iter().map(|_| Err(e.copy())).collect(),
        };
        for ((i, w), o) in ready.into_iter().zip(&sent).zip(outcomes) {
            let o = match o {
                Ok(KeyOutcome::Written(v)) => Ok(KeyOutcome::Written(v)),
                Ok(KeyOutcome::Conflict(c)) => self
                    .shown_current(&w.limit, cluster, c)
                    .await
                    .map(KeyOutcome::Conflict),
                Err(e) => Err(self.at(cluster, e)),
            };
            done.push((i, o));
        }
        done
    }

    /// The one cluster that keeps every (limit, key) pair, or `InvalidArgument` naming them.
    fn one_cluster(&self, keys: &[(&str, &str)]) -> Result<usize> {
        let clusters: Vec<usize> = keys.iter().map(|(l, k)| self.ring.cluster(l, k)).collect();
        let first = clusters.first().copied().unwrap_or(0);
        if clusters.iter().all(|c| *c == first) {
            return Ok(first);
        }
        let named: Vec<String> = keys
            .iter()
            .zip(&clusters)
            .take(NAMED_KEYS)
            .map(|((l, k), c)| format!("{l}/{k} on {}", self.shards[*c].name))
            .collect();
        let more = keys.len().saturating_sub(NAMED_KEYS);
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        Err(Error::invalid(format!(
            "check_all cannot be all-or-nothing over keys kept by different clusters of a \
             sharded store (independent clusters cannot commit together): {}{more}. Give the \
             keys one hash tag to keep them on one cluster, e.g. {{user42}}:ip and \
             {{user42}}:path",
            named.join(", ")
        )))
    }
}

#[async_trait]
impl RateStore for ShardedBackend {
    async fn ensure_limit(&self, name: &str, quota: Option<&[u8]>) -> Result<Versioned> {
        let first = self
            .store(0)?
            .ensure_limit(name, quota)
            .await
            .map_err(|e| self.at(0, e))?;
        self.known.learn(name, 0, &first);
        let copies = self.copy_in_background(name, &first.value);
        // Answering clusters get their copy before this returns; one that does not answer
        // delays it by COPY_GRACE at most.
        let _ = tokio::time::timeout(COPY_GRACE, join_all(copies)).await;
        Ok(present(&first))
    }

    async fn put_limit(&self, name: &str, quota: &[u8]) -> Result<u64> {
        // The first cluster first: it is the truth every other copy is repaired from.
        let v0 = self
            .store(0)?
            .put_limit(name, quota)
            .await
            .map_err(|e| self.at(0, e))?;
        let stored = |version| Versioned {
            value: quota.to_vec(),
            version,
        };
        self.known.learn(name, 0, &stored(v0));
        let puts = (1..self.shards.len()).map(|c| async move {
            let r = match self.store(c) {
                Ok(store) => store.put_limit(name, quota).await,
                Err(e) => Err(e),
            };
            (c, r)
        });
        let mut failed = Vec::new();
        for (c, r) in join_all(puts).await {
            match r {
                Ok(v) => self.known.learn(name, c, &stored(v)),
                Err(e) => failed.push(format!("{} ({e})", self.shards[c].name)),
            }
        }
        if !failed.is_empty() {
            return Err(Error::store(format!(
                "the new quota of {name:?} is stored on the first cluster ({}) but not yet on {}; \
                 each of those clusters is given it at the first check of one of its keys once \
                 it answers (the first cluster's quota wins)",
                self.shards[0].name,
                failed.join(", ")
            )));
        }
        Ok(shown(quota))
    }

    /// The first cluster's: every limit is created there first (`ensure_limit`, `put_limit`),
    /// so the others' lists add nothing, and a down cluster after the first hides none.
    async fn limits(&self) -> Result<Vec<String>> {
        self.store(0)?.limits().await.map_err(|e| self.at(0, e))
    }

    async fn read_key(&self, limit: &str, key: &str) -> Result<Current> {
        let c = self.ring.cluster(limit, key);
        let store = self.store(c)?;
        let current = match store.read_key(limit, key).await {
            // Absent on this cluster only (added since, or down at the limit's creation).
            Err(Error::NotFound(_)) if c != 0 => {
                self.reconcile(limit, c).await?;
                store.read_key(limit, key).await
            }
            r => r,
        }
        .map_err(|e| self.at(c, e))?;
        limit_found(limit, self.shown_current(limit, c, current).await?)
    }

    async fn write_keys(&self, writes: &[KeyWrite]) -> Result<WriteOutcome> {
        if let Some(settled) = before_write(writes)? {
            return Ok(settled);
        }
        let keys: Vec<(&str, &str)> = writes
            .iter()
            .map(|w| (w.limit.as_str(), w.key.as_str()))
            .collect();
        let c = self.one_cluster(&keys)?;
        let mut sent = Vec::with_capacity(writes.len());
        let mut stale = false;
        for w in writes {
            match self.prepare(&w.limit, c, w.quota_version).await? {
                Prepared::Version(v) => sent.push(KeyWrite {
                    quota_version: v,
                    ..w.clone()
                }),
                Prepared::Stale(_) => stale = true,
            }
        }
        if stale {
            // None applies: what each write finds, read as the rate layer reads it.
            let mut found = Vec::with_capacity(writes.len());
            for w in writes {
                found.push(match self.read_key(&w.limit, &w.key).await {
                    Ok(current) => current,
                    Err(Error::NotFound(_)) => Current {
                        quota: None,
                        key: None,
                    },
                    Err(e) => return Err(e),
                });
            }
            return Ok(WriteOutcome::Conflict(found));
        }
        match self
            .store(c)?
            .write_keys(&sent)
            .await
            .map_err(|e| self.at(c, e))?
        {
            WriteOutcome::Written(v) => Ok(WriteOutcome::Written(v)),
            WriteOutcome::Conflict(found) => {
                let mut shown_found = Vec::with_capacity(found.len());
                for (w, current) in writes.iter().zip(found) {
                    shown_found.push(self.shown_current(&w.limit, c, current).await?);
                }
                Ok(WriteOutcome::Conflict(shown_found))
            }
        }
    }

    async fn write_each(&self, writes: &[KeyWrite]) -> Vec<Result<KeyOutcome>> {
        if let Some(settled) = before_write_each(writes) {
            return settled;
        }
        let mut groups: Vec<Vec<usize>> = vec![Vec::new(); self.shards.len()];
        for (i, w) in writes.iter().enumerate() {
            groups[self.ring.cluster(&w.limit, &w.key)].push(i);
        }
        let per_cluster = groups
            .iter()
            .enumerate()
            .filter(|(_, which)| !which.is_empty())
            .map(|(c, which)| self.write_each_on(c, writes, which));
        let mut outcomes: Vec<Option<Result<KeyOutcome>>> = writes.iter().map(|_| None).collect();
        for (i, o) in join_all(per_cluster).await.into_iter().flatten() {
            outcomes[i] = Some(o);
        }
        outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Err(Error::store("a sharded write got no outcome"))))
            .collect()
    }

    fn part_of(&self, limit: &str, key: &str) -> usize {
        self.ring.cluster(limit, key)
    }

    fn parts(&self) -> usize {
        self.shards.len()
    }

    async fn ping_part(&self, part: usize) -> Result<()> {
        let store = self.store(part.min(self.shards.len() - 1))?;
        store
            .limits()
            .await
            .map(|_| ())
            .map_err(|e| self.at(part, e))
    }

    fn part_name(&self, part: usize) -> Option<String> {
        (part < self.shards.len()).then(|| self.describe(part))
    }

    fn joint_keys(&self, keys: &[(&str, &str)]) -> Result<()> {
        self.one_cluster(keys).map(|_| ())
    }

    fn version_life(&self) -> std::time::Duration {
        self.shards
            .iter()
            .filter_map(|s| s.backend.rate_store())
            .map(|s| s.version_life())
            .min()
            .unwrap_or(std::time::Duration::MAX)
    }

    async fn delete_key(&self, limit: &str, key: &str) -> Result<()> {
        let c = self.ring.cluster(limit, key);
        self.store(c)?
            .delete_key(limit, key)
            .await
            .map_err(|e| self.at(c, e))
    }
}

//! Rate-limit storage of `memory://`: the quotas and key states of every Limiter on the same
//! store NAME, under one lock. Versions come from one counter, so none is ever reused; a key
//! whose `expires_at` has passed is swept by a later call (at most once a second, never before
//! its `expires_at`): an in-process store has no clock of its own to do it sooner.

use super::rate_table::{Rates, Stored};
use super::MemoryBackend;
use crate::backend::lock;
use crate::backend::rate_store::{before_write, limit_found};
use crate::backend::{Current, KeyWrite, RateStore, Versioned, WriteOutcome};
use crate::error::{Error, Result};
use crate::stats::RequestKind;
use async_trait::async_trait;

impl MemoryBackend {
    fn rates(&self) -> std::sync::MutexGuard<'_, Rates> {
        lock(&self.store.rates)
    }
}

#[async_trait]
impl RateStore for MemoryBackend {
    async fn ensure_limit(&self, name: &str, quota: Option<&[u8]>) -> Result<Versioned> {
        self.stats.count(RequestKind::Txn);
        let mut r = self.rates();
        if let Some(v) = r.limits.get(name) {
            return Ok(v.clone());
        }
        let Some(quota) = quota else {
            return Err(Error::NotFound(name.to_string()));
        };
        let stored = Versioned {
            value: quota.to_vec(),
            version: r.next_version(),
        };
        r.limits.insert(name.to_string(), stored.clone());
        Ok(stored)
    }

    async fn put_limit(&self, name: &str, quota: &[u8]) -> Result<u64> {
        self.stats.count(RequestKind::Put);
        let mut r = self.rates();
        let version = r.next_version();
        r.limits.insert(
            name.to_string(),
            Versioned {
                value: quota.to_vec(),
                version,
            },
        );
        Ok(version)
    }

    async fn limits(&self) -> Result<Vec<String>> {
        self.stats.count(RequestKind::Range);
        Ok(self.rates().limits.keys().cloned().collect())
    }

    async fn read_key(&self, limit: &str, key: &str) -> Result<Current> {
        self.stats.count(RequestKind::Range);
        let mut r = self.rates();
        r.sweep();
        limit_found(limit, r.current(limit, key))
    }

    async fn write_keys(&self, writes: &[KeyWrite]) -> Result<WriteOutcome> {
        if let Some(settled) = before_write(writes)? {
            return Ok(settled);
        }
        self.stats.count(RequestKind::Txn);
        let mut r = self.rates();
        let holds = |w: &KeyWrite| {
            let quota_ok = r
                .limits
                .get(&w.limit)
                .is_some_and(|q| q.version == w.quota_version);
            let key_version = r
                .keys
                .get(&(w.limit.clone(), w.key.clone()))
                .map(|s| s.value.version);
            quota_ok && key_version == w.expected
        };
        if !writes.iter().all(holds) {
            let found = writes.iter().map(|w| r.current(&w.limit, &w.key)).collect();
            return Ok(WriteOutcome::Conflict(found));
        }
        let mut versions = Vec::with_capacity(writes.len());
        for w in writes {
            let version = r.next_version();
            r.keys.insert(
                (w.limit.clone(), w.key.clone()),
                Stored {
                    value: Versioned {
                        value: w.value.clone(),
                        version,
                    },
                    expires_at: w.expires_at,
                },
            );
            versions.push(version);
        }
        r.sweep();
        Ok(WriteOutcome::Written(versions))
    }

    async fn delete_key(&self, limit: &str, key: &str) -> Result<()> {
        self.stats.count(RequestKind::Delete);
        self.rates()
            .keys
            .remove(&(limit.to_string(), key.to_string()));
        Ok(())
    }
}

//! What one Limiter knows about its rate limits: each limit's quota (and its store version),
//! and per key the last state it saw, which serves provable denials without a request and is
//! the expected version of the next write. Shared by every handle of the Limiter, so checks of
//! one key from anywhere in the process coalesce (`rate_limit/batch.rs`).

use super::cell::KeyCell;
use crate::backend::lock;
use crate::backend::Current;
use crate::error::{Error, Result};
use crate::rate::{decide, KeyState, Quota, UnixNanos};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Cells kept per limit before idle ones are swept (the sweep is amortised over inserts).
const SWEEP_ABOVE: usize = 4096;

#[derive(Debug, Default)]
pub(crate) struct RateRegistry {
    limits: Mutex<HashMap<String, Arc<LimitShared>>>,
}

impl RateRegistry {
    /// Every key cell of every limit, with its limit and key.
    pub(crate) fn all_cells(&self) -> Vec<(Arc<LimitShared>, String, Arc<KeyCell>)> {
        let limits: Vec<Arc<LimitShared>> = lock(&self.limits).values().cloned().collect();
        let mut all = Vec::new();
        for limit in limits {
            let keys: Vec<(String, Arc<KeyCell>)> = lock(&limit.keys)
                .iter()
                .map(|(k, c)| (k.clone(), c.clone()))
                .collect();
            all.extend(keys.into_iter().map(|(k, c)| (limit.clone(), k, c)));
        }
        all
    }

    /// The shared state of `name`, created with `quota` (at `version`) if unknown, or updated
    /// to it if `version` is newer than what we knew.
    pub(crate) fn limit(&self, name: &str, quota: Quota, version: u64) -> Arc<LimitShared> {
        let mut limits = lock(&self.limits);
        let shared = limits
            .entry(name.to_string())
            .or_insert_with(|| {
                Arc::new(LimitShared {
                    name: name.to_string(),
                    quota: Mutex::new((quota, version)),
                    keys: Mutex::default(),
                    sweep_at: Mutex::new(SWEEP_ABOVE),
                })
            })
            .clone();
        shared.learn_quota(quota, version);
        shared
    }
}

/// One rate limit as this Limiter knows it.
#[derive(Debug)]
pub(crate) struct LimitShared {
    pub(crate) name: String,
    /// The quota and the version it has in the store.
    quota: Mutex<(Quota, u64)>,
    keys: Mutex<HashMap<String, Arc<KeyCell>>>,
    /// Sweep idle cells when the map grows past this.
    sweep_at: Mutex<usize>,
}

impl LimitShared {
    pub(crate) fn quota(&self) -> (Quota, u64) {
        *lock(&self.quota)
    }

    /// Takes a quota read from the store. Versions differ only when the store's quota changed;
    /// the store's is the truth, so any different version replaces ours (a stale one is
    /// corrected by the store at the next write, which checks the version).
    pub(crate) fn learn_quota(&self, quota: Quota, version: u64) {
        let mut q = lock(&self.quota);
        if q.1 != version {
            *q = (quota, version);
        }
    }

    /// The cell of `key`, created if absent.
    pub(crate) fn cell(&self, key: &str) -> Arc<KeyCell> {
        let mut keys = lock(&self.keys);
        if let Some(c) = keys.get(key) {
            return c.clone();
        }
        let mut sweep_at = lock(&self.sweep_at);
        if keys.len() >= *sweep_at {
            keys.retain(|_, c| Arc::strong_count(c) > 1 || !c.is_idle());
            *sweep_at = (keys.len() * 2).max(SWEEP_ABOVE);
        }
        let cell = Arc::new(KeyCell::default());
        keys.insert(key.to_string(), cell.clone());
        cell
    }

    /// Forgets what we know of `key` (after a reset).
    pub(crate) fn forget(&self, key: &str) {
        if let Some(c) = lock(&self.keys).get(key) {
            c.forget();
        }
    }

    /// Cells held now (for tests of the memory bound).
    pub(crate) fn cells(&self) -> usize {
        lock(&self.keys).len()
    }
}

/// Updates the limit's quota and the key's known state from what a store returned.
pub(crate) fn learn(
    limit: &LimitShared,
    cell: &KeyCell,
    current: Current,
    now: UnixNanos,
) -> Result<()> {
    let quota = current
        .quota
        .ok_or_else(|| Error::NotFound(limit.name.clone()))?;
    limit.learn_quota(Quota::decode(&quota.value)?, quota.version);
    let (quota, _) = limit.quota();
    match current.key {
        None => cell.set_known(None, None, now, now),
        // A reset key some stores keep (see `RateStore::delete_key`): absent, at a version.
        Some(k) if k.value.is_empty() => cell.set_known(None, Some(k.version), now, now),
        Some(k) => {
            let state = KeyState::decode(&k.value)?;
            let expires_at = decide(&quota, Some(&state), 0, now).expires_at;
            cell.set_known(Some(state), Some(k.version), expires_at, now);
        }
    }
    Ok(())
}

/// Counts of rate-limit decisions by where they were made.
#[derive(Debug, Default)]
pub(crate) struct RateCounts {
    pub(crate) batches: std::sync::atomic::AtomicU64,
    pub(crate) local_answers: std::sync::atomic::AtomicU64,
    pub(crate) lease_admitted: std::sync::atomic::AtomicU64,
    pub(crate) leases: std::sync::atomic::AtomicU64,
    pub(crate) leased_units: std::sync::atomic::AtomicU64,
    pub(crate) lease_returned_units: std::sync::atomic::AtomicU64,
    pub(crate) lease_lost_units: std::sync::atomic::AtomicU64,
    pub(crate) approx_admitted: std::sync::atomic::AtomicU64,
    pub(crate) approx_reports: std::sync::atomic::AtomicU64,
}

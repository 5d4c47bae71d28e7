//! The store interface of rate limits: versioned values with compare-and-swap, per
//! (limit, key), and each limit's stored quota. What the values mean is [`crate::rate`]'s
//! business; a store only keeps them.
//!
//! A [`Backend`](super::Backend) that keeps rate limits returns itself from
//! [`Backend::rate_store`](super::Backend::rate_store). What every store checks and answers
//! the same way (a key written twice in a batch, an empty batch, a read of an absent limit)
//! is written once at the end of this file ([`before_write`], [`before_write_each`],
//! [`limit_found`]), for every store to call.

use crate::error::{Error, Result};
use async_trait::async_trait;
use std::collections::HashSet;

/// A stored value and its version. Versions of one key only grow while it exists (etcd's
/// `mod_revision` and memory's are never reused at all; ZooKeeper's restart when a node is
/// re-created: see [`RateStore::version_life`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The bytes stored.
    pub value: Vec<u8>,
    /// The version to compare against in the next write.
    pub version: u64,
}

/// One conditional write of a key's state.
// Not `#[non_exhaustive]`: stores' own tests build writes, and a new field would be a new
// duty for every `RateStore` (a breaking change either way).
#[derive(Debug, Clone)]
pub struct KeyWrite {
    /// Rate limit name (validated).
    pub limit: String,
    /// The version of the limit's quota the state was computed with: the write fails if the
    /// quota changed since, so no client mixes an old quota into a new state.
    pub quota_version: u64,
    /// The key (validated: 1–512 bytes of UTF-8; the store escapes it as it needs).
    pub key: String,
    /// The version the key must still have; `None`: the key must be absent.
    pub expected: Option<u64>,
    /// The new state.
    pub value: Vec<u8>,
    /// Unix time (ns) from which the state is worth nothing: the store may delete the key from
    /// then on and should within a bounded time (lease, TTL or sweep), never before.
    pub expires_at: u64,
}

/// What a store holds for one write of a batch that did not apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    /// The limit's quota now (`None`: the limit was deleted).
    pub quota: Option<Versioned>,
    /// The key's state now (`None`: absent).
    pub key: Option<Versioned>,
}

/// The result of [`RateStore::write_keys`].
// Exhaustive on purpose: a conditional write either applied or did not (the store answers
// one or the other), and the crate matches both arms; a third answer would be a new method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Every write applied; the new versions, in order.
    Written(Vec<u64>),
    /// Some condition failed, so none applied; what each write found, in order. A store that
    /// can return these atomically with the failure does (etcd: a Txn's else branch); one that
    /// cannot reads them after (counted as reads).
    Conflict(Vec<Current>),
}

/// What became of one write of [`RateStore::write_each`].
// Exhaustive on purpose, as `WriteOutcome`: applied or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyOutcome {
    /// It applied; the key's new version.
    Written(u64),
    /// Its condition failed, so it did not apply; what the store holds now.
    Conflict(Current),
}

impl KeyOutcome {
    /// The outcome of a one-write [`RateStore::write_keys`].
    pub fn of_one(outcome: WriteOutcome) -> Result<KeyOutcome> {
        match outcome {
            WriteOutcome::Written(v) => v
                .first()
                .copied()
                .map(KeyOutcome::Written)
                .ok_or_else(|| Error::store("a write applied without a version")),
            WriteOutcome::Conflict(found) => found
                .into_iter()
                .next()
                .map(KeyOutcome::Conflict)
                .ok_or_else(|| {
                    Error::store("the store reported a conflict without the current state")
                }),
        }
    }
}

/// Rate-limit storage. Implemented by `memory://`, `etcd://` and `zk://`.
///
/// Every method is bounded in time (a call and its retries take at most twice the request
/// timeout) and may retry a request whose reply was lost: a retried write may have applied
/// already, which the caller recognises by the unique tag in its value.
#[async_trait]
pub trait RateStore: Send + Sync + std::fmt::Debug + 'static {
    /// Creates the limit with the encoded `quota` if absent and returns what is stored then.
    /// `None` and absent → `NotFound`. (Comparing the stored quota is the caller's job.)
    async fn ensure_limit(&self, name: &str, quota: Option<&[u8]>) -> Result<Versioned>;

    /// Stores `quota` for the limit, creating it if absent; returns the new version.
    async fn put_limit(&self, name: &str, quota: &[u8]) -> Result<u64>;

    /// Names of all rate limits, sorted.
    async fn limits(&self) -> Result<Vec<String>>;

    /// Reads a key and its limit's quota (`NotFound` if the limit is absent), in one request
    /// where the store allows it.
    async fn read_key(&self, limit: &str, key: &str) -> Result<Current>;

    /// Applies every write, or none if any condition (key version, quota version) fails:
    /// atomically, in one request where the store allows it. At most one write per
    /// (limit, key) (else `InvalidArgument`, before any request). An empty slice is
    /// `Written(vec![])` without a request. (The crate's stores share these checks:
    /// `before_write`, at the end of this file.)
    async fn write_keys(&self, writes: &[KeyWrite]) -> Result<WriteOutcome>;

    /// Applies each write on its own: each applies if its own conditions hold, whatever
    /// becomes of the others (writes of *different* keys that happen to be ready together).
    /// One outcome per write, in order. At most one write per (limit, key).
    ///
    /// The default sends each as a one-write [`write_keys`](Self::write_keys), concurrently; a
    /// store that can carry independent conditional writes in one request overrides it (etcd:
    /// one Txn of nested Txns), which moves many keys per round trip.
    async fn write_each(&self, writes: &[KeyWrite]) -> Vec<Result<KeyOutcome>> {
        if let Some(settled) = before_write_each(writes) {
            return settled;
        }
        let each = writes.iter().map(|w| async move {
            KeyOutcome::of_one(self.write_keys(std::slice::from_ref(w)).await?)
        });
        futures::future::join_all(each).await
    }

    /// Which part of the store keeps `key` of `limit`: one [`write_keys`](Self::write_keys)
    /// is all-or-nothing only over keys of one part, so joint writes never mix parts. The
    /// default: one part (0), for a store that commits any keys together; a sharded store has
    /// one part per cluster.
    fn part_of(&self, _limit: &str, _key: &str) -> usize {
        0
    }

    /// How many parts the store has (see [`part_of`](Self::part_of)).
    fn parts(&self) -> usize {
        1
    }

    /// One small read of part `part` alone (bounded by the request timeout), to tell whether
    /// it answers now. The default lists the limits.
    async fn ping_part(&self, _part: usize) -> Result<()> {
        self.limits().await.map(|_| ())
    }

    /// How messages name part `part` (see [`part_of`](Self::part_of)); `None` for a store
    /// of one part, which is just "the store".
    fn part_name(&self, _part: usize) -> Option<String> {
        None
    }

    /// Refuses (limit, key) pairs that one [`write_keys`](Self::write_keys) cannot carry
    /// (keys of several parts) with `InvalidArgument` naming them, before anything is decided.
    /// The default accepts any.
    fn joint_keys(&self, _keys: &[(&str, &str)]) -> Result<()> {
        Ok(())
    }

    /// How long after a state's `expires_at` its version stays safe to write against: until
    /// then the store cannot have deleted the key and re-created it at that same version.
    /// Default: forever, for stores whose versions are never reused (etcd, memory). A store
    /// whose versions restart on re-creation (ZooKeeper) returns less than the time it waits
    /// before deleting an expired key; past it, callers write "must be absent" instead (one
    /// more request if the key is still there).
    fn version_life(&self) -> std::time::Duration {
        std::time::Duration::MAX
    }

    /// Forgets a key (reset): deletes it, or stores an empty value in its place (callers read
    /// an empty value as an absent key; a store whose versions would restart on re-creation
    /// does this, and deletes the key later, once its old state has expired). Forgetting an
    /// absent key succeeds.
    async fn delete_key(&self, limit: &str, key: &str) -> Result<()>;
}

// What every store checks and answers the same way, whatever it stores in (memory, etcd,
// ZooKeeper, sharded, and any new store): written once so that they cannot drift apart on what
// the trait promises.

/// Before [`write_keys`](RateStore::write_keys) sends anything: `Ok(Some(outcome))` is
/// the answer without a request (an empty batch is `Written(vec![])`), `Err` a batch refused
/// (see [`one_write_per_key`]), `Ok(None)` a batch to send.
pub(crate) fn before_write(writes: &[KeyWrite]) -> Result<Option<WriteOutcome>> {
    if writes.is_empty() {
        return Ok(Some(WriteOutcome::Written(Vec::new())));
    }
    one_write_per_key(writes)?;
    Ok(None)
}

/// Before [`write_each`](RateStore::write_each) sends anything: `Some(outcomes)` is the
/// answer without a request (none for an empty batch; the same refusal for every write of a
/// batch that writes a key twice), `None` a batch to send.
pub(crate) fn before_write_each(writes: &[KeyWrite]) -> Option<Vec<Result<KeyOutcome>>> {
    match before_write(writes) {
        Ok(None) => None,
        Ok(Some(_)) => Some(Vec::new()),
        Err(e) => Some(writes.iter().map(|_| Err(e.copy())).collect()),
    }
}

/// `InvalidArgument` naming the first key written twice in one batch: two conditions on one
/// key in one request would contradict each other (and stores answer that differently), so
/// no store is asked.
pub(crate) fn one_write_per_key(writes: &[KeyWrite]) -> Result<()> {
    let mut seen = HashSet::new();
    match writes.iter().find(|w| !seen.insert((&w.limit, &w.key))) {
        Some(w) => Err(Error::invalid(format!(
            "key {:?} of rate limit {:?} is written twice in one batch",
            w.key, w.limit
        ))),
        None => Ok(()),
    }
}

/// What [`read_key`](RateStore::read_key) returns from what the store read: `NotFound`
/// naming `limit` when its quota is absent.
pub(crate) fn limit_found(limit: &str, current: Current) -> Result<Current> {
    if current.quota.is_none() {
        return Err(Error::NotFound(limit.to_string()));
    }
    Ok(current)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(limit: &str, key: &str) -> KeyWrite {
        KeyWrite {
            limit: limit.into(),
            quota_version: 1,
            key: key.into(),
            expected: None,
            value: Vec::new(),
            expires_at: 0,
        }
    }

    #[test]
    fn an_empty_batch_is_settled_and_a_key_written_twice_refused() {
        assert_eq!(
            before_write(&[]).unwrap(),
            Some(WriteOutcome::Written(vec![]))
        );
        assert_eq!(before_write(&[w("a", "k"), w("b", "k")]).unwrap(), None);
        let twice = [w("a", "k"), w("b", "k"), w("a", "k")];
        assert!(
            matches!(before_write(&twice), Err(Error::InvalidArgument(m)) if m.contains("twice"))
        );
        assert!(before_write_each(&[]).is_some_and(|o| o.is_empty()));
        let refused = before_write_each(&twice).expect("refused");
        assert_eq!(refused.len(), 3);
        assert!(refused
            .iter()
            .all(|o| matches!(o, Err(Error::InvalidArgument(_)))));
        assert!(before_write_each(&[w("a", "k")]).is_none());
    }

    #[test]
    fn a_read_without_a_quota_is_not_found() {
        let absent = Current {
            quota: None,
            key: None,
        };
        assert!(matches!(limit_found("api", absent), Err(Error::NotFound(n)) if n == "api"));
    }
}

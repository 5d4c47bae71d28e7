//! Rate-limit storage on etcd (layout in `keys.rs`): a key's version is its `mod_revision`
//! (global, so never reused for a key, even across a delete and re-create).
//!
//! * Write: **one** Txn — compare every key's `mod_revision` (`create_revision == 0` for "must
//!   be absent") and every quota's `mod_revision`; then the puts (no lease: each state carries
//!   its `\n@<expires_at>`, and the sweeper deletes it once expired, see `sweeper.rs`); else a
//!   get of every key and quota, so a conflict costs no extra read. etcd's `--max-txn-ops`
//!   (default [`MAX_TXN_OPS`]) bounds a batch.
//! * Writes of different keys each on its own (`write_each`): **one** Txn holding a nested
//!   Txn per (limit, quota version) that compares the quota once (else: gets of its keys and
//!   quota), holding in turn a nested Txn per write (its key's version → put, else get) and a
//!   get of the quota for the conflicts. So each write applies or fails on its own conditions
//!   and many keys move per round trip with one compare each (etcd 3.3+).
//! * Read: one Txn of two gets (key and quota), counted as a read.
//! * A retried write whose first attempt applied finds its own value in the conflict reply
//!   (the caller recognises it by the tag in the value).
//!
//! [`Rates`] is the backend's rate store: the link, and the sweeper of the keys it wrote
//! (the backend's own [`RateStore`] impl hands every call to it).

use super::attempt::Until;
use super::calls::Link;
use super::client::{get_kvs, kv, most_nested, MAX_TXN_OPS};
use super::sweep_state::EtcdSweep;
use super::sweeper::Sweeper;
use crate::backend::expiry::{split_expiry, with_expiry};
use crate::backend::rate_store::{
    before_write, before_write_each, limit_found, Current, KeyOutcome, KeyWrite, RateStore,
    Versioned, WriteOutcome,
};
use crate::backend::retry::CALL_TIMEOUTS;
use crate::error::{Error, Result};
use crate::stats::RequestKind;
use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use std::sync::Arc;

/// A nested write's compare (its key's version), put and else-get.
const NESTED_WRITE_OPS: usize = 1;

/// Distinct (limit, quota version) pairs of a batch, in first-seen order.
fn quota_checks(writes: &[KeyWrite]) -> Vec<(&str, u64)> {
    let mut out: Vec<(&str, u64)> = Vec::new();
    for w in writes {
        if !out.contains(&(w.limit.as_str(), w.quota_version)) {
            out.push((w.limit.as_str(), w.quota_version));
        }
    }
    out
}

/// Distinct limits of a batch, in first-seen order.
fn limits_of(writes: &[KeyWrite]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for w in writes {
        if !out.contains(&w.limit.as_str()) {
            out.push(w.limit.as_str());
        }
    }
    out
}

/// A batch etcd can take in one Txn (its operation limit), else `InvalidArgument`.
fn check_batch(writes: &[KeyWrite]) -> Result<()> {
    let limits = limits_of(writes).len();
    let ops = writes.len() + quota_checks(writes).len().max(limits);
    if ops > MAX_TXN_OPS {
        return Err(Error::invalid(format!(
            "{} key writes over {limits} rate limits need {ops} operations in one etcd \
             transaction; etcd allows at most {MAX_TXN_OPS} (its --max-txn-ops default)",
            writes.len(),
        )));
    }
    Ok(())
}

fn versioned(kv: &etcd_client::KeyValue) -> Versioned {
    Versioned {
        value: kv.value().to_vec(),
        version: kv.mod_revision().max(0) as u64,
    }
}

/// A key's state as the caller wrote it (without its stored expiry).
fn versioned_key(kv: &etcd_client::KeyValue) -> Versioned {
    Versioned {
        value: split_expiry(kv.value().to_vec()).0,
        version: kv.mod_revision().max(0) as u64,
    }
}

/// The revision a successful write or put produced.
fn revision(header: Option<&etcd_client::ResponseHeader>) -> Result<u64> {
    match header.map(|h| h.revision()) {
        Some(r) if r > 0 => Ok(r as u64),
        _ => Err(Error::store("etcd reply without a revision")),
    }
}

/// The rate-limit keys of a backend.
#[derive(Debug)]
pub(super) struct Rates {
    /// Deletes the rate-limit keys we wrote once expired (`sweeper.rs`, `scan.rs`).
    sweeper: Sweeper,
    link: Arc<Link>,
}

impl Rates {
    /// The rate store on `link`; its sweeper stops with the backend.
    pub(super) fn new(link: Arc<Link>) -> Rates {
        let sweep = EtcdSweep {
            endpoints: link.endpoints.clone(),
            stats: link.stats.clone(),
            request_timeout: link.config.request_timeout,
            prefix: link.keys.rate_keys_prefix(),
        };
        let sweeper = Sweeper::new(sweep, link.stop.child_token());
        Rates { sweeper, link }
    }

    /// Sends a rate write's Txn, retried until the deadline.
    async fn send_rate_txn(&self, txn: Txn) -> Result<etcd_client::TxnResponse> {
        self.link
            .retry_until(RequestKind::Txn, Until::Deadline, |c| {
                let t = txn.clone();
                async move { kv(&c).txn(t).await }
            })
            .await
    }

    /// Hands the keys a Txn wrote at `revision` to the sweeper.
    fn record_written(&self, writes: &[KeyWrite], keys: &[String], revision: u64) {
        let revision = i64::try_from(revision).unwrap_or(i64::MAX);
        self.sweeper.wrote(
            revision,
            keys.iter()
                .zip(writes)
                .map(|(key, w)| (key.as_str(), w.expires_at)),
        );
    }

    /// One attempt at `write_each`: an outer Txn without compares whose success branch holds
    /// one nested Txn per write.
    async fn write_each_once(&self, writes: &[KeyWrite]) -> Result<Vec<KeyOutcome>> {
        let keys: Vec<String> = writes
            .iter()
            .map(|w| self.link.keys.rate_key(&w.limit, &w.key))
            .collect();
        let groups = quota_groups(writes);
        let group_txns: Vec<TxnOp> = groups
            .iter()
            .map(|(quota, members)| self.group_txn(writes, &keys, *quota, members))
            .collect();
        let resp = self.send_rate_txn(Txn::new().and_then(group_txns)).await?;
        let written_at = revision(resp.header())?;
        let answered = resp.op_responses();
        if answered.len() != groups.len() {
            return Err(Error::store(format!(
                "etcd answered {} of {} groups of writes",
                answered.len(),
                groups.len()
            )));
        }
        let outcomes = group_outcomes(&groups, &answered, writes.len(), written_at)?;
        let (written, written_keys): (Vec<KeyWrite>, Vec<String>) = writes
            .iter()
            .zip(keys)
            .zip(&outcomes)
            .filter(|(_, o)| matches!(o, KeyOutcome::Written(_)))
            .map(|((w, k), _)| (w.clone(), k))
            .unzip();
        self.record_written(&written, &written_keys, written_at);
        Ok(outcomes)
    }

    /// The nested Txn of one quota group: if the quota is still at its version, each write
    /// under its own compare (else reading its key), and the quota read; else every key and
    /// the quota read.
    fn group_txn(
        &self,
        writes: &[KeyWrite],
        keys: &[String],
        (limit, qv): (&str, u64),
        members: &[usize],
    ) -> TxnOp {
        let quota = self.link.keys.quota(limit);
        let mut then: Vec<TxnOp> = members
            .iter()
            .map(|&i| {
                let (w, key) = (&writes[i], &keys[i]);
                let version = match w.expected {
                    None => Compare::create_revision(key.clone(), CompareOp::Equal, 0),
                    Some(v) => Compare::mod_revision(
                        key.clone(),
                        CompareOp::Equal,
                        i64::try_from(v).unwrap_or(i64::MAX),
                    ),
                };
                let value = with_expiry(&w.value, w.expires_at);
                TxnOp::txn(
                    Txn::new()
                        .when([version])
                        .and_then([TxnOp::put(key.clone(), value, None)])
                        .or_else([TxnOp::get(key.clone(), None)]),
                )
            })
            .collect();
        // The quota, for the writes that conflict.
        then.push(TxnOp::get(quota.clone(), None));
        let mut otherwise: Vec<TxnOp> = members
            .iter()
            .map(|&i| TxnOp::get(keys[i].clone(), None))
            .collect();
        otherwise.push(TxnOp::get(quota.clone(), None));
        let same_quota = Compare::mod_revision(
            quota,
            CompareOp::Equal,
            i64::try_from(qv).unwrap_or(i64::MAX),
        );
        TxnOp::txn(
            Txn::new()
                .when([same_quota])
                .and_then(then)
                .or_else(otherwise),
        )
    }

    /// The batch, all or nothing, in one Txn.
    async fn write_once(&self, writes: &[KeyWrite]) -> Result<WriteOutcome> {
        let keys: Vec<String> = writes
            .iter()
            .map(|w| self.link.keys.rate_key(&w.limit, &w.key))
            .collect();
        let limits = limits_of(writes);
        let mut when: Vec<Compare> = writes
            .iter()
            .zip(&keys)
            .map(|(w, key)| match w.expected {
                None => Compare::create_revision(key.clone(), CompareOp::Equal, 0),
                Some(v) => Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    i64::try_from(v).unwrap_or(i64::MAX),
                ),
            })
            .collect();
        when.extend(quota_checks(writes).into_iter().map(|(limit, version)| {
            Compare::mod_revision(
                self.link.keys.quota(limit),
                CompareOp::Equal,
                i64::try_from(version).unwrap_or(i64::MAX),
            )
        }));
        let puts: Vec<TxnOp> = writes
            .iter()
            .zip(&keys)
            .map(|(w, key)| TxnOp::put(key.clone(), with_expiry(&w.value, w.expires_at), None))
            .collect();
        let mut gets: Vec<TxnOp> = keys.iter().map(|k| TxnOp::get(k.clone(), None)).collect();
        gets.extend(
            limits
                .iter()
                .map(|l| TxnOp::get(self.link.keys.quota(l), None)),
        );
        let txn = Txn::new().when(when).and_then(puts).or_else(gets);
        let resp = self.send_rate_txn(txn).await?;
        if resp.succeeded() {
            let written_at = revision(resp.header())?;
            self.record_written(writes, &keys, written_at);
            return Ok(WriteOutcome::Written(vec![written_at; writes.len()]));
        }
        let ops = resp.op_responses();
        let found = writes
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let q = limits.iter().position(|l| *l == w.limit).unwrap_or(0);
                Current {
                    key: get_kvs(ops.get(i)).first().map(versioned_key),
                    quota: get_kvs(ops.get(writes.len() + q)).first().map(versioned),
                }
            })
            .collect();
        Ok(WriteOutcome::Conflict(found))
    }
}

#[async_trait]
impl RateStore for Rates {
    async fn ensure_limit(&self, name: &str, quota: Option<&[u8]>) -> Result<Versioned> {
        let key = self.link.keys.quota(name);
        let Some(quota) = quota else {
            let resp = self
                .link
                .retry(RequestKind::Range, |c| {
                    let k = key.clone();
                    async move { kv(&c).get(k, None).await }
                })
                .await?;
            return resp
                .kvs()
                .first()
                .map(versioned)
                .ok_or_else(|| Error::NotFound(name.to_string()));
        };
        // Create if absent, else read: one request, and a retry after a lost reply finds the
        // first attempt's quota.
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), quota.to_vec(), None)])
            .or_else([TxnOp::get(key.clone(), None)]);
        let resp = self.link.txn(txn).await?;
        if resp.succeeded() {
            return Ok(Versioned {
                value: quota.to_vec(),
                version: revision(resp.header())?,
            });
        }
        get_kvs(resp.op_responses().first())
            .first()
            .map(versioned)
            // Deleted between the compare and the get cannot happen in one Txn; an empty
            // reply is a store failure.
            .ok_or_else(|| Error::store(format!("etcd returned no quota at {key}")))
    }

    async fn put_limit(&self, name: &str, quota: &[u8]) -> Result<u64> {
        let key = self.link.keys.quota(name);
        let resp = self
            .link
            .retry(RequestKind::Put, |c| {
                let (k, v) = (key.clone(), quota.to_vec());
                async move { kv(&c).put(k, v, None).await }
            })
            .await?;
        revision(resp.header())
    }

    async fn limits(&self) -> Result<Vec<String>> {
        self.link.names_under(self.link.keys.quotas_prefix()).await
    }

    async fn read_key(&self, limit: &str, key: &str) -> Result<Current> {
        let (k, q) = (
            self.link.keys.rate_key(limit, key),
            self.link.keys.quota(limit),
        );
        // Both in one revision: a Txn without compares runs its success branch.
        let txn = Txn::new().and_then([TxnOp::get(k, None), TxnOp::get(q, None)]);
        let resp = self
            .link
            .retry(RequestKind::Range, |c| {
                let t = txn.clone();
                async move { kv(&c).txn(t).await }
            })
            .await?;
        let ops = resp.op_responses();
        let current = Current {
            quota: get_kvs(ops.get(1)).first().map(versioned),
            key: get_kvs(ops.first()).first().map(versioned_key),
        };
        limit_found(limit, current)
    }

    async fn write_keys(&self, writes: &[KeyWrite]) -> Result<WriteOutcome> {
        if let Some(settled) = before_write(writes)? {
            return Ok(settled);
        }
        check_batch(writes)?;
        let bound = self.link.config.request_timeout * CALL_TIMEOUTS;
        tokio::time::timeout(bound, self.write_once(writes))
            .await
            .map_err(|_| Error::store(format!("etcd did not take the write within {bound:?}")))?
    }

    async fn write_each(&self, writes: &[KeyWrite]) -> Vec<Result<KeyOutcome>> {
        if let Some(settled) = before_write_each(writes) {
            return settled;
        }
        let fits = check_batch(writes).and_then(|()| {
            // The outer Txn holds a group per (limit, quota version), each a nested Txn per
            // write and a get of the quota: etcd checks each level against what the levels
            // above leave of its limit.
            let groups = quota_checks(writes).len();
            let most = most_nested(NESTED_WRITE_OPS + groups + 1);
            if writes.len() > most {
                return Err(Error::invalid(format!(
                    "{} independent writes over {groups} rate limit quotas in one etcd \
                     transaction; etcd allows at most {most} (its --max-txn-ops default, \
                     {MAX_TXN_OPS}, less what the nesting takes)",
                    writes.len(),
                )));
            }
            Ok(())
        });
        if let Err(e) = fits {
            return writes.iter().map(|_| Err(e.copy())).collect();
        }
        let bound = self.link.config.request_timeout * CALL_TIMEOUTS;
        let all = tokio::time::timeout(bound, self.write_each_once(writes))
            .await
            .map_err(|_| Error::store(format!("etcd did not take the writes within {bound:?}")))
            .and_then(|r| r);
        match all {
            Ok(outcomes) => outcomes.into_iter().map(Ok).collect(),
            Err(e) => writes.iter().map(|_| Err(e.copy())).collect(),
        }
    }

    async fn delete_key(&self, limit: &str, key: &str) -> Result<()> {
        let k = self.link.keys.rate_key(limit, key);
        self.link
            .retry(RequestKind::Delete, |c| {
                let k = k.clone();
                async move { kv(&c).delete(k, None).await }
            })
            .await?;
        Ok(())
    }
}

/// The writes grouped by (limit, quota version): a group's quota is compared once for all its
/// writes (a compare is a read of the quota key), not once per key.
fn quota_groups(writes: &[KeyWrite]) -> Vec<((&str, u64), Vec<usize>)> {
    quota_checks(writes)
        .into_iter()
        .map(|(limit, qv)| {
            let members = (0..writes.len())
                .filter(|&i| writes[i].limit == limit && writes[i].quota_version == qv)
                .collect();
            ((limit, qv), members)
        })
        .collect()
}

/// Each write's outcome, from the answers of its group's nested Txn (in the batch's order).
fn group_outcomes(
    groups: &[((&str, u64), Vec<usize>)],
    answered: &[TxnOpResponse],
    count: usize,
    written_at: u64,
) -> Result<Vec<KeyOutcome>> {
    let mut outcomes: Vec<Option<KeyOutcome>> = vec![None; count];
    for ((_, members), group) in groups.iter().zip(answered) {
        let TxnOpResponse::Txn(group) = group else {
            return Err(Error::store(
                "etcd answered a group of writes with another kind of op",
            ));
        };
        let ops = group.op_responses();
        let quota = get_kvs(ops.get(members.len())).first().map(versioned);
        for (j, &i) in members.iter().enumerate() {
            outcomes[i] = Some(match ops.get(j) {
                // The quota changed: nothing of the group applied; the else branch read each
                // key.
                Some(found) if !group.succeeded() => KeyOutcome::Conflict(Current {
                    key: get_kvs(Some(found)).first().map(versioned_key),
                    quota: quota.clone(),
                }),
                Some(TxnOpResponse::Txn(t)) if t.succeeded() => KeyOutcome::Written(written_at),
                Some(TxnOpResponse::Txn(t)) => KeyOutcome::Conflict(Current {
                    key: get_kvs(t.op_responses().first()).first().map(versioned_key),
                    quota: quota.clone(),
                }),
                _ => {
                    return Err(Error::store(
                        "etcd answered a nested write with another kind of op",
                    ))
                }
            });
        }
    }
    outcomes
        .into_iter()
        .collect::<Option<_>>()
        .ok_or_else(|| Error::store("a write of the batch got no answer"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(limit: &str, qv: u64) -> KeyWrite {
        KeyWrite {
            limit: limit.into(),
            quota_version: qv,
            key: "k".into(),
            expected: None,
            value: Vec::new(),
            expires_at: 0,
        }
    }

    #[test]
    fn quotas_are_compared_and_read_once_per_limit() {
        let ws = [w("a", 1), w("b", 2), w("a", 1), w("a", 3)];
        assert_eq!(quota_checks(&ws), vec![("a", 1), ("b", 2), ("a", 3)]);
        assert_eq!(limits_of(&ws), vec!["a", "b"]);
    }

    #[test]
    fn batches_etcd_cannot_take_are_refused() {
        let keyed = |n: usize| -> Vec<KeyWrite> {
            (0..n)
                .map(|i| KeyWrite {
                    key: format!("k{i}"),
                    ..w("a", 1)
                })
                .collect()
        };
        assert!(check_batch(&keyed(127)).is_ok());
        assert!(
            matches!(check_batch(&keyed(128)), Err(Error::InvalidArgument(m)) if m.contains("128"))
        );
    }
}

//! Lowering a held entry's weight (`Backend::shrink_entry`): a read of the entry, then a put of
//! its value with the lower weight if the key was not changed meanwhile. A put keeps the key's
//! create revision (its place in the queue and fencing token) and its lease; every view sees
//! the put as a change of the entry's weight and decides its waiters again (only the ones it
//! grants are woken). On a fair semaphore the Limiter of a waiter the rule now grants writes
//! that grant from its view (`fair_grants.rs`), as after a holder's expiry: a weight only
//! falls, so a grant decided from a view that missed the put is smaller, never too large.

use super::calls::Link;
use super::client::kv;
use super::keys::EntryValue;
use crate::error::{Error, Result};
use crate::stats::RequestKind;
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};

/// Compare-and-put attempts before giving up: only a concurrent write of the same entry (none
/// of ours but a retried shrink) makes one fail.
const ATTEMPTS: usize = 3;

/// See [`Backend::shrink_entry`](crate::backend::Backend::shrink_entry): two requests (the
/// read, the compare-and-put).
pub(super) async fn shrink_entry(link: &Link, name: &str, id: &str, permits: u32) -> Result<u32> {
    let key = link.keys.entry(name, id);
    for _ in 0..ATTEMPTS {
        let Some(entry) = read_entry(link, &key).await? else {
            return Err(Error::SessionLost); // the key went with its lease
        };
        let Some(mut value) = EntryValue::parse(entry.value()) else {
            return Err(Error::store(format!(
                "the queue entry of semaphore {name:?} is unreadable; its weight stays"
            )));
        };
        if value.permits <= permits {
            return Ok(value.permits); // already lowered (a retried or repeated shrink)
        }
        value.permits = permits;
        if put_if_unchanged(link, &key, &entry, value.encode()).await? {
            return Ok(permits);
        }
    }
    Err(Error::store(format!(
        "the queue entry of semaphore {name:?} kept changing during its shrink; its weight stays"
    )))
}

/// The entry's key, read.
async fn read_entry(link: &Link, key: &str) -> Result<Option<etcd_client::KeyValue>> {
    let resp = link
        .retry(RequestKind::Range, |mut c| {
            let k = key.to_string();
            async move { c.get(k, None).await }
        })
        .await?;
    Ok(resp.kvs().first().cloned())
}

/// Puts `value` on the entry read as `entry`, under its lease, if nothing changed the key since.
async fn put_if_unchanged(
    link: &Link,
    key: &str,
    entry: &etcd_client::KeyValue,
    value: Vec<u8>,
) -> Result<bool> {
    let put = TxnOp::put(
        key,
        value,
        Some(PutOptions::new().with_lease(entry.lease())),
    );
    let txn = Txn::new()
        .when([Compare::mod_revision(
            key,
            CompareOp::Equal,
            entry.mod_revision(),
        )])
        .and_then([put]);
    let resp = link
        .retry(RequestKind::Txn, |c| {
            let t = txn.clone();
            async move { kv(&c).txn(t).await }
        })
        .await?;
    Ok(resp.succeeded())
}

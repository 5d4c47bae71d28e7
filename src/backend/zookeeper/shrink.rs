//! Lowering a held entry's weight (`Backend::shrink_entry`). The weight is part of the entry
//! node's name, and a new node would be a new sequence (token and place), so the node keeps
//! its name and the lowered weight goes in its data (`nodes.rs`: every reader takes the lower
//! of the two). One `setData` at the data version this Limiter wrote (the create's, 0, or its
//! last shrink's): "lower to n if above". A version that moved (a shrink of ours whose caller
//! gave up, applied meanwhile) reads the node and decides again; a node gone went with its
//! session.
//!
//! Every view sees the change as a data event of the entry and reads the entry's data with
//! the capacity (`view.rs`), so the waiters a lower weight lets in are granted at once; on a
//! fair semaphore the Limiter of a waiter the rule now picks writes that grant
//! (`fair_grants.rs`), as after a release. A weight only falls, so a view that has not read the
//! change yet grants less, never more.

use super::calls::{is_zk, Link};
use super::nodes::{EntryData, EntryName};
use crate::backend::lock;
use crate::error::{Error, Result};
use crate::stats::RequestKind;
use zookeeper_client as zk;

/// Conditional writes before giving up: only a concurrent write of the same entry (a shrink
/// of ours still in flight) makes one fail.
const ATTEMPTS: usize = 3;

/// See [`Backend::shrink_entry`](crate::backend::Backend::shrink_entry): one request (the
/// `setData`) when this Limiter knows the entry's data, one read more otherwise.
pub(super) async fn shrink_entry(link: &Link, name: &str, id: &str, permits: u32) -> Result<u32> {
    let (node, lost, mut known) = match lock(&link.entries.live).get(id) {
        Some(l) => (l.node.clone(), l.lost.clone(), l.data.clone()),
        None => return Err(Error::SessionLost), // released, or gone with its session
    };
    // The entry's own session only: a new one would not hold it.
    let session = match link.session.current().await {
        Some(s) if !lost.is_lost() => s,
        _ => return Err(Error::SessionLost),
    };
    let named = EntryName::parse(&node).map_or(u32::MAX, |e| e.permits);
    let client = session.client()?;
    let path = link.paths.entry(name, &node);
    for _ in 0..ATTEMPTS {
        let (mut data, version) = match known.take() {
            Some(k) => k,
            None => read(link, &client, &path, name).await?,
        };
        let held = data.weight(named);
        if held <= permits {
            return Ok(held); // already as low (a repeated or retried shrink)
        }
        data.permits = Some(permits);
        let written = link
            .call(
                RequestKind::Put,
                client.set_data(&path, &data.encode(), Some(version)),
            )
            .await;
        match written {
            Ok(stat) => {
                if let Some(l) = lock(&link.entries.live).get_mut(id) {
                    l.data = Some((data, stat.version));
                }
                return Ok(permits);
            }
            Err(e) if is_zk(&e, &zk::Error::BadVersion) => {} // read it and decide again
            Err(e) if is_zk(&e, &zk::Error::NoNode) => return Err(Error::SessionLost),
            Err(e) => {
                return Err(
                    link.denied_as(e, || format!("lowering the weight of entry node {path}"))
                )
            }
        }
    }
    Err(Error::store(format!(
        "the queue entry of semaphore {name:?} kept changing during its shrink; its weight stays"
    )))
}

/// The entry's data and data version; a node gone is `SessionLost`, foreign data a store error.
async fn read(
    link: &Link,
    client: &zk::Client,
    path: &str,
    name: &str,
) -> Result<(EntryData, i32)> {
    let (raw, stat) = match link.call(RequestKind::Range, client.get_data(path)).await {
        Ok(read) => read,
        Err(e) if is_zk(&e, &zk::Error::NoNode) => return Err(Error::SessionLost),
        Err(e) => return Err(e),
    };
    match EntryData::parse(&raw) {
        Some(data) => Ok((data, stat.version)),
        None => Err(Error::store(format!(
            "the queue entry of semaphore {name:?} at {path} is unreadable; its weight stays"
        ))),
    }
}

//! Granting on a fair semaphore in etcd: one range read of the semaphore (capacity, fair record,
//! queue, at one revision), the fair rule, and the marks of what it grants written in one Txn
//! that compares the fair record's `mod_revision`. A conflict means someone else granted from
//! those marks: read and decide again, within one call's bound. Who grants: an enqueue for its
//! own entry, and a Limiter whose view shows the rule granting one of its waiters (after a
//! release, a holder's expiry or a resize), so a release wakes only the Limiter it grants.

use super::calls::Link;
use super::fair_record::{next_grants, FairRead};
use super::semaphore::read_semaphore;
use crate::backend::retry::Attempts;
use crate::error::{Error, Result};
use etcd_client::{Compare, CompareOp, KeyValue, Txn, TxnOp};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Grants what the fair rule grants now on `name`, starting from `first` (a read already made)
/// or a fresh read. Returns the marks once nothing more is to be granted (`None`: a plain
/// semaphore).
pub(super) async fn grant(
    link: &Link,
    name: &str,
    mut first: Option<Vec<KeyValue>>,
) -> Result<Option<HashSet<u64>>> {
    let fair_key = link.keys.fair(name);
    let mut attempts = Attempts::new(link.config.request_timeout);
    loop {
        let kvs = match first.take() {
            Some(kvs) => kvs,
            None => read_semaphore(link, name).await?.1,
        };
        let Some(read) = FairRead::of(link, name, &kvs)? else {
            return Ok(None);
        };
        let grants = next_grants(&read.queue, read.capacity, &read.fair);
        if grants.is_empty() {
            return Ok(Some(read.fair.marks));
        }
        let queued: HashSet<u64> = read.queue.iter().map(|e| e.0).collect();
        let record = read.fair.with_grants(&queued, &grants);
        let txn = Txn::new()
            .when([Compare::mod_revision(
                fair_key.clone(),
                CompareOp::Equal,
                read.fair.mod_revision,
            )])
            .and_then([TxnOp::put(fair_key.clone(), record.encode(), None)]);
        if link.txn(txn).await?.succeeded() {
            return Ok(Some(record.granted.into_iter().collect()));
        }
        // Someone granted from the same marks first: decide again from what they wrote.
        if !attempts.again(false).await {
            return Err(Error::store(format!(
                "grants on fair semaphore {name:?} kept being written by other Limiters; \
                 the waiters stay queued and are granted at the next change"
            )));
        }
    }
}

/// The background grant of one fair semaphore's view: kicked when the view shows the rule
/// granting one of our waiters; one pass at a time, and one more if kicked meanwhile.
pub(super) struct Granter {
    link: Arc<Link>,
    name: String,
    running: AtomicBool,
    again: AtomicBool,
}

impl Granter {
    pub(super) fn new(link: Arc<Link>, name: &str) -> Arc<Granter> {
        Arc::new(Granter {
            link,
            name: name.to_string(),
            running: AtomicBool::new(false),
            again: AtomicBool::new(false),
        })
    }

    /// Starts a grant pass, or asks the running one for one more.
    pub(super) fn kick(self: &Arc<Self>) {
        self.again.store(true, Ordering::SeqCst);
        if self.running.swap(true, Ordering::SeqCst) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                while me.again.swap(false, Ordering::SeqCst) {
                    if me.link.stop.is_stopped() {
                        break;
                    }
                    if let Err(e) = grant(&me.link, &me.name, None).await {
                        tracing::warn!(semaphore = %me.name, "granting on a fair semaphore failed: {e}; its waiters are granted at the next change of it");
                    }
                }
                me.running.store(false, Ordering::SeqCst);
                // A kick between the last check and now found us running: take it.
                if !me.again.load(Ordering::SeqCst) || me.running.swap(true, Ordering::SeqCst) {
                    return;
                }
            }
        });
    }
}

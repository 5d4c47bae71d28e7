//! Granting on a fair semaphore in etcd: one range read of the semaphore (capacity, fair record,
//! queue, at one revision), the fair rule, and the marks of what it grants written in one Txn
//! that compares the fair record's `mod_revision`. A conflict means someone else granted from
//! those marks: read and decide again, within one call's bound. Who grants: an enqueue for its
//! own entry; a release, in the Txn of its delete, from its view; and a Limiter whose view
//! shows the rule granting one of its waiters (after a holder's expiry or a resize, or a
//! grant written from a view that was behind), from that view: one Txn, no read.

use super::calls::Link;
use super::fair_record::{next_grants, FairRead};
use super::view_state::GrantPlan;
use crate::backend::lock;
use crate::error::Result;
use etcd_client::{Compare, CompareOp, KeyValue, Txn, TxnOp};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// An enqueue's own grant on a fair semaphore: from `kvs` (a read at or past the entry's
/// revision), when the fair rule grants entry `token` now, writes that grant (with whatever
/// else the rule grants at once) in one Txn comparing the fair record's `mod_revision`.
/// `true` if the entry holds. One attempt: on a conflict (someone granted from the same record
/// first) the entry waits, and its Limiter's view grants it when the rule picks it. Entries the
/// rule does not pick now are left to their own Limiters, so concurrent enqueues do not all
/// race for the record.
pub(super) async fn grant_own(
    link: &Link,
    name: &str,
    (revision, kvs): (i64, &[KeyValue]),
    token: u64,
) -> Result<bool> {
    let Some(read) = FairRead::of(link, name, kvs)? else {
        return Ok(false);
    };
    if read.fair.marks.contains(&token) {
        return Ok(true);
    }
    let (grants, vtimes) = next_grants(&read.queue, read.capacity, &read.fair);
    if !grants.contains(&token) {
        return Ok(false);
    }
    let queued: HashSet<u64> = read.queue.iter().map(|e| e.0).collect();
    let plan = GrantPlan {
        fair_revision: read.fair.mod_revision,
        cap_revision: read.cap_revision,
        seen_revision: revision,
        record: read.fair.with_grants(&queued, &grants, vtimes),
        grants,
    };
    write_plan(link, name, &plan).await
}

/// What a grant compares: the fair record and the capacity are still those the decision read
/// (so two Limiters never grant from the same marks, and no grant decided before a resize
/// lands after it).
fn decided_from(link: &Link, name: &str, plan: &GrantPlan) -> Vec<Compare> {
    vec![
        Compare::mod_revision(link.keys.fair(name), CompareOp::Equal, plan.fair_revision),
        Compare::mod_revision(link.keys.cap(name), CompareOp::Equal, plan.cap_revision),
    ]
}

/// A release's grant compares more: that nothing was queued since its view's revision. A
/// releaser's view that has not seen a newcomer would grant past it; then the delete alone
/// applies, and the waiters' views (each has seen its own entry) grant. The waiters' own grants
/// do not compare this: they decide for themselves, and would otherwise fail again and again
/// while entries keep arriving.
fn release_decided_from(link: &Link, name: &str, plan: &GrantPlan) -> Vec<Compare> {
    let queued_since = plan.seen_revision.saturating_add(1);
    let mut compares = decided_from(link, name, plan);
    compares.push(
        Compare::create_revision(link.keys.queue_prefix(name), CompareOp::Less, queued_since)
            .with_prefix(),
    );
    compares
}

/// Writes a grant decided from a view: one Txn, applied only if the fair record is still the
/// one the view decided from (else the view gets the newer record and decides again). `true`
/// if it applied.
pub(super) async fn write_plan(link: &Link, name: &str, plan: &GrantPlan) -> Result<bool> {
    let fair_key = link.keys.fair(name);
    let txn = Txn::new()
        .when(decided_from(link, name, plan))
        .and_then([TxnOp::put(fair_key, plan.record.encode(), None)]);
    Ok(link.txn(txn).await?.succeeded())
}

/// A release on a fair semaphore: deletes the entry at `key` and, in the same Txn, writes the
/// grant `plan` decided from the view without it, if the fair record is still the one the view
/// saw (else the delete alone applies, and the waiters' views grant).
pub(super) async fn release_granting(
    link: &Link,
    name: &str,
    key: &str,
    plan: &GrantPlan,
) -> Result<()> {
    let fair_key = link.keys.fair(name);
    let txn = Txn::new()
        .when(release_decided_from(link, name, plan))
        .and_then([
            TxnOp::delete(key, None),
            TxnOp::put(fair_key, plan.record.encode(), None),
        ])
        .or_else([TxnOp::delete(key, None)]);
    link.txn(txn).await.map(|_| ())
}

/// The background grants of one fair semaphore's view: handed the plan each time the view
/// shows the rule granting one of our waiters; one write at a time, always of the latest plan.
pub(super) struct Granter {
    link: Arc<Link>,
    name: String,
    running: AtomicBool,
    latest: Mutex<Option<GrantPlan>>,
}

impl Granter {
    pub(super) fn new(link: Arc<Link>, name: &str) -> Arc<Granter> {
        Arc::new(Granter {
            link,
            name: name.to_string(),
            running: AtomicBool::new(false),
            latest: Mutex::new(None),
        })
    }

    /// Writes `plan`, or leaves it for the write in flight to take next.
    pub(super) fn kick(self: &Arc<Self>, plan: GrantPlan) {
        *lock(&self.latest) = Some(plan);
        if self.running.swap(true, Ordering::SeqCst) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                loop {
                    let next = lock(&me.latest).take();
                    let Some(plan) = next else { break };
                    if me.link.stop.is_stopped() {
                        break;
                    }
                    if let Err(e) = write_plan(&me.link, &me.name, &plan).await {
                        tracing::warn!(semaphore = %me.name, "granting on a fair semaphore failed: {e}; its waiters are granted at the next change of it");
                    }
                }
                me.running.store(false, Ordering::SeqCst);
                // A plan handed over between the last take and now found us running: take it.
                let pending = lock(&me.latest).is_some();
                if !pending || me.running.swap(true, Ordering::SeqCst) {
                    return;
                }
            }
        });
    }
}

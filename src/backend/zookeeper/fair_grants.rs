//! Granting on a fair semaphore in ZooKeeper: the fair rule applied to the session's view, and
//! the marks of what it grants written by one `multi`: a check of the capacity's data version
//! and a `setData` of the fair record expecting the data version, both as the view decided
//! from. A conflict (`BadVersion`) means someone else granted from those marks, or the capacity
//! changed (a shrink must not be granted past): the view gets the newer record or capacity (its
//! event) and decides again. Who grants: an
//! enqueue for its own entry (one attempt); a release, in the `multi` of its delete; and a view
//! that shows the rule granting one of its waiters (after a holder's expiry, a resize, or a
//! conflict), through its [`Granter`].

use super::fair_record::GrantPlan;
use crate::backend::lock;
use crate::stats::{RequestCounters, RequestKind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

/// The nodes a grant is written to: the semaphore's (its capacity) and its fair record.
#[derive(Debug, Clone)]
pub(super) struct FairPaths {
    pub semaphore: String,
    pub record: String,
}

/// Writes `plan` if the capacity and the fair record are still at the plan's versions, after
/// deleting `entry` if given (a release). `Ok(true)` if it applied, `Ok(false)` on a conflict
/// (or a node gone): then nothing applied.
pub(super) async fn write_plan(
    client: &zk::Client,
    paths: &FairPaths,
    entry: Option<&str>,
    plan: &GrantPlan,
) -> Result<bool, zk::Error> {
    let mut multi = client.new_multi_writer();
    if let Some(entry) = entry {
        multi.add_delete(entry, None)?;
    }
    multi.add_check_version(&paths.semaphore, plan.cap_version)?;
    multi.add_set_data(&paths.record, &plan.record.encode(), Some(plan.version))?;
    match multi.commit().await {
        Ok(_) => Ok(true),
        Err(zk::MultiWriteError::OperationFailed { .. }) => Ok(false),
        Err(zk::MultiWriteError::RequestFailed { source }) => Err(source),
    }
}

/// The background grants of one fair semaphore's view: handed the plan each time the view
/// shows the rule granting one of its waiters; one write at a time, always of the latest plan.
pub(super) struct Granter {
    /// Dropped when the view dies, so a session given up on is not kept alive by it.
    client: Mutex<Option<zk::Client>>,
    paths: FairPaths,
    stats: Arc<RequestCounters>,
    timeout: Duration,
    stop: CancellationToken,
    running: AtomicBool,
    latest: Mutex<Option<GrantPlan>>,
}

impl Granter {
    pub(super) fn new(
        client: zk::Client,
        paths: FairPaths,
        stats: Arc<RequestCounters>,
        timeout: Duration,
        stop: CancellationToken,
    ) -> Arc<Granter> {
        Arc::new(Granter {
            client: Mutex::new(Some(client)),
            paths,
            stats,
            timeout,
            stop,
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
                    if me.stop.is_cancelled() {
                        break;
                    }
                    me.write(&plan).await;
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

    /// Forgets the session's client: the view is gone, nothing more is written.
    pub(super) fn close(&self) {
        lock(&self.client).take();
    }

    async fn write(&self, plan: &GrantPlan) {
        let Some(client) = lock(&self.client).clone() else {
            return;
        };
        self.stats.count(RequestKind::Txn);
        let write = write_plan(&client, &self.paths, None, plan);
        let written = tokio::select! {
            _ = self.stop.cancelled() => return,
            r = tokio::time::timeout(self.timeout, write) => r,
        };
        let failure = match written {
            Ok(Ok(_)) => return,
            Ok(Err(e)) => e.to_string(),
            Err(_) => "no answer in time".to_string(),
        };
        tracing::warn!(record = %self.paths.record, "granting on a fair semaphore failed: {failure}; its waiters are granted at the next change of it");
    }
}

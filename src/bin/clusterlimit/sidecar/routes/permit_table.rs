//! HTTP permits. Each is held by a task of its own that releases it when the client asks,
//! releases it when the client's TTL runs out without a keepalive (so a crashed client's
//! permit comes back even though nobody calls us again), and reports it lost when the store
//! session ends behind it.

use crate::common::lock;
use crate::sidecar::metrics::Metrics;
use crate::sidecar::release_body::Reported;
use clusterlimit::Permit;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// How the permit task answers a release: the store's result.
type ReleaseReply = oneshot::Sender<clusterlimit::Result<()>>;

/// A release asked of the permit task: the outcome to report and where to answer.
type ReleaseAsk = (Reported, ReleaseReply);

/// What the table knows of one permit; the `Permit` itself lives in its task.
struct Slot {
    semaphore: String,
    ttl: Duration,
    deadline: Instant,
    lost: bool,
    release: Option<oneshot::Sender<ReleaseAsk>>,
}

/// Outcome of a keepalive.
pub enum KeepAlive {
    /// The client TTL was extended by this much from now.
    Extended(Duration),
    /// The permit was lost: the store may have given it to someone else.
    Lost,
    /// No such permit (never existed, released, or expired).
    Unknown,
}

/// Every permit held through the sidecar, by id.
pub struct Table {
    slots: Mutex<HashMap<String, Slot>>,
    metrics: Arc<Metrics>,
    shutting_down: AtomicBool,
}

impl Table {
    /// An empty table reporting to `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Arc<Table> {
        Arc::new(Table {
            slots: Mutex::new(HashMap::new()),
            metrics,
            shutting_down: AtomicBool::new(false),
        })
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        lock(&self.slots)
    }

    /// Registers a granted permit with its client TTL; returns its id.
    pub fn insert(self: &Arc<Self>, permit: Permit, ttl: Duration) -> String {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let (tx, rx) = oneshot::channel();
        self.metrics
            .held(permit.semaphore(), i64::from(permit.permits()));
        self.slots().insert(
            id.clone(),
            Slot {
                semaphore: permit.semaphore().to_string(),
                ttl,
                deadline: Instant::now() + ttl,
                lost: false,
                release: Some(tx),
            },
        );
        tokio::spawn(hold(self.clone(), id.clone(), permit, rx));
        id
    }

    /// Extends the client TTL of `id`.
    pub fn keepalive(&self, id: &str) -> KeepAlive {
        match self.slots().get_mut(id) {
            None => KeepAlive::Unknown,
            Some(slot) if slot.lost => KeepAlive::Lost,
            Some(slot) => {
                slot.deadline = Instant::now() + slot.ttl;
                KeepAlive::Extended(slot.ttl)
            }
        }
    }

    /// Releases `id` with the client's outcome; `None` if unknown. A lost permit "releases"
    /// without a store request.
    pub async fn release(&self, id: &str, outcome: Reported) -> Option<clusterlimit::Result<()>> {
        let slot = self.slots().remove(id)?;
        let (reply_tx, reply_rx) = oneshot::channel();
        if let Some(tx) = slot.release {
            let _ = tx.send((outcome, reply_tx));
        }
        // The task always answers; if it is gone, the permit is gone with it.
        Some(reply_rx.await.unwrap_or(Ok(())))
    }

    /// From now on, lost permits are the shutdown's doing: no warnings, no lost count.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
    }

    fn deadline(&self, id: &str) -> Option<Instant> {
        self.slots().get(id).map(|s| s.deadline)
    }

    /// Removes `id` if its client TTL has run out (checked under the lock, so a keepalive that
    /// got in first wins).
    fn expire_if_due(&self, id: &str) -> bool {
        let mut slots = self.slots();
        match slots.get(id) {
            Some(slot) if slot.deadline <= Instant::now() => {
                slots.remove(id);
                true
            }
            _ => false,
        }
    }

    fn mark_lost(&self, id: &str) -> Option<String> {
        self.slots().get_mut(id).map(|slot| {
            slot.lost = true;
            slot.semaphore.clone()
        })
    }
}

/// The permit's task: waits for a release request, the client deadline, or loss.
async fn hold(
    table: Arc<Table>,
    id: String,
    permit: Permit,
    mut release_rx: oneshot::Receiver<ReleaseAsk>,
) {
    let semaphore = permit.semaphore().to_string();
    let weight = i64::from(permit.permits());
    let mut held = Some(permit);
    loop {
        let deadline = table.deadline(&id);
        tokio::select! {
            msg = &mut release_rx => {
                // A sender gone without asking (never: the table asks before dropping it) says
                // nothing of the work.
                let (said, reply) = match msg {
                    Ok((said, reply)) => (said, Some(reply)),
                    Err(_) => (Reported::Ignore, None),
                };
                let result = match held.take() {
                    Some(p) => {
                        table.metrics.held(&semaphore, -weight);
                        let outcome = said.outcome(&p);
                        p.release_with(outcome).await
                    }
                    None => Ok(()),
                };
                tracing::debug!(%id, %semaphore, ?said, "released");
                if let Some(reply) = reply {
                    let _ = reply.send(result);
                }
                return;
            }
            () = lost(held.as_ref()) => {
                // Dropping it is harmless: its entry is gone or going with the session.
                held = None;
                table.metrics.held(&semaphore, -weight);
                if table.mark_lost(&id).is_some() && !table.shutting_down.load(Ordering::Acquire) {
                    tracing::warn!(%id, %semaphore, "permit lost: the store session ended behind it");
                    table.metrics.lost(&semaphore);
                }
            }
            () = sleep_until(deadline) => {
                if table.expire_if_due(&id) {
                    if let Some(p) = held.take() {
                        table.metrics.held(&semaphore, -weight);
                        table.metrics.expired(&semaphore);
                        tracing::info!(%id, %semaphore, "client stopped calling keepalive: releasing its permit");
                        if let Err(e) = p.release().await {
                            tracing::warn!(%id, error = %e, "releasing an expired permit; the library keeps trying");
                        }
                    }
                    return;
                }
            }
        }
    }
}

async fn lost(permit: Option<&Permit>) {
    match permit {
        Some(p) => p.lost().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

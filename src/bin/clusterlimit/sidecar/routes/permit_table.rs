//! HTTP permits. Each is held by a task of its own that releases it when the client asks,
//! releases it when the client's TTL runs out without a keepalive (so a crashed client's
//! permit comes back even though nobody calls us again), and reports it lost when the store
//! session ends behind it. The task also lowers its permit's weight when asked (a shrink).

use crate::common::lock;
use crate::sidecar::metrics::Metrics;
use crate::sidecar::release_body::Reported;
use clusterlimit::Permit;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// How the permit task answers a release: the store's result.
type ReleaseReply = oneshot::Sender<clusterlimit::Result<()>>;

/// A release asked of the permit task: the outcome to report and where to answer.
type ReleaseAsk = (Reported, ReleaseReply);

/// A shrink asked of the permit task: the weight to lower to, and where to answer with the
/// store's result (the weight held afterwards).
type ShrinkAsk = (u32, oneshot::Sender<clusterlimit::Result<u32>>);

/// What the table knows of one permit; the `Permit` itself lives in its task.
struct Slot {
    semaphore: String,
    ttl: Duration,
    deadline: Instant,
    lost: bool,
    release: Option<oneshot::Sender<ReleaseAsk>>,
    shrink: mpsc::Sender<ShrinkAsk>,
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

/// Outcome of a shrink.
pub enum Shrunk {
    /// The store's answer: the weight held now, or why not.
    Done(clusterlimit::Result<u32>),
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
        // One shrink at a time per permit; a second waits for the first's turn.
        let (shrink_tx, shrink_rx) = mpsc::channel(1);
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
                shrink: shrink_tx,
            },
        );
        let asks = Asks {
            release: rx,
            shrink: shrink_rx,
        };
        tokio::spawn(hold(self.clone(), id.clone(), permit, asks));
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

    /// Lowers the weight of `id` to `permits` (checked by the library: 1 ≤ permits ≤ held).
    pub async fn shrink(&self, id: &str, permits: u32) -> Shrunk {
        let sender = match self.slots().get(id) {
            None => return Shrunk::Unknown,
            Some(slot) if slot.lost => return Shrunk::Lost,
            Some(slot) => slot.shrink.clone(),
        };
        let (reply_tx, reply_rx) = oneshot::channel();
        if sender.send((permits, reply_tx)).await.is_err() {
            return Shrunk::Unknown; // the task ended: released or expired meanwhile
        }
        match reply_rx.await {
            Ok(Err(clusterlimit::Error::SessionLost)) => Shrunk::Lost,
            Ok(result) => Shrunk::Done(result),
            Err(_) => Shrunk::Unknown,
        }
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

/// What a permit's task is asked through: a release (once), shrinks (any number).
struct Asks {
    release: oneshot::Receiver<ReleaseAsk>,
    shrink: mpsc::Receiver<ShrinkAsk>,
}

/// The permit's task: waits for a release or shrink request, the client deadline, or loss.
async fn hold(table: Arc<Table>, id: String, permit: Permit, mut asks: Asks) {
    let semaphore = permit.semaphore().to_string();
    let mut weight = i64::from(permit.permits());
    let mut held = Some(permit);
    let mut shrinks_open = true;
    loop {
        let deadline = table.deadline(&id);
        tokio::select! {
            msg = &mut asks.release => {
                let result = release(&table, &semaphore, weight, held.take(), msg).await;
                tracing::debug!(%id, %semaphore, "released");
                if let Some((result, reply)) = result {
                    let _ = reply.send(result);
                }
                return;
            }
            ask = asks.shrink.recv(), if shrinks_open => match ask {
                Some((permits, reply)) => {
                    let result = shrink(held.as_mut(), permits).await;
                    // Also after an error: the store may have answered late (see shrink_to).
                    if let Some(now) = held.as_ref().map(|p| i64::from(p.permits())) {
                        table.metrics.held(&semaphore, now - weight);
                        weight = now;
                    }
                    tracing::debug!(%id, %semaphore, permits, ok = result.is_ok(), "shrink");
                    let _ = reply.send(result);
                }
                None => shrinks_open = false,
            },
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

/// Releases `held` with the outcome asked in `msg`; the result and where to answer, if asked.
async fn release(
    table: &Table,
    semaphore: &str,
    weight: i64,
    held: Option<Permit>,
    msg: Result<ReleaseAsk, oneshot::error::RecvError>,
) -> Option<(clusterlimit::Result<()>, ReleaseReply)> {
    // A sender gone without asking (never: the table asks before dropping it) says nothing
    // of the work.
    let (said, reply) = match msg {
        Ok((said, reply)) => (said, Some(reply)),
        Err(_) => (Reported::Ignore, None),
    };
    let result = match held {
        Some(p) => {
            table.metrics.held(semaphore, -weight);
            let outcome = said.outcome(&p);
            p.release_with(outcome).await
        }
        None => Ok(()),
    };
    reply.map(|r| (result, r))
}

/// Lowers `held` to `permits`; the weight held afterwards. A permit already gone is lost.
async fn shrink(held: Option<&mut Permit>, permits: u32) -> clusterlimit::Result<u32> {
    let permit = held.ok_or(clusterlimit::Error::SessionLost)?;
    permit.shrink_to(permits).await?;
    Ok(permit.permits())
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

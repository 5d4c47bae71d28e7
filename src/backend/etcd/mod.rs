//! `etcd://` backend: permits are keys bound to the Limiter's lease, ordered by create revision.
//!
//! * Acquire: **one** Txn — `if create_revision(key) == 0 then put(key, lease) else read key`;
//!   retrying the same key after a lost reply is idempotent. Once this Limiter has a live view
//!   of the semaphore (`view.rs`: a watch, set up by its second acquire or first wait there),
//!   the grant is decided from the view as soon as it has applied the put's revision: the Txn
//!   reads nothing, so its cost grows neither with the queue nor with the semaphore's
//!   tombstones. Without a view (the first acquire), or if the view lags, the semaphore is
//!   read: in the same Txn, or by one range read after it.
//! * Release: one delete.
//! * Waiting: one watch per semaphore per Limiter feeds a local view (`view.rs`); a release costs
//!   one delete plus one watch event per watching process, never a re-read per waiter.
//! * Fencing token: the entry key's create revision.
//! * Rate limits (`rate.rs`): one Txn per compare-and-swap write, whose else branch returns
//!   the current state; idle keys are deleted by their writer once expired, many per Txn
//!   (`sweeper.rs`), and those of dead writers by a slow paced scan (`scan.rs`).
//!
//! Where the code is: `connect.rs` (connecting, the lease sessions), `calls.rs` (every request,
//! retried within the bounds of `attempt.rs`; `client.rs`: what every request shares),
//! `semaphore.rs` (capacity, status, names), `entries.rs` (enqueue, removal, the watches that
//! feed the views), `board.rs` (announcements), `config.rs` (the settings); this file holds the
//! backend's state and its [`Backend`] impl.

mod attempt;
mod board;
mod calls;
mod client;
mod config;
mod connect;
mod describe;
mod endpoints;
mod entries;
mod keys;
mod rate;
mod scan;
mod security;
mod semaphore;
mod session;
mod strays;
mod sweep_state;
mod sweeper;
mod tls_probe;
mod view;

use super::{lock, Backend, Enqueued, EntryRequest, SessionSlot, Stop};
use crate::backend::waiters::WaitOutcome;
use crate::error::{Error, Result};
use crate::lost::LostSignal;
use crate::members::StoreMember;
use crate::stats::{RequestCounters, RequestKind, RequestStats};
use crate::status::Status;
use async_trait::async_trait;
use attempt::Until;
pub use config::EtcdConfig;
use endpoints::Endpoints;
use keys::Keys;
use security::Security;
pub use security::{CACERT_ENV, CERT_ENV, KEY_ENV, PASSWORD_ENV};
use session::Session;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use strays::Strays;
use sweeper::Sweeper;
use view::SemWatch;

/// The `etcd://` backend: one client, one lease, one watch per contended semaphore.
pub struct EtcdBackend {
    endpoints: Arc<Endpoints>,
    keys: Keys,
    config: EtcdConfig,
    /// How the connection is secured, to name the cause of a refusal.
    security: Security,
    stats: Arc<RequestCounters>,
    session: SessionSlot<Session>,
    /// Entries of this Limiter (key → loss signal), so a key deleted behind our back fires
    /// `lost()` and `close()` can mark every permit lost.
    /// (Entries held or in flight, so a key deleted behind our back fires `lost()`, `close()`
    /// can mark every permit lost, and an entry nobody owns is found: see `strays.rs`.)
    strays: Strays,
    watches: Mutex<HashMap<String, Arc<SemWatch>>>,
    /// Semaphores enqueued on through a read: the next enqueue on one starts its view.
    enqueued: Mutex<HashSet<String>>,
    /// Set by close/shutdown: stops every background task and retry of this backend.
    stop: Stop,
    /// Deletes the rate-limit keys we wrote once expired (`sweeper.rs`, `scan.rs`).
    sweeper: Sweeper,
}

impl std::fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("config", &self.config)
            .field("stopped", &self.stop.is_stopped())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Backend for EtcdBackend {
    async fn ensure_semaphore(&self, name: &str, capacity: Option<u32>) -> Result<u32> {
        self.open_semaphore(name, capacity).await
    }

    async fn enqueue(&self, req: &EntryRequest) -> Result<Enqueued> {
        let key = self.keys.entry(&req.name, &req.id);
        // In flight until it ends, however it ends (this future may be dropped mid-request).
        let sending = self.strays.tracked.sending(key.into_bytes());
        let enqueued = self.enqueue_checked(req).await;
        if let Ok(enq) = &enqueued {
            sending.enqueued(enq.token as i64, enq.lost.clone());
        }
        enqueued
    }

    fn set_orphan_sink(&self, sink: super::OrphanSink) {
        let _ = self.strays.sink.set(sink);
    }

    async fn wait_outcome(&self, req: &EntryRequest, enq: &Enqueued) -> Result<WaitOutcome> {
        let watch = match lock(&self.watches).get(&req.name) {
            Some(w) if !w.is_stopped() => w.clone(),
            // Stopped with the backend or its session: the entry went with the lease.
            _ => return Err(Error::SessionLost),
        };
        // A watch that stops drops its waiters: the entry's fate is unknown, its session gone.
        watch
            .register(enq.token, req.permits)
            .await
            .map_err(|_| Error::SessionLost)
    }

    async fn remove(&self, name: &str, id: &str) -> Result<()> {
        self.remove_entry(name, id).await
    }

    async fn status(&self, name: &str) -> Result<Status> {
        self.read_status(name).await
    }

    async fn set_capacity(&self, name: &str, capacity: u32) -> Result<()> {
        self.resize(name, capacity).await
    }

    async fn list(&self) -> Result<Vec<String>> {
        self.names_under(self.keys.names_prefix()).await
    }

    async fn announce(&self, board: &str, id: &str, value: &[u8]) -> Result<()> {
        self.put_announcement(board, id, value).await
    }

    async fn announcements(&self, board: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.read_announcements(board).await
    }

    async fn withdraw(&self, board: &str, id: &str) -> Result<()> {
        self.delete_announcement(board, id).await
    }

    /// The member list, and who leads from one member's status (two requests).
    async fn members(&self) -> Result<Vec<StoreMember>> {
        let list = self
            .retry(
                RequestKind::Range,
                |mut c| async move { c.member_list().await },
            )
            .await?;
        let leader = self
            .retry(RequestKind::Range, |mut c| async move { c.status().await })
            .await?
            .leader();
        Ok(list
            .members()
            .iter()
            .map(|m| StoreMember {
                name: if m.name().is_empty() {
                    format!("{:x} (not started)", m.id())
                } else {
                    m.name().to_string()
                },
                address: m.client_urls().first().cloned().unwrap_or_default(),
                role: if m.id() == leader {
                    "leader"
                } else {
                    "follower"
                }
                .to_string(),
            })
            .collect())
    }

    fn stats(&self) -> RequestStats {
        self.stats.snapshot()
    }

    fn rate_store(&self) -> Option<&dyn super::RateStore> {
        Some(self)
    }

    fn session_ttl(&self) -> Duration {
        self.config.session_ttl
    }

    async fn session_signal(&self) -> Option<LostSignal> {
        self.session.live_signal().await
    }

    async fn end_session(&self, of: &LostSignal) {
        let Some(session) = self.session.end_if_current(of).await else {
            return;
        };
        self.strays.tracked.forget_lost();
        if let Err(e) = self.revoke(&session, Until::Deadline).await {
            let store = self.endpoints.all_urls();
            tracing::warn!(lease = session.lease, %store, "revoking the lease of an ended session at etcd {store} failed: {e}; etcd expires it within the session TTL");
        }
    }

    async fn close(&self) -> Result<()> {
        self.end_locally();
        match self.session.end().await {
            Some(session) => self.revoke(&session, Until::Closing).await,
            None => Ok(()),
        }
    }

    fn shutdown(&self) {
        self.end_locally();
        if let Some(session) = self.session.try_end() {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                let (_, client) = self.endpoints.pick();
                let timeout = self.config.request_timeout;
                self.stats.count(RequestKind::Lease);
                handle.spawn(async move {
                    let _ =
                        tokio::time::timeout(timeout, client.lease_client().revoke(session.lease))
                            .await;
                });
            }
        }
    }
}

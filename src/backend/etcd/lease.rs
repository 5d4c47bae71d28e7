//! The lease sessions of a connected backend: granted on first use, again after a loss,
//! revoked when ended. Entries and announcements are put with the live session's lease
//! (`entries.rs`, `board.rs`); rate-limit keys need none, so a backend that keeps only those
//! never grants one.

use super::attempt::Until;
use super::calls::Link;
use super::session::Session;
use super::strays::Strays;
use crate::backend::{lock, SessionSlot};
use crate::error::{Error, Result};
use crate::lost::LostSignal;
use crate::stats::RequestKind;
use std::sync::Arc;

/// This Limiter's lease session (one at a time), and who must know of it.
pub(super) struct Leases {
    link: Arc<Link>,
    slot: SessionSlot<Session>,
    /// Told of each lease granted (an entry under the live lease that nobody owns is a stray),
    /// and of its end (every entry of it is lost).
    strays: Strays,
}

impl Leases {
    pub(super) fn new(link: Arc<Link>, strays: Strays) -> Arc<Leases> {
        Arc::new(Leases {
            link,
            slot: SessionSlot::default(),
            strays,
        })
    }

    /// The live session, or a new lease if the last one was lost.
    pub(super) async fn live(&self) -> Result<Arc<Session>> {
        self.slot
            .live_or_start(&self.link.stop, |_| {}, || self.start())
            .await
    }

    /// Grants a lease and starts its keeper.
    async fn start(&self) -> Result<Arc<Session>> {
        let link = &self.link;
        // Retried like any request: a lease whose grant reply was lost holds no keys and
        // simply expires.
        let ttl = Session::ttl_secs(link.config.session_ttl);
        let (sent, granted) = link
            .retry(RequestKind::Lease, |c| async move {
                let sent = tokio::time::Instant::now();
                c.lease_client().grant(ttl, None).await.map(|g| (sent, g))
            })
            .await?;
        let s = Session::start(
            link.endpoints.clone(),
            sent,
            &granted,
            link.config.session_ttl,
            link.config.request_timeout,
            link.stats.clone(),
        );
        *lock(&self.strays.session) = Some((s.lease, s.lost.clone()));
        Ok(s)
    }

    /// The loss signal of the live session, if there is one.
    pub(super) async fn signal(&self) -> Option<LostSignal> {
        self.slot.live_signal().await
    }

    /// Ends the session `of` belongs to, if it is still the current one, and revokes its lease.
    pub(super) async fn end(&self, of: &LostSignal) {
        let Some(session) = self.slot.end_if_current(of).await else {
            return;
        };
        self.strays.tracked.forget_lost();
        if let Err(e) = self.revoke(&session, Until::Deadline).await {
            let store = self.link.endpoints.all_urls();
            tracing::warn!(lease = session.lease, %store, "revoking the lease of an ended session at etcd {store} failed: {e}; etcd expires it within the session TTL");
        }
    }

    /// Stops the backend and revokes the lease (retried through a failover).
    pub(super) async fn close(&self) -> Result<()> {
        self.end_locally();
        match self.slot.end().await {
            Some(session) => self.revoke(&session, Until::Closing).await,
            None => Ok(()),
        }
    }

    /// Stops the backend without waiting: the lease is revoked by a task of its own (one
    /// attempt), if a runtime is there to run it.
    pub(super) fn shutdown(&self) {
        self.end_locally();
        if let Some(session) = self.slot.try_end() {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                let (_, client) = self.link.endpoints.pick();
                let timeout = self.link.config.request_timeout;
                self.link.stats.count(RequestKind::Lease);
                handle.spawn(async move {
                    let _ =
                        tokio::time::timeout(timeout, client.lease_client().revoke(session.lease))
                            .await;
                });
            }
        }
    }

    /// Asks etcd to end the lease of a session already ended locally (retried through a
    /// failover; etcd expires it within the TTL anyway, as nothing keeps it alive).
    async fn revoke(&self, session: &Session, until: Until<'_>) -> Result<()> {
        let lease = session.lease;
        let revoked = self
            .link
            .retry_until(RequestKind::Lease, until, |c| async move {
                c.lease_client().revoke(lease).await
            })
            .await;
        match revoked {
            // "Not found": it is gone already, which is the goal.
            Ok(_) | Err(Error::SessionLost) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn end_locally(&self) {
        self.link.stop.stop();
        self.strays.tracked.end_all();
    }
}

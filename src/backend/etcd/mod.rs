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
//! The backend is made of parts, each a type in a file of its own that owns its state and its
//! requests: `Link` (`calls.rs`: members, settings, counters, stop, every
//! request, retried within the bounds of `attempt.rs`; made by `connect.rs`; `client.rs`: what
//! every request shares), `Leases` (`lease.rs`: the lease sessions), `Entries` (`entries.rs`:
//! enqueue, wait, removal, the watches that feed the views), `Semaphores` (`semaphore.rs`:
//! capacity, status), `Board` (`board.rs`: announcements) and `Rates` (`rate.rs`: the
//! rate store and its sweeper); `config.rs` holds the settings. This file composes them and
//! hands each [`Backend`] method to the part that owns it. Imports run one way: this file uses
//! the parts, the parts use the link, never the reverse.

mod attempt;
mod board;
mod calls;
mod client;
mod config;
mod connect;
mod describe;
mod endpoints;
mod entries;
mod fair_grants;
mod fair_record;
mod keys;
mod lease;
mod rate;
mod scan;
mod security;
mod semaphore;
mod session;
mod shrink;
mod strays;
mod sweep_state;
mod sweeper;
mod tls_probe;
mod view;
mod view_state;

use super::{Backend, Enqueued, EntryRequest, OrphanSink, RateStore};
use crate::backend::rate_forward::rate_store_by;
use crate::backend::waiters::WaitOutcome;
use crate::error::Result;
use crate::lost::LostSignal;
use crate::members::StoreMember;
use crate::stats::{RequestKind, RequestStats};
use crate::status::Status;
use async_trait::async_trait;
use board::Board;
use calls::Link;
pub use config::EtcdConfig;
use entries::Entries;
use lease::Leases;
use rate::Rates;
pub use security::{CACERT_ENV, CERT_ENV, KEY_ENV, PASSWORD_ENV};
use semaphore::Semaphores;
use std::sync::Arc;
use std::time::Duration;
use strays::Strays;

/// How long an entry nobody owns is left alone before it is removed (see `strays.rs`).
const STRAY_GRACE: Duration = Duration::from_millis(200);

/// The `etcd://` backend: one client, one lease, one watch per contended semaphore.
pub struct EtcdBackend {
    link: Arc<Link>,
    leases: Arc<Leases>,
    entries: Entries,
    semaphores: Semaphores,
    board: Board,
    rates: Rates,
}

impl EtcdBackend {
    /// Connects and grants the session lease (fails fast if no member answers).
    ///
    /// TLS files and the password are read first: a missing, unreadable or garbled one is an
    /// `InvalidArgument` naming it, before any network traffic. A refusal by etcd (untrusted or
    /// rejected certificate, wrong password, no permission on the prefix) is a `Store` error
    /// naming the cause, returned without retrying.
    pub async fn connect(config: EtcdConfig) -> Result<EtcdBackend> {
        let backend = Self::connect_rate_only(config).await?;
        backend.leases.live().await?;
        Ok(backend)
    }

    /// [`connect`](Self::connect) without the session lease, for a cluster that keeps
    /// rate-limit keys alone (a sharded store's clusters after the first): rate-limit keys
    /// are bound to no lease, so none is granted (and none can be reported lost) until a
    /// semaphore or an announcement needs one. Connects the members (and authenticates)
    /// but sends no request.
    pub async fn connect_rate_only(config: EtcdConfig) -> Result<EtcdBackend> {
        let link = Arc::new(connect::connect(config).await?);
        let strays = Strays::new(STRAY_GRACE);
        let leases = Leases::new(link.clone(), strays.clone());
        Ok(EtcdBackend {
            entries: Entries::new(link.clone(), leases.clone(), strays.clone()),
            semaphores: Semaphores::new(link.clone(), strays),
            board: Board::new(link.clone()),
            rates: Rates::new(link.clone()),
            leases,
            link,
        })
    }
}

impl std::fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("config", &self.link.config)
            .field("stopped", &self.link.stop.is_stopped())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Backend for EtcdBackend {
    async fn ensure_semaphore(&self, name: &str, capacity: Option<u32>) -> Result<u32> {
        self.semaphores.open(name, capacity).await
    }

    fn keeps_fair_semaphores(&self) -> bool {
        true
    }

    async fn ensure_fair_semaphore(
        &self,
        name: &str,
        capacity: Option<u32>,
        classes: Option<&crate::fair::Classes>,
    ) -> Result<u32> {
        self.semaphores.open_fair(name, capacity, classes).await
    }

    async fn enqueue(&self, req: &EntryRequest) -> Result<Enqueued> {
        self.entries.enqueue(req).await
    }

    fn set_orphan_sink(&self, sink: OrphanSink) {
        self.entries.set_orphan_sink(sink);
    }

    async fn wait_outcome(&self, req: &EntryRequest, enq: &Enqueued) -> Result<WaitOutcome> {
        self.entries.wait(req, enq).await
    }

    async fn remove(&self, name: &str, id: &str) -> Result<()> {
        self.entries.remove(name, id).await
    }

    async fn shrink_entry(&self, name: &str, id: &str, permits: u32) -> Result<u32> {
        shrink::shrink_entry(&self.link, name, id, permits).await
    }

    async fn status(&self, name: &str) -> Result<Status> {
        self.semaphores.status(name).await
    }

    async fn set_capacity(&self, name: &str, capacity: u32) -> Result<()> {
        self.semaphores.resize(name, capacity).await
    }

    async fn list(&self) -> Result<Vec<String>> {
        self.link.names_under(self.link.keys.names_prefix()).await
    }

    async fn announce(&self, board: &str, id: &str, value: &[u8]) -> Result<()> {
        self.board.announce(&self.leases, board, id, value).await
    }

    async fn announcements(&self, board: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.board.read(board).await
    }

    async fn withdraw(&self, board: &str, id: &str) -> Result<()> {
        self.board.withdraw(board, id).await
    }

    /// The member list, and who leads from one member's status (two requests).
    async fn members(&self) -> Result<Vec<StoreMember>> {
        let list = self
            .link
            .retry(
                RequestKind::Range,
                |mut c| async move { c.member_list().await },
            )
            .await?;
        let leader = self
            .link
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
        self.link.stats.snapshot()
    }

    fn rate_store(&self) -> Option<&dyn RateStore> {
        Some(self)
    }

    fn session_ttl(&self) -> Duration {
        self.link.config.session_ttl
    }

    async fn session_signal(&self) -> Option<LostSignal> {
        self.leases.signal().await
    }

    async fn end_session(&self, of: &LostSignal) {
        self.leases.end(of).await;
    }

    async fn close(&self) -> Result<()> {
        self.leases.close().await
    }

    fn shutdown(&self) {
        self.leases.shutdown();
    }
}

// The rate store is the `Rates` part (`rate.rs`).
rate_store_by!(EtcdBackend, rates);

//! `zk://` backend: permits are ephemeral sequential znodes under the semaphore's node, ordered
//! by their sequence number (see `nodes.rs` for the layout).
//!
//! * Acquire, uncontended: **one** request — the create. The session already watches the
//!   semaphore (a persistent recursive watch set up when the semaphore was opened, see
//!   `view.rs`), and ZooKeeper delivers that watch's events before the create's reply, so the
//!   local view knows the whole queue ahead of the new entry without a read.
//! * Release: one delete.
//! * Shrink (`Permit::shrink_to`): one `setData` of the entry's data, which then states the
//!   lowered weight (the name keeps the weight it was created with, so token and place stay;
//!   see `shrink.rs`); each watching process reads the entry's data with the capacity once.
//! * Waiting: no request at all. A release costs one delete plus one watch event per watching
//!   process; nobody re-reads, nobody watches "the node N places ahead".
//! * A create whose reply was lost (connection dropped) is found again by its request id in the
//!   view's next snapshot; one never answered is remembered and deleted if it ever shows up.
//! * Loss: see `session.rs` (a deadline kept by acknowledged probes; `Expired` ends it too).
//! * Fair semaphores (`fair_record.rs`, `fair_grants.rs`): a record child holds the classes and
//!   the grant marks; an entry states its flow, class and weight in its node name. Grants are
//!   decided from the view and written by one `setData` expecting the record's data version;
//!   a release deletes its entry and writes the next grant in one `multi`.
//! * Fencing token: the node's sequence number + 1 (strictly increasing per semaphore; ZooKeeper
//!   keeps the sequence as a signed 32-bit counter of the parent's creates, so it wraps after
//!   2^31 entries of one semaphore).
//! * Access: with digest credentials (`digest_file=` or `CLUSTERLIMIT_ZK_DIGEST`, sent on every
//!   connection of every session) each node created (root, semaphore, entry) is creator-all +
//!   anyone-read: other identities see status but cannot add or delete entries (both need a
//!   right on the semaphore's node) nor change a capacity. Without credentials nodes are
//!   anyone-all, as before (`acl=open` asks for that with credentials too). Existing nodes keep
//!   their ACL (never changed behind the user's back; an open semaphores' node is logged as a
//!   warning), so protecting an existing tree takes a `setAcl` or a new chroot (see `auth.rs`).
//!
//! Built on the `zookeeper-client` crate, which re-sends watches after a reconnect and reports
//! an expired session instead of silently replacing it.
//!
//! The backend is made of parts, each a type in a file of its own that owns its state and its
//! requests: `Link` (`calls.rs`: settings, credentials, counters, the sessions
//! and their reaper of abandoned nodes, every request, bounded or retried across sessions; made
//! by `connect.rs`; `tracked.rs`: this Limiter's entries), `Permits` (`entries.rs`: enqueue,
//! wait, removal), `Semaphores` (`semaphore.rs`: node, capacity, status, names), `Board`
//! (`board.rs`: announcements) and `Rates` (`rate.rs`: the rate store and its sweeper);
//! `config.rs` holds the settings. This file composes them and hands each [`Backend`] method to
//! the part that owns it. Imports run one way: this file uses the parts, the parts use the
//! link, never the reverse.

mod auth;
mod board;
mod calls;
mod config;
mod connect;
mod entries;
mod entry_weights;
mod fair_grants;
mod fair_record;
mod nodes;
pub(crate) mod rate;
mod scan;
mod semaphore;
mod semaphore_fair;
mod session;
mod shrink;
mod sweep_state;
mod sweeper;
mod tls;
mod tracked;
mod view;
mod view_queue;

use super::{Backend, Enqueued, EntryRequest, RateStore};
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
pub use config::ZkConfig;
use entries::Permits;
use rate::Rates;
use semaphore::Semaphores;
use std::sync::Arc;
use std::time::Duration;

/// Longest a close waits for ZooKeeper to confirm the session's end (a round trip, when the
/// server answers; when it does not, the session expires there anyway).
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// The `zk://` backend: one session, one watch per semaphore in use.
pub struct ZkBackend {
    link: Arc<Link>,
    permits: Permits,
    semaphores: Semaphores,
    board: Board,
    rates: Rates,
}

impl ZkBackend {
    /// Connects the session and creates the root nodes if absent. Fails fast if no server
    /// answers.
    pub async fn connect(config: ZkConfig) -> Result<ZkBackend> {
        Self::open(config, false).await
    }

    /// [`connect`](Self::connect) for a cluster that keeps rate-limit keys alone (a sharded
    /// store's clusters after the first): no semaphore lives in its sessions, and its logs
    /// say that the loss of one costs nothing.
    pub async fn connect_rate_only(config: ZkConfig) -> Result<ZkBackend> {
        Self::open(config, true).await
    }

    async fn open(config: ZkConfig, rate_only: bool) -> Result<ZkBackend> {
        let link = Arc::new(connect::connect(config, rate_only).await?);
        Ok(ZkBackend {
            permits: Permits::new(link.clone()),
            semaphores: Semaphores::new(link.clone()),
            board: Board::new(link.clone()),
            rates: Rates::new(link.clone()),
            link,
        })
    }
}

impl std::fmt::Debug for ZkBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkBackend")
            .field("config", &self.link.config)
            .field("digest", &self.link.digest)
            .field("tls", &self.link.tls.is_some())
            .field("stopped", &self.link.stop.is_stopped())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Backend for ZkBackend {
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
        self.permits.enqueue(req).await
    }

    async fn wait_outcome(&self, req: &EntryRequest, enq: &Enqueued) -> Result<WaitOutcome> {
        self.permits.wait(req, enq).await
    }

    async fn remove(&self, name: &str, id: &str) -> Result<()> {
        self.permits.remove(name, id).await
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
        self.semaphores.list().await
    }

    async fn announce(&self, board: &str, id: &str, value: &[u8]) -> Result<()> {
        self.board.announce(board, id, value).await
    }

    async fn announcements(&self, board: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.board.read(board).await
    }

    async fn withdraw(&self, board: &str, id: &str) -> Result<()> {
        self.board.withdraw(board, id).await
    }

    /// The ensemble from `/zookeeper/config` (`server.N=host:peer:election[:role];client`);
    /// ZooKeeper does not tell a client who leads. A standalone server has no such config: one
    /// member, the servers this Limiter was given.
    async fn members(&self) -> Result<Vec<StoreMember>> {
        let (config, _) = self
            .link
            .session_call(
                RequestKind::Range,
                "reading the ensemble's configuration",
                None,
                |c| async move { c.get_config().await },
            )
            .await?;
        Ok(nodes::ensemble(
            &String::from_utf8_lossy(&config),
            &self.link.hosts,
        ))
    }

    fn stats(&self) -> RequestStats {
        self.link.stats.snapshot()
    }

    fn rate_store(&self) -> Option<&dyn RateStore> {
        Some(self)
    }

    fn session_ttl(&self) -> Duration {
        self.link.config.session_timeout
    }

    async fn session_signal(&self) -> Option<LostSignal> {
        self.link.session.live_signal().await
    }

    async fn end_session(&self, of: &LostSignal) {
        // Ending it locally drops the client, which closes the session on the server.
        if self.link.session.end_if_current(of).await.is_some() {
            self.link.stats.count(RequestKind::Lease);
            self.link.entries.forget_session();
        }
    }

    async fn close(&self) -> Result<()> {
        self.link.end_locally();
        self.rates.forget_client();
        if let Some(session) = self.link.session.end().await {
            self.link.stats.count(RequestKind::Lease);
            // The close goes out from the client's own task: wait for it, so a process that
            // exits next (a `run`, a sidecar) ends its session now, not a timeout later.
            let bound = self.link.config.request_timeout.min(CLOSE_WAIT);
            if !session.closed_on_server(bound).await {
                tracing::debug!(
                    "ZooKeeper did not confirm the session's close within {} ms; the server \
                     expires it within the session timeout",
                    bound.as_millis()
                );
            }
        }
        Ok(())
    }

    fn shutdown(&self) {
        self.link.end_locally();
        self.link.session.try_end();
    }
}

// The rate store is the `Rates` part (`rate.rs`).
rate_store_by!(ZkBackend, rates);

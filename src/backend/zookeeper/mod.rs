//! `zk://` backend: permits are ephemeral sequential znodes under the semaphore's node, ordered
//! by their sequence number (see `nodes.rs` for the layout).
//!
//! * Acquire, uncontended: **one** request — the create. The session already watches the
//!   semaphore (a persistent recursive watch set up when the semaphore was opened, see
//!   `view.rs`), and ZooKeeper delivers that watch's events before the create's reply, so the
//!   local view knows the whole queue ahead of the new entry without a read.
//! * Release: one delete.
//! * Waiting: no request at all. A release costs one delete plus one watch event per watching
//!   process; nobody re-reads, nobody watches "the node N places ahead".
//! * A create whose reply was lost (connection dropped) is found again by its request id in the
//!   view's next snapshot; one never answered is remembered and deleted if it ever shows up.
//! * Loss: see `session.rs` (a deadline kept by acknowledged probes; `Expired` ends it too).
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
//! Where the code is: `connect.rs` (connecting, the sessions and their reaper of abandoned
//! nodes), `calls.rs` (every request, bounded, or retried across sessions), `semaphore.rs`
//! (node, capacity, status, names), `entries.rs` (enqueue, removal; `tracked.rs`: this
//! Limiter's entries), `board.rs` (announcements), `config.rs` (the settings); this file holds
//! the backend's state and its [`Backend`] impl.

mod auth;
mod board;
mod calls;
mod config;
mod connect;
mod entries;
mod nodes;
pub(crate) mod rate;
mod scan;
mod semaphore;
mod session;
mod sweep_state;
mod sweeper;
mod tls;
mod tracked;
mod view;

use super::{Backend, Enqueued, EntryRequest, SessionSlot, Stop};
use crate::backend::waiters::WaitOutcome;
use crate::error::{Error, Result};
use crate::lost::LostSignal;
use crate::members::StoreMember;
use crate::stats::{RequestCounters, RequestKind, RequestStats};
use crate::status::Status;
use async_trait::async_trait;
use auth::{Digest, Identity};
pub use config::ZkConfig;
use nodes::Paths;
use session::ZkSession;
use std::sync::Arc;
use std::time::Duration;
use sweeper::Sweeper;
use tracked::Entries;
use zookeeper_client::Acls;

/// The `zk://` backend: one session, one watch per semaphore in use.
pub struct ZkBackend {
    config: ZkConfig,
    /// Keeps rate-limit keys alone (see [`ZkBackend::connect_rate_only`]).
    rate_only: bool,
    hosts: String,
    paths: Paths,
    stats: Arc<RequestCounters>,
    session: SessionSlot<ZkSession>,
    entries: Arc<Entries>,
    /// Sent on every session (and every reconnect of one); `Debug` hides the password.
    digest: Option<Digest>,
    identity: Identity,
    /// Read from the files once; `None`: plain text.
    tls: Option<tls::Tls>,
    /// ACL of every node created.
    acls: Acls<'static>,
    /// Set by close/shutdown: no new session starts.
    stop: Stop,
    /// Deletes the rate-limit keys we wrote once expired (`rate.rs`, `sweeper.rs`).
    sweeper: Sweeper,
}

impl std::fmt::Debug for ZkBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkBackend")
            .field("config", &self.config)
            .field("digest", &self.digest)
            .field("tls", &self.tls.is_some())
            .field("stopped", &self.stop.is_stopped())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Backend for ZkBackend {
    async fn ensure_semaphore(&self, name: &str, capacity: Option<u32>) -> Result<u32> {
        self.open_semaphore(name, capacity).await
    }

    async fn enqueue(&self, req: &EntryRequest) -> Result<Enqueued> {
        self.enqueue_entry(req).await
    }

    async fn wait_outcome(&self, req: &EntryRequest, enq: &Enqueued) -> Result<WaitOutcome> {
        if enq.lost.is_lost() {
            return Err(Error::SessionLost);
        }
        // The session is the entry's own: a lost session would have fired `enq.lost`.
        let session = self.session.current().await;
        let view = match session {
            Some(s) => s.views.lock().await.get(&req.name).cloned(),
            None => None,
        };
        let Some(view) = view else {
            return Err(Error::SessionLost);
        };
        // A view that stops (its session ended) drops its waiters.
        view.register(enq.token, req.permits)
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
        self.list_names().await
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

    /// The ensemble from `/zookeeper/config` (`server.N=host:peer:election[:role];client`);
    /// ZooKeeper does not tell a client who leads. A standalone server has no such config: one
    /// member, the servers this Limiter was given.
    async fn members(&self) -> Result<Vec<StoreMember>> {
        let (config, _) = self
            .session_call(
                RequestKind::Range,
                "reading the ensemble's configuration",
                false,
                |c| async move { c.get_config().await },
            )
            .await?;
        Ok(nodes::ensemble(
            &String::from_utf8_lossy(&config),
            &self.hosts,
        ))
    }

    fn stats(&self) -> RequestStats {
        self.stats.snapshot()
    }

    fn rate_store(&self) -> Option<&dyn super::RateStore> {
        Some(self)
    }

    fn session_ttl(&self) -> Duration {
        self.config.session_timeout
    }

    async fn session_signal(&self) -> Option<LostSignal> {
        self.session.live_signal().await
    }

    async fn end_session(&self, of: &LostSignal) {
        // Ending it locally drops the client, which closes the session on the server.
        if self.session.end_if_current(of).await.is_some() {
            self.stats.count(RequestKind::Lease);
            self.entries.forget_session();
        }
    }

    async fn close(&self) -> Result<()> {
        self.end_locally();
        if self.session.end().await.is_some() {
            self.stats.count(RequestKind::Lease);
        }
        Ok(())
    }

    fn shutdown(&self) {
        self.end_locally();
        self.session.try_end();
    }
}

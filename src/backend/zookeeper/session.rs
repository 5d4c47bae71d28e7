//! One ZooKeeper session per Limiter, and when its permits can no longer be trusted.
//!
//! The server expires a session `T` (the negotiated timeout) after it last heard from the
//! client. A probe (`exists` on the root) every `T/3` gives a lower bound on that moment: when a
//! probe sent at `s` is answered, the server heard from us at or after `s`, so it cannot expire
//! the session before `s + T`. That instant is the session's [`SessionDeadline`]: while disconnected no
//! probe is answered, the deadline stays put, and `lost()` fires at the latest just before the
//! server could hand the permits to someone else — whatever the client library's own reconnect
//! timers do. A reconnect in time extends the deadline again: permits and waits stay intact.
//!
//! The session ends for good (never revived) when the deadline passes, the client reports
//! `Expired` (or `Closed`, `AuthFailed`), or the Limiter closes: `lost()` fires, the views stop,
//! and the client is dropped, which closes the session on the server if it is still there (so
//! ephemeral nodes of a session we gave up on do not linger). The backend builds a new session
//! for later calls.

use super::view::SemView;
use crate::backend::outage::Outage;
use crate::error::{Error, Result};
use crate::lost::{LostSignal, SessionDeadline};
use crate::stats::{RequestCounters, RequestKind};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{timeout, Instant};
use tokio_util::sync::CancellationToken;
use zookeeper_client::{self as zk, SessionState};

/// Pause before the next probe after one failed.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// What the session's tasks share.
#[derive(Debug)]
struct Shared {
    /// `None` once the session has ended: dropping the last clone closes it on the server.
    client: Mutex<Option<zk::Client>>,
    lost: LostSignal,
    stop: CancellationToken,
    /// The session's id as the client logs it (`0x…`), for our own logs.
    id: String,
}

impl Shared {
    fn end(&self) {
        if !self.stop.is_cancelled() {
            tracing::debug!(session = %self.id, "ZooKeeper session given up locally");
        }
        self.lost.fire();
        self.stop.cancel();
        let client = crate::backend::lock(&self.client).take();
        drop(client);
    }
}

/// A ZooKeeper session and the semaphore views fed by its watches.
#[derive(Debug)]
pub(super) struct ZkSession {
    shared: Arc<Shared>,
    /// The session's states, taken at connect: after [`end`](Self::end) it reports `Closed`
    /// once the server has closed the session (the client sends the close when its last clone
    /// goes), without keeping the client alive.
    states: zk::StateWatcher,
    /// One view per semaphore this session has used (made under this lock, once).
    pub views: tokio::sync::Mutex<HashMap<String, Arc<SemView>>>,
}

/// Settings for [`ZkSession::connect`].
pub(super) struct SessionConfig<'a> {
    pub hosts: &'a str,
    /// Path probed to keep the deadline (the root; it exists once connected).
    pub probe_path: &'a str,
    /// Digest credentials, sent on connect and again on every reconnect by the client.
    pub digest: Option<&'a super::auth::Digest>,
    pub identity: &'a super::auth::Identity,
    /// TLS for every connection, if any.
    pub tls: Option<&'a super::tls::Tls>,
    pub session_timeout: Duration,
    pub request_timeout: Duration,
    pub stats: Arc<RequestCounters>,
    /// What the loss of a session costs, for its log lines ([`LOSES_PERMITS`] or
    /// [`LOSES_NOTHING`]).
    pub loss: &'static str,
}

/// A session's loss, said of a store that keeps semaphores and announcements in it.
pub(super) const LOSES_PERMITS: &str = "its permits are lost";
/// A session's loss, said of a cluster of a sharded store that keeps rate-limit keys alone
/// (persistent nodes, not bound to a session).
pub(super) const LOSES_NOTHING: &str = "this cluster keeps rate-limit keys only, so nothing \
     is lost; its next request starts a new session";

impl ZkSession {
    /// Connects a new session (fails fast when no server answers) and starts its keeper.
    pub(super) async fn connect(cfg: SessionConfig<'_>) -> Result<Arc<ZkSession>> {
        let sent = Instant::now();
        cfg.stats.count(RequestKind::Lease);
        let mut connector = zk::Client::connector()
            .with_session_timeout(cfg.session_timeout)
            .with_fail_eagerly();
        if let Some(d) = cfg.digest {
            connector = connector.with_auth("digest", d.auth());
        }
        let connect = super::tls::connect(connector, cfg.tls, cfg.hosts);
        let client = timeout(cfg.request_timeout, connect)
            .await
            .map_err(|_| Error::store("timed out connecting to ZooKeeper"))?
            .map_err(|e| match e {
                zk::Error::AuthFailed => cfg.identity.rejected(),
                // The client only logs why each server failed (at debug): say what to check.
                zk::Error::NoHosts if cfg.tls.is_some() => Error::store(format!(
                    "no ZooKeeper server at {} completed a TLS connection: check that these are \
                     secureClientPort addresses, the CA certificate that signed the servers', \
                     and the client certificate if the servers require one",
                    cfg.hosts
                )),
                e => Error::store(e),
            })?;
        let negotiated = client.session_timeout();
        let shared = Arc::new(Shared {
            client: Mutex::new(Some(client.clone())),
            lost: LostSignal::new(SessionDeadline::at(sent + negotiated)),
            stop: CancellationToken::new(),
            id: client.session_id().to_string(),
        });
        let keeper = Keeper {
            shared: shared.clone(),
            client,
            probe_path: cfg.probe_path.to_string(),
            hosts: cfg.hosts.to_string(),
            timeout: negotiated,
            request_timeout: cfg.request_timeout,
            stats: cfg.stats,
            loss: cfg.loss,
        };
        let states = keeper.client.state_watcher();
        tokio::spawn(keeper.run());
        tracing::debug!(session = %shared.id, timeout = ?negotiated, "ZooKeeper session started");
        Ok(Arc::new(ZkSession {
            shared,
            states,
            views: tokio::sync::Mutex::new(HashMap::new()),
        }))
    }

    /// The client, or `SessionLost` once the session has ended.
    pub(super) fn client(&self) -> Result<zk::Client> {
        if self.shared.lost.is_lost() {
            self.shared.end();
            return Err(Error::SessionLost);
        }
        crate::backend::lock(&self.shared.client)
            .clone()
            .ok_or(Error::SessionLost)
    }

    /// Fires when the session can no longer be trusted.
    pub(super) fn lost(&self) -> &LostSignal {
        &self.shared.lost
    }

    /// Cancelled when the session ends; parent of its views' tokens.
    pub(super) fn stop_token(&self) -> &CancellationToken {
        &self.shared.stop
    }

    /// Ends the session: `lost()` fires, views stop, the client closes once its last clone
    /// (in flight elsewhere) is gone. Never blocks, never panics.
    pub(super) fn end(&self) {
        self.shared.end();
    }

    /// After [`end`](Self::end): waits, at most `bound`, until the session is closed on the
    /// server (or otherwise over), so a process that exits next does not leave its ephemeral
    /// nodes (entries, announcements, seats) to expire a session timeout later. `false` if it
    /// was not seen closed in time: the server then expires it.
    pub(super) async fn closed_on_server(&self, bound: Duration) -> bool {
        let mut states = self.states.clone();
        let closed = async {
            while !states.peek_state().is_terminated() {
                // Pending for ever if the client task ended without a state: the bound ends it.
                states.changed().await;
            }
        };
        timeout(bound, closed).await.is_ok()
    }
}

impl crate::backend::StoreSession for ZkSession {
    fn lost(&self) -> &LostSignal {
        ZkSession::lost(self)
    }

    /// Dropping the client closes the session on the server (every node of it goes); if the
    /// close does not arrive, nothing keeps the session alive and the server expires it.
    fn end_locally(&self) {
        self.end();
    }
}

/// Ends one session from a background task (see [`ZkSession::end`]) without keeping it open.
#[derive(Debug, Clone)]
pub(super) struct SessionEnd(Arc<Shared>);

impl SessionEnd {
    pub(super) fn end(&self) {
        self.0.end();
    }
}

impl ZkSession {
    /// A handle that ends this session.
    pub(super) fn end_handle(&self) -> SessionEnd {
        SessionEnd(self.shared.clone())
    }
}

impl Drop for ZkSession {
    fn drop(&mut self) {
        self.shared.end();
    }
}

/// Probes the session every `T/3`, moves the deadline, and ends the session when the client
/// reports a terminal state or the deadline passes.
struct Keeper {
    shared: Arc<Shared>,
    client: zk::Client,
    probe_path: String,
    /// The servers, named in its log lines.
    hosts: String,
    timeout: Duration,
    request_timeout: Duration,
    stats: Arc<RequestCounters>,
    loss: &'static str,
}

impl Keeper {
    async fn run(self) {
        let interval = self.timeout / 3;
        let mut states = self.client.state_watcher();
        let mut pause = interval;
        // One warning when probes start failing, one line when they work again.
        let mut outage = Outage::default();
        loop {
            tokio::select! {
                // Stop first: ending the session both stops the keeper and marks it lost.
                biased;
                _ = self.shared.stop.cancelled() => return,
                _ = self.shared.lost.lost() => {
                    if !self.shared.lost.deadline().passed() {
                        break; // marked lost by whoever noticed it
                    }
                    tracing::warn!(session = %self.client.session_id(), servers = %self.hosts, "ZooKeeper session at {} may have expired (no answer within the session timeout); {}", self.hosts, self.loss);
                    break;
                }
                state = states.changed() => {
                    match state {
                        SessionState::Expired | SessionState::Closed | SessionState::AuthFailed => {
                            let why = match state {
                                SessionState::Expired => "ZooKeeper expired the session",
                                SessionState::AuthFailed => "ZooKeeper refused the session's credentials",
                                _ => "the connection closed the session",
                            };
                            tracing::warn!(session = %self.client.session_id(), servers = %self.hosts, "ZooKeeper session at {} ended: {why}; {}", self.hosts, self.loss);
                            break;
                        }
                        _ => continue,
                    }
                }
                _ = tokio::time::sleep(pause) => {}
            }
            let sent = Instant::now();
            self.stats.count(RequestKind::Lease);
            let bound = self.request_timeout.min(interval).max(RETRY_PAUSE);
            match timeout(bound, self.client.check_stat(&self.probe_path)).await {
                Ok(Ok(_)) => {
                    self.shared.lost.deadline().extend(sent + self.timeout);
                    pause = interval;
                    outage.ok("ZooKeeper session probe");
                }
                Ok(Err(e)) if super::view::is_terminal(&e) => {
                    tracing::warn!(servers = %self.hosts, "ZooKeeper session at {} ended: {e}; {}", self.hosts, self.loss);
                    break;
                }
                Ok(Err(e)) => {
                    outage.failed("ZooKeeper session probe", &self.hosts, &e);
                    pause = RETRY_PAUSE;
                }
                Err(_) => {
                    outage.failed("ZooKeeper session probe", &self.hosts, &"no answer in time");
                    pause = RETRY_PAUSE;
                }
            }
        }
        self.shared.end();
    }
}

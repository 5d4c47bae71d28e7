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

mod auth;
mod board;
mod nodes;
mod rate;
mod scan;
mod session;
mod sweeper;
mod tls;
mod view;

use super::retry::Attempts;
use super::{lock, Backend, Enqueued, EntryRequest, SessionSlot, Stop};
use crate::backend::capacity::CapValue;
use crate::backend::waiters::{self, Outcome};
use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::lost::LostSignal;
use crate::queue;
use crate::stats::{RequestCounters, RequestKind, RequestStats};
use crate::status::{unix_ms_now, Holder, Status};
use crate::timing::GIVE_UP_AFTER_TTLS;
use async_trait::async_trait;
use auth::{Digest, Identity};
use nodes::{EntryData, EntryName, Paths};
use session::{SessionConfig, ZkSession};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use view::{EntryEvents, SemView, ViewConfig};
use zookeeper_client::{self as zk, Acls, CreateMode, Permission};

/// Settings of the ZooKeeper backend.
#[derive(Debug, Clone)]
pub struct ZkConfig {
    /// `host:port` servers.
    pub hosts: Vec<String>,
    /// Absolute path of the root node (created if absent).
    pub root: String,
    /// Requested session timeout (the server may negotiate it into its own bounds).
    pub session_timeout: Duration,
    /// Bound on each call's store requests.
    pub request_timeout: Duration,
    /// TLS to the servers' `secureClientPort` (the CA is required); `None` for plain text.
    /// Needs the `zk-tls` feature.
    pub tls: Option<crate::TlsFiles>,
    /// File holding `user:password` for digest authentication; `None`: the
    /// `CLUSTERLIMIT_ZK_DIGEST` environment variable if set, else no authentication.
    pub digest_file: Option<std::path::PathBuf>,
    /// ACL of the nodes this backend creates (`None`: creator-all + anyone-read with
    /// credentials, anyone-all without). Nodes that already exist keep theirs.
    pub acl: Option<crate::ZkAcl>,
}

/// The `zk://` backend: one session, one watch per semaphore in use.
pub struct ZkBackend {
    config: ZkConfig,
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
    sweeper: sweeper::Sweeper,
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

/// This Limiter's queue entries, by request id.
#[derive(Default)]
struct Entries {
    live: Mutex<HashMap<String, LiveEntry>>,
    /// Creates sent whose outcome is unknown (no reply yet, or the reply was lost).
    in_doubt: Mutex<HashSet<String>>,
    /// In-doubt requests given up on: their node is deleted if it ever shows up.
    abandoned: Mutex<HashSet<String>>,
    /// Set by the backend: deletes an abandoned node (a background task with a client).
    reaper: Mutex<Option<Reaper>>,
}

struct LiveEntry {
    node: String,
    lost: LostSignal,
}

type Reaper = Arc<dyn Fn(String) + Send + Sync>;

impl Entries {
    /// Forgets what belonged to a session that ended: its nodes went with it.
    fn forget_session(&self) {
        lock(&self.live).retain(|_, e| !e.lost.is_lost());
        lock(&self.in_doubt).clear();
        lock(&self.abandoned).clear();
    }
}

impl EntryEvents for Entries {
    fn appeared(&self, semaphore: &str, node: &str) {
        let Some(e) = EntryName::parse(node) else {
            return;
        };
        // A node of a request given up on, or a second node of a live request (a create
        // retried after a reconnect, whose first attempt was applied late): nobody holds it.
        let orphan = lock(&self.abandoned).remove(&e.id)
            || lock(&self.live).get(&e.id).is_some_and(|l| l.node != node);
        if orphan {
            tracing::debug!(semaphore, node, "deleting the node of an abandoned request");
            if let Some(reap) = lock(&self.reaper).clone() {
                reap(format!("{semaphore}/{node}"));
            }
        }
    }

    fn vanished(&self, node: &str) {
        let Some(e) = EntryName::parse(node) else {
            return;
        };
        let gone = {
            let mut live = lock(&self.live);
            match live.get(&e.id) {
                Some(l) if l.node == node => live.remove(&e.id),
                _ => None,
            }
        };
        if let Some(l) = gone {
            tracing::warn!(node, "permit node deleted behind our back; permit lost");
            l.lost.fire();
        }
    }
}

/// How one create attempt ended.
enum Created {
    Node {
        token: u64,
        node: String,
    },
    /// The connection dropped: the create may or may not have been applied.
    InDoubt,
}

impl ZkBackend {
    /// Connects the session and creates the root nodes if absent. Fails fast if no server
    /// answers.
    pub async fn connect(config: ZkConfig) -> Result<ZkBackend> {
        let tls = config.tls.as_ref().map(tls::Tls::load).transpose()?;
        let digest = Digest::load(config.digest_file.as_deref())?;
        let acls = auth::node_acls(config.acl, digest.as_ref())?;
        super::reach::any_reachable("ZooKeeper", &config.hosts).await?;
        let stop = Stop::default();
        let stats = Arc::new(RequestCounters::default());
        let backend = ZkBackend {
            sweeper: sweeper::Sweeper::new(
                stop.child_token(),
                stats.clone(),
                config.request_timeout,
            ),
            identity: Identity::of(digest.as_ref()),
            digest,
            tls,
            acls,
            hosts: config.hosts.join(","),
            paths: Paths::new(&config.root),
            config,
            stats,
            session: SessionSlot::default(),
            entries: Arc::new(Entries::default()),
            stop,
        };
        let session = backend.session().await?;
        let client = session.client()?;
        let dir = backend.paths.semaphores();
        let made = backend
            .call(RequestKind::Put, async {
                client
                    .mkdir(&dir, &CreateMode::Persistent.with_acls(backend.acls))
                    .await
            })
            .await;
        match made {
            Ok(()) => {}
            // ZooKeeper checks the parent's ACL before whether the node exists: a client that
            // may only read (another identity, or none) gets NoAuth for a root that is there.
            Err(e) if is_zk(&e, &zk::Error::NoAuth) => {
                let there = backend
                    .call(RequestKind::Range, client.check_stat(&dir))
                    .await?;
                if there.is_none() {
                    return Err(backend
                        .identity
                        .denied(&format!("creating the root node {dir}")));
                }
            }
            Err(e) => return Err(e),
        }
        backend.warn_if_open(&client, &dir).await;
        Ok(backend)
    }

    /// With creator ACLs, says so if an existing node we rely on (the semaphores' node, a
    /// semaphore) is open to everyone, e.g. made by an earlier version without credentials:
    /// clusterlimit never changes an existing node's ACL, and ZooKeeper checks a parent's ACL
    /// for creating and deleting children, so anyone could still add or delete what is under
    /// it. One read, best effort.
    async fn warn_if_open(&self, client: &zk::Client, dir: &str) {
        if self.acls == Acls::anyone_all() {
            return;
        }
        if let Ok((acls, _)) = self.call(RequestKind::Range, client.get_acl(dir)).await {
            let open = acls.iter().any(|a| {
                let p = a.permission();
                a.scheme() == "world"
                    && [Permission::WRITE, Permission::CREATE, Permission::DELETE]
                        .into_iter()
                        .any(|w| p.has(w))
            });
            if open {
                tracing::warn!(
                    node = dir,
                    "this node lets anyone write (created without ACLs), so anyone may add or delete what is under it; clusterlimit does not change existing ACLs: restrict it with setAcl or use a new chroot"
                );
            }
        }
    }

    /// The live session, or a new one if the last one was lost.
    async fn session(&self) -> Result<Arc<ZkSession>> {
        // Entries of a replaced session are gone with it.
        let forget = |_: &ZkSession| self.entries.forget_session();
        self.session
            .live_or_start(&self.stop, forget, || async {
                let s = ZkSession::connect(SessionConfig {
                    hosts: &self.hosts,
                    probe_path: self.paths.root(),
                    digest: self.digest.as_ref(),
                    tls: self.tls.as_ref(),
                    identity: &self.identity,
                    session_timeout: self.config.session_timeout,
                    request_timeout: self.config.request_timeout,
                    stats: self.stats.clone(),
                })
                .await?;
                *lock(&self.entries.reaper) = Some(self.reaper(&s)?);
                Ok(s)
            })
            .await
    }

    /// Deletes the nodes of abandoned requests in the background, under the rule of
    /// `release.rs`: retried until ZooKeeper confirms it or the session ends, and if it stays
    /// unconfirmed for two session timeouts, the session is ended so the node goes for certain.
    fn reaper(&self, session: &ZkSession) -> Result<Reaper> {
        let client = session.client()?;
        let stop = session.stop_token().clone();
        let ender = session.end_handle();
        let root = self.paths.semaphores();
        let stats = self.stats.clone();
        let bound = self.config.request_timeout;
        let give_up_after = self.config.session_timeout * GIVE_UP_AFTER_TTLS;
        // Holds a client clone only while a delete runs; ends with the session.
        let client = Arc::new(Mutex::new(Some(client)));
        let stopper = client.clone();
        let stop_watch = stop.clone();
        tokio::spawn(async move {
            stop_watch.cancelled().await;
            lock(&stopper).take();
        });
        Ok(Arc::new(move |rel: String| {
            let Some(client) = lock(&client).clone() else {
                return;
            };
            let path = format!("{root}/{rel}");
            let (stats, stop, ender) = (stats.clone(), stop.clone(), ender.clone());
            tokio::spawn(async move {
                let give_up_at = Instant::now() + give_up_after;
                let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
                loop {
                    stats.count(RequestKind::Delete);
                    let r = tokio::select! {
                        _ = stop.cancelled() => return, // the session ended: the node went too
                        r = tokio::time::timeout(bound, client.delete(&path, None)) => r,
                    };
                    match r {
                        Ok(Ok(())) | Ok(Err(zk::Error::NoNode)) => return,
                        Ok(Err(e)) if view::is_terminal(&e) => return,
                        Ok(Err(e)) => {
                            tracing::debug!(%path, error = %e, "deleting an abandoned node failed; retrying")
                        }
                        Err(_) => {
                            tracing::debug!(%path, "deleting an abandoned node timed out; retrying")
                        }
                    }
                    if Instant::now() >= give_up_at {
                        tracing::error!(%path, "an abandoned node could not be deleted within {GIVE_UP_AFTER_TTLS} session timeouts; ending the session so ZooKeeper removes it");
                        ender.end();
                        return;
                    }
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(backoff.pause()) => {}
                    }
                }
            });
        }))
    }

    /// One store request, bounded by the request timeout; `kind` is counted.
    async fn call<T>(
        &self,
        kind: RequestKind,
        request: impl Future<Output = std::result::Result<T, zk::Error>>,
    ) -> Result<T> {
        self.stats.count(kind);
        match tokio::time::timeout(self.config.request_timeout, request).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.map_error(e)),
            Err(_) => Err(Error::store("ZooKeeper did not answer in time")),
        }
    }

    fn map_error(&self, e: zk::Error) -> Error {
        match e {
            zk::Error::AuthFailed => self.identity.rejected(),
            e if view::is_terminal(&e) => Error::SessionLost,
            e => Error::store(e),
        }
    }

    /// `e`, or if it is a `NoAuth` answer, an error saying that the ACL denied `what`.
    fn denied_as(&self, e: Error, what: impl FnOnce() -> String) -> Error {
        if is_zk(&e, &zk::Error::NoAuth) {
            self.identity.denied(&what())
        } else {
            e
        }
    }

    /// The session's view of `name`, set up on first use (3 requests: watch, children, data).
    async fn view(&self, session: &ZkSession, name: &str) -> Result<Arc<SemView>> {
        let mut views = session.views.lock().await;
        if let Some(v) = views.get(name) {
            if v.is_live() {
                return Ok(v.clone());
            }
        }
        let cfg = ViewConfig {
            client: session.client()?,
            name: name.to_string(),
            path: self.paths.semaphore(name),
            stats: self.stats.clone(),
            events: self.entries.clone(),
        };
        let start = SemView::start(cfg, session.stop_token().child_token());
        let view = match tokio::time::timeout(self.config.request_timeout, start).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => return Err(self.map_error(e)),
            Err(_) => return Err(Error::store("ZooKeeper did not answer in time")),
        };
        views.insert(name.to_string(), view.clone());
        Ok(view)
    }

    /// The enqueue of `req` failed, and nobody will ask for its id again: a create of it
    /// whose outcome is unknown (timed out, reply lost) may still apply, late (a member that
    /// was hung commits it when it resumes). Delete its node if it shows up, or now if the view
    /// shows it already.
    fn abandon_in_doubt(&self, view: &SemView, req: &EntryRequest) {
        if !lock(&self.entries.in_doubt).remove(&req.id) {
            return;
        }
        lock(&self.entries.abandoned).insert(req.id.clone());
        let shown = view.nodes_of(&req.id);
        if shown.is_empty() {
            return;
        }
        lock(&self.entries.abandoned).remove(&req.id);
        if let Some(reap) = lock(&self.entries.reaper).clone() {
            for node in shown {
                tracing::debug!(semaphore = %req.name, %node, "deleting the node of a failed enqueue");
                reap(format!("{}/{node}", req.name));
            }
        }
    }

    /// Sends the create of `req`'s node once.
    async fn create_once(
        &self,
        client: &zk::Client,
        req: &EntryRequest,
        deadline: Instant,
    ) -> Result<Created> {
        let prefix = self.paths.entry_prefix(&req.name, req.permits, &req.id);
        let data = EntryData {
            owner: req.owner.clone(),
            since_unix_ms: unix_ms_now(),
        }
        .encode();
        let options = CreateMode::EphemeralSequential.with_acls(self.acls);
        self.stats.count(RequestKind::Put);
        lock(&self.entries.in_doubt).insert(req.id.clone());
        let settled = |e: &Self| lock(&e.entries.in_doubt).remove(&req.id);
        match tokio::time::timeout_at(deadline, client.create(&prefix, &data, &options)).await {
            Ok(Ok((_, seq))) => {
                settled(self);
                let token = u64::try_from(seq.into_i64())
                    .map_err(|_| Error::store("ZooKeeper returned a negative sequence number"))?
                    + 1;
                let node = EntryName::node(req.permits, &req.id, token);
                Ok(Created::Node { token, node })
            }
            Ok(Err(e)) if view::is_connection_error(&e) => Ok(Created::InDoubt),
            Ok(Err(zk::Error::NoNode)) => {
                settled(self);
                Err(Error::NotFound(req.name.clone()))
            }
            Ok(Err(e)) => {
                settled(self);
                Err(self.denied_as(self.map_error(e), || {
                    format!("adding an entry to semaphore {:?}", req.name)
                }))
            }
            // Still queued or in flight: it stays in doubt, so a late node is deleted.
            Err(_) => Err(Error::store("ZooKeeper did not answer the create in time")),
        }
    }

    /// Creates `req`'s node, retrying across reconnects; a create whose reply was lost is found
    /// again in the view by its request id. Returns `(token, node)`.
    async fn create_entry(
        &self,
        session: &ZkSession,
        view: &SemView,
        req: &EntryRequest,
    ) -> Result<(u64, String)> {
        let client = session.client()?;
        let deadline = Attempts::new(self.config.request_timeout).deadline();
        loop {
            let snapshots = view.snapshots();
            match self.create_once(&client, req, deadline).await? {
                Created::Node { token, node } => return Ok((token, node)),
                Created::InDoubt => {
                    tracing::debug!(semaphore = %req.name, id = %req.id, "create reply lost; looking for the node after the reconnect");
                    // A snapshot taken after the loss shows the node if the create was applied.
                    let resynced = view.wait_progress(deadline, |(_, n)| n > snapshots).await;
                    if session.lost().is_lost() {
                        return Err(Error::SessionLost);
                    }
                    if !resynced {
                        return Err(Error::store("ZooKeeper connection lost during the create"));
                    }
                    if let Some((token, permits)) = view.find(&req.id) {
                        lock(&self.entries.in_doubt).remove(&req.id);
                        return Ok((token, EntryName::node(permits, &req.id, token)));
                    }
                }
            }
        }
    }

    /// Reads the semaphore's children: `(entries in order, node names by token)`.
    async fn read_queue(
        &self,
        client: &zk::Client,
        name: &str,
    ) -> Result<(Vec<queue::Entry>, HashMap<u64, String>)> {
        let path = self.paths.semaphore(name);
        let (children, _) = self
            .call(RequestKind::Range, client.get_children(&path))
            .await
            .map_err(|e| not_found_as(e, name))?;
        let mut entries = Vec::new();
        let mut nodes = HashMap::new();
        for node in children {
            if let Some(e) = EntryName::parse(&node) {
                entries.push(queue::Entry {
                    token: e.token(),
                    permits: e.permits,
                });
                nodes.insert(e.token(), node);
            }
        }
        entries.sort_by_key(|e| e.token);
        Ok((entries, nodes))
    }

    /// Reads the capacity record and its data version.
    async fn read_capacity(&self, client: &zk::Client, name: &str) -> Result<(CapValue, i32)> {
        let path = self.paths.semaphore(name);
        let (data, stat) = self
            .call(RequestKind::Range, client.get_data(&path))
            .await
            .map_err(|e| not_found_as(e, name))?;
        let cap = CapValue::parse(&data)
            .ok_or_else(|| Error::store(format!("unreadable capacity at {path}")))?;
        Ok((cap, stat.version))
    }

    fn end_locally(&self) {
        self.stop.stop();
        for (_, l) in lock(&self.entries.live).drain() {
            l.lost.fire();
        }
    }
}

/// Whether `e` is the ZooKeeper error `z`.
fn is_zk(e: &Error, z: &zk::Error) -> bool {
    matches!(e, Error::Store(inner) if inner.downcast_ref::<zk::Error>() == Some(z))
}

/// A `NoNode` store error for the semaphore's node means the semaphore does not exist.
fn not_found_as(e: Error, name: &str) -> Error {
    if is_zk(&e, &zk::Error::NoNode) {
        Error::NotFound(name.to_string())
    } else {
        e
    }
}

#[async_trait]
impl Backend for ZkBackend {
    async fn ensure_semaphore(&self, name: &str, capacity: Option<u32>) -> Result<u32> {
        let session = self.session().await?;
        let known = {
            let views = session.views.lock().await;
            views.get(name).filter(|v| v.is_live()).cloned()
        };
        let view = match known {
            // The watch keeps it current: no request.
            Some(v) if v.capacity().is_some() => v,
            _ => {
                let mut denied = None;
                if let Some(c) = capacity {
                    let client = session.client()?;
                    let path = self.paths.semaphore(name);
                    let data = CapValue::new(c).encode();
                    let created = self
                        .call(
                            RequestKind::Put,
                            client.create(
                                &path,
                                &data,
                                &CreateMode::Persistent.with_acls(self.acls),
                            ),
                        )
                        .await;
                    match created {
                        Ok(_) => {}
                        Err(e) if is_zk(&e, &zk::Error::NodeExists) => {
                            self.warn_if_open(&client, &path).await;
                        }
                        // It may exist (ZooKeeper checks the ACL first): the view tells.
                        Err(e) if is_zk(&e, &zk::Error::NoAuth) => denied = Some(e),
                        Err(e) => return Err(e),
                    }
                }
                let view = self.view(&session, name).await?;
                if let (Some(e), None) = (denied, view.capacity()) {
                    return Err(self.denied_as(e, || format!("creating semaphore {name:?}")));
                }
                if capacity.is_some() && view.capacity().is_none() {
                    // A view that watched the absent semaphore learns of our create from its
                    // event, which precedes the create's reply: wait for it to be applied.
                    let limit = Instant::now() + self.config.request_timeout;
                    view.wait_progress(limit, |_| view.capacity().is_some())
                        .await;
                }
                view
            }
        };
        let stored = view
            .capacity()
            .ok_or_else(|| Error::NotFound(name.to_string()))?;
        match capacity {
            Some(c) if c != stored => Err(Error::CapacityMismatch {
                stored,
                requested: c,
            }),
            _ => Ok(stored),
        }
    }

    async fn enqueue(&self, req: &EntryRequest) -> Result<Enqueued> {
        let session = self.session().await?;
        let view = self.view(&session, &req.name).await?;
        // The weight is checked once the view has applied every change made before our entry
        // (below): a capacity changed just now may not be in the view yet.
        if view.capacity().is_none() {
            return Err(Error::NotFound(req.name.clone()));
        }
        let (token, node) = match self.create_entry(&session, &view, req).await {
            Ok(created) => created,
            Err(e) => {
                self.abandon_in_doubt(&view, req);
                return Err(e);
            }
        };
        let lost = session.lost().child();
        lock(&self.entries.live).insert(
            req.id.clone(),
            LiveEntry {
                node: node.clone(),
                lost: lost.clone(),
            },
        );
        // A create retried after a lost reply may have applied twice, the first one late. A
        // second node of ours that the view showed while our create was in doubt was left
        // alone then (it could have been the one we would keep): delete it now. One that
        // shows up from here on is caught by `appeared`, as `live` knows which node is ours.
        let extra: Vec<String> = view
            .nodes_of(&req.id)
            .into_iter()
            .filter(|n| *n != node)
            .collect();
        if !extra.is_empty() {
            if let Some(reap) = lock(&self.entries.reaper).clone() {
                for other in extra {
                    tracing::debug!(semaphore = %req.name, node = %other, "deleting a second node of one request (a create applied late)");
                    reap(format!("{}/{other}", req.name));
                }
            }
        }
        // Our node's creation event precedes the create's reply; the view applies it promptly.
        let limit = Instant::now() + self.config.request_timeout;
        if !view.wait_progress(limit, |(seen, _)| seen > token).await {
            return Err(if session.lost().is_lost() {
                Error::SessionLost
            } else {
                Error::store("the semaphore watch did not report our own entry in time")
            });
        }
        let granted = match view.outcome(token, req.permits) {
            Some(Outcome::Granted) => true,
            Some(Outcome::TooHeavy(cap)) => return Err(waiters::over_capacity(req, cap)),
            Some(other) => {
                return Err(other
                    .into_result(req, &lost)
                    .err()
                    .unwrap_or(Error::SessionLost))
            }
            None => false,
        };
        Ok(Enqueued {
            token,
            granted,
            lost,
        })
    }

    async fn wait_outcome(&self, req: &EntryRequest, enq: &Enqueued) -> Result<Outcome> {
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
        // Forget it first: our own delete must not look like a node deleted behind our back.
        let live = lock(&self.entries.live).remove(id);
        if self.stop.is_stopped() {
            return Ok(()); // close() ended the session, and every node of it
        }
        if live.as_ref().is_some_and(|l| l.lost.is_lost()) {
            return Ok(()); // its session is gone, and the node with it
        }
        let session = self.session().await?;
        let node = match live {
            Some(l) => Some(l.node),
            None => {
                let known = session.views.lock().await.get(name).cloned();
                let shown = || {
                    known
                        .as_ref()
                        .and_then(|v| v.find(id))
                        .map(|(token, permits)| EntryName::node(permits, id, token))
                };
                match shown() {
                    Some(node) => Some(node),
                    // Created by a request whose reply never came: delete that node if it ever
                    // shows up; if the view showed it between the look above and the mark,
                    // `appeared` did not know it was abandoned then: delete it here.
                    None if lock(&self.entries.in_doubt).remove(id) => {
                        lock(&self.entries.abandoned).insert(id.to_string());
                        let late = shown();
                        if late.is_some() {
                            lock(&self.entries.abandoned).remove(id);
                        }
                        late
                    }
                    None => None,
                }
            }
        };
        let Some(node) = node else {
            return Ok(()); // never created, or abandoned until it shows up
        };
        let client = session.client()?;
        let path = self.paths.entry(name, &node);
        // A delete is idempotent (NoNode: done), so a connection broken under it (a failover,
        // a blip) is retried on the reconnected client, within the call's deadline and while
        // the session lives.
        let mut attempts = Attempts::new(self.config.request_timeout);
        loop {
            let e = match self
                .call(RequestKind::Delete, client.delete(&path, None))
                .await
            {
                Ok(()) => return Ok(()),
                Err(e) if is_zk(&e, &zk::Error::NoNode) => return Ok(()),
                Err(e) if is_zk(&e, &zk::Error::NoAuth) => {
                    return Err(self.denied_as(e, || format!("deleting the entry node {path}")))
                }
                Err(e) => e,
            };
            let broken = matches!(&e, Error::Store(inner)
                if inner.downcast_ref::<zk::Error>().is_some_and(view::is_connection_error));
            if !broken || session.lost().is_lost() || !attempts.again(true).await {
                return Err(e);
            }
            tracing::debug!(%path, error = %e, "release interrupted by a connection error; retrying");
        }
    }

    async fn status(&self, name: &str) -> Result<Status> {
        let session = self.session().await?;
        let client = session.client()?;
        // The queue first, then the capacity: never a capacity older than the queue.
        let (entries, nodes) = self.read_queue(&client, name).await?;
        let (cap, _) = self.read_capacity(&client, name).await?;
        let n = queue::holders(entries.iter().copied(), cap.capacity, cap.floor);
        // Owners of the holders and waiters, in one multi-read.
        let mut reader = client.new_multi_reader();
        for e in &entries {
            let node = nodes.get(&e.token).map(String::as_str).unwrap_or_default();
            reader
                .add_get_data(&self.paths.entry(name, node))
                .map_err(Error::store)?;
        }
        let data = if entries.is_empty() {
            Vec::new()
        } else {
            self.call(RequestKind::Range, reader.commit()).await?
        };
        let mut holders = Vec::with_capacity(n);
        let mut waiters = Vec::with_capacity(entries.len().saturating_sub(n));
        for (i, (e, d)) in entries.iter().zip(data).enumerate() {
            // An entry released or withdrawn since the listing is no longer there.
            let zk::MultiReadResult::Data { data, stat } = d else {
                continue;
            };
            let v = EntryData::parse(&data);
            let row = if i < n { &mut holders } else { &mut waiters };
            row.push(Holder {
                owner: v.as_ref().map_or_else(|| "?".into(), |v| v.owner.clone()),
                permits: e.permits,
                fencing_token: e.token,
                since_unix_ms: v
                    .map_or(u64::try_from(stat.ctime).unwrap_or(0), |v| v.since_unix_ms),
            });
        }
        Ok(Status::from_queue(name, cap.capacity, holders, waiters))
    }

    async fn set_capacity(&self, name: &str, capacity: u32) -> Result<()> {
        let session = self.session().await?;
        let client = session.client()?;
        let path = self.paths.semaphore(name);
        // Read, compute, compare-and-set (on the data version); a write that lost a race reads
        // again.
        let mut attempts = Attempts::new(self.config.request_timeout);
        loop {
            let (old, version) = self.read_capacity(&client, name).await?;
            let mut writer = client.new_multi_writer();
            let mut floor = old.floor;
            if capacity < old.capacity {
                // Shrinking grandfathers the holders of now. The write checks that the capacity
                // and every one of them are unchanged, so no waiter was granted in between.
                let (entries, nodes) = self.read_queue(&client, name).await?;
                floor = queue::floor_after_resize(&entries, old.capacity, capacity, old.floor);
                if floor != old.floor {
                    let n = queue::holders(entries.iter().copied(), old.capacity, old.floor);
                    for e in &entries[..n] {
                        let node = nodes.get(&e.token).map(String::as_str).unwrap_or_default();
                        writer
                            .add_check_version(&self.paths.entry(name, node), 0)
                            .map_err(Error::store)?;
                    }
                }
            }
            writer
                .add_set_data(&path, &CapValue { capacity, floor }.encode(), Some(version))
                .map_err(Error::store)?;
            let commit = writer.commit();
            let written = self
                .call(RequestKind::Txn, async {
                    commit.await.map_err(zk::Error::from)
                })
                .await;
            match written {
                Ok(_) => return Ok(()),
                // Something changed since the read (or a holder left): read again.
                Err(e) if is_zk(&e, &zk::Error::BadVersion) || is_zk(&e, &zk::Error::NoNode) => {}
                Err(e) => {
                    let e = self.denied_as(e, || format!("setting the capacity of {name:?}"));
                    return Err(not_found_as(e, name));
                }
            }
            if !attempts.again(true).await {
                return Err(Error::store(format!(
                    "semaphore {name:?} kept changing; capacity not set, try again"
                )));
            }
        }
    }

    async fn list(&self) -> Result<Vec<String>> {
        let session = self.session().await?;
        let client = session.client()?;
        let dir = self.paths.semaphores();
        let mut names = match self
            .call(RequestKind::Range, client.list_children(&dir))
            .await
        {
            Ok(names) => names,
            Err(e) if is_zk(&e, &zk::Error::NoNode) => Vec::new(),
            Err(e) => return Err(e),
        };
        names.sort();
        Ok(names)
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
    async fn members(&self) -> Result<Vec<crate::StoreMember>> {
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

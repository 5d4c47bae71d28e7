//! A local, watch-fed copy of one semaphore (capacity + queue), shared by every waiter and
//! acquire of one session. It is what makes an uncontended acquire one request (the create: the
//! view already knows the queue ahead of it) and a release herd-free (one delete; each watching
//! process gets one event and nobody re-reads).
//!
//! How it stays exact:
//! * It is fed by a persistent recursive watch on the semaphore node, set up before the first
//!   read. ZooKeeper sends a session's watch events before the responses of its later requests,
//!   so once our create's reply is in, the event of our own node is already on its way.
//! * A snapshot is `getChildren` and then `getData` (capacity). Creation events arrive in
//!   creation (= sequence) order, so after a snapshot whose highest entry is `M`, a creation
//!   event for an entry `<= M` is already reflected (present, or deleted before the snapshot) and is
//!   skipped; deleting an absent entry is a no-op. An entry created after `M` and deleted before
//!   the snapshot may appear briefly until its deletion event is applied: that only ever blocks
//!   waiters, never grants. (The parent's `cversion` is no watermark: on ZooKeeper 3.8 it also
//!   counts deletions, while sequence numbers count creations.) The capacity is always read
//!   after the queue it is combined with: queues only lose entries ahead of a waiter, so a newer
//!   capacity with an older queue never over-grants.
//! * Events are applied one at a time by one task, which also does every read, so a snapshot
//!   or capacity read and the events queued behind it are applied in order.
//! * After a reconnect the view adds its watch again and reads a new snapshot: zookeeper-client
//!   0.11.2 does not re-register persistent watches on a new connection (its `resend_watches`
//!   only ever sends the old `SetWatches` lists), and even re-registered ones lose the events of
//!   the disconnected time (ZOOKEEPER-4698).
//! * An entry is decided only once the view has seen its creation (`seen > token`).
//! * An entry's weight is its name's, or lower once a shrink stored a lower one in its data
//!   (`shrink.rs`). The snapshot reads every entry's data with the capacity (one multi-read,
//!   `entry_weights.rs`), and each data change event of an entry reads that entry's data and
//!   the capacity again (one multi-read): a weight is only ever combined with a capacity of
//!   the same point or newer, since a lowered weight with a capacity older than it could grant
//!   past a capacity lowered in between. The queue may be older than both: it only ever holds
//!   entries that have left since, which blocks waiters, never grants them.
//! * A fair semaphore's record (`<name>/fair`) is read first in a snapshot (before the listing
//!   it is combined with), and again for each of its creation or data-change events, in order
//!   with the queue's events; such a read may be ahead of the queue applied so far, and then
//!   decides no grant until the queue has caught up (`fair_record.rs`). Each change of the view
//!   that makes the fair rule grant one of its waiters hands the grant to its `Granter`.

use super::entry_weights;
use super::fair_grants::Granter;
use super::fair_record::{Fair, FairState, GrantPlan};
use super::nodes::{EntryData, EntryName};
use super::view_queue::{install_capacity, note_shrink, Queue};
use crate::backend::capacity::CapValue;
use crate::backend::waiters::{WaitOutcome, Waiters};
use crate::stats::{RequestCounters, RequestKind};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;
use zookeeper_client::{self as zk, AddWatchMode, EventType, SessionState};

#[derive(Debug, Default)]
struct State {
    queue: Queue,
    waiters: Waiters,
    /// Events may have been missed since the last snapshot (disconnected).
    stale: bool,
    /// The watch is gone for good (session ended, view stopped): nothing will be decided.
    dead: bool,
}

/// Told about entries the view sees appear and vanish (by node name), outside the view's lock.
pub(super) trait EntryEvents: Send + Sync {
    /// A queue entry appeared (from an event or a snapshot).
    fn appeared(&self, semaphore: &str, node: &str);
    /// A queue entry vanished.
    fn vanished(&self, node: &str);
}

/// What the view's task needs.
pub(super) struct ViewConfig {
    pub client: zk::Client,
    pub name: String,
    pub path: String,
    pub stats: Arc<RequestCounters>,
    pub events: Arc<dyn EntryEvents>,
    /// The fair record's path, and who writes the grants the view decides.
    pub fair_path: String,
    pub granter: Arc<Granter>,
}

/// The watch-fed view of one semaphore.
pub(super) struct SemView {
    state: Mutex<State>,
    /// Bumped after every applied change and snapshot: `(seen, snapshots)`.
    progress: watch::Sender<(u64, u64)>,
    stop: CancellationToken,
    granter: Arc<Granter>,
}

impl std::fmt::Debug for SemView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemView").finish_non_exhaustive()
    }
}

/// Pause between attempts to read a snapshot that failed while connected.
const RESYNC_PAUSE: Duration = Duration::from_millis(100);
const RESYNC_MAX_PAUSE: Duration = Duration::from_secs(2);

impl SemView {
    /// Sets up the watch, reads the first snapshot (3 requests: the fair record, the listing,
    /// the entries' data with the capacity) and starts the task. Returns
    /// the view even when the semaphore does not exist (then `capacity()` is `None`).
    pub(super) async fn start(
        cfg: ViewConfig,
        stop: CancellationToken,
    ) -> Result<Arc<SemView>, zk::Error> {
        cfg.stats.count(RequestKind::Watch);
        let watcher = cfg
            .client
            .watch(&cfg.path, AddWatchMode::PersistentRecursive)
            .await?;
        let view = Arc::new(SemView {
            state: Mutex::new(State::default()),
            progress: watch::Sender::new((0, 0)),
            stop,
            granter: cfg.granter.clone(),
        });
        view.resync(&cfg).await?;
        tokio::spawn(view.clone().run(cfg, watcher));
        Ok(view)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        crate::backend::lock(&self.state)
    }

    /// Whether the view still follows the store.
    pub(super) fn is_live(&self) -> bool {
        !self.stop.is_cancelled() && !self.lock().dead
    }

    /// Stored capacity as far as the view knows; `None` if the semaphore does not exist.
    pub(super) fn capacity(&self) -> Option<u32> {
        self.lock().queue.cap.map(|c| c.capacity)
    }

    /// The entry made by request `id`, if the view has it: `(token, node name)`.
    pub(super) fn find(&self, id: &str) -> Option<(u64, String)> {
        self.lock()
            .queue
            .entries
            .iter()
            .find(|(_, e)| e.id == id)
            .map(|(&token, e)| (token, e.node.clone()))
    }

    /// What the view knows of the semaphore's fair record.
    pub(super) fn fair(&self) -> Fair {
        self.lock().queue.fair.clone()
    }

    /// The grant to write when the fair rule, on the view, picks entry `token` now.
    pub(super) fn plan_with(&self, token: u64) -> Option<GrantPlan> {
        self.lock()
            .queue
            .plan(None)
            .filter(|p| p.grants.contains(&token))
    }

    /// The grant a release of entry `token` makes on a fair semaphore, from the view (`None`:
    /// a plain semaphore, or nothing to grant).
    pub(super) fn release_plan(&self, token: u64) -> Option<GrantPlan> {
        self.lock().queue.plan(Some(token))
    }

    /// Node names of every entry of request `id` the view holds (normally at most one; two
    /// when a create retried after a lost reply was also applied late).
    pub(super) fn nodes_of(&self, id: &str) -> Vec<String> {
        self.lock()
            .queue
            .entries
            .iter()
            .filter(|(_, e)| e.id == id)
            .map(|(_, e)| e.node.clone())
            .collect()
    }

    /// Data version of the capacity the view holds (-1: none).
    pub(super) fn capacity_version(&self) -> i32 {
        self.lock().queue.cap_version
    }

    /// The exact floor of the shrink written as data `version`, if this view applied that
    /// change right after the one before it (so its queue was the queue of that moment).
    pub(super) fn shrink_floor(&self, version: i32) -> Option<u64> {
        self.lock()
            .queue
            .shrink_floor
            .filter(|(v, _)| *v == version)
            .map(|(_, floor)| floor)
    }

    /// Number of snapshots read so far (to wait for one taken after some moment).
    pub(super) fn snapshots(&self) -> u64 {
        self.progress.borrow().1
    }

    /// Waits until `until` says yes about `(seen, snapshots)`, the view dies, or `limit` passes.
    /// Returns whether `until` said yes.
    pub(super) async fn wait_progress(
        &self,
        limit: tokio::time::Instant,
        until: impl Fn((u64, u64)) -> bool,
    ) -> bool {
        let mut rx = self.progress.subscribe();
        let done = async {
            loop {
                // Copied out first: the watch's guard must not be held while `until` locks.
                let progress = *rx.borrow_and_update();
                if until(progress) {
                    return true;
                }
                if !self.is_live() || rx.changed().await.is_err() {
                    return false;
                }
            }
        };
        tokio::select! {
            r = done => r,
            _ = tokio::time::sleep_until(limit) => false,
            _ = self.stop.cancelled() => false,
        }
    }

    /// The outcome for entry `token` now (`None`: it waits, or the view has not seen it yet).
    pub(super) fn outcome(&self, token: u64, permits: u32) -> Option<WaitOutcome> {
        crate::backend::waiters::outcome(&self.lock().queue, token, permits)
    }

    /// Registers a waiter; the receiver gets its outcome once decided, and an error if the view
    /// dies first.
    pub(super) fn register(&self, token: u64, permits: u32) -> oneshot::Receiver<WaitOutcome> {
        let st = &mut *self.lock();
        if st.dead || self.stop.is_cancelled() {
            // The sender is dropped at once: the receiver reports an error.
            return oneshot::channel().1;
        }
        let rx = st.waiters.register(&st.queue, token, permits);
        if let Some(plan) = st.queue.plan_for(&st.waiters) {
            self.granter.kick(plan);
        }
        rx
    }

    fn publish(&self, st: &mut State) {
        st.waiters.resolve(&st.queue);
        let seen = st.queue.seen;
        self.progress.send_modify(|p| p.0 = seen);
        if let Some(plan) = st.queue.plan_for(&st.waiters) {
            self.granter.kick(plan);
        }
    }

    fn die(&self) {
        self.granter.close();
        let mut st = self.lock();
        st.dead = true;
        // Dropping the senders tells every waiter the view is gone.
        st.waiters = Waiters::default();
        drop(st);
        self.progress.send_modify(|_| {});
    }

    async fn run(self: Arc<Self>, cfg: ViewConfig, mut watcher: zk::PersistentWatcher) {
        loop {
            let event = tokio::select! {
                // Stop first: once the session is given up its client goes, and
                // zookeeper-client's watcher panics if polled after its channel closed.
                biased;
                _ = self.stop.cancelled() => break,
                e = watcher.changed() => e,
            };
            match event.event_type {
                EventType::Session => match event.session_state {
                    SessionState::Disconnected => self.lock().stale = true,
                    SessionState::SyncConnected | SessionState::ConnectedReadOnly => {
                        if self.lock().stale {
                            // Stopped meanwhile: leave at once (below), so the session's client
                            // is not kept alive by this task after the session was given up.
                            let renewed = tokio::select! {
                                biased;
                                _ = self.stop.cancelled() => break,
                                r = self.rewatch(&cfg) => r,
                            };
                            if let Some(fresh) = renewed {
                                // The new watcher gets every event from its registration on;
                                // the old one got nothing since the disconnect.
                                watcher = fresh;
                            }
                        }
                    }
                    // Terminal (expired, closed, auth failed): the watcher must not be polled
                    // again, and the session's owner reports the loss.
                    _ => break,
                },
                EventType::NodeCreated | EventType::NodeDeleted | EventType::NodeDataChanged => {
                    tokio::select! {
                        biased;
                        _ = self.stop.cancelled() => break,
                        () = self.apply(&cfg, event.event_type, &event.path) => {}
                    }
                }
                EventType::NodeChildrenChanged => {}
            }
        }
        self.die();
        // `cfg` (and its clone of the session's client) goes here: a session given up on is
        // closed on the server, or expires there, rather than kept alive by a view (a request
        // of this task on a hung connection would otherwise hold it until the member wakes up,
        // and the client would reconnect, keeping that session's ephemeral nodes).
        drop(cfg);
    }

    async fn apply(&self, cfg: &ViewConfig, kind: EventType, path: &str) {
        if path == cfg.path {
            match kind {
                EventType::NodeDataChanged => {
                    if let Err(e) = self.read_capacity(cfg).await {
                        tracing::debug!(semaphore = %cfg.name, error = %e, "capacity read failed; reading a snapshot");
                        self.resync_until_done(cfg).await;
                    }
                }
                EventType::NodeDeleted => {
                    let mut st = self.lock();
                    install_capacity(&mut st.queue, None);
                    self.publish(&mut st);
                }
                // Created again after a delete: start over.
                _ => self.resync_until_done(cfg).await,
            }
            return;
        }
        if path == cfg.fair_path {
            self.apply_fair(cfg, kind).await;
            return;
        }
        let Some(node) = path
            .strip_prefix(cfg.path.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
            .filter(|n| !n.contains('/'))
        else {
            return;
        };
        let Some(entry) = EntryName::parse(node) else {
            return;
        };
        match kind {
            EventType::NodeCreated => {
                let fresh = {
                    let mut st = self.lock();
                    let token = entry.token();
                    let fresh = token >= st.queue.seen;
                    if fresh {
                        st.queue.insert(node, entry);
                        st.queue.seen = token + 1;
                    }
                    self.publish(&mut st);
                    fresh
                };
                if fresh {
                    cfg.events.appeared(&cfg.name, node);
                }
            }
            EventType::NodeDeleted => {
                {
                    let mut st = self.lock();
                    st.queue.entries.remove(&entry.token());
                    self.publish(&mut st);
                }
                cfg.events.vanished(node);
            }
            EventType::NodeDataChanged => self.apply_weight(cfg, node, &entry).await,
            _ => {}
        }
    }

    /// Applies a data change of entry `node` (a shrink): reads its data and the capacity at
    /// once and installs both (a weight only falls; a capacity only if newer). The capacity
    /// read here may be ahead of the queue: no exact floor is noted from it.
    async fn apply_weight(&self, cfg: &ViewConfig, node: &str, entry: &EntryName) {
        let path = format!("{}/{node}", cfg.path);
        let read = entry_weights::read(&cfg.client, &cfg.stats, &cfg.path, &[path]).await;
        let read = match read {
            Ok(read) => read,
            Err(e) => {
                tracing::debug!(semaphore = %cfg.name, error = %e, "reading a lowered weight failed; reading a snapshot");
                self.resync_until_done(cfg).await;
                return;
            }
        };
        let mut st = self.lock();
        if let Some(Some((data, _))) = read.entries.first() {
            let weight = EntryData::weight_of(data, entry.permits);
            st.queue.lower(entry.token(), node, weight);
        }
        let cap = read.capacity.map(|(data, v)| (CapValue::parse(&data), v));
        install_capacity(&mut st.queue, cap);
        self.publish(&mut st);
    }

    /// Reads the fair record: `None` if there is none.
    async fn fetch_fair(&self, cfg: &ViewConfig) -> Result<Option<Fair>, zk::Error> {
        cfg.stats.count(RequestKind::Range);
        match cfg.client.get_data(&cfg.fair_path).await {
            Ok((data, stat)) => Ok(Some(
                FairState::parse(&data, stat.version).map_or(Fair::Broken, Fair::Kept),
            )),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Applies an event of the fair record: reads it (it may be ahead of the queue applied so
    /// far: see the module doc) and installs it unless an older version; a deleted one leaves
    /// the semaphore broken.
    async fn apply_fair(&self, cfg: &ViewConfig, kind: EventType) {
        let read = match kind {
            EventType::NodeDeleted => None,
            _ => match self.fetch_fair(cfg).await {
                Ok(read) => read,
                Err(e) => {
                    tracing::debug!(semaphore = %cfg.name, error = %e, "fair record read failed; reading a snapshot");
                    self.resync_until_done(cfg).await;
                    return;
                }
            },
        };
        let mut st = self.lock();
        let older = matches!((&st.queue.fair, &read),
            (Fair::Kept(held), Some(Fair::Kept(new))) if new.version < held.version);
        if !older {
            st.queue.fair = after_read(&st.queue.fair, read);
        }
        self.publish(&mut st);
    }

    /// Reads the capacity node: `None` if the semaphore does not exist.
    async fn fetch_capacity(
        &self,
        cfg: &ViewConfig,
    ) -> Result<Option<(Option<CapValue>, i32)>, zk::Error> {
        cfg.stats.count(RequestKind::Range);
        match cfg.client.get_data(&cfg.path).await {
            Ok((data, stat)) => Ok(Some((CapValue::parse(&data), stat.version))),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads the capacity and installs it if newer than the one held. Called for a data change
    /// event, before any later event is applied: the queue is the queue of that change.
    async fn read_capacity(&self, cfg: &ViewConfig) -> Result<(), zk::Error> {
        let cap = self.fetch_capacity(cfg).await?;
        let mut st = self.lock();
        if !st.stale {
            note_shrink(&mut st.queue, cap);
        }
        install_capacity(&mut st.queue, cap);
        self.publish(&mut st);
        Ok(())
    }

    /// Reads a snapshot (fair record, then queue, then capacity: never a record newer nor a
    /// capacity older than the queue) and installs them at once.
    async fn resync(&self, cfg: &ViewConfig) -> Result<(), zk::Error> {
        let fair = self.fetch_fair(cfg).await?;
        cfg.stats.count(RequestKind::Range);
        let children = match cfg.client.list_children(&cfg.path).await {
            Ok(children) => children,
            Err(zk::Error::NoNode) => Vec::new(),
            Err(e) => return Err(e),
        };
        let named: Vec<(&String, EntryName)> = children
            .iter()
            .filter_map(|node| Some((node, EntryName::parse(node)?)))
            .collect();
        let paths: Vec<String> = named
            .iter()
            .map(|(node, _)| format!("{}/{node}", cfg.path))
            .collect();
        // Every entry's data (lowered weights) with the capacity, after the listing.
        let read = entry_weights::read(&cfg.client, &cfg.stats, &cfg.path, &paths).await?;
        let cap = read.capacity.map(|(data, v)| (CapValue::parse(&data), v));
        let mut appeared = Vec::new();
        {
            let mut st = self.lock();
            let q = &mut st.queue;
            let before = std::mem::take(&mut q.entries);
            for ((node, e), data) in named.into_iter().zip(read.entries) {
                let token = e.token();
                if !before.contains_key(&token) {
                    appeared.push(node.clone());
                }
                q.seen = q.seen.max(token + 1);
                let weight = data.map_or(e.permits, |(d, _)| EntryData::weight_of(&d, e.permits));
                q.insert(node, e);
                q.lower(token, node, weight);
            }
            q.fair = after_read(&q.fair, fair);
            install_capacity(q, cap);
            st.stale = false;
            self.publish(&mut st);
        }
        self.progress.send_modify(|p| p.1 += 1);
        for node in appeared {
            cfg.events.appeared(&cfg.name, &node);
        }
        Ok(())
    }

    /// Registers the watch again on the new connection, then reads a snapshot. `None` (still
    /// stale) if the connection dropped again: the next reconnect retries.
    async fn rewatch(&self, cfg: &ViewConfig) -> Option<zk::PersistentWatcher> {
        let mut pause = RESYNC_PAUSE;
        loop {
            cfg.stats.count(RequestKind::Watch);
            match cfg
                .client
                .watch(&cfg.path, AddWatchMode::PersistentRecursive)
                .await
            {
                Ok(w) => {
                    self.resync_until_done(cfg).await;
                    return Some(w);
                }
                Err(e) if is_connection_error(&e) || is_terminal(&e) => return None,
                Err(e) => {
                    tracing::debug!(semaphore = %cfg.name, error = %e, "watch renewal failed; retrying");
                    tokio::select! {
                        _ = self.stop.cancelled() => return None,
                        _ = tokio::time::sleep(pause) => {}
                    }
                    pause = (pause * 2).min(RESYNC_MAX_PAUSE);
                }
            }
        }
    }

    /// Reads snapshots until one succeeds, the connection drops (the next reconnect retries),
    /// the session ends, or the view is stopped.
    async fn resync_until_done(&self, cfg: &ViewConfig) {
        let mut pause = RESYNC_PAUSE;
        loop {
            match self.resync(cfg).await {
                Ok(()) => return,
                Err(e) if is_connection_error(&e) => {
                    self.lock().stale = true;
                    return;
                }
                Err(e) if is_terminal(&e) => return,
                Err(e) => {
                    tracing::debug!(semaphore = %cfg.name, error = %e, "semaphore snapshot failed; retrying");
                    tokio::select! {
                        _ = self.stop.cancelled() => return,
                        _ = tokio::time::sleep(pause) => {}
                    }
                    pause = (pause * 2).min(RESYNC_MAX_PAUSE);
                }
            }
        }
    }
}

/// The view's fair record after a read of it (`None`: no such node): a semaphore that had a
/// record and now has none is broken, never taken for a plain one.
fn after_read(held: &Fair, read: Option<Fair>) -> Fair {
    match (held, read) {
        (_, Some(read)) => read,
        (Fair::Kept(_) | Fair::Broken, None) => Fair::Broken,
        (Fair::Plain, None) => Fair::Plain,
    }
}

/// The connection broke under the request: it may or may not have been applied. (A reset
/// connection fails requests in flight with the raw I/O error, not `ConnectionLoss`.)
pub(super) fn is_connection_error(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::ConnectionLoss | zk::Error::Custom(_) | zk::Error::Timeout
    )
}

/// Errors after which the session is gone for good.
pub(super) fn is_terminal(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::SessionExpired
            | zk::Error::ClientClosed
            | zk::Error::AuthFailed
            | zk::Error::SessionMoved
    )
}

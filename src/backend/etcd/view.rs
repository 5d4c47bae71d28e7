//! A local, watch-fed copy of one semaphore (capacity + queue), shared by every waiter of one
//! Limiter. This is what keeps waiting herd-free: a release is one delete in etcd and one watch
//! event per watching process; nobody re-reads the queue. Waiters are told their outcome when
//! the view, at a revision at or past their own entry, says they hold (or that their entry or
//! the semaphore is gone).
//!
//! The view is exact at its revision: it starts from a range read at revision R (the acquire
//! Txn's own read) and applies every event after R in order. On a broken stream it resumes from
//! the last applied revision + 1; if that revision was compacted it reads the state anew.
//!
//! An enqueue of a Limiter that has this view decides its grant here ([`SemWatch::when_seen`]):
//! once the view has applied the revision of the enqueue's own put, it is exactly what a range
//! read at that revision (or later) would return, so the put needs no read of its own. A view
//! that does not get there in time (a lagging or broken watch) decides nothing: the enqueue
//! reads instead (docs/design.md, "Why a grant decided from the view is safe").
//!
//! A watch on a member that hangs would just go quiet, so a quiet watch with waiters (or an
//! enqueue waiting for the view to catch up) asks
//! etcd for a progress report (`WatchProgressRequest`, answered at once by etcd ≥ 3.4); with no answer
//! in time, the member is marked failed and the watch resumes on the next one.

use super::endpoints::Endpoints;
use super::fair_record::{FairState, Tagged};
use super::keys::EntryValue;
use crate::backend::capacity::CapValue;
use crate::backend::outage::Outage;
use crate::backend::waiters::{QueueView, WaitOutcome, Waiters};
use crate::queue;
use crate::stats::{RequestCounters, RequestKind};
use etcd_client::{EventType, GetOptions, KeyValue, SortOrder, SortTarget, WatchOptions};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// Semaphore state at one revision.
#[derive(Debug, Default, Clone)]
pub(super) struct View {
    pub revision: i64,
    cap: Option<CapValue>,
    /// The capacity key's `mod_revision` (a grant compares it: no grant decided before a
    /// resize lands after it).
    cap_revision: i64,
    /// create revision → weight
    entries: BTreeMap<i64, u32>,
    /// key → create revision, to place delete events
    by_key: HashMap<Vec<u8>, i64>,
    /// A fair semaphore's record (classes and marks); `None` on a plain one.
    fair: Option<FairState>,
    /// create revision → flow, class and weight, of the entries that name them
    tags: HashMap<i64, crate::fair::FairTag>,
}

/// A grant decided from a view: the fair record to write if it is still at `fair_revision`.
#[derive(Debug, Clone)]
pub(super) struct GrantPlan {
    pub fair_revision: i64,
    /// The capacity key's revision the decision read: a grant decided before a shrink must not
    /// land after it.
    pub cap_revision: i64,
    /// The revision the decision's queue is exact at: a grant applies only if no entry was
    /// queued since (one the decision did not see might be next by the rule).
    pub seen_revision: i64,
    pub record: super::fair_record::FairRecord,
    pub grants: Vec<u64>,
}

/// Where a semaphore's keys are, for a view to tell them apart.
#[derive(Debug, Clone)]
pub(super) struct ViewKeys {
    pub cap: String,
    pub fair: String,
    pub queue_prefix: String,
}

impl View {
    /// Builds a view from a range read of the semaphore's prefix at `revision`.
    pub(super) fn from_kvs(revision: i64, keys: &ViewKeys, kvs: &[KeyValue]) -> View {
        let mut view = View {
            revision,
            ..View::default()
        };
        for kv in kvs {
            view.put(keys, kv);
        }
        view
    }

    fn put(&mut self, keys: &ViewKeys, kv: &KeyValue) {
        if kv.key() == keys.cap.as_bytes() {
            // Unreadable capacity: keep the last good one rather than guess.
            if let Some(cap) = CapValue::parse(kv.value()) {
                self.cap = Some(cap);
                self.cap_revision = kv.mod_revision();
            }
        } else if kv.key() == keys.fair.as_bytes() {
            // Unreadable: no marks known, so nothing granted from the view (never a guess).
            self.fair = FairState::parse(kv);
        } else if kv.key().starts_with(keys.queue_prefix.as_bytes()) {
            let rev = kv.create_revision();
            let value = EntryValue::parse(kv.value());
            let tag = value.as_ref().and_then(EntryValue::tag);
            self.entries
                .insert(rev, value.map_or(u32::MAX, |v| v.permits));
            self.by_key.insert(kv.key().to_vec(), rev);
            match tag {
                Some(tag) => self.tags.insert(rev, tag),
                None => self.tags.remove(&rev),
            };
        }
    }

    /// The marks of a fair semaphore (`None`: a plain one).
    fn marks(&self) -> Option<&std::collections::HashSet<u64>> {
        self.fair.as_ref().map(|f| &f.marks)
    }

    /// When the fair rule, applied to this view, grants one of our `waiters` now: the grant
    /// to write (`fair_grants.rs`). Always `None` on a plain semaphore.
    pub(super) fn plan_for(&self, waiters: &Waiters) -> Option<GrantPlan> {
        if self.fair.is_none() || waiters.is_empty() {
            return None;
        }
        let ours = waiters.tokens();
        self.plan(None)
            .filter(|p| p.grants.iter().any(|t| ours.contains(t)))
    }

    /// The grant the fair rule makes on this view (without the entry at `key`: a release
    /// writes it with its delete), if any.
    pub(super) fn plan(&self, without: Option<&[u8]>) -> Option<GrantPlan> {
        let (Some(fair), Some(cap)) = (&self.fair, self.cap) else {
            return None;
        };
        let gone = without.and_then(|k| self.by_key.get(k)).copied();
        let queue: Vec<Tagged> = self
            .entries
            .iter()
            .filter(|(&rev, _)| Some(rev) != gone)
            .map(|(&rev, &permits)| (rev as u64, permits, self.tags.get(&rev).cloned()))
            .collect();
        let (grants, vtimes) = super::fair_record::next_grants(&queue, cap.capacity, fair);
        if grants.is_empty() {
            return None;
        }
        let queued = queue.iter().map(|e| e.0).collect();
        Some(GrantPlan {
            fair_revision: fair.mod_revision,
            cap_revision: self.cap_revision,
            seen_revision: self.revision,
            record: fair.with_grants(&queued, &grants, vtimes),
            grants,
        })
    }

    /// See [`SemWatch::decide_own_put`].
    fn decide_own_put(&self, token: u64, permits: u32) -> Option<Seen> {
        let revision = u64::try_from(self.revision).unwrap_or(0);
        if revision >= token {
            return Some(Seen::decide(self.cap, self.entries(), self.marks(), token));
        }
        if revision.checked_add(1) != Some(token) {
            return None;
        }
        let own = queue::Entry { token, permits };
        let entries = self.entries().chain(std::iter::once(own));
        Some(Seen::decide(self.cap, entries, self.marks(), token))
    }

    fn delete(&mut self, keys: &ViewKeys, key: &[u8]) {
        if key == keys.cap.as_bytes() {
            self.cap = None;
        } else if key == keys.fair.as_bytes() {
            self.fair = None;
        } else if let Some(rev) = self.by_key.remove(key) {
            self.entries.remove(&rev);
            self.tags.remove(&rev);
        }
    }
}

/// What a view (or a read) at a revision at or past an entry's says about that entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    /// No capacity key: the semaphore does not exist.
    NoSemaphore,
    /// The semaphore's capacity, whether the entry holds, and whether the semaphore is fair
    /// (then holding is its grant mark).
    Entry {
        capacity: u32,
        granted: bool,
        fair: bool,
    },
}

impl Seen {
    /// Decides for entry `token` from a capacity and the queue in token order, and on a fair
    /// semaphore its grant marks (`marks`: then an entry holds when queued and marked).
    pub(super) fn decide(
        cap: Option<CapValue>,
        entries: impl IntoIterator<Item = queue::Entry>,
        marks: Option<&std::collections::HashSet<u64>>,
        token: u64,
    ) -> Seen {
        match (cap, marks) {
            (None, _) => Seen::NoSemaphore,
            (Some(c), Some(marks)) => Seen::Entry {
                capacity: c.capacity,
                granted: marks.contains(&token) && entries.into_iter().any(|e| e.token == token),
                fair: true,
            },
            (Some(c), None) => Seen::Entry {
                capacity: c.capacity,
                granted: queue::holds(entries, c.capacity, c.floor, token) == Some(true),
                fair: false,
            },
        }
    }
}

impl QueueView for View {
    fn capacity(&self) -> Option<(u32, u64)> {
        self.cap.map(|c| (c.capacity, c.floor))
    }
    fn entries(&self) -> impl Iterator<Item = queue::Entry> + '_ {
        self.entries.iter().map(|(&rev, &permits)| queue::Entry {
            token: rev as u64,
            permits,
        })
    }
    fn contains(&self, token: u64) -> bool {
        self.entries.contains_key(&(token as i64))
    }
    fn has_seen(&self, token: u64) -> bool {
        self.revision >= token as i64
    }
    fn marked(&self, token: u64) -> Option<bool> {
        self.marks().map(|m| m.contains(&token))
    }
}

struct State {
    view: View,
    waiters: Waiters,
}

/// Called with the key of every queue entry the view sees deleted (to fire `lost()` on a
/// permit whose key vanished behind our back).
pub(super) type OnDelete = Arc<dyn Fn(&[u8]) + Send + Sync>;

/// The watch of one semaphore and the waiters fed by it.
pub(super) struct SemWatch {
    state: Mutex<State>,
    stop: CancellationToken,
    /// The view's revision, for enqueues waiting for it to reach their put's.
    seen: tokio::sync::watch::Sender<i64>,
    /// Whether a watch stream is up (created and not yet broken).
    live: AtomicBool,
    /// Enqueues waiting in [`SemWatch::when_seen`]: like waiters, they make a quiet watch
    /// check that its member still answers.
    awaiting: AtomicUsize,
    /// See [`WatchConfig::on_grantable`].
    on_grantable: OnGrantable,
}

/// Counts one enqueue in [`SemWatch::awaiting`] while it lives.
struct Awaiting<'a>(&'a AtomicUsize);

impl<'a> Awaiting<'a> {
    fn new(n: &'a AtomicUsize) -> Self {
        n.fetch_add(1, Ordering::SeqCst);
        Awaiting(n)
    }
}

impl Drop for Awaiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for SemWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemWatch").finish_non_exhaustive()
    }
}

/// What the watch task needs.
pub(super) struct WatchConfig {
    pub endpoints: Arc<Endpoints>,
    pub sem_prefix: String,
    pub keys: ViewKeys,
    pub request_timeout: Duration,
    pub stats: Arc<RequestCounters>,
    pub on_delete: OnDelete,
    /// Called with every queue entry the view sees written (to find strays: `strays.rs`).
    pub on_put: OnPut,
    /// Called (outside the view's lock) when the fair rule grants one of this Limiter's
    /// waiters: it writes the grant (`fair_grants.rs`).
    pub on_grantable: OnGrantable,
}

/// See [`WatchConfig::on_grantable`].
pub(super) type OnGrantable = Arc<dyn Fn(GrantPlan) + Send + Sync>;

/// See [`WatchConfig::on_put`].
pub(super) type OnPut = Arc<dyn Fn(&KeyValue) + Send + Sync>;

/// Pause before resuming a watch that broke (on the next member); doubled while resuming
/// keeps failing, reset once a watch is created.
const RETRY_PAUSE: Duration = Duration::from_millis(25);
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(1);

/// How long a watch may be quiet before it asks for progress, and then how long the answer
/// may take: a hung member is left within twice this.
fn quiet_bound(request_timeout: Duration) -> Duration {
    (request_timeout / 4).clamp(Duration::from_millis(250), Duration::from_secs(1))
}

impl SemWatch {
    /// Starts watching from `view.revision + 1`.
    pub(super) fn start(view: View, config: WatchConfig, stop: CancellationToken) -> Arc<SemWatch> {
        let (seen, _) = tokio::sync::watch::channel(view.revision);
        let watch = Arc::new(SemWatch {
            state: Mutex::new(State {
                view,
                waiters: Waiters::default(),
            }),
            stop,
            seen,
            live: AtomicBool::new(false),
            awaiting: AtomicUsize::new(0),
            on_grantable: config.on_grantable.clone(),
        });
        tokio::spawn(watch.clone().run(config));
        watch
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        crate::backend::lock(&self.state)
    }

    /// Registers a waiter; the receiver gets its outcome once decided. On a fair semaphore,
    /// if the rule grants it (or another waiter of ours) now, the grant is written.
    pub(super) fn register(&self, token: u64, permits: u32) -> oneshot::Receiver<WaitOutcome> {
        let (rx, grantable) = {
            let st = &mut *self.lock();
            let rx = st.waiters.register(&st.view, token, permits);
            (rx, st.view.plan_for(&st.waiters))
        };
        if let Some(plan) = grantable {
            (self.on_grantable)(plan);
        }
        rx
    }

    /// The grant a release of the entry at `key` makes on a fair semaphore, from the view
    /// (`None`: a plain semaphore, or nothing to grant).
    pub(super) fn release_plan(&self, key: &[u8]) -> Option<GrantPlan> {
        self.lock().view.plan(Some(key))
    }

    /// The classes of a fair semaphore as the view has them (`None`: plain, or unknown).
    pub(super) fn classes(&self) -> Option<crate::fair::Classes> {
        self.lock().view.fair.as_ref().map(|f| f.classes.clone())
    }

    /// The grant to write when the fair rule, on the view, picks entry `token` now.
    pub(super) fn plan_with(&self, token: u64) -> Option<GrantPlan> {
        self.lock()
            .view
            .plan(None)
            .filter(|p| p.grants.contains(&token))
    }

    /// Whether the task still runs (it stops on close/shutdown).
    pub(super) fn is_stopped(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Whether the view is being fed right now (a stream is up), so an enqueue may expect it
    /// to catch up with its put within a round trip or so.
    pub(super) fn is_live(&self) -> bool {
        !self.is_stopped() && self.live.load(Ordering::SeqCst)
    }

    /// What the view says about our entry of `permits` just written alone by a put at revision
    /// `token`, without waiting for the put's event: when the view has applied revision
    /// `token − 1` (or `token` itself), nothing else changed in etcd between the view and the
    /// put (revisions count every write of the cluster, and a put changes one key), so the view
    /// plus this entry, last in the queue, is the semaphore at `token`. `None` when the view is
    /// further behind: the caller waits for it ([`SemWatch::when_seen`]).
    pub(super) fn decide_own_put(&self, token: u64, permits: u32) -> Option<Seen> {
        self.lock().view.decide_own_put(token, permits)
    }

    /// What the view says about entry `token` once it has applied the entry's revision, or
    /// `None` if it does not get there within `bound` (the caller then reads).
    pub(super) async fn when_seen(&self, token: u64, bound: Duration) -> Option<Seen> {
        let _awaiting = Awaiting::new(&self.awaiting);
        let mut seen = self.seen.subscribe();
        let caught_up = seen.wait_for(|&r| r >= token as i64);
        if !matches!(tokio::time::timeout(bound, caught_up).await, Ok(Ok(_))) {
            return None;
        }
        let st = self.lock();
        // The view only moves forward: still at or past `token`.
        Some(Seen::decide(
            st.view.cap,
            st.view.entries(),
            st.view.marks(),
            token,
        ))
    }

    async fn run(self: Arc<Self>, cfg: WatchConfig) {
        let mut pause = RETRY_PAUSE;
        let mut outage = Outage::default();
        while !self.stop.is_cancelled() {
            match self.watch_once(&cfg, &mut pause).await {
                Ok(()) => outage.ok("etcd semaphore watch"),
                Err(e) => outage.failed(
                    "etcd semaphore watch",
                    &cfg.endpoints.all_urls(),
                    &super::describe::failure(&e),
                ),
            }
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(MAX_RETRY_PAUSE);
        }
    }

    /// Watches until the stream ends or breaks, on the member in use; a failure marks that
    /// member failed. `Ok` when it ended in an orderly way (cancel because of compaction,
    /// handled by re-reading). `pause` is reset once the watch is created.
    async fn watch_once(
        &self,
        cfg: &WatchConfig,
        pause: &mut Duration,
    ) -> Result<(), etcd_client::Error> {
        let (member, client) = cfg.endpoints.pick();
        let result = self.watch_on(cfg, client, pause).await;
        self.live.store(false, Ordering::SeqCst);
        if result.is_err() {
            cfg.endpoints.failed(member);
        }
        result
    }

    async fn watch_on(
        &self,
        cfg: &WatchConfig,
        client: etcd_client::Client,
        pause: &mut Duration,
    ) -> Result<(), etcd_client::Error> {
        let start = self.lock().view.revision + 1;
        cfg.stats.count(RequestKind::Watch);
        let opts = WatchOptions::new().with_prefix().with_start_revision(start);
        // A slow link is not a hung member: allow a few of the usual round trips.
        let quiet = quiet_bound(cfg.request_timeout)
            .max(cfg.endpoints.latency() * 4)
            .min(cfg.request_timeout);
        let mut stream = tokio::time::timeout(
            cfg.request_timeout,
            client
                .watch_client()
                .watch(cfg.sem_prefix.clone(), Some(opts)),
        )
        .await
        .map_err(|_| etcd_client::Error::WatchError("watch create timed out".into()))??;
        // Whether a progress request is out: a second quiet period means the member hangs.
        let mut asked = false;
        loop {
            let msg = tokio::select! {
                _ = self.stop.cancelled() => return Ok(()),
                m = tokio::time::timeout(quiet, stream.message()) => m,
            };
            let msg = match msg {
                Ok(m) => m?,
                Err(_) if asked => {
                    return Err(etcd_client::Error::WatchError(format!(
                        "no watch progress within {quiet:?}; trying another member"
                    )))
                }
                // Quiet and nobody waiting: a stale watch costs nothing yet, so no probe
                // (an idle Limiter sends nothing); a waiter that registers gets one within
                // `quiet`.
                Err(_)
                    if self.lock().waiters.is_empty()
                        && self.awaiting.load(Ordering::SeqCst) == 0 =>
                {
                    continue
                }
                Err(_) => {
                    // Not counted in RequestStats: a liveness probe like an HTTP/2 ping,
                    // not a request of any operation.
                    tokio::time::timeout(quiet, stream.request_progress())
                        .await
                        .map_err(|_| {
                            etcd_client::Error::WatchError("watch progress request stuck".into())
                        })??;
                    asked = true;
                    continue;
                }
            };
            asked = false;
            let Some(resp) = msg else {
                return Err(etcd_client::Error::WatchError("watch stream ended".into()));
            };
            if resp.created() {
                *pause = RETRY_PAUSE;
                self.live.store(true, Ordering::SeqCst);
            }
            if resp.canceled() {
                if resp.compact_revision() > 0 {
                    tracing::info!(prefix = %cfg.sem_prefix, compacted = resp.compact_revision(), "watch start compacted; re-reading the semaphore");
                    self.reread(cfg).await?;
                    return Ok(());
                }
                return Err(etcd_client::Error::WatchError(format!(
                    "watch canceled: {}",
                    resp.cancel_reason()
                )));
            }
            self.apply(cfg, resp.events());
        }
    }

    fn apply(&self, cfg: &WatchConfig, events: &[etcd_client::Event]) {
        if events.is_empty() {
            return;
        }
        let mut deleted = Vec::new();
        let mut written = Vec::new();
        let grantable = {
            let mut st = self.lock();
            for ev in events {
                let Some(kv) = ev.kv() else { continue };
                st.view.revision = st.view.revision.max(kv.mod_revision());
                match ev.event_type() {
                    EventType::Put => {
                        st.view.put(&cfg.keys, kv);
                        written.push(kv);
                    }
                    EventType::Delete => {
                        st.view.delete(&cfg.keys, kv.key());
                        deleted.push(kv.key().to_vec());
                    }
                }
            }
            let st = &mut *st;
            st.waiters.resolve(&st.view);
            self.seen.send_replace(st.view.revision);
            st.view.plan_for(&st.waiters)
        };
        if let Some(plan) = grantable {
            (cfg.on_grantable)(plan);
        }
        for kv in written {
            (cfg.on_put)(kv);
        }
        for key in deleted {
            (cfg.on_delete)(&key);
        }
    }

    /// Reads the whole semaphore anew (after compaction) and continues from there.
    async fn reread(&self, cfg: &WatchConfig) -> Result<(), etcd_client::Error> {
        cfg.stats.count(RequestKind::Range);
        let opts = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend);
        let (_, client) = cfg.endpoints.pick();
        let resp = tokio::time::timeout(
            cfg.request_timeout,
            super::client::kv(&client).get(cfg.sem_prefix.clone(), Some(opts)),
        )
        .await
        .map_err(|_| etcd_client::Error::WatchError("re-read timed out".into()))??;
        let revision = resp.header().map_or(0, |h| h.revision());
        let view = View::from_kvs(revision, &cfg.keys, resp.kvs());
        for kv in resp.kvs() {
            (cfg.on_put)(kv);
        }
        let (gone, grantable) = {
            let st = &mut *self.lock();
            let gone: Vec<Vec<u8>> = st
                .view
                .by_key
                .keys()
                .filter(|k| !view.by_key.contains_key(*k))
                .cloned()
                .collect();
            st.view = view;
            st.waiters.resolve(&st.view);
            self.seen.send_replace(st.view.revision);
            (gone, st.view.plan_for(&st.waiters))
        };
        if let Some(plan) = grantable {
            (cfg.on_grantable)(plan);
        }
        for key in gone {
            (cfg.on_delete)(&key);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::waiters::outcome;

    fn view(cap: u32, entries: &[(i64, u32)], revision: i64) -> View {
        View {
            revision,
            cap: Some(CapValue {
                capacity: cap,
                floor: 0,
            }),
            entries: entries.iter().copied().collect(),
            by_key: entries
                .iter()
                .map(|&(r, _)| (format!("k{r}").into_bytes(), r))
                .collect(),
            fair: None,
            tags: HashMap::new(),
            cap_revision: 0,
        }
    }

    #[test]
    fn own_put_right_after_the_view_is_decided_without_its_event() {
        let entry = |granted| {
            Some(Seen::Entry {
                capacity: 2,
                granted,
                fair: false,
            })
        };
        // view at 9, our put is revision 10: the view plus our entry is the semaphore at 10
        let v = view(2, &[(5, 1), (9, 1)], 9);
        assert_eq!(v.decide_own_put(10, 1), entry(false), "two ahead of us");
        let v = view(2, &[(5, 1)], 9);
        assert_eq!(v.decide_own_put(10, 1), entry(true));
        assert_eq!(
            v.decide_own_put(10, 2),
            entry(false),
            "weight 2 behind 1 of 2"
        );
        // a write we have not seen (revision 10) may be ahead of our put at 11: wait
        assert_eq!(v.decide_own_put(11, 1), None);
        // the view already applied our put: decide from it
        let v = view(2, &[(5, 1), (10, 1)], 12);
        assert_eq!(v.decide_own_put(10, 1), entry(true));
        assert_eq!(
            View::default().decide_own_put(1, 1),
            Some(Seen::NoSemaphore),
            "revision 0, put 1: no capacity key"
        );
    }

    #[test]
    fn seen_decides_as_a_read_at_the_views_revision_would() {
        let v = view(2, &[(5, 1), (7, 1), (9, 1)], 9);
        let entry = |granted| Seen::Entry {
            capacity: 2,
            granted,
            fair: false,
        };
        assert_eq!(Seen::decide(v.cap, v.entries(), None, 7), entry(true));
        assert_eq!(Seen::decide(v.cap, v.entries(), None, 9), entry(false));
        assert_eq!(
            Seen::decide(v.cap, v.entries(), None, 8),
            entry(false),
            "gone"
        );
        assert_eq!(Seen::decide(None, v.entries(), None, 7), Seen::NoSemaphore);
    }

    #[test]
    fn outcomes() {
        let v = view(2, &[(5, 1), (7, 1), (9, 1)], 9);
        assert_eq!(outcome(&v, 7, 1), Some(WaitOutcome::Granted));
        assert_eq!(outcome(&v, 9, 1), None);
        assert_eq!(outcome(&v, 8, 1), Some(WaitOutcome::Gone));
        assert_eq!(outcome(&v, 12, 1), None, "not seen yet");
        let v = view(1, &[(5, 1), (7, 2)], 9);
        assert_eq!(outcome(&v, 7, 2), Some(WaitOutcome::TooHeavy(1)));
        let mut v = view(1, &[(5, 1)], 9);
        let keys = ViewKeys {
            cap: "cap".into(),
            fair: "fair".into(),
            queue_prefix: "q/".into(),
        };
        v.delete(&keys, b"cap");
        assert_eq!(outcome(&v, 5, 1), Some(WaitOutcome::NoSemaphore));
    }
}

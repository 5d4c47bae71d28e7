//! `memory://NAME`: the embedded store. Semaphores live in this process; every Limiter opened on
//! the same NAME shares them, each with its own session. Same meaning as the other backends
//! (see [`crate::queue`]), no lease: a session ends on `close()`, when its Limiter is dropped, or
//! through [`expire_sessions`] (for testing how code reacts to a lost session).

use super::{lock, Backend, Enqueued, EntryRequest, Stop};
use crate::backend::waiters::{self, QueueView, WaitOutcome, Waiters};
use crate::error::{Error, Result};
use crate::lost::{LostSignal, SessionDeadline};
use crate::queue;
use crate::stats::{RequestCounters, RequestKind, RequestStats};
use crate::status::{unix_ms_now, Holder, Status};
use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

type Registry = Mutex<HashMap<String, Weak<Store>>>;

fn registry() -> &'static Registry {
    static STORES: OnceLock<Registry> = OnceLock::new();
    STORES.get_or_init(Default::default)
}

mod board;
mod fair;
mod rate;
mod rate_table;

#[derive(Debug, Default)]
struct Store {
    state: Mutex<State>,
    rates: Mutex<rate_table::Rates>,
}

#[derive(Debug, Default)]
struct State {
    sems: BTreeMap<String, Sem>,
    sessions: HashMap<u64, LostSignal>,
    next_session: u64,
    boards: board::Boards,
}

#[derive(Debug)]
struct Sem {
    queue: SemQueue,
    /// Waiters of every Limiter on this store, told their outcome after each change.
    waiters: Waiters,
}

#[derive(Debug)]
struct SemQueue {
    capacity: u32,
    floor: u64,
    next_token: u64,
    entries: BTreeMap<u64, MemEntry>,
    by_id: HashMap<String, u64>,
    /// Classes and grant marks of a fair semaphore; `None`: a plain FIFO one.
    fair: Option<fair::MemFair>,
}

#[derive(Debug)]
struct MemEntry {
    id: String,
    permits: u32,
    owner: String,
    since_unix_ms: u64,
    session: u64,
    /// Flow, class and weight on a fair semaphore.
    tag: Option<crate::fair::FairTag>,
}

impl QueueView for SemQueue {
    fn capacity(&self) -> Option<(u32, u64)> {
        Some((self.capacity, self.floor))
    }
    fn entries(&self) -> impl Iterator<Item = queue::Entry> + '_ {
        self.entries.iter().map(|(&token, e)| queue::Entry {
            token,
            permits: e.permits,
        })
    }
    fn contains(&self, token: u64) -> bool {
        self.entries.contains_key(&token)
    }
    fn has_seen(&self, _token: u64) -> bool {
        true // the store itself: always current
    }
    fn marked(&self, token: u64) -> Option<bool> {
        self.fair.as_ref().map(|f| f.marks.contains(&token))
    }
}

impl Sem {
    fn new(capacity: u32, classes: Option<crate::fair::Classes>) -> Sem {
        Sem {
            queue: SemQueue {
                capacity,
                floor: 0,
                next_token: 1,
                entries: BTreeMap::new(),
                by_id: HashMap::new(),
                fair: classes.map(fair::MemFair::new),
            },
            waiters: Waiters::default(),
        }
    }

    fn remove_where(&mut self, pred: impl Fn(&MemEntry) -> bool) {
        let q = &mut self.queue;
        let before = q.entries.len();
        q.entries.retain(|_, e| !pred(e));
        if q.entries.len() != before {
            let entries = &q.entries;
            q.by_id.retain(|_, t| entries.contains_key(t));
            q.grant_fair();
            self.waiters.resolve(&self.queue);
        }
    }
}

impl SemQueue {
    /// On a fair semaphore, marks what the fair rule grants now.
    fn grant_fair(&mut self) {
        let Some(fair) = &mut self.fair else { return };
        let entries: Vec<(u64, u32, Option<&crate::fair::FairTag>)> = self
            .entries
            .iter()
            .map(|(&t, e)| (t, e.permits, e.tag.as_ref()))
            .collect();
        fair.grant(&entries, self.capacity);
    }

    /// The status of a fair semaphore.
    fn fair_status(&self, name: &str, fair: &fair::MemFair) -> Status {
        let rows = self.entries.iter().map(|(&t, e)| {
            let row = Holder::new(&e.owner, e.permits, t, e.since_unix_ms);
            (t, row, e.tag.clone())
        });
        fair.status(name, self.capacity, rows)
    }
}

impl State {
    fn sem(&mut self, name: &str) -> Result<&mut Sem> {
        self.sems
            .get_mut(name)
            .ok_or_else(|| Error::NotFound(name.to_string()))
    }

    fn new_session(&mut self) -> (u64, LostSignal) {
        self.next_session += 1;
        let lost = LostSignal::new(SessionDeadline::none());
        self.sessions.insert(self.next_session, lost.clone());
        (self.next_session, lost)
    }

    fn end_session(&mut self, id: u64) {
        if let Some(lost) = self.sessions.remove(&id) {
            lost.fire();
        }
        for sem in self.sems.values_mut() {
            sem.remove_where(|e| e.session == id);
        }
        self.boards.end_session(id);
    }
}

/// Ends every session of the in-process store `name`, as a store losing its sessions would:
/// all entries go, every permit fires `lost()`, waits fail with `SessionLost`. Limiters start
/// new sessions on their next call. Meant for testing code against session loss. Returns how
/// many sessions were ended (0 if no Limiter has the store open). A test hook: only with the
/// `testing` feature.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> clusterlimit::Result<()> {
/// let limiter = clusterlimit::Limiter::connect("memory://lost-doc").await?;
/// let permit = limiter.semaphore("jobs", 1).await?.acquire().await?;
/// assert_eq!(clusterlimit::backend::memory::expire_sessions("lost-doc"), 1);
/// permit.lost().await; // fires: the code under test must stop its work here
/// assert!(permit.is_lost());
/// # Ok(()) }
/// ```
#[cfg(feature = "testing")]
pub fn expire_sessions(name: &str) -> usize {
    let store = lock(registry()).get(name).and_then(Weak::upgrade);
    let Some(store) = store else { return 0 };
    let mut st = lock(&store.state);
    let ids: Vec<u64> = st.sessions.keys().copied().collect();
    for &id in &ids {
        st.end_session(id);
    }
    ids.len()
}

/// Key states held by the in-process store `name` now (0 if no Limiter has it open): for
/// tests that idle keys are swept. A test hook: only with the `testing` feature.
#[cfg(feature = "testing")]
pub fn rate_key_count(name: &str) -> usize {
    let store = lock(registry())
        .get(name)
        .and_then(std::sync::Weak::upgrade);
    store.map_or(0, |s| lock(&s.rates).key_count())
}

/// The `memory://` backend: one session in one in-process store.
#[derive(Debug)]
pub struct MemoryBackend {
    store: Arc<Store>,
    session: Mutex<(u64, LostSignal)>,
    stats: RequestCounters,
    stop: Stop,
}

impl MemoryBackend {
    /// Opens (or creates) the store `name` with a new session.
    pub fn open(name: &str) -> MemoryBackend {
        let store = {
            let mut reg = lock(registry());
            reg.retain(|_, w| w.strong_count() > 0);
            match reg.get(name).and_then(Weak::upgrade) {
                Some(s) => s,
                None => {
                    let s = Arc::new(Store::default());
                    reg.insert(name.to_string(), Arc::downgrade(&s));
                    s
                }
            }
        };
        let session = lock(&store.state).new_session();
        MemoryBackend {
            store,
            session: Mutex::new(session),
            stats: RequestCounters::default(),
            stop: Stop::default(),
        }
    }

    /// The live session, renewed if the last one was lost (as a reconnecting client would).
    fn current_session(&self) -> (u64, LostSignal) {
        let mut s = lock(&self.session);
        if s.1.is_lost() {
            *s = lock(&self.store.state).new_session();
        }
        s.clone()
    }

    fn end_session(&self) {
        let id = lock(&self.session).0;
        lock(&self.store.state).end_session(id);
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    async fn ensure_semaphore(&self, name: &str, capacity: Option<u32>) -> Result<u32> {
        self.stop.check()?;
        self.stats.count(RequestKind::Txn);
        let mut st = lock(&self.store.state);
        if let Some(sem) = st.sems.get(name) {
            let stored = sem.queue.capacity;
            return match capacity {
                Some(c) if c != stored => Err(Error::CapacityMismatch {
                    stored,
                    requested: c,
                }),
                _ => Ok(stored),
            };
        }
        let capacity = capacity.ok_or_else(|| Error::NotFound(name.to_string()))?;
        st.sems.insert(name.to_string(), Sem::new(capacity, None));
        Ok(capacity)
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
        self.stop.check()?;
        self.stats.count(RequestKind::Txn);
        let mut st = lock(&self.store.state);
        if let Some(sem) = st.sems.get(name) {
            let q = &sem.queue;
            let Some(stored) = &q.fair else {
                return Err(super::fair_checks::not_fair(name));
            };
            if let Some(asked) = classes.filter(|c| *c != &stored.classes) {
                return Err(super::fair_checks::classes_differ(
                    name,
                    &stored.classes,
                    asked,
                ));
            }
            return match capacity {
                Some(c) if c != q.capacity => Err(Error::CapacityMismatch {
                    stored: q.capacity,
                    requested: c,
                }),
                _ => Ok(q.capacity),
            };
        }
        let capacity = capacity.ok_or_else(|| Error::NotFound(name.to_string()))?;
        let classes = classes.cloned().unwrap_or_default();
        classes.check(capacity)?;
        st.sems
            .insert(name.to_string(), Sem::new(capacity, Some(classes)));
        Ok(capacity)
    }

    async fn enqueue(&self, req: &EntryRequest) -> Result<Enqueued> {
        // A session ended by close() must not be renewed.
        self.stop.check()?;
        let (session, lost) = self.current_session();
        self.stats.count(RequestKind::Txn);
        let mut st = lock(&self.store.state);
        let sem = &mut st.sem(&req.name)?.queue;
        if req.permits > sem.capacity {
            return Err(waiters::over_capacity(req, sem.capacity));
        }
        match (&sem.fair, &req.fair) {
            (None, Some(_)) => return Err(super::fair_checks::not_fair(&req.name)),
            (Some(f), Some(tag)) => {
                super::fair_checks::check_tag(&req.name, &f.classes, Some(tag))?
            }
            _ => {}
        }
        let token = match sem.by_id.get(&req.id) {
            Some(&t) => t,
            None => {
                let t = sem.next_token;
                sem.next_token += 1;
                sem.entries.insert(
                    t,
                    MemEntry {
                        id: req.id.clone(),
                        permits: req.permits,
                        owner: req.owner.clone(),
                        since_unix_ms: unix_ms_now(),
                        session,
                        tag: req.fair.clone(),
                    },
                );
                sem.by_id.insert(req.id.clone(), t);
                sem.grant_fair();
                t
            }
        };
        let granted = waiters::outcome(&*sem, token, req.permits) == Some(WaitOutcome::Granted);
        Ok(Enqueued {
            token,
            granted,
            lost: lost.child(),
        })
    }

    async fn wait_outcome(&self, req: &EntryRequest, enq: &Enqueued) -> Result<WaitOutcome> {
        let outcome = {
            let mut st = lock(&self.store.state);
            let sem = st.sem(&req.name)?;
            sem.waiters.register(&sem.queue, enq.token, req.permits)
        };
        // A dropped sender: the store went away with its last Limiter, and the entry with it.
        Ok(outcome.await.unwrap_or(WaitOutcome::Gone))
    }

    async fn remove(&self, name: &str, id: &str) -> Result<()> {
        self.stats.count(RequestKind::Delete);
        let mut st = lock(&self.store.state);
        if let Some(sem) = st.sems.get_mut(name) {
            sem.remove_where(|e| e.id == id);
        }
        Ok(())
    }

    async fn shrink_entry(&self, name: &str, id: &str, permits: u32) -> Result<u32> {
        self.stop.check()?;
        self.stats.count(RequestKind::Txn);
        let mut st = lock(&self.store.state);
        let sem = st.sem(name)?;
        let q = &mut sem.queue;
        let entry = q
            .by_id
            .get(id)
            .and_then(|t| q.entries.get_mut(t))
            .ok_or(Error::SessionLost)?;
        if permits >= entry.permits {
            return Ok(entry.permits);
        }
        entry.permits = permits;
        q.grant_fair();
        sem.waiters.resolve(&sem.queue);
        Ok(permits)
    }

    async fn status(&self, name: &str) -> Result<Status> {
        self.stop.check()?;
        self.stats.count(RequestKind::Range);
        let mut st = lock(&self.store.state);
        let sem = &st.sem(name)?.queue;
        if let Some(fair) = &sem.fair {
            return Ok(sem.fair_status(name, fair));
        }
        let entries: Vec<queue::Entry> = sem.entries().collect();
        let n = queue::holders(entries.iter().copied(), sem.capacity, sem.floor);
        let mut rows: Vec<Holder> = sem
            .entries
            .iter()
            .map(|(&token, e)| Holder::new(&e.owner, e.permits, token, e.since_unix_ms))
            .collect();
        let waiters = rows.split_off(n.min(rows.len()));
        Ok(Status::from_queue(name, sem.capacity, rows, waiters))
    }

    async fn set_capacity(&self, name: &str, capacity: u32) -> Result<()> {
        self.stop.check()?;
        self.stats.count(RequestKind::Txn);
        let mut st = lock(&self.store.state);
        let sem = st.sem(name)?;
        let q = &mut sem.queue;
        if let Some(fair) = &q.fair {
            // Marks keep holding through a shrink: a fair semaphore needs no floor.
            fair.classes.check(capacity)?;
        } else {
            let entries: Vec<queue::Entry> = q.entries().collect();
            q.floor = queue::floor_after_resize(&entries, q.capacity, capacity, q.floor);
        }
        q.capacity = capacity;
        q.grant_fair();
        sem.waiters.resolve(&sem.queue);
        Ok(())
    }

    async fn list(&self) -> Result<Vec<String>> {
        self.stop.check()?;
        self.stats.count(RequestKind::Range);
        Ok(lock(&self.store.state).sems.keys().cloned().collect())
    }

    async fn announce(&self, board: &str, id: &str, value: &[u8]) -> Result<()> {
        // A session ended by close() must not be renewed.
        self.stop.check()?;
        self.stats.count(RequestKind::Put);
        // A session ended between taking it and writing would leave the value unbound: write
        // only under a session the store still has (a few tries; each ended one is replaced).
        for _ in 0..3 {
            let (session, _) = self.current_session();
            let mut st = lock(&self.store.state);
            if st.sessions.contains_key(&session) {
                st.boards.put(board, id, session, value);
                return Ok(());
            }
        }
        Err(Error::SessionLost)
    }

    async fn announcements(&self, board: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.stop.check()?;
        self.stats.count(RequestKind::Range);
        Ok(lock(&self.store.state).boards.list(board))
    }

    async fn withdraw(&self, board: &str, id: &str) -> Result<()> {
        self.stop.check()?;
        self.stats.count(RequestKind::Delete);
        lock(&self.store.state).boards.remove(board, id);
        Ok(())
    }

    async fn members(&self) -> Result<Vec<crate::members::StoreMember>> {
        self.stop.check()?;
        Ok(vec![crate::members::StoreMember {
            name: "memory".to_string(),
            address: "this process".to_string(),
            role: "embedded".to_string(),
        }])
    }

    fn rate_store(&self) -> Option<&dyn super::RateStore> {
        Some(self)
    }

    fn stats(&self) -> RequestStats {
        self.stats.snapshot()
    }

    fn session_ttl(&self) -> Duration {
        crate::timing::DEFAULT_SESSION_TTL
    }

    async fn session_signal(&self) -> Option<LostSignal> {
        let s = lock(&self.session);
        (!s.1.is_lost()).then(|| s.1.clone())
    }

    async fn end_session(&self, session: &LostSignal) {
        let id = {
            let s = lock(&self.session);
            if !s.1.same_session(session) {
                return;
            }
            s.0
        };
        self.stats.count(RequestKind::Lease);
        lock(&self.store.state).end_session(id);
    }

    async fn close(&self) -> Result<()> {
        self.stop.stop();
        self.stats.count(RequestKind::Lease);
        self.end_session();
        Ok(())
    }

    fn shutdown(&self) {
        self.stop.stop();
        self.end_session();
    }
}

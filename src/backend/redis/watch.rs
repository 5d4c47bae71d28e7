//! A Limiter's watch of one semaphore it has waiters in: reads the semaphore when told of a
//! change (`notify.rs`), when the earliest session there may have lapsed, and after a broken
//! subscription, and tells exactly the waiters whose fate is decided ([`Waiters`]). One read
//! per Limiter and change, however many of its waiters there are. On a fair semaphore a read
//! that shows the rule granting one of our waiters kicks our grant (`fair_grants.rs`).

use super::fair_grants::Granter;
use super::permits::Permits;
use super::sem_reply::SemState;
use crate::backend::outage::Outage;
use crate::backend::{lock, Enqueued, EntryRequest, QueueView, WaitOutcome, Waiters};
use crate::error::{Error, Result};
use crate::queue;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Pause after a failed read.
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// A watch without waiters stops after this long (the next wait starts another).
const LINGER: Duration = Duration::from_secs(5);
/// Margin past a session's deadline before looking again (the server's clock ticks on).
const EXPIRY_MARGIN: Duration = Duration::from_millis(5);

/// A Limiter's watches, one per semaphore it waits in.
#[derive(Debug, Default)]
pub(super) struct Watches(Mutex<HashMap<String, Arc<SemWatch>>>);

impl Watches {
    /// Waits for the fate of the enqueued entry (see
    /// [`Backend::wait_outcome`](crate::backend::Backend::wait_outcome)).
    pub(super) async fn wait_outcome(
        &self,
        permits: &Arc<Permits>,
        req: &EntryRequest,
        enq: &Enqueued,
    ) -> Result<WaitOutcome> {
        // A watch stops on its own when nobody waited for a while; registering on one that
        // just stopped starts the next.
        for _ in 0..3 {
            if let Some(told) = self
                .watch(permits, &req.name)?
                .register(enq.token, req.permits)
            {
                // A watch that stops with the backend drops its waiters: the session is gone.
                return told.await.map_err(|_| Error::SessionLost);
            }
        }
        Err(Error::SessionLost)
    }

    /// The live watch of semaphore `name`, started if there is none.
    fn watch(&self, permits: &Arc<Permits>, name: &str) -> Result<Arc<SemWatch>> {
        if permits.stop.is_stopped() {
            return Err(Error::SessionLost);
        }
        let mut watches = lock(&self.0);
        if let Some(w) = watches.get(name).filter(|w| !w.is_stopped()) {
            return Ok(w.clone());
        }
        let w = SemWatch::start(Arc::downgrade(permits), name, permits.stop.child_token());
        watches.insert(name.to_string(), w.clone());
        Ok(w)
    }
}

pub(super) struct SemWatch {
    name: String,
    state: Mutex<State>,
    /// Woken by the semaphore's channel, and by a waiter that needs a newer read.
    wake: Arc<Notify>,
    /// Writes the grants a read shows the fair rule giving one of our waiters.
    granter: Arc<Granter>,
}

#[derive(Default)]
struct State {
    seen: Option<Seen>,
    waiters: Waiters,
    /// The highest token a waiter registered since the waiters were last all decided: how far
    /// a read must go.
    upto: u64,
    stopped: bool,
}

/// The last read.
enum Seen {
    Present(Box<SemState>),
    /// The semaphore does not exist (any more).
    Absent,
}

impl std::fmt::Debug for SemWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemWatch")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl SemWatch {
    pub(super) fn start(permits: Weak<Permits>, name: &str, stop: CancellationToken) -> Arc<Self> {
        let watch = Arc::new(SemWatch {
            name: name.to_string(),
            state: Mutex::new(State::default()),
            wake: Arc::new(Notify::new()),
            granter: Granter::new(permits.clone(), name),
        });
        tokio::spawn(watch.clone().run(permits, stop));
        watch
    }

    pub(super) fn is_stopped(&self) -> bool {
        lock(&self.state).stopped
    }

    /// Registers entry `token`; the receiver gets its outcome (at once if the last read
    /// decides it). `None` when the watch has stopped. On a fair semaphore, if the last read
    /// shows the rule granting it (or another waiter of ours), the grant is written.
    pub(super) fn register(
        &self,
        token: u64,
        permits: u32,
    ) -> Option<oneshot::Receiver<WaitOutcome>> {
        let (told, grantable) = self.register_locked(token, permits)?;
        if let Some(read) = grantable {
            self.granter.kick(read);
        }
        Some(told)
    }

    fn register_locked(
        &self,
        token: u64,
        permits: u32,
    ) -> Option<(oneshot::Receiver<WaitOutcome>, Option<SemState>)> {
        let mut state = lock(&self.state);
        let State {
            seen,
            waiters,
            upto,
            stopped,
        } = &mut *state;
        if *stopped {
            return None;
        }
        *upto = (*upto).max(token);
        Some(match seen {
            Some(Seen::Present(s)) if s.has_seen(token) => {
                let told = waiters.register(&**s, token, permits);
                (told, grants_one_of(s, waiters))
            }
            Some(Seen::Absent) => (waiters.register(&ABSENT, token, permits), None),
            _ => {
                // Newer than the last read: read again.
                self.wake.notify_one();
                (waiters.register(&UNSEEN, token, permits), None)
            }
        })
    }

    async fn run(self: Arc<Self>, permits: Weak<Permits>, stop: CancellationToken) {
        let Some(p) = permits.upgrade() else {
            return self.finish();
        };
        let channel = p.keys(&self.name).channel;
        let store = p.link.shown().to_string();
        // Subscribed before the first read, so no change after it goes unheard.
        p.notifier.subscribe(&channel, self.wake.clone()).await;
        drop(p);
        let mut outage = Outage::default();
        let mut idle_since: Option<Instant> = None;
        loop {
            let Some(p) = permits.upgrade() else { break };
            let next = match self.reading_up_to() {
                // Nobody waits here: a change costs no read (the next waiter reads first).
                None => LINGER,
                Some(upto) => match p.read(&self.name, Some(upto)).await {
                    Ok(read) => {
                        outage.ok("reading a semaphore");
                        let (next, grantable) = self.apply(read);
                        if let Some(read) = grantable {
                            self.granter.kick(read);
                        }
                        next
                    }
                    Err(e) => {
                        outage.failed(&format!("reading semaphore {:?}", self.name), &store, &e);
                        RETRY_PAUSE
                    }
                },
            };
            if self.stopped_when_idle(&mut idle_since) {
                p.notifier.unsubscribe(&channel, &self.wake).await;
                return;
            }
            drop(p);
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(next.min(LINGER)) => {}
            }
        }
        self.finish();
    }

    /// How far a read must go (the last waiter's token), or `None` when nobody waits: then the
    /// last read is forgotten, so the next waiter reads first.
    fn reading_up_to(&self) -> Option<u64> {
        let mut state = lock(&self.state);
        if state.waiters.is_empty() {
            state.seen = None;
            return None;
        }
        Some(state.upto)
    }

    /// Decides waiters from a read; returns when to read again at the latest, and the read
    /// when the fair rule grants one of our waiters from it.
    fn apply(&self, read: Option<SemState>) -> (Duration, Option<SemState>) {
        let mut state = lock(&self.state);
        let State {
            seen,
            waiters,
            upto,
            ..
        } = &mut *state;
        let next = match read {
            Some(s) => {
                waiters.resolve(&s);
                let next = s.next_expiry.map_or(LINGER, |d| d + EXPIRY_MARGIN);
                let grantable = grants_one_of(&s, waiters);
                *seen = Some(Seen::Present(Box::new(s)));
                (next, grantable)
            }
            None => {
                waiters.resolve(&ABSENT);
                *seen = Some(Seen::Absent);
                (LINGER, None)
            }
        };
        if waiters.is_empty() {
            *upto = 0;
        }
        next
    }

    /// Stops the watch if nobody has waited for [`LINGER`].
    fn stopped_when_idle(&self, idle_since: &mut Option<Instant>) -> bool {
        let mut state = lock(&self.state);
        if !state.waiters.is_empty() {
            *idle_since = None;
            return false;
        }
        let since = *idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() < LINGER {
            return false;
        }
        state.stopped = true;
        true
    }

    /// Stopped with the backend: waiters are dropped (their wait fails: the session is gone).
    fn finish(&self) {
        let mut state = lock(&self.state);
        state.stopped = true;
        state.waiters = Waiters::default();
    }
}

/// `state` when the fair rule, applied to it, grants one of `waiters` now (never on a plain
/// semaphore): the read a grant decides from.
fn grants_one_of(state: &SemState, waiters: &Waiters) -> Option<SemState> {
    if state.fair.is_none() || waiters.is_empty() {
        return None;
    }
    let ours = waiters.tokens();
    let grants = state.next_grants();
    grants
        .iter()
        .any(|t| ours.contains(t))
        .then(|| state.clone())
}

/// A view with no queue: before a read has seen a waiter's entry (`seen: false`: nothing is
/// decided yet), or of a semaphore that does not exist (`seen: true`: every waiter learns so).
struct NoQueue {
    seen: bool,
}

/// Before a read has seen the entry.
const UNSEEN: NoQueue = NoQueue { seen: false };
/// The semaphore does not exist.
const ABSENT: NoQueue = NoQueue { seen: true };

impl QueueView for NoQueue {
    fn capacity(&self) -> Option<(u32, u64)> {
        None
    }
    fn entries(&self) -> impl Iterator<Item = queue::Entry> + '_ {
        std::iter::empty()
    }
    fn contains(&self, _token: u64) -> bool {
        false
    }
    fn has_seen(&self, _token: u64) -> bool {
        self.seen
    }
}

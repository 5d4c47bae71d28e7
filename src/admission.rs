//! Admission of acquires to the store: what keeps a Limiter serving at the store's speed when
//! it is offered more acquires than the store can write (docs/semaphores.md, "Under overload").
//!
//! Without it every acquire sent its write at once: past the store's write rate the requests
//! queued in the client and the store, every one answered after its caller's deadline, each
//! timed-out acquire added a removal, and the process grew without bound while granting
//! nothing (congestion collapse). So:
//! * a Limiter keeps only so many acquire requests at the store at once (an enqueue, and the
//!   removal of an entry whose caller left while it was being written); the others wait for a
//!   slot, in arrival order, in their callers' own futures;
//! * how many follows the store's answer time, as TCP follows a path's round trip: one more
//!   slot per round of answers within twice the fastest answer seen lately (plus a few ms of
//!   queue, less if the callers' timeouts are short), about a quarter fewer per round of
//!   slower ones ([`Control`]), between 1 and [`MAX_SLOTS`]. A store that queues is given fewer
//!   requests, so its answers stay fast and what it serves is served in time;
//! * an acquire with a deadline waits for a slot only while the store could still answer in
//!   time (its recent answer time, [`Admission::expected`]), and is refused before anything is
//!   sent otherwise; one that the callers already waiting would keep from a slot until too late
//!   (their number ÷ the slots × the answer time) is refused at once. A refusal costs no
//!   request and no removal;
//! * a refusal is counted ([`crate::RequestStats::acquires_refused_store_busy`]) and logged at
//!   most once per [`WARN_EVERY`]: the store, not the capacity, is the limit now.
//!
//! Memory per Limiter is bounded whatever the offered rate: at most [`MAX_SLOTS`] requests
//! with their replies, and one small waiter node per caller waiting for a slot, in the
//! caller's future; callers with a deadline wait only if the store can serve them by then, so
//! at most (store answers per second × the longest timeout) of them wait at once.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// The most acquire requests of one Limiter at the store at once: ~30,000 requests/s at a
/// 1 ms round trip, more than one store serves.
pub(crate) const MAX_SLOTS: usize = 64;
/// Slots at the start: a fast start, corrected within a few round trips.
const FIRST_SLOTS: f64 = 16.0;
/// At most one "the store is the limit" warning per Limiter in this time.
const WARN_EVERY: Duration = Duration::from_secs(10);
/// An answer time older than this is not trusted to refuse: the next acquire is sent anyway,
/// so a store that became fast again is seen.
const STALE_AFTER: Duration = Duration::from_secs(1);
/// How much queueing at the store still counts as fast, at most (see `Control::target`).
const QUEUE_ALLOWANCE: Duration = Duration::from_millis(2);
/// Slots taken away per slow answer: about a quarter of them per round of slow answers.
const SLOWER: f64 = 0.3;
/// Weight of the newest answer time in the moving average.
const NEW_WEIGHT: f64 = 0.2;
/// The fastest answer is remembered over two spans of this: a store that became slower for
/// good (another disk, more members) sets a new norm within 10 s.
const FASTEST_SPAN: Duration = Duration::from_secs(5);

/// An acquire refused before reaching the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refused {
    /// The store answered lately (it is busy, not down): every slot was taken by requests it
    /// is serving. `false`: no answer for a while, the slots are held by requests it leaves
    /// unanswered.
    pub(crate) store_answering: bool,
}

/// How many slots, from the store's answer times.
#[derive(Debug)]
struct Control {
    /// The wanted number of slots (fractional: it moves by parts of a slot per answer).
    limit: f64,
    /// Slots in the semaphore now, plus those still out that will be forgotten on return.
    issued: usize,
    /// Slots to forget when they come back (the limit fell below what was out).
    to_forget: usize,
    /// Moving average of the answer time, and when it was last updated.
    answer: Option<(Duration, Instant)>,
    /// The fastest answer in this span and in the one before, and when this span began.
    fastest: (Option<Duration>, Option<Duration>, Instant),
    /// Moving average of the time callers with a deadline have left when they ask.
    budget: Option<Duration>,
}

impl Control {
    /// The longest answer time that still counts as fast: a store answering within it serves
    /// more with more requests out. Twice the fastest answer at least; up to
    /// [`QUEUE_ALLOWANCE`] more (a few requests queued at the store keep it busy, which is
    /// where it serves the most), but at most half of what the callers' timeouts leave them
    /// (a queue their timeouts cannot wait through serves nobody).
    fn target(&self, fastest: Duration) -> Duration {
        let allowance = self
            .budget
            .map_or(QUEUE_ALLOWANCE, |b| QUEUE_ALLOWANCE.min(b / 2));
        (fastest * 2).max(fastest + allowance)
    }

    /// Takes in the time a caller with a deadline has left when it asks for a slot.
    fn budget(&mut self, left: Duration) {
        self.budget = Some(match self.budget {
            Some(old) => old.mul_f64(1.0 - NEW_WEIGHT) + left.mul_f64(NEW_WEIGHT),
            None => left,
        });
    }

    fn fastest(&self) -> Option<Duration> {
        match (self.fastest.0, self.fastest.1) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Takes one answer time in and moves the limit; `slots` follows it: slots added, or
    /// free slots taken away and slots still out marked to be forgotten when they come back.
    fn answered(&mut self, took: Duration, now: Instant, slots: &Semaphore) {
        self.answer = Some(match self.answer {
            Some((old, _)) => (
                old.mul_f64(1.0 - NEW_WEIGHT) + took.mul_f64(NEW_WEIGHT),
                now,
            ),
            None => (took, now),
        });
        if now.duration_since(self.fastest.2) >= FASTEST_SPAN {
            self.fastest = (None, self.fastest.0, now);
        }
        self.fastest.0 = Some(self.fastest.0.map_or(took, |f| f.min(took)));
        let fastest = self.fastest().unwrap_or(took);
        let queueing = took > self.target(fastest);
        self.limit = if queueing {
            (self.limit - SLOWER).max(1.0)
        } else {
            (self.limit + 1.0 / self.limit).min(MAX_SLOTS as f64)
        };
        let wanted = self.limit.round() as usize;
        if wanted > self.issued {
            let more = wanted - self.issued;
            // Slots still to be forgotten count first: they come back instead.
            let kept = more.min(self.to_forget);
            self.to_forget -= kept;
            slots.add_permits(more - kept);
        } else {
            let fewer = self.issued - wanted;
            self.to_forget += fewer - slots.forget_permits(fewer);
        }
        self.issued = wanted;
    }
}

/// One Limiter's admission of acquires to the store.
#[derive(Debug)]
pub(crate) struct Admission {
    slots: Arc<Semaphore>,
    control: Mutex<Control>,
    refused: AtomicU64,
    /// Callers with a deadline waiting for a slot now.
    waiting: AtomicUsize,
    /// Refusals since the last warning, and when it was.
    warned: Mutex<(u64, Option<Instant>)>,
}

/// One caller counted among those waiting for a slot, while it lives.
struct Waiting<'a> {
    count: &'a AtomicUsize,
    /// Callers that were waiting when this one came.
    ahead: usize,
}

impl<'a> Waiting<'a> {
    fn join(count: &'a AtomicUsize) -> Self {
        let ahead = count.fetch_add(1, Relaxed);
        Waiting { count, ahead }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Relaxed);
    }
}

/// A slot at the store, held while the request it was taken for is out.
#[derive(Debug)]
pub(crate) struct Slot {
    permit: Option<OwnedSemaphorePermit>,
    admission: Arc<Admission>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut control = crate::backend::lock(&self.admission.control);
        if control.to_forget > 0 {
            control.to_forget -= 1;
            if let Some(p) = self.permit.take() {
                p.forget();
            }
        }
    }
}

impl Default for Admission {
    fn default() -> Self {
        Admission::new(FIRST_SLOTS)
    }
}

impl Admission {
    /// An admission starting with `slots` slots (at least 1).
    fn new(slots: f64) -> Self {
        let slots = slots.clamp(1.0, MAX_SLOTS as f64);
        let issued = slots.round() as usize;
        Admission {
            slots: Arc::new(Semaphore::new(issued)),
            control: Mutex::new(Control {
                limit: slots,
                issued,
                to_forget: 0,
                answer: None,
                fastest: (None, None, Instant::now()),
                budget: None,
            }),
            refused: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            warned: Mutex::new((0, None)),
        }
    }

    /// A slot for one acquire request, or a refusal: its `deadline` would pass before the
    /// store, at its recent speed, could answer. Without a deadline it waits for a slot as long
    /// as it takes. Cancel-safe.
    pub(crate) async fn enter(
        self: &Arc<Self>,
        semaphore: &str,
        deadline: Option<Instant>,
    ) -> Result<Slot, Refused> {
        let slot = |permit| Slot {
            permit: Some(permit),
            admission: self.clone(),
        };
        let Some(deadline) = deadline else {
            return self
                .slots
                .clone()
                .acquire_owned()
                .await
                .map(slot)
                .map_err(|_| Refused {
                    store_answering: false,
                });
        };
        crate::backend::lock(&self.control)
            .budget(deadline.saturating_duration_since(Instant::now()));
        // The latest moment a request may leave and still be answered in time, and whether
        // the callers already waiting for a slot leave one free by then.
        let answer = self.expected().unwrap_or_default();
        let latest = deadline.checked_sub(answer);
        let waiting = Waiting::join(&self.waiting);
        let queue_wait = answer.mul_f64(waiting.ahead as f64 / self.limit().max(1) as f64);
        let permit = match latest {
            Some(latest) if latest > Instant::now() + queue_wait => {
                tokio::time::timeout_at(latest, self.slots.clone().acquire_owned())
                    .await
                    .ok()
                    .and_then(Result::ok)
            }
            _ => None,
        };
        drop(waiting);
        permit.map(slot).ok_or_else(|| {
            self.refuse(semaphore);
            Refused {
                store_answering: self.expected().is_some(),
            }
        })
    }

    /// Records how long an acquire request took to be answered.
    pub(crate) fn answered(&self, took: Duration) {
        crate::backend::lock(&self.control).answered(took, Instant::now(), &self.slots);
    }

    /// The store's recent answer time, if measured lately enough to refuse on.
    pub(crate) fn expected(&self) -> Option<Duration> {
        let answer = crate::backend::lock(&self.control).answer;
        answer
            .filter(|(_, at)| at.elapsed() < STALE_AFTER)
            .map(|(d, _)| d)
    }

    /// Acquires refused so far before reaching the store.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Relaxed)
    }

    /// Slots wanted now (rounded).
    fn limit(&self) -> usize {
        crate::backend::lock(&self.control).issued
    }

    fn refuse(&self, semaphore: &str) {
        self.refused.fetch_add(1, Relaxed);
        let mut warned = crate::backend::lock(&self.warned);
        warned.0 += 1;
        if warned.1.is_some_and(|at| at.elapsed() < WARN_EVERY) {
            return;
        }
        let since = warned.1.map_or(String::new(), |at| {
            format!(" in the last {} s", at.elapsed().as_secs())
        });
        let answer = self
            .expected()
            .map_or("has not answered lately".to_string(), |d| {
                format!("answers in {:.1} ms", ms(d))
            });
        tracing::warn!(
            semaphore = %semaphore,
            "the store, not the capacity, is the limit now: {} acquire(s){since} refused before reaching it, their timeout would pass first (the store {answer}; this process keeps {} acquire requests at it); counted in acquires_refused_store_busy",
            warned.0,
            self.limit(),
        );
        *warned = (0, Some(Instant::now()));
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(slots: f64) -> Arc<Admission> {
        Arc::new(Admission::new(slots))
    }

    #[tokio::test(start_paused = true)]
    async fn a_free_slot_is_taken_at_once_and_a_full_gate_refuses_by_the_deadline() {
        let a = with(1.0);
        let deadline = Instant::now() + Duration::from_millis(50);
        let held = a.enter("s", Some(deadline)).await.expect("a free slot");
        let started = Instant::now();
        let refused = a.enter("s", Some(deadline)).await.expect_err("no slot");
        assert!(!refused.store_answering, "nothing answered yet");
        assert_eq!(started.elapsed(), Duration::from_millis(50));
        assert_eq!(a.refused(), 1);
        drop(held);
        assert!(a.enter("s", None).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_shorter_than_the_store_answers_is_refused_without_waiting() {
        let a = with(4.0);
        a.answered(Duration::from_millis(30));
        let started = Instant::now();
        let short = Instant::now() + Duration::from_millis(20);
        let refused = a.enter("s", Some(short)).await.expect_err("too short");
        assert!(refused.store_answering, "a busy store, not a down one");
        assert_eq!(started.elapsed(), Duration::ZERO);
        let long = Instant::now() + Duration::from_millis(100);
        assert!(a.enter("s", Some(long)).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_answer_time_refuses_nothing() {
        let a = with(4.0);
        a.answered(Duration::from_millis(30));
        tokio::time::sleep(STALE_AFTER).await;
        assert_eq!(a.expected(), None);
        let short = Instant::now() + Duration::from_millis(20);
        assert!(a.enter("s", Some(short)).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_for_a_slot_leave_when_only_the_store_time_remains() {
        let a = with(1.0);
        a.answered(Duration::from_millis(10)); // not queueing: a second slot
        let held = (a.enter("s", None).await, a.enter("s", None).await);
        assert!(held.0.is_ok() && held.1.is_ok());
        let started = Instant::now();
        let deadline = Instant::now() + Duration::from_millis(40);
        assert!(a.enter("s", Some(deadline)).await.is_err());
        // It waited until the deadline less the store's answer time.
        assert_eq!(started.elapsed(), Duration::from_millis(30));
        drop(held);
    }

    #[tokio::test(start_paused = true)]
    async fn slots_shrink_while_the_store_queues_and_grow_back_when_it_is_fast() {
        let a = with(16.0);
        for _ in 0..20 {
            a.answered(Duration::from_millis(1));
        }
        // Slow answers (queueing): 0.3 slot fewer each, down to one.
        for _ in 0..100 {
            a.answered(Duration::from_millis(20));
        }
        assert_eq!(a.limit(), 1);
        assert_eq!(a.slots.available_permits(), 1);
        // Slots out when the limit fell are forgotten as they come back.
        let b = with(8.0);
        let mut held = Vec::new();
        for _ in 0..8 {
            held.push(b.enter("s", None).await.expect("slot"));
        }
        b.answered(Duration::from_millis(1));
        for _ in 0..100 {
            b.answered(Duration::from_millis(20));
        }
        drop(held);
        assert_eq!(
            b.slots.available_permits(),
            1,
            "one slot wanted, seven forgotten"
        );
        // Fast again: about one slot more per round of answers.
        for _ in 0..60 {
            a.answered(Duration::from_millis(1));
        }
        let grown = a.limit();
        assert!((8..=12).contains(&grown), "{grown}");
        assert_eq!(a.slots.available_permits(), grown);
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_behind_too_many_waiters_is_refused_at_once() {
        let a = with(1.0);
        a.answered(Duration::from_millis(10)); // two slots now
        let held = (a.enter("s", None).await, a.enter("s", None).await);
        assert!(held.0.is_ok() && held.1.is_ok());
        // Ten callers waiting with long deadlines: ~50 ms of queue ahead of the next one.
        let long = Instant::now() + Duration::from_secs(10);
        let mut queued = Vec::new();
        for _ in 0..10 {
            let a = a.clone();
            queued.push(tokio::spawn(async move {
                a.enter("s", Some(long)).await.is_ok()
            }));
        }
        tokio::task::yield_now().await;
        let started = Instant::now();
        let soon = Instant::now() + Duration::from_millis(40);
        assert!(a.enter("s", Some(soon)).await.is_err());
        assert_eq!(started.elapsed(), Duration::ZERO, "refused without waiting");
        drop(held);
        for q in queued {
            assert!(q.await.unwrap(), "the long waiters get their slots");
        }
    }

    #[test]
    fn the_answer_time_is_a_moving_average() {
        let a = Admission::new(1.0);
        let mut c = a.control.into_inner().unwrap();
        let now = Instant::now();
        c.answered(Duration::from_millis(10), now, &a.slots);
        c.answered(Duration::from_millis(20), now, &a.slots);
        let (e, _) = c.answer.expect("fresh");
        assert!((ms(e) - 12.0).abs() < 0.01, "{e:?}");
    }
}

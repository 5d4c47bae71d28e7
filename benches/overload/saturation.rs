//! Issue 37's store-saturation rows: a *fixed* semaphore (capacity 32, holds of 1 ms, no
//! dependency) used from 6 Limiters, each its own `Limiter` (its own etcd session), offered
//! open-loop Poisson acquires at a multiple of the store's measured ceiling (ceiling.rs) with
//! a short `acquire_timeout`. Each row: a low load (10% of the ceiling) that gives the
//! unloaded acquire latency, the overload, then the low load again to see how soon the
//! latency comes back (saturation_record.rs reads the figures).
//!
//! The bench must outlive a library that collapses here (every acquire timing out, memory
//! growing by GB): each Limiter's generator keeps at most `OUTSTANDING` calls outstanding (the
//! next arrivals are counted as not sent), every call is cut off `HUNG_AFTER` past its
//! timeout, the process's memory is guarded (memory.rs), the calls left at the end are
//! abandoned after `DRAIN`, and a row that errs is reported and the next one runs.

use crate::memory::{Seen, Watch};
use crate::support::EtcdCluster;
use anyhow::Context as _;
use clusterlimit::{Error, Limiter, Semaphore};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// One row: the offered acquires as a multiple of the ceiling, and the acquire timeout.
#[derive(Debug, Clone, Copy)]
pub struct SatRow {
    pub times_ceiling: f64,
    pub timeout: Duration,
}

/// The rows of one run and their phases.
#[derive(Debug, Clone)]
pub struct SatPlan {
    pub rows: Vec<SatRow>,
    /// Low load before (the unloaded latency), overload, low load after (the recovery).
    pub before: Duration,
    pub overload: Duration,
    pub after: Duration,
    /// How long each round of the ceiling's measurement lasts, and how many (the best counts).
    pub ceiling_for: Duration,
    pub ceiling_rounds: usize,
    pub limiters: usize,
    pub capacity: u32,
    pub hold: Duration,
    /// The low load as a share of the ceiling.
    pub low: f64,
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

impl SatPlan {
    /// Full: 2× and 4× at 20 ms, and 2× at 2 ms; 10 s of overload, 5 s after. Quick: 2× at
    /// 20 ms for 3 s.
    pub fn new(quick: bool) -> SatPlan {
        let row = |times_ceiling, timeout| SatRow {
            times_ceiling,
            timeout: ms(timeout),
        };
        let (rows, before, overload, after, ceiling_rounds) = if quick {
            (vec![row(2.0, 20)], ms(1000), ms(3000), ms(2000), 1)
        } else {
            let rows = vec![row(2.0, 20), row(4.0, 20), row(2.0, 2)];
            (rows, ms(2000), ms(10_000), ms(5000), 2)
        };
        SatPlan {
            rows,
            before,
            overload,
            after,
            ceiling_for: if quick { ms(1500) } else { ms(3000) },
            ceiling_rounds,
            limiters: crate::ceiling::CONNECTIONS,
            capacity: 32,
            hold: ms(1),
            low: 0.1,
        }
    }

    pub fn total(&self) -> Duration {
        self.before + self.overload + self.after
    }
}

/// Calls one Limiter's generator keeps outstanding at most: a library that answers within its
/// timeout stays far below (at 4× a ceiling of ~5,000/s and 20 ms, ~70 per Limiter).
pub const OUTSTANDING: usize = 1000;
/// A call with no answer this long past its acquire timeout is cut off and counted as hung.
pub const HUNG_AFTER: Duration = Duration::from_secs(5);
/// A call still unsent this long past its timeout is not sent at all: it could only time out.
pub const BEHIND_SLACK: Duration = Duration::from_millis(100);
/// How long the end of a row waits for calls still outstanding before abandoning them.
const DRAIN: Duration = Duration::from_secs(5);
/// Bound on opening and closing the row's Limiters.
const SETUP_BOUND: Duration = Duration::from_secs(30);
/// Distinct error messages kept per row; the rest are counted under "other".
const MESSAGES_KEPT: usize = 8;

/// How one acquire ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Granted,
    /// `Timeout` or `NoPermits`: the semaphore's answer to overload.
    Rejected,
    /// Any other error (its message is counted).
    Failed,
    /// No answer within the timeout + `HUNG_AFTER`.
    Hung,
    /// Not sent: the generator was already past the call's timeout (the process is too busy
    /// to keep to the schedule).
    Behind,
    /// Not sent: the Limiter had `OUTSTANDING` calls outstanding, or the process was over its
    /// memory guard.
    Bounded,
}

/// One acquire: when it was scheduled (s from the row's start), how long its answer took.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    pub scheduled: f64,
    pub latency: Duration,
    pub end: End,
}

/// What one row recorded.
pub struct SatData {
    pub calls: Vec<Call>,
    /// Error message → count (acquires and releases that failed other than by timing out).
    pub messages: BTreeMap<String, usize>,
    pub abandoned: usize,
    pub memory: Seen,
}

/// Error messages of a row, counted.
#[derive(Default)]
struct Messages(Mutex<BTreeMap<String, usize>>);

impl Messages {
    fn add(&self, what: &str, e: &Error) {
        self.add_text(format!("{what}: {e}"));
    }

    fn add_text(&self, mut text: String) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        text.truncate(200);
        if !m.contains_key(&text) && m.len() >= MESSAGES_KEPT {
            text = "other".to_string();
        }
        *m.entry(text).or_default() += 1;
    }
}

/// Runs row `index`; `ceiling` is the store's pairs/s.
pub async fn run_row(
    plan: &SatPlan,
    row: SatRow,
    ceiling: f64,
    etcd: &EtcdCluster,
    index: usize,
) -> anyhow::Result<SatData> {
    let url = etcd.url(&format!("overload/saturation/{index}"));
    let sems = tokio::time::timeout(SETUP_BOUND, open(plan, &url))
        .await
        .context("opening the Limiters took over 30 s")??;
    let messages = Arc::new(Messages::default());
    let watch = Watch::start(crate::grid::MEMORY_GUARD);
    let start = Instant::now() + ms(100);
    let mut generators = JoinSet::new();
    for (i, (_, sem)) in sems.iter().enumerate() {
        let gen = Generator {
            sem: sem.clone(),
            plan: plan.clone(),
            row,
            ceiling,
            start,
            seed: 37 + index as u64 * 101 + i as u64,
            messages: messages.clone(),
        };
        generators.spawn(gen.run());
    }
    let (mut calls, mut abandoned) = (Vec::new(), 0);
    while let Some(done) = generators.join_next().await {
        let (c, a) = done.context("a generator panicked")?;
        calls.extend(c);
        abandoned += a;
    }
    let memory = watch.finish();
    close(&sems, &messages).await;
    let messages = std::mem::take(&mut *messages.0.lock().unwrap_or_else(|p| p.into_inner()));
    calls.sort_by(|a, b| a.scheduled.total_cmp(&b.scheduled));
    Ok(SatData {
        calls,
        messages,
        abandoned,
        memory,
    })
}

/// The row's Limiters, each with its handle on the fixed semaphore.
async fn open(plan: &SatPlan, url: &str) -> anyhow::Result<Vec<(Limiter, Semaphore)>> {
    let mut out = Vec::new();
    for i in 0..plan.limiters {
        out.push(
            crate::stores::client(url, &format!("saturation-{i}"), "sat", plan.capacity).await?,
        );
    }
    Ok(out)
}

/// Closes the Limiters, bounded; a failure is counted with the row's messages, not fatal.
async fn close(sems: &[(Limiter, Semaphore)], messages: &Messages) {
    for (limiter, _) in sems {
        match tokio::time::timeout(SETUP_BOUND, limiter.close()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => messages.add("close", &e),
            Err(_) => messages.add_text(format!(
                "close: no answer within {} s",
                SETUP_BOUND.as_secs()
            )),
        }
    }
}

/// One Limiter's share of the arrivals.
struct Generator {
    sem: Semaphore,
    plan: SatPlan,
    row: SatRow,
    ceiling: f64,
    start: Instant,
    seed: u64,
    messages: Arc<Messages>,
}

impl Generator {
    /// Arrivals per second of this Limiter at `t` s from the start.
    fn rate_at(&self, t: f64) -> f64 {
        let p = &self.plan;
        let (a, b) = (
            p.before.as_secs_f64(),
            (p.before + p.overload).as_secs_f64(),
        );
        let share = if t >= a && t < b {
            self.row.times_ceiling
        } else {
            p.low
        };
        share * self.ceiling / p.limiters as f64
    }

    /// Offers the arrivals, then waits (bounded) for the calls; returns them and how many
    /// were abandoned.
    async fn run(self) -> (Vec<Call>, usize) {
        let me = Arc::new(self);
        let mut rng = fastrand::Rng::with_seed(me.seed);
        let (mut calls, mut tasks) = (Vec::new(), JoinSet::new());
        let end = me.plan.total().as_secs_f64();
        let mut t = 0.0;
        loop {
            // Exponential gaps at the rate in force: 1 - u is in (0, 1].
            t += -(1.0 - rng.f64()).ln() / me.rate_at(t);
            if t >= end {
                break;
            }
            let scheduled = me.start + Duration::from_secs_f64(t);
            tokio::time::sleep_until(scheduled).await;
            while let Some(Ok(c)) = tasks.try_join_next() {
                calls.push(c);
            }
            if let Some(end) = me.not_sent(scheduled, tasks.len()) {
                calls.push(Call {
                    scheduled: t,
                    latency: Duration::ZERO,
                    end,
                });
                continue;
            }
            let g = me.clone();
            tasks.spawn(async move { g.call(t).await });
        }
        let give_up = Instant::now() + DRAIN;
        while let Ok(Some(done)) = tokio::time::timeout_at(give_up, tasks.join_next()).await {
            if let Ok(c) = done {
                calls.push(c);
            }
        }
        let abandoned = tasks.len();
        tasks.shutdown().await;
        (calls, abandoned)
    }

    /// Why the call scheduled at `scheduled` is not sent, if it is not.
    fn not_sent(&self, scheduled: Instant, outstanding: usize) -> Option<End> {
        if outstanding >= OUTSTANDING || crate::memory::over_guard() {
            Some(End::Bounded)
        } else if Instant::now() >= scheduled + self.row.timeout + BEHIND_SLACK {
            Some(End::Behind)
        } else {
            None
        }
    }

    /// One acquire (bounded), a 1 ms hold, the release.
    async fn call(&self, scheduled: f64) -> Call {
        let asked = Instant::now();
        let bound = self.row.timeout + HUNG_AFTER;
        let answer = tokio::time::timeout(bound, self.sem.acquire_timeout(self.row.timeout)).await;
        let latency = asked.elapsed();
        let end = match answer {
            Err(_) => End::Hung,
            Ok(Err(Error::Timeout | Error::NoPermits)) => End::Rejected,
            Ok(Err(e)) => {
                self.messages.add("acquire", &e);
                End::Failed
            }
            Ok(Ok(permit)) => {
                tokio::time::sleep(self.plan.hold).await;
                match tokio::time::timeout(HUNG_AFTER, permit.release()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => self.messages.add("release", &e),
                    Err(_) => self.messages.add_text(format!(
                        "release: no answer within {} s (cut off)",
                        HUNG_AFTER.as_secs()
                    )),
                }
                End::Granted
            }
        };
        Call {
            scheduled,
            latency,
            end,
        }
    }
}

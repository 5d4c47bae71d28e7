//! One run: a fresh dependency, R replicas of one contender offering open-loop Poisson load
//! (a call late to its schedule is sent late, never skipped, and its latency counts from its
//! scheduled time), the scenario's capacity changes and joins, and a monitor sampling the
//! stored capacity. Also the unloaded latency: one caller, one call at a time.

use crate::dependency::Dependency;
use crate::flight::{Admission, Flight};
use crate::gate::{CallSetup, Contender, ErrorLog, Kind, Opening, Replica, SEMAPHORE};
use crate::plan::{DependencySize, Plan, Scenario};
use crate::stats::Samples;
use anyhow::Context as _;
use clusterlimit::adaptive::CapacityDecision;
use clusterlimit::{Limiter, RequestStats, Semaphore};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// How often the monitor samples the stored capacity and the per-replica limits.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// Beyond a call's deadline, how long the end of a run waits for its release.
pub const RELEASE_GRACE: Duration = Duration::from_secs(5);
/// Calls one replica may have outstanding, as a multiple of what its arrival rate puts in
/// flight over a call's deadline: a healthy run stays far below it (its releases take
/// milliseconds);
/// a library that stops answering (a store past its write rate) would otherwise make the
/// harness's own tasks and memory grow without bound.
const OUTSTANDING_MARGIN: f64 = 4.0;
/// The bound is never below this many calls per replica.
const OUTSTANDING_FLOOR: usize = 256;

/// The unloaded latency, which sets the latency objective and the timeouts.
#[derive(Debug, Clone)]
pub struct Unloaded {
    pub samples: Samples,
}

impl Unloaded {
    /// Goodput counts a call within this: 3× the unloaded p99.
    pub fn objective(&self) -> Duration {
        self.samples.p99() * 3
    }

    /// The p99 target: 2× the unloaded p99.
    pub fn p99_target(&self) -> Duration {
        self.samples.p99() * 2
    }

    /// A call's deadline from its scheduled time: twice the objective (then it is dropped).
    pub fn client_timeout(&self) -> Duration {
        self.objective() * 2
    }

    /// The longest a call waits to be admitted: a quarter of the unloaded median. Under
    /// overload a few calls wait at any time, so a freed permit goes to one of them at once
    /// instead of idling until the next arrival; with FIFO grants an admitted call has mostly
    /// waited this long, so it stays short next to the service time.
    pub fn admission(&self) -> Duration {
        self.samples.p50() / 4
    }
}

/// `calls` calls of one caller, one at a time, on a fresh dependency.
pub async fn unloaded(size: DependencySize, calls: usize, seed: u64) -> anyhow::Result<Unloaded> {
    let dep = Dependency::start(size, seed)?;
    let client = reqwest::Client::new();
    let timeout = Duration::from_secs(10);
    let mut v = Vec::with_capacity(calls);
    // 5 unmeasured calls open the connection.
    for i in 0..calls + 5 {
        let t = Instant::now();
        let resp = tokio::time::timeout(timeout, client.get(&dep.url).send())
            .await
            .context("an unloaded call timed out")?
            .context("an unloaded call failed")?;
        anyhow::ensure!(
            resp.status().is_success(),
            "the unloaded dependency answered {}",
            resp.status()
        );
        if i >= 5 {
            v.push(t.elapsed());
        }
    }
    Ok(Unloaded {
        samples: Samples::new(v),
    })
}

/// One call's fate (times in seconds from the run's start).
#[derive(Debug, Clone, Copy)]
pub struct Record {
    pub scheduled: f64,
    pub done: f64,
    pub kind: Kind,
}

impl Record {
    pub fn latency(&self) -> f64 {
        self.done - self.scheduled
    }
}

/// The stored capacity read at `at` (a status read issued at `asked`).
#[derive(Debug, Clone, Copy)]
pub struct CapacitySample {
    pub asked: f64,
    pub at: f64,
    pub capacity: u32,
}

/// Everything one run recorded.
#[derive(Debug)]
pub struct RunData {
    pub records: Vec<Record>,
    pub admissions: Vec<Admission>,
    /// Cluster contenders: the stored capacity over the run.
    pub capacity: Vec<CapacitySample>,
    /// Ours: the controller's steps as read over the run, `(read at, step)`.
    pub decisions: Vec<(f64, CapacityDecision)>,
    /// tower-acc: the sum of the replicas' limits over the run, `(at, sum)`.
    pub limits: Vec<(f64, usize)>,
    pub errors: (usize, Vec<String>),
    /// Requests of the replicas' Limiters to the store.
    pub store: RequestStats,
    /// Calls still unanswered when the run gave up waiting for them.
    pub abandoned: usize,
    /// The run's start on the wall clock (Unix ms): the adaptive windows are aligned on it.
    pub start_unix_ms: u64,
}

/// What a run needs besides the plan.
pub struct RunSpec<'a> {
    pub plan: &'a Plan,
    pub scenario: &'a Scenario,
    pub replicas: usize,
    pub contender: Contender,
    /// The contender's own etcd prefix.
    pub etcd_url: String,
    pub unloaded: &'a Unloaded,
    pub seed: u64,
}

/// Runs one scenario with one contender on a fresh dependency.
pub async fn run(spec: &RunSpec<'_>) -> anyhow::Result<RunData> {
    let size = spec.plan.dependency;
    let dep = Arc::new(Dependency::start(size, spec.seed)?);
    let opening = Arc::new(Opening {
        contender: spec.contender,
        etcd_url: spec.etcd_url.clone(),
        dependency_url: dep.url.clone(),
        errors: Arc::new(ErrorLog::default()),
    });
    let limits: Vec<Arc<AtomicUsize>> = (0..spec.replicas)
        .map(|_| Arc::new(AtomicUsize::new(0)))
        .collect();
    // Replicas there from the start are opened before it; the others when they join.
    let mut opened = Vec::new();
    for (i, limit) in limits.iter().enumerate() {
        opened.push(if spec.scenario.start_of(i, spec.replicas).is_zero() {
            Some(opening.replica(i, limit.clone()).await?)
        } else {
            None
        });
    }
    let monitor = Monitor::open(spec).await?;
    let first = match &monitor {
        Some(m) => Some(m.first().await?),
        None => None,
    };
    let start = Instant::now();
    let start_unix_ms = unix_ms();
    let setup = Arc::new(CallSetup {
        url: dep.url.clone(),
        client_timeout: spec.unloaded.client_timeout(),
        admission: spec.unloaded.admission(),
        flight: Arc::new(Flight::new(start)),
    });
    let rate = spec.plan.overload * size.capacity_per_s(size.workers) / spec.replicas as f64;
    let mut replicas = JoinSet::new();
    for (i, replica) in opened.into_iter().enumerate() {
        let load = ReplicaLoad {
            opening: opening.clone(),
            index: i,
            limit: limits[i].clone(),
            setup: setup.clone(),
            start,
            from: spec.scenario.start_of(i, spec.replicas),
            until: spec.scenario.run_for,
            rate,
            most_outstanding: outstanding_bound(rate, spec.unloaded.client_timeout()),
            seed: spec.seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        };
        replicas.spawn(load.run(replica));
    }
    let changes = change_capacity(&dep, spec.scenario, start);
    let watch = async {
        match (monitor, first) {
            (Some(m), Some(first)) => m.run(spec, start, first, &opening.errors).await,
            _ => Ok((Vec::new(), Vec::new())),
        }
    };
    let (watched, limits, ()) = tokio::join!(watch, sample_limits(&limits, spec, start), changes);
    let (capacity, decisions) = watched?;
    let mut data = RunData {
        records: Vec::new(),
        admissions: Vec::new(),
        capacity,
        decisions,
        limits,
        errors: (0, Vec::new()),
        store: RequestStats::default(),
        abandoned: 0,
        start_unix_ms,
    };
    let mut closing = Vec::new();
    while let Some(done) = replicas.join_next().await {
        let (records, abandoned, replica) = done.context("a replica's task panicked")??;
        data.records.extend(records);
        data.abandoned += abandoned;
        closing.push(replica);
    }
    let limiters: Vec<Limiter> = closing
        .iter()
        .filter_map(|r| r.limiter().cloned())
        .collect();
    data.store = crate::stores::total_stats(&limiters);
    crate::stores::close_all(&limiters).await?;
    data.admissions = setup.flight.admissions();
    data.errors = opening.errors.get();
    data.records
        .sort_by(|a, b| a.scheduled.total_cmp(&b.scheduled));
    Ok(data)
}

/// One replica's share of the load.
struct ReplicaLoad {
    opening: Arc<Opening>,
    index: usize,
    limit: Arc<AtomicUsize>,
    setup: Arc<CallSetup>,
    start: Instant,
    /// Offsets from `start`: the first arrival is at or after `from`, the last before `until`.
    from: Duration,
    until: Duration,
    /// Calls per second (Poisson).
    rate: f64,
    /// Calls this replica may have outstanding; beyond it an arrival is not sent.
    most_outstanding: usize,
    seed: u64,
}

/// The most calls one replica offering `rate` calls/s keeps outstanding (see
/// `OUTSTANDING_MARGIN`).
fn outstanding_bound(rate: f64, client_timeout: Duration) -> usize {
    let in_flight = rate * client_timeout.as_secs_f64();
    ((in_flight * OUTSTANDING_MARGIN) as usize).max(OUTSTANDING_FLOOR)
}

/// Milliseconds since the Unix epoch, by the wall clock.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl ReplicaLoad {
    /// Opens the replica if it joins late, offers its load, waits for its calls.
    async fn run(self, replica: Option<Replica>) -> anyhow::Result<(Vec<Record>, usize, Replica)> {
        tokio::time::sleep_until(self.start + self.from).await;
        let replica = match replica {
            Some(r) => r,
            // Its calls are scheduled from `from` anyway: a slow start counts in their latency.
            None => self.opening.replica(self.index, self.limit.clone()).await?,
        };
        let replica = Arc::new(replica);
        let mut rng = fastrand::Rng::with_seed(self.seed);
        let mut calls = JoinSet::new();
        let mut records = Vec::new();
        let mut t = self.from.as_secs_f64();
        let until = self.until.as_secs_f64();
        // Bounded: the arrivals up to `until` at this rate, with a wide margin.
        let most = (self.rate * until * 2.0) as usize + 100;
        for _ in 0..most {
            // Exponential gaps: 1 - u is in (0, 1].
            t += -(1.0 - rng.f64()).ln() / self.rate;
            if t >= until {
                break;
            }
            let scheduled = self.start + Duration::from_secs_f64(t);
            tokio::time::sleep_until(scheduled).await;
            // Finished calls are collected as we go, so the set holds only those in flight.
            while let Some(r) = calls.try_join_next() {
                records.push(r.context("a call's task panicked")?);
            }
            if !self.may_send(scheduled, calls.len()) {
                let at = self.setup.flight.secs(scheduled);
                records.push(Record {
                    scheduled: at,
                    done: at,
                    kind: Kind::NotSent,
                });
                continue;
            }
            let (replica, setup) = (replica.clone(), self.setup.clone());
            calls.spawn(async move {
                let (kind, done) = replica.call(&setup, scheduled).await;
                Record {
                    scheduled: setup.flight.secs(scheduled),
                    done: setup.flight.secs(done),
                    kind,
                }
            });
        }
        let give_up = Instant::now() + self.setup.client_timeout + RELEASE_GRACE;
        loop {
            match tokio::time::timeout_at(give_up, calls.join_next()).await {
                Ok(Some(r)) => records.push(r.context("a call's task panicked")?),
                Ok(None) => break,
                Err(_) => break,
            }
        }
        let abandoned = calls.len();
        calls.shutdown().await;
        let replica = Arc::into_inner(replica).context("a call still holds its replica")?;
        Ok((records, abandoned, replica))
    }
}

impl ReplicaLoad {
    /// Whether the call scheduled at `scheduled` is sent: not when the harness is already past
    /// its deadline (it would only be counted as timed out), when `outstanding` calls reach the
    /// bound, or when the process is over its memory guard (memory.rs).
    fn may_send(&self, scheduled: Instant, outstanding: usize) -> bool {
        Instant::now() < scheduled + self.setup.client_timeout
            && outstanding < self.most_outstanding
            && !crate::memory::over_guard()
    }
}

/// Applies the scenario's worker changes at their times.
async fn change_capacity(dep: &Dependency, scenario: &Scenario, start: Instant) {
    for (at, workers) in &scenario.worker_changes {
        tokio::time::sleep_until(start + *at).await;
        dep.set_workers(*workers);
    }
}

/// What a cluster contender's run is watched with: a Limiter of its own reading the stored
/// capacity every `SAMPLE_EVERY` (and ours' controller steps every `DECISION_EVERY` reads).
struct Monitor {
    limiter: Limiter,
    sem: Semaphore,
    adaptive: bool,
}

/// How often the adaptive controller's last step is read, in a loop of its own (a slow status
/// read does not delay it): every step of a 500 ms window is seen several times before the
/// next one replaces it, so the grid's count of windows that got a step is the library's, not
/// the monitor's.
const DECISION_EVERY: Duration = Duration::from_millis(100);

impl Monitor {
    /// Opened once the replicas there from the start have opened the semaphore.
    async fn open(spec: &RunSpec<'_>) -> anyhow::Result<Option<Monitor>> {
        if !spec.contender.is_cluster() {
            return Ok(None);
        }
        let limiter = crate::stores::limiter(&spec.etcd_url, "monitor").await?;
        let sem = limiter
            .open_semaphore(SEMAPHORE)
            .await
            .context("the monitor opens the semaphore")?;
        Ok(Some(Monitor {
            limiter,
            sem,
            adaptive: matches!(spec.contender, Contender::Ours { .. }),
        }))
    }

    /// One read, before the run starts.
    async fn first(&self) -> anyhow::Result<CapacitySample> {
        let status = self
            .sem
            .status()
            .await
            .context("read the semaphore's status")?;
        Ok(CapacitySample {
            asked: 0.0,
            at: 0.0,
            capacity: status.capacity,
        })
    }

    /// Reads from `start` until a little past the run's end: the last calls are admitted up
    /// to an admission timeout late, and each admission is checked between two reads
    /// (record.rs).
    /// A read that fails is logged in `errors` (a failed run for issue 31's scenarios, a
    /// figure for the grid's store-saturated rows) and skipped.
    async fn run(
        self,
        spec: &RunSpec<'_>,
        start: Instant,
        first: CapacitySample,
        errors: &ErrorLog,
    ) -> anyhow::Result<(Vec<CapacitySample>, Vec<(f64, CapacityDecision)>)> {
        let end = start + spec.scenario.run_for + spec.unloaded.admission() + SAMPLE_EVERY * 3;
        let (capacity, decisions) = tokio::join!(
            self.capacities(start, end, first, errors),
            self.decisions(start, end, errors)
        );
        self.limiter
            .close()
            .await
            .context("close the monitor's Limiter")?;
        Ok((capacity, decisions))
    }
}

impl Monitor {
    /// The stored capacity every `SAMPLE_EVERY` until `end` (one read per tick).
    async fn capacities(
        &self,
        start: Instant,
        end: Instant,
        first: CapacitySample,
        errors: &ErrorLog,
    ) -> Vec<CapacitySample> {
        let secs = |t: Instant| t.saturating_duration_since(start).as_secs_f64();
        let mut capacity = vec![first];
        let mut tick = tokio::time::interval(SAMPLE_EVERY);
        loop {
            tick.tick().await;
            if Instant::now() >= end {
                return capacity;
            }
            let asked = Instant::now();
            match self.sem.status().await {
                Ok(status) => capacity.push(CapacitySample {
                    asked: secs(asked),
                    at: secs(Instant::now()),
                    capacity: status.capacity,
                }),
                Err(e) => errors.add(format!("monitor: read the semaphore's status: {e}")),
            }
        }
    }

    /// Ours: each new step of the controller (by window) as read every `DECISION_EVERY`.
    async fn decisions(
        &self,
        start: Instant,
        end: Instant,
        errors: &ErrorLog,
    ) -> Vec<(f64, CapacityDecision)> {
        let mut decisions: Vec<(f64, CapacityDecision)> = Vec::new();
        if !self.adaptive {
            return decisions;
        }
        let mut tick = tokio::time::interval(DECISION_EVERY);
        loop {
            tick.tick().await;
            if Instant::now() >= end {
                return decisions;
            }
            match self.sem.adaptive_status().await {
                Ok(read) => {
                    if let Some(d) = read.and_then(|s| s.last) {
                        if decisions.last().is_none_or(|(_, p)| p.window != d.window) {
                            let at = Instant::now().saturating_duration_since(start);
                            decisions.push((at.as_secs_f64(), d));
                        }
                    }
                }
                Err(e) => errors.add(format!("monitor: read the adaptive status: {e}")),
            }
        }
    }
}

/// tower-acc: the sum of the replicas' limits every `SAMPLE_EVERY` (joined replicas count
/// from their first limit).
async fn sample_limits(
    limits: &[Arc<AtomicUsize>],
    spec: &RunSpec<'_>,
    start: Instant,
) -> Vec<(f64, usize)> {
    let mut out = Vec::new();
    if spec.contender != Contender::TowerAcc {
        return out;
    }
    let end = start + spec.scenario.run_for;
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    while Instant::now() < end {
        tick.tick().await;
        let sum = limits.iter().map(|l| l.load(Ordering::Relaxed)).sum();
        out.push((start.elapsed().as_secs_f64(), sum));
    }
    out
}

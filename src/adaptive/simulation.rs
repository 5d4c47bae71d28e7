//! A dependency simulated in virtual time and driven by [`step`] window after window (issue
//! 37): the controller's capacity converges near the dependency's true capacity from starts far
//! above and below it, on fast, medium and slow dependencies, and again after the capacity
//! doubles or halves. Pure and deterministic (a fixed seed), fast (events, not ticks).
//!
//! The dependency: `K` workers, a FIFO queue of `queue` calls behind them (full: the call is
//! refused at once, a drop), lognormal service times of mean `S` (σ 0.5). The load: Poisson
//! arrivals at 3× the dependency's capacity (open loop); an arrival finding the pool full is
//! rejected by the limiter (not an outcome). Windows of 500 ms; each decision lands 100 ms after
//! its window's end (the controller's read after the announcements, then its write), and a
//! smaller capacity revokes nobody: the pool drains as calls complete, as in a real semaphore.

use super::algorithm::{step, Aimd, Bounds, CapacityAlgorithm, Gradient, Memory};
use super::window::{Outcome, WindowSummary};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

const WINDOW_NS: u64 = 500_000_000;
/// A decision lands this long after its window's end.
const LANDS_NS: u64 = 100_000_000;
/// Windows run before the dependency's capacity changes, and after.
const PHASE: usize = 40;
/// The bound proven: within this many windows the capacity is in [0.5×, 2×] of the true one
/// and stays there.
const CONVERGE_WITHIN: usize = 20;

/// xorshift64*: deterministic, good enough for arrivals and service times.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    fn exponential(&mut self, mean: f64) -> f64 {
        -mean * self.unit().ln()
    }

    fn normal(&mut self) -> f64 {
        (-2.0 * self.unit().ln()).sqrt() * (std::f64::consts::TAU * self.unit()).cos()
    }
}

/// The simulated dependency and the pool in front of it.
struct Sim {
    now: u64,
    rng: Rng,
    /// Workers (the true capacity).
    workers: u32,
    busy: u32,
    /// Admission times of the calls waiting for a worker.
    queue: VecDeque<u64>,
    queue_limit: usize,
    service_mean_ns: f64,
    /// (completion time, admission time) of the calls in service.
    done: BinaryHeap<Reverse<(u64, u64)>>,
    arrival_mean_ns: f64,
    /// The next arrival, while the pool has room (Poisson: memoryless, so arrivals while the
    /// pool is full, all rejected, need not be drawn).
    next_arrival: Option<u64>,
    /// The capacity in force, and one decided but not landed yet.
    capacity: u32,
    landing: Option<(u64, u32)>,
    held: u32,
    window: WindowSummary,
}

impl Sim {
    fn new(
        workers: u32,
        service: Duration,
        queue_limit: usize,
        offered_per_s: f64,
        seed: u64,
    ) -> Self {
        Sim {
            now: 0,
            rng: Rng(seed | 1),
            workers,
            busy: 0,
            queue: VecDeque::new(),
            queue_limit,
            service_mean_ns: service.as_nanos() as f64,
            done: BinaryHeap::new(),
            arrival_mean_ns: 1e9 / offered_per_s,
            next_arrival: None,
            capacity: 0,
            landing: None,
            held: 0,
            window: WindowSummary::default(),
        }
    }

    fn service_ns(&mut self) -> u64 {
        const SIGMA: f64 = 0.5;
        let factor = (SIGMA * self.rng.normal() - SIGMA * SIGMA / 2.0).exp();
        (self.service_mean_ns * factor).max(1.0) as u64
    }

    fn start_waiting(&mut self) {
        while self.busy < self.workers {
            let Some(admitted) = self.queue.pop_front() else {
                break;
            };
            self.busy += 1;
            let at = self.now + self.service_ns();
            self.done.push(Reverse((at, admitted)));
        }
    }

    fn arrivals_if_room(&mut self) {
        if self.next_arrival.is_none() && self.held < self.capacity {
            let gap = self.rng.exponential(self.arrival_mean_ns) as u64;
            self.next_arrival = Some(self.now + gap.max(1));
        }
    }

    fn arrive(&mut self) {
        self.next_arrival = None;
        if self.held < self.capacity {
            self.held += 1;
            self.window.in_flight(u64::from(self.held));
            if self.busy < self.workers || self.queue.len() < self.queue_limit {
                self.queue.push_back(self.now);
                self.start_waiting();
            } else {
                self.window.record(Outcome::Dropped);
                self.held -= 1;
            }
        }
        self.arrivals_if_room();
    }

    fn complete(&mut self, admitted: u64) {
        self.busy -= 1;
        self.held -= 1;
        self.window
            .record(Outcome::Success(Duration::from_nanos(self.now - admitted)));
        self.start_waiting();
        self.arrivals_if_room();
    }

    /// Runs until `until`.
    fn run_until(&mut self, until: u64) {
        loop {
            let arrival = self.next_arrival.unwrap_or(u64::MAX);
            let completion = self.done.peek().map_or(u64::MAX, |Reverse((at, _))| *at);
            let landing = self.landing.map_or(u64::MAX, |(at, _)| at);
            let next = arrival.min(completion).min(landing);
            if next > until {
                self.now = until;
                return;
            }
            self.now = next;
            if next == landing {
                self.capacity = self.landing.take().map_or(self.capacity, |(_, c)| c);
                self.arrivals_if_room();
            } else if next == completion {
                if let Some(Reverse((_, admitted))) = self.done.pop() {
                    self.complete(admitted);
                }
            } else {
                self.arrive();
            }
        }
    }

    /// The window that just ended; the next starts with the permits held now.
    fn take_window(&mut self) -> WindowSummary {
        let mut next = WindowSummary::default();
        next.in_flight(u64::from(self.held));
        std::mem::replace(&mut self.window, next)
    }

    fn set_workers(&mut self, workers: u32) {
        self.workers = workers;
        self.start_waiting();
    }
}

/// One scenario: a dependency of `k` workers and mean service time `service`, the pool created
/// at `start`; after [`PHASE`] windows the workers become `k2`.
#[derive(Debug, Clone, Copy)]
struct Scenario {
    algorithm: CapacityAlgorithm,
    service: Duration,
    k: u32,
    queue: usize,
    start: u32,
    k2: u32,
}

/// The capacities decided, window by window, and the baseline at the end of each phase.
struct Run {
    first: Vec<u32>,
    second: Vec<u32>,
    baseline: Option<Duration>,
}

const BOUNDS: Bounds = Bounds {
    min: 1,
    max: 1000,
    max_step: 0.5,
};

fn simulate(s: &Scenario, seed: u64) -> Run {
    let offered = 3.0 * f64::from(s.k.max(s.k2)) / s.service.as_secs_f64();
    let mut sim = Sim::new(s.k, s.service, s.queue, offered, seed);
    sim.capacity = s.start;
    sim.arrivals_if_room();
    let mut memory = Memory::default();
    let mut stored = s.start;
    let mut caps = Vec::new();
    let mut baseline = None;
    for w in 0..2 * PHASE {
        if w == PHASE {
            baseline = memory.baseline;
            sim.set_workers(s.k2);
        }
        let end = (w as u64 + 1) * WINDOW_NS;
        sim.run_until(end);
        let summary = sim.take_window();
        let next = step(&s.algorithm, &BOUNDS, &mut memory, stored, &summary);
        if next.capacity != stored {
            sim.landing = Some((end + LANDS_NS, next.capacity));
            stored = next.capacity;
        }
        caps.push(stored);
    }
    let second = caps.split_off(PHASE);
    Run {
        first: caps,
        second,
        baseline,
    }
}

/// Windows until the capacity is in [0.5×, 2×] of `k` for good (1 = from the first decision
/// on); `None` if it is out of that band at the end.
fn converged_after(caps: &[u32], k: u32) -> Option<usize> {
    let inside = |c: &u32| (f64::from(*c) >= f64::from(k) * 0.5) && *c <= 2 * k;
    match caps.iter().rposition(|c| !inside(c)) {
        None => Some(1),
        Some(i) if i + 1 < caps.len() => Some(i + 2),
        Some(_) => None,
    }
}

fn name(a: &CapacityAlgorithm) -> &'static str {
    match a {
        CapacityAlgorithm::Aimd(_) => "AIMD",
        CapacityAlgorithm::Gradient(_) => "gradient",
    }
}

fn scenarios() -> Vec<Scenario> {
    let mut all = Vec::new();
    for algorithm in [
        CapacityAlgorithm::Gradient(Gradient::default()),
        CapacityAlgorithm::Aimd(Aimd::default()),
    ] {
        for service_ms in [5, 50, 200] {
            for k in [4u32, 32] {
                // A short queue (drops soon) and a long one (latency only).
                for queue in [(k / 2) as usize, 8 * k as usize] {
                    for (start, k2) in [(10 * k, 2 * k), ((k / 4).max(1), k / 2)] {
                        all.push(Scenario {
                            algorithm,
                            service: Duration::from_millis(service_ms),
                            k,
                            queue,
                            start,
                            k2,
                        });
                    }
                }
            }
        }
    }
    all
}

/// From 10× too high and 4× too low, for S = 5, 50, 200 ms and K = 4, 32, a short and a long
/// dependency queue, gradient and AIMD with their defaults: within 20 windows (10 s) the
/// capacity is within [0.5×, 2×] of the true one and stays there; after the capacity doubles
/// (from the 10× start) or halves (from the 4× too low one), again within 20 windows.
/// `cargo test --lib convergence_table -- --nocapture` prints the table.
#[test]
fn converges_from_any_start_and_after_any_step() {
    let mut table = vec![
        "| algorithm | S | K | queue | start | windows to [0.5×, 2×] | K → | windows to [0.5×, 2×] after | baseline |".to_string(),
        "|---|---|---|---|---|---|---|---|---|".to_string(),
    ];
    let mut failed = Vec::new();
    for (i, s) in scenarios().iter().enumerate() {
        let run = simulate(s, 0x5eed_0000 + i as u64);
        let first = converged_after(&run.first, s.k);
        let second = converged_after(&run.second, s.k2);
        let show = |n: Option<usize>| n.map_or("never".to_string(), |n| n.to_string());
        table.push(format!(
            "| {} | {} ms | {} | {} | {} ({}×) | {} | {} | {} | {} |",
            name(&s.algorithm),
            s.service.as_millis(),
            s.k,
            s.queue,
            s.start,
            f64::from(s.start) / f64::from(s.k),
            show(first),
            s.k2,
            show(second),
            run.baseline.map_or("none".into(), |b| format!(
                "{:.1} ms",
                b.as_secs_f64() * 1e3
            )),
        ));
        if first.is_none_or(|n| n > CONVERGE_WITHIN) || second.is_none_or(|n| n > CONVERGE_WITHIN) {
            failed.push(format!("{s:?}: {:?} then {:?}", run.first, run.second));
        }
    }
    let table = table.join("\n");
    println!("{table}");
    assert!(
        failed.is_empty(),
        "{table}\n\nnot within {CONVERGE_WITHIN} windows:\n{}",
        failed.join("\n")
    );
}

/// From a start 10× too high the learnt baseline is the dependency's unloaded latency, not the
/// queue's: within 1.5× of the mean service time (its median is 0.88× of it).
#[test]
fn the_baseline_is_learnt_from_a_10x_start() {
    let mut wrong = Vec::new();
    for (i, s) in scenarios()
        .iter()
        .enumerate()
        .filter(|(_, s)| s.start > s.k)
    {
        let run = simulate(s, 0xba5e_0000 + i as u64);
        let mean = s.service.as_secs_f64();
        let ok = run
            .baseline
            .is_some_and(|b| (mean / 1.5..=mean * 1.5).contains(&b.as_secs_f64()));
        if !ok {
            wrong.push(format!(
                "{s:?}: baseline {:?}, steps {:?}",
                run.baseline, run.first
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The simulation itself: a fixed pool at the true capacity serves it (throughput K/S, latency
/// about S), twice the pool doubles the latency, and a pool past the queue drops.
#[test]
fn the_simulated_dependency_behaves_like_one() {
    let s = Duration::from_millis(50);
    for (pool, queue, want_ms, drops) in [
        (8, 64, 50.0, false),
        (16, 64, 100.0, false),
        (32, 4, 75.0, true),
    ] {
        let mut sim = Sim::new(8, s, queue, 3.0 * 8.0 / 0.05, 7);
        sim.capacity = pool;
        sim.arrivals_if_room();
        sim.run_until(2 * WINDOW_NS);
        let _ = sim.take_window();
        sim.run_until(12 * WINDOW_NS);
        let w = sim.take_window();
        let per_s = w.ok as f64 / 5.0;
        assert!((140.0..=180.0).contains(&per_s), "{pool}: {per_s} calls/s");
        let mean = w.mean_latency().unwrap_or_default().as_secs_f64() * 1e3;
        assert!(
            (mean / want_ms - 1.0).abs() < 0.2,
            "{pool}: mean {mean} ms, want {want_ms}"
        );
        assert_eq!(w.dropped > 0, drops, "{pool}: {w:?}");
        if !drops {
            assert_eq!(w.peak_in_flight, u64::from(pool));
        }
    }
}

/// Not a gate: the same grid over 8 other seeds each, printing the worst windows to converge
/// (99 = not in the band at the end) and how many baselines from a 10× start missed 1.5× of
/// S. `cargo test --lib sweep_seeds -- --ignored --nocapture`.
#[test]
#[ignore]
fn sweep_seeds() {
    let mut worst = Vec::new();
    for (i, s) in scenarios().iter().enumerate() {
        let mut max1 = 0;
        let mut max2 = 0;
        let mut bad_base = 0;
        for seed in 0..8u64 {
            let run = simulate(s, seed * 7919 + i as u64 * 104_729 + 1);
            max1 = max1.max(converged_after(&run.first, s.k).unwrap_or(99));
            max2 = max2.max(converged_after(&run.second, s.k2).unwrap_or(99));
            let mean = s.service.as_secs_f64();
            if s.start > s.k
                && !run
                    .baseline
                    .is_some_and(|b| (mean / 1.5..=mean * 1.5).contains(&b.as_secs_f64()))
            {
                bad_base += 1;
            }
        }
        worst.push(format!(
            "{} {:?} K{} q{} start{} -> {max1} / {max2} bad_base {bad_base}",
            name(&s.algorithm),
            s.service,
            s.k,
            s.queue,
            s.start
        ));
    }
    println!("{}", worst.join("\n"));
}

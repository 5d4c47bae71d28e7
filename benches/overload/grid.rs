//! Issue 37's grid: ours (the adaptive semaphore; gradient, and AIMD on a subset) on the run's
//! etcd, R = 4 replicas each with its own Limiter, open-loop Poisson load at 3× the true
//! capacity, over every service time (5 / 50 / 200 ms) × true capacity (4 / 32 workers) ×
//! first capacity (0.25× / 4× / 10× the true one). In every row the dependency's capacity
//! halves and later comes back (steps ×0.5 and ×2). Each row runs through load.rs like issue
//! 31's scenarios, with its own dependency size; grid_record.rs reads its figures.
//!
//! A row that errs or overruns its time is reported as failed and the grid goes on: the rows
//! past the store's write rate are expected to break today's library.

use crate::gate::{Algo, Contender};
use crate::grid_record::{figures, GridFigures};
use crate::load::{self, RunSpec, Unloaded};
use crate::memory::{Seen, Watch};
use crate::plan::{DependencySize, Plan, Scenario};
use crate::support::EtcdCluster;
use std::time::Duration;

/// A grid row: which dependency, which start, which algorithm.
#[derive(Debug, Clone, Copy)]
pub struct GridRow {
    pub service: Duration,
    pub workers: usize,
    /// The first capacity as a multiple of the true one, and how the report prints it.
    pub start: (f64, &'static str),
    pub algo: Algo,
}

/// When the grid's changes come, from a row's start. The full run's 15 s phases are 30
/// windows of 500 ms: the 10 s settle target plus the hold fit in each phase, and the steady
/// part after the warm-up (10 windows) is 20 windows long.
#[derive(Debug, Clone, Copy)]
pub struct GridTimes {
    pub warm_up: Duration,
    pub halves: Duration,
    pub back: Duration,
    pub end: Duration,
}

/// The grid of one run.
#[derive(Debug, Clone)]
pub struct GridPlan {
    pub rows: Vec<GridRow>,
    pub times: GridTimes,
    /// A step has settled once its conditions hold this long (grid_record.rs).
    pub settle_hold: Duration,
    pub replicas: usize,
    /// The offered load as a multiple of the true capacity.
    pub overload: f64,
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const fn s(n: u64) -> Duration {
    Duration::from_secs(n)
}

const STARTS: [(f64, &str); 3] = [(0.25, "0.25×"), (4.0, "4×"), (10.0, "10×")];
const SERVICES: [Duration; 3] = [ms(5), ms(50), ms(200)];
const WORKERS: [usize; 2] = [4, 32];

impl GridPlan {
    /// Full: every combination with the gradient, then AIMD on the 4-worker rows from the
    /// two extreme starts (0.25× and 10×). Quick: one row (50 ms × 4 workers, from 4×) with
    /// 4 s phases.
    pub fn new(quick: bool) -> GridPlan {
        let (rows, times, settle_hold) = if quick {
            let row = GridRow {
                service: ms(50),
                workers: 4,
                start: STARTS[1],
                algo: Algo::Gradient,
            };
            let times = GridTimes {
                warm_up: s(1),
                halves: s(4),
                back: s(8),
                end: s(12),
            };
            (vec![row], times, s(1))
        } else {
            let times = GridTimes {
                warm_up: s(5),
                halves: s(15),
                back: s(30),
                end: s(45),
            };
            (full_rows(), times, s(3))
        };
        GridPlan {
            rows,
            times,
            settle_hold,
            replicas: 4,
            overload: 3.0,
        }
    }
}

fn full_rows() -> Vec<GridRow> {
    let mut rows = Vec::new();
    for service in SERVICES {
        for workers in WORKERS {
            for start in STARTS {
                rows.push(GridRow {
                    service,
                    workers,
                    start,
                    algo: Algo::Gradient,
                });
            }
        }
    }
    for service in SERVICES {
        for start in [STARTS[0], STARTS[2]] {
            rows.push(GridRow {
                service,
                workers: 4,
                start,
                algo: Algo::Aimd,
            });
        }
    }
    rows
}

impl GridRow {
    /// The dependency: issue 31's queue (128) and service-time shape, this row's size.
    pub fn size(&self) -> DependencySize {
        DependencySize {
            workers: self.workers,
            queue: 128,
            mean_service: self.service,
            sigma: 0.5,
        }
    }

    pub fn initial(&self) -> u32 {
        ((self.workers as f64 * self.start.0).round() as u32).max(1)
    }

    /// Issue 31's max (256), or 512 where the 10× start (320) is above it and the library
    /// would refuse it.
    pub fn max(&self) -> u32 {
        if self.initial() > 256 {
            512
        } else {
            256
        }
    }

    pub fn contender(&self) -> Contender {
        Contender::Ours {
            initial: self.initial(),
            label: self.start.1,
            algo: self.algo,
            max: self.max(),
        }
    }

    /// Calls per second offered (all replicas): each an acquire and a release, i.e. one
    /// enqueue + remove pair of the store.
    pub fn offered_per_s(&self, overload: f64) -> f64 {
        overload * self.size().capacity_per_s(self.workers)
    }

    pub fn name(&self) -> String {
        format!(
            "{} ms × {} workers from {} ({})",
            self.service.as_millis(),
            self.workers,
            self.start.1,
            self.algo.name()
        )
    }

    /// The row's timeline: capacity halves at `halves`, comes back at `back`.
    pub fn scenario(&self, t: &GridTimes) -> Scenario {
        Scenario {
            name: self.name(),
            run_for: t.end,
            measure_from: t.warm_up,
            worker_changes: vec![(t.halves, self.workers / 2), (t.back, self.workers)],
            join_at: None,
        }
    }
}

/// Sequential calls measuring a service time's unloaded latency: ~10 s at most each (fewer
/// calls for the slow dependency).
fn unloaded_calls(service: Duration, quick: bool) -> usize {
    let calls = (s(10).as_millis() / service.as_millis().max(1)) as usize;
    if quick {
        calls.min(60)
    } else {
        calls.min(400)
    }
}

/// One row's outcome: its figures or why it failed, with what it cost.
pub struct GridResult {
    pub row: GridRow,
    pub figures: Result<GridFigures, String>,
    pub took: Duration,
    pub memory: Seen,
    pub cores: Option<(f64, f64)>,
}

/// The unloaded latency of each service time the grid uses, measured once.
pub async fn unloaded_by_service(
    grid: &GridPlan,
    quick: bool,
    seed: u64,
) -> anyhow::Result<Vec<(Duration, Unloaded)>> {
    let mut out: Vec<(Duration, Unloaded)> = Vec::new();
    for row in &grid.rows {
        if out.iter().any(|(s, _)| *s == row.service) {
            continue;
        }
        let calls = unloaded_calls(row.service, quick);
        eprintln!(
            "overload bench: grid: unloaded latency at {} ms ({calls} calls)",
            row.service.as_millis()
        );
        out.push((row.service, load::unloaded(row.size(), calls, seed).await?));
    }
    Ok(out)
}

/// Memory growth at which a row stops sending (memory.rs): far above a healthy run's.
pub const MEMORY_GUARD: u64 = 2_000_000_000;

/// Runs every row of the grid, one after another, on `etcd`.
pub async fn run(
    plan: &Plan,
    etcd: &EtcdCluster,
    unloaded: &[(Duration, Unloaded)],
    seed: u64,
) -> anyhow::Result<Vec<GridResult>> {
    let grid = &plan.grid;
    let mut results = Vec::new();
    for (i, row) in grid.rows.iter().enumerate() {
        let base = &unloaded
            .iter()
            .find(|(s, _)| *s == row.service)
            .ok_or_else(|| anyhow::anyhow!("no unloaded latency for {}", row.name()))?
            .1;
        eprintln!(
            "overload bench: grid {}/{}: {} ({} s)",
            i + 1,
            grid.rows.len(),
            row.name(),
            grid.times.end.as_secs()
        );
        let result = run_row(plan, etcd, row, base, i, seed).await;
        if let Err(e) = &result.figures {
            eprintln!("overload bench: grid row failed: {e}");
        }
        results.push(result);
        crate::compact(etcd).await?;
    }
    Ok(results)
}

/// One row, bounded in time: its run can take the run's length, the calls' deadline, the
/// release grace and a minute for opening and closing the Limiters.
async fn run_row(
    plan: &Plan,
    etcd: &EtcdCluster,
    row: &GridRow,
    unloaded: &Unloaded,
    index: usize,
    seed: u64,
) -> GridResult {
    let grid = &plan.grid;
    let row_plan = Plan {
        dependency: row.size(),
        overload: grid.overload,
        settle_hold: grid.settle_hold,
        scenarios: Vec::new(),
        ..plan.clone()
    };
    let scenario = row.scenario(&grid.times);
    let spec = RunSpec {
        plan: &row_plan,
        scenario: &scenario,
        replicas: grid.replicas,
        contender: row.contender(),
        etcd_url: etcd.url(&format!("overload/grid/{index}")),
        unloaded,
        seed: seed + index as u64,
    };
    let limit = grid.times.end + unloaded.client_timeout() + load::RELEASE_GRACE + s(60);
    let started = std::time::Instant::now();
    let cpu = crate::Cpu::start(etcd);
    let watch = Watch::start(MEMORY_GUARD);
    let data = tokio::time::timeout(limit, load::run(&spec)).await;
    let memory = watch.finish();
    let cores = cpu.cores();
    let figures = match data {
        Err(_) => Err(format!("the row did not end within {} s", limit.as_secs())),
        Ok(Err(e)) => Err(format!("{e:#}")),
        Ok(Ok(data)) => {
            if plan.series {
                print_series(&row_plan, &scenario, row, unloaded, &data);
            }
            Ok(figures(&row_plan, &scenario, &grid.times, unloaded, &data))
        }
    };
    GridResult {
        row: *row,
        figures,
        took: started.elapsed(),
        memory,
        cores,
    }
}

/// `--series`: the row's per-second figures and the controller's steps as read (stderr).
fn print_series(
    plan: &Plan,
    scenario: &Scenario,
    row: &GridRow,
    unloaded: &Unloaded,
    data: &load::RunData,
) {
    let summary = crate::record::summarise(plan, scenario, unloaded, data);
    let contender = row.contender();
    let text = crate::report::series(
        scenario,
        plan.grid.replicas,
        contender,
        &summary,
        &data.decisions,
    );
    eprint!("{text}");
}

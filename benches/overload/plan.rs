//! Command line, the dependency's size and the scenarios' timelines (the same detection as
//! benches/limiter/plan.rs).
//!
//! * `cargo bench --bench overload`: the full run (cargo passes `--bench`): R = 4 and 8, every
//!   scenario at its issue's times; writes its block into BENCHMARKS.md.
//! * `cargo bench --bench overload -- --quick`: R = 4 only, every time scaled down; prints only.
//! * `cargo test --all-targets` runs this binary without `--bench`: the quick mode too.

use crate::grid::GridPlan;
use crate::saturation::SatPlan;
use std::path::PathBuf;
use std::time::Duration;

pub use crate::common::args::Parsed;

/// Name a `cargo test` filter is matched against.
const NAME: &str = "overload";

const USAGE: &str = "usage: cargo bench --bench overload [-- [--quick] [--grid] [--saturation] [--series] [--out PATH]]
  --quick       R = 4 only, scenarios a few seconds long, one grid row, one saturation row (a
                smoke run, under 4 minutes); prints the tables, writes no file unless --out is
                given
  --grid        only issue 37's grid (and the store's ceiling it is marked against)
  --saturation  only issue 37's store-saturation rows (with their ceiling); with --grid: both
  --series      also print each run's per-second figures (stderr)
  --out PATH    markdown file to update (default for a full run: BENCHMARKS.md; a run writes
                only the blocks of the parts it ran)";

/// The simulated dependency: `workers` calls served at once, `queue` more waiting (then 503),
/// service times lognormal with this mean and shape. Its true capacity is `workers` concurrent
/// calls, i.e. `workers / mean_service` calls per second.
#[derive(Debug, Clone, Copy)]
pub struct DependencySize {
    pub workers: usize,
    pub queue: usize,
    pub mean_service: Duration,
    /// σ of the service time's logarithm: 0.5 puts p99 at about 2.7× the mean.
    pub sigma: f64,
}

impl DependencySize {
    /// Calls per second the dependency serves with `workers` workers.
    pub fn capacity_per_s(&self, workers: usize) -> f64 {
        workers as f64 / self.mean_service.as_secs_f64()
    }
}

/// One load pattern: how long it runs, what happens when (offsets from its start).
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub run_for: Duration,
    /// Figures (goodput, latency, rates) are taken from here to the end: the contenders start
    /// cold and the targets are about a loaded system.
    pub measure_from: Duration,
    /// The dependency's workers change to `.1` at `.0` (capacity halves, comes back).
    pub worker_changes: Vec<(Duration, usize)>,
    /// A burst of replicas joining: half of the R replicas run from the start, the others
    /// start (connect, open their limiter) at this offset. Each replica offers its share of
    /// the full load, so the offered load goes from half of it to all of it.
    pub join_at: Option<Duration>,
}

/// What one run does.
#[derive(Debug, Clone)]
pub struct Plan {
    pub quick: bool,
    /// Markdown file whose generated block is replaced; `None` prints only.
    pub out: Option<PathBuf>,
    pub series: bool,
    pub dependency: DependencySize,
    /// Offered load as a multiple of the dependency's full capacity (split over the replicas).
    pub overload: f64,
    pub replicas: Vec<usize>,
    /// Sequential calls of the one caller that measures the unloaded latency.
    pub unloaded_calls: usize,
    /// A change has settled once goodput and p99 hold for this long (see record.rs).
    pub settle_hold: Duration,
    /// Steady, capacity halves, replicas join (the order of the report).
    pub scenarios: Vec<Scenario>,
    pub parts: Parts,
    pub grid: GridPlan,
    pub saturation: SatPlan,
}

/// Which parts a run measures: issue 31's scenarios, issue 37's grid, its saturation rows.
/// Without `--grid` or `--saturation`, all three.
#[derive(Debug, Clone, Copy)]
pub struct Parts {
    pub scenarios: bool,
    pub grid: bool,
    pub saturation: bool,
}

impl Parts {
    fn from_flags(flags: &[String]) -> Parts {
        let has = |f: &str| flags.iter().any(|g| g == f);
        let (grid, saturation) = (has("--grid"), has("--saturation"));
        if grid || saturation {
            Parts {
                scenarios: false,
                grid,
                saturation,
            }
        } else {
            Parts {
                scenarios: true,
                grid: true,
                saturation: true,
            }
        }
    }
}

pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Parsed<Plan>, String> {
    Ok(
        crate::common::args::parse(NAME, USAGE, &["--series", "--grid", "--saturation"], args)?
            .map(|args| {
                let series = args.flags.iter().any(|f| f == "--series");
                let parts = Parts::from_flags(&args.flags);
                Plan::new(args.quick, args.out, series, parts)
            }),
    )
}

/// 8 workers × 50 ms: 160 calls/s, so 3× overload is 480 calls/s offered, each call through a
/// cluster semaphore about two etcd writes: what a 2-core machine serves beside the harness.
const DEPENDENCY: DependencySize = DependencySize {
    workers: 8,
    // A deep queue, as a connection pool or accept backlog has: without a limit the calls wait
    // in it far beyond the objective instead of being refused at once.
    queue: 128,
    mean_service: Duration::from_millis(50),
    sigma: 0.5,
};

const fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

/// The scenarios' times: how long each runs, when its changes come, its warm-up.
struct Times {
    steady: Duration,
    /// The capacity halves at `.0`, comes back at `.1`, the run ends at `.2`.
    halves: (Duration, Duration, Duration),
    /// Half the replicas join at `.0`, the run ends at `.1`.
    joins: (Duration, Duration),
    warm_up: Duration,
}

impl Plan {
    /// The full run: R = 4 and 8, the times. `quick`: every scenario at about a fifth
    /// of its length, R = 4 only (under 3 minutes).
    fn new(quick: bool, out: Option<PathBuf>, series: bool, parts: Parts) -> Plan {
        let (replicas, unloaded_calls, settle_hold, times) = if quick {
            let times = Times {
                steady: s(4),
                halves: (s(3), s(6), s(10)),
                joins: (s(2), s(5)),
                warm_up: s(1),
            };
            (vec![4], 60, s(1), times)
        } else {
            let times = Times {
                steady: s(20),
                halves: (s(20), s(40), s(55)),
                joins: (s(8), s(25)),
                warm_up: s(5),
            };
            (vec![4, 8], 300, s(3), times)
        };
        Plan {
            quick,
            out,
            series,
            dependency: DEPENDENCY,
            overload: 3.0,
            replicas,
            unloaded_calls,
            settle_hold,
            scenarios: scenarios(times),
            parts,
            grid: GridPlan::new(quick),
            saturation: SatPlan::new(quick),
        }
    }
}

/// Steady 3× overload; the capacity halving and coming back; half the replicas joining. The
/// join's warm-up is shorter: its first half runs at half the load.
fn scenarios(t: Times) -> Vec<Scenario> {
    let w = DEPENDENCY.workers;
    let (halves, back, halves_end) = t.halves;
    let (join, join_end) = t.joins;
    vec![
        Scenario {
            name: "steady 3× overload".to_string(),
            run_for: t.steady,
            measure_from: t.warm_up,
            worker_changes: vec![],
            join_at: None,
        },
        Scenario {
            name: format!(
                "capacity halves at {} s, back at {} s",
                halves.as_secs(),
                back.as_secs()
            ),
            run_for: halves_end,
            measure_from: t.warm_up,
            worker_changes: vec![(halves, w / 2), (back, w)],
            join_at: None,
        },
        Scenario {
            name: format!("half the replicas join at {} s", join.as_secs()),
            run_for: join_end,
            measure_from: t.warm_up / 2,
            worker_changes: vec![],
            join_at: Some(join),
        },
    ]
}

impl Scenario {
    /// When replica `index` of `replicas` starts offering load.
    pub fn start_of(&self, index: usize, replicas: usize) -> Duration {
        match self.join_at {
            Some(at) if index >= replicas / 2 => at,
            _ => Duration::ZERO,
        }
    }

    /// Workers in force at `t` (from the start of the run), starting from `full`.
    pub fn workers_at(&self, t: Duration, full: usize) -> usize {
        // The changes are in time order: the last one at or before `t` is in force.
        self.worker_changes
            .iter()
            .rev()
            .find(|(at, _)| *at <= t)
            .map_or(full, |(_, w)| *w)
    }
}

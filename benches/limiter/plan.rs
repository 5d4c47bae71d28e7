//! Command line and the sizes of a run.
//!
//! * `cargo bench --bench limiter [-- --cluster]`: the full run (cargo passes `--bench`);
//!   writes its tables into BENCHMARKS.md.
//! * `cargo bench --bench limiter -- --quick`: the same program with small sizes, printing only.
//! * `cargo test --all-targets` runs this binary without `--bench` (a `harness = false` bench
//!   is run as a test): that is the quick mode too, so CI keeps the benchmark working without a
//!   release build. Name filters given to `cargo test` (e.g. `scripts/test contract`) skip it
//!   unless they match "limiter", like a libtest test name.

use std::path::PathBuf;
use std::time::Duration;

/// What one run does.
#[derive(Debug, Clone)]
pub struct Plan {
    pub quick: bool,
    /// 3-node etcd and ZooKeeper instead of 1 node each.
    pub cluster: bool,
    /// Markdown file whose generated block is replaced; `None` prints only.
    pub out: Option<PathBuf>,
    /// Rows 1–2: interleaved rounds, each a batch of every operation.
    pub latency_rounds: usize,
    pub latency_batch: usize,
    /// Row 3 (and row 7's contended case): length of each contended run.
    pub contended_for: Duration,
    /// Row 4: handoffs measured (after a few unmeasured ones).
    pub handoffs: usize,
    /// Row 6: waiters on one semaphore, handoffs measured behind them.
    pub waiters: usize,
    pub waiter_handoffs: usize,
    /// Row 6: semaphores with one holder each, and the window their steady cost is read over.
    pub semaphores: usize,
    pub steady_for: Duration,
    /// Row 6: acquisitions between the two history measurements, and pairs per measurement.
    pub history_past: usize,
    pub history_samples: usize,
    /// Row 7: uncontended kazoo acquire+release pairs.
    pub peer_iterations: usize,
}

/// Result of reading the command line.
pub enum Parsed {
    Run(Plan),
    /// Nothing to run; print this and exit 0.
    Exit(String),
}

/// Name a `cargo test` filter is matched against.
const NAME: &str = "limiter";

const USAGE: &str = "usage: cargo bench --bench limiter [-- [--quick] [--cluster] [--out PATH]]
  --quick     small sizes (CI); prints the tables, writes no file unless --out is given
  --cluster   3-node etcd and 3-node ZooKeeper instead of 1 node each
  --out PATH  markdown file to update (default for a full run: BENCHMARKS.md)";

/// libtest options that take a value (`cargo test -- --test-threads 1`), so it is not taken
/// for a filter.
const LIBTEST_VALUED: &[&str] = &["--test-threads", "--format", "--color", "--logfile", "-Z"];

pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Parsed, String> {
    let mut bench = false;
    let mut quick = false;
    let mut cluster = false;
    let mut out = None;
    let mut filters = Vec::new();
    let mut skips = Vec::new();
    let mut list = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bench" => bench = true,
            "--quick" => quick = true,
            "--cluster" => cluster = true,
            "--out" => out = Some(PathBuf::from(args.next().ok_or("--out needs a path")?)),
            "--help" | "-h" => return Ok(Parsed::Exit(USAGE.to_string())),
            "--list" => list = true,
            "--skip" => skips.push(args.next().unwrap_or_default()),
            a if LIBTEST_VALUED.contains(&a) => {
                args.next();
            }
            a if a.starts_with('-') => {
                // Other libtest flags (--nocapture, --exact, …) change nothing here.
                if bench {
                    return Err(format!("unknown option {a}\n{USAGE}"));
                }
            }
            filter => filters.push(filter.to_string()),
        }
    }
    if list {
        return Ok(Parsed::Exit(format!("{NAME}: bench")));
    }
    let filtered_out = (!filters.is_empty() && !filters.iter().any(|f| NAME.contains(f.as_str())))
        || skips.iter().any(|s| NAME.contains(s.as_str()));
    if filtered_out {
        return Ok(Parsed::Exit(format!("{NAME}: filtered out")));
    }
    // Without --bench we run as a test (cargo test): always the quick mode.
    let quick = quick || !bench;
    if !quick && out.is_none() {
        out = Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("BENCHMARKS.md"));
    }
    Ok(Parsed::Run(if quick {
        Plan::quick(cluster, out)
    } else {
        Plan::full(cluster, out)
    }))
}

impl Plan {
    fn full(cluster: bool, out: Option<PathBuf>) -> Plan {
        Plan {
            quick: false,
            cluster,
            out,
            latency_rounds: 20,
            latency_batch: 50,
            contended_for: Duration::from_secs(10),
            handoffs: 200,
            waiters: 500,
            waiter_handoffs: 100,
            semaphores: 1_000,
            steady_for: Duration::from_secs(10),
            history_past: 5_000,
            history_samples: 300,
            peer_iterations: 500,
        }
    }

    /// Every row runs, with sizes that keep a debug build (cargo test) well under 2 minutes.
    fn quick(cluster: bool, out: Option<PathBuf>) -> Plan {
        Plan {
            quick: true,
            cluster,
            out,
            latency_rounds: 3,
            latency_batch: 10,
            contended_for: Duration::from_secs(1),
            handoffs: 10,
            waiters: 30,
            waiter_handoffs: 5,
            semaphores: 30,
            steady_for: Duration::from_secs(1),
            history_past: 200,
            history_samples: 20,
            peer_iterations: 20,
        }
    }

    /// Nodes per store.
    pub fn nodes(&self) -> usize {
        if self.cluster {
            3
        } else {
            1
        }
    }
}

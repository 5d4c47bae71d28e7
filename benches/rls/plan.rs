//! Command line and the sizes of a run (the same detection as benches/limiter/plan.rs).
//!
//! * `cargo bench --bench rls`: the full run (cargo passes `--bench`); writes its section into
//!   BENCHMARKS.md.
//! * `cargo bench --bench rls -- --quick`: small sizes, printing only.
//! * `cargo test --all-targets` runs this binary without `--bench` (a `harness = false` bench
//!   is run as a test): that is the quick mode too. Name filters given to `cargo test` skip it
//!   unless they match "rls", like a libtest test name.

use std::path::PathBuf;
use std::time::Duration;

/// What one run does.
#[derive(Debug, Clone)]
pub struct Plan {
    pub quick: bool,
    /// Markdown file whose generated block is replaced; `None` prints only.
    pub out: Option<PathBuf>,
    /// Sequential latency: interleaved rounds, each a batch of both paths.
    pub rounds: usize,
    pub batch: usize,
    /// Unmeasured calls per path before the rounds (connections, first keys, JIT-free warmup).
    pub warmup: usize,
    /// Concurrent case: callers, and how long each path runs.
    pub callers: usize,
    pub concurrent_for: Duration,
    /// Store down: answers measured per policy after the first one.
    pub down_answers: usize,
    /// `--edge-only`: only the edge rows (3-member etcd, default sidecar settings).
    pub edge_only: bool,
    /// Edge rows: concurrent ShouldRateLimit callers, the HTTP/2 connections they share, the
    /// distinct keys of the many-keys rows, and how long each row runs.
    pub edge_callers: usize,
    pub edge_connections: usize,
    pub edge_keys: u32,
    pub edge_for: Duration,
    /// The fault run: load before the first fault, how long the leader stays SIGSTOPped,
    /// the load after each fault, how long the SIGKILLed leader stays down.
    pub fault_warm: Duration,
    pub fault_pause: Duration,
    pub fault_settle: Duration,
    pub fault_down: Duration,
}

pub use crate::common::args::Parsed;

/// Name a `cargo test` filter is matched against.
const NAME: &str = "rls";

const USAGE: &str = "usage: cargo bench --bench rls [-- [--quick] [--edge-only] [--out PATH]]
  --quick      small sizes (CI); prints the tables, writes no file unless --out is given
               (and never the edge section: quick figures are no results)
  --edge-only  only the edge rows and the leader faults (3-member etcd, default settings)
  --out PATH   markdown file to update (default for a full run: BENCHMARKS.md)";

pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Parsed<Plan>, String> {
    Ok(
        crate::common::args::parse(NAME, USAGE, &["--edge-only"], args)?.map(|args| {
            let mut plan = if args.quick {
                Plan::quick(args.out)
            } else {
                Plan::full(args.out)
            };
            plan.edge_only = args.flags.iter().any(|f| f == "--edge-only");
            plan
        }),
    )
}

impl Plan {
    fn full(out: Option<PathBuf>) -> Plan {
        Plan {
            quick: false,
            out,
            rounds: 20,
            batch: 100,
            warmup: 200,
            callers: 16,
            concurrent_for: Duration::from_secs(5),
            down_answers: 500,
            edge_only: false,
            edge_callers: 64,
            edge_connections: 8,
            edge_keys: 1_000,
            edge_for: Duration::from_secs(10),
            fault_warm: Duration::from_secs(3),
            fault_pause: Duration::from_secs(3),
            fault_settle: Duration::from_secs(4),
            fault_down: Duration::from_secs(3),
        }
    }

    /// Every measurement runs, with sizes that keep a debug build (cargo test) under ~60 s:
    /// the first part well under 40 s, the edge rows 4 × 2 s and the faults ~10 s.
    fn quick(out: Option<PathBuf>) -> Plan {
        Plan {
            quick: true,
            out,
            rounds: 6,
            batch: 20,
            warmup: 20,
            callers: 16,
            concurrent_for: Duration::from_secs(1),
            down_answers: 50,
            edge_only: false,
            edge_callers: 64,
            edge_connections: 8,
            edge_keys: 1_000,
            edge_for: Duration::from_secs(2),
            fault_warm: Duration::from_millis(1_500),
            fault_pause: Duration::from_secs(2),
            fault_settle: Duration::from_secs(2),
            fault_down: Duration::from_millis(1_500),
        }
    }
}

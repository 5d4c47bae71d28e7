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
}

pub use crate::common::args::Parsed;

/// Name a `cargo test` filter is matched against.
const NAME: &str = "rls";

const USAGE: &str = "usage: cargo bench --bench rls [-- [--quick] [--out PATH]]
  --quick     small sizes (CI); prints the tables, writes no file unless --out is given
  --out PATH  markdown file to update (default for a full run: BENCHMARKS.md)";

pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Parsed<Plan>, String> {
    Ok(
        crate::common::args::parse(NAME, USAGE, &[], args)?.map(|args| {
            if args.quick {
                Plan::quick(args.out)
            } else {
                Plan::full(args.out)
            }
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
        }
    }

    /// Every measurement runs, with sizes that keep a debug build (cargo test) well under 40 s.
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
        }
    }
}

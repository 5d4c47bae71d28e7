//! Command line and sizes of the leases bench (the same detection as the other benches):
//! `cargo bench --features testing --bench leases` is the full run (writes its section into
//! BENCHMARKS.md), `-- --quick` and `cargo test --all-features --all-targets` the quick one
//! (small sizes, prints only).

use std::path::PathBuf;
use std::time::Duration;

/// What one run does.
#[derive(Debug, Clone)]
pub struct Plan {
    pub quick: bool,
    pub out: Option<PathBuf>,
    /// Row 1: the quotas (per second, burst = quota), each leases on and off.
    pub quotas: Vec<u64>,
    /// Row 1: Limiters (the processes) and callers on each.
    pub limiters: usize,
    pub callers: usize,
    /// How long each measured run lasts.
    pub run: Duration,
    /// Row 2: callers on each of its Limiters (demands 1:1:1:5), at `fair_quota` per second.
    pub fair_callers: Vec<usize>,
    pub fair_quota: u64,
    /// Row 3: failover on one key, leases on beside off.
    pub failover: Failover,
}

/// Row 3's sizes: the leader's kill comes at a third of `run`, the Limiter's at two thirds.
#[derive(Debug, Clone)]
pub struct Failover {
    pub limiters: usize,
    pub callers: usize,
    /// Per second, burst = quota.
    pub quota: u64,
    pub run: Duration,
}

pub use crate::common::args::Parsed;

const USAGE: &str =
    "usage: cargo bench --features testing --bench leases [-- [--quick] [--out PATH]]
  --quick      small sizes (CI); prints the tables, writes no file unless --out is given
  --out PATH   markdown file to update (default for a full run: BENCHMARKS.md)";

pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Parsed<Plan>, String> {
    Ok(
        crate::common::args::parse("leases", USAGE, &[], args)?.map(|args| {
            let (limiters, callers, run, fair_callers) = if args.quick {
                (2, 4, Duration::from_millis(400), vec![2, 2, 2, 10])
            } else {
                (8, 32, Duration::from_secs(5), vec![8, 8, 8, 40])
            };
            let failover = if args.quick {
                Failover {
                    limiters: 2,
                    callers: 4,
                    quota: 100_000,
                    run: Duration::from_millis(2_400),
                }
            } else {
                Failover {
                    limiters: 8,
                    callers: 32,
                    quota: 1_000_000,
                    run: Duration::from_secs(6),
                }
            };
            Plan {
                quick: args.quick,
                out: args.out,
                quotas: vec![1_000, 100_000, 1_000_000],
                limiters,
                callers,
                run,
                fair_callers,
                fair_quota: 10_000,
                failover,
            }
        }),
    )
}

//! Command line and sizes of the costs bench (the same detection as the other benches):
//! `cargo bench --bench costs` is the full run (writes its section into BENCHMARKS.md),
//! `-- --quick` and `cargo test --all-targets` the quick one (small sizes, prints only).

use crate::llm::Scenario;
use std::path::PathBuf;
use std::time::Duration;

/// What one run does.
#[derive(Debug, Clone)]
pub struct Plan {
    pub quick: bool,
    pub out: Option<PathBuf>,
    /// Row 1: rounds of `pair_batch` pairs of each kind, the order rotating.
    pub pair_rounds: usize,
    pub pair_batch: usize,
    /// Row 2.
    pub scenario: Scenario,
}

pub use crate::common::args::Parsed;

const USAGE: &str = "usage: cargo bench --bench costs [-- [--quick] [--out PATH]]
  --quick      small sizes (CI); prints the tables, writes no file unless --out is given
  --out PATH   markdown file to update (default for a full run: BENCHMARKS.md)";

/// 1,000,000 tokens per minute, scaled to `window`.
fn per_minute_scaled(window: Duration) -> u64 {
    (1_000_000.0 * window.as_secs_f64() / 60.0).round() as u64
}

pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Parsed<Plan>, String> {
    Ok(
        crate::common::args::parse("costs", USAGE, &[], args)?.map(|args| {
            let (quick, window, windows, replicas, callers, rounds, batch) = if args.quick {
                (true, Duration::from_secs(2), 2, 2, 8, 2, 10)
            } else {
                (false, Duration::from_secs(30), 3, 8, 32, 10, 30)
            };
            Plan {
                quick,
                out: args.out,
                pair_rounds: rounds,
                pair_batch: batch,
                scenario: Scenario {
                    replicas,
                    callers,
                    tenants: 4,
                    window,
                    budget: per_minute_scaled(window),
                    windows,
                    max_tokens: 4_000,
                },
            }
        }),
    )
}

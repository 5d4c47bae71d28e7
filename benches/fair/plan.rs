//! Command line and sizes of the fairness bench (the same detection as the other benches):
//! `cargo bench --bench fair` is the full run (writes its section into BENCHMARKS.md),
//! `-- --quick` and `cargo test --all-targets` the quick one (small sizes, prints only).

use crate::members::Leave;
use std::path::PathBuf;
use std::time::Duration;

/// What one run does.
#[derive(Debug, Clone)]
pub struct Plan {
    pub quick: bool,
    pub out: Option<PathBuf>,
    /// Noisy tenant: flow A's looping acquires (spread over 4 Limiters), flow B's requests.
    pub noisy_a: usize,
    pub noisy_b: usize,
    /// Weighted shares and the reserve: how long the saturating flows run.
    pub share_for: Duration,
    /// Plain vs fair without flows: rounds of pairs of each.
    pub plain_rounds: usize,
    pub plain_pairs: usize,
}

pub use crate::common::args::Parsed;

impl Plan {
    /// Capacity per member on the `store`-th store: a sequence 3 → 5 → 2 per way of going
    /// away; the quick run does one per store, closing and killing in turn (memory: close,
    /// etcd: kill, ZooKeeper: close, Redis: kill).
    pub fn leaves_for(&self, store: usize) -> &'static [Leave] {
        match (self.quick, store % 2) {
            (false, _) => &[Leave::Close, Leave::Kill],
            (true, 0) => &[Leave::Close],
            (true, _) => &[Leave::Kill],
        }
    }
}

const USAGE: &str = "usage: cargo bench --bench fair [-- [--quick] [--out PATH]]
  --quick      small sizes (CI); prints the tables, writes no file unless --out is given
  --out PATH   markdown file to update (default for a full run: BENCHMARKS.md)";

pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Parsed<Plan>, String> {
    Ok(
        crate::common::args::parse("fair", USAGE, &[], args)?.map(|args| {
            if args.quick {
                Plan {
                    quick: true,
                    out: args.out,
                    noisy_a: 200,
                    noisy_b: 30,
                    share_for: Duration::from_secs(1),
                    plain_rounds: 4,
                    plain_pairs: 20,
                }
            } else {
                Plan {
                    quick: false,
                    out: args.out.or_else(|| Some(PathBuf::from("BENCHMARKS.md"))),
                    noisy_a: 1000,
                    noisy_b: 200,
                    share_for: Duration::from_secs(30),
                    plain_rounds: 20,
                    plain_pairs: 50,
                }
            }
        }),
    )
}

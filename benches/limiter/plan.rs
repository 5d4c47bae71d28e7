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
    /// Which part of the bench runs (`--only semaphores|rates`; both by default).
    pub parts: Parts,
    /// `--only-fresh-keys`: of the rate part, row 4b alone, printed (no file is written).
    pub fresh_keys_only: bool,
    /// `--only-redis`: of the rate part, the rows on Redis alone (issue 39: the hot key on
    /// Redis, etcd and redis-cell; row 4b on Redis), printed (no file is written).
    pub redis_only: bool,
    /// `--only-shards`: row 4b's fresh keys on 1 and on 2 etcd clusters (a sharded store),
    /// printed; no other server starts.
    pub shards_only: bool,
    /// `--only-redis-permits`: of the semaphore part, row 8 alone (rows 1–4 on Redis beside
    /// etcd, issue 39), printed (no file is written).
    pub redis_permits_only: bool,
    /// Rows 1–2: interleaved rounds, each a batch of every operation.
    pub latency_rounds: usize,
    pub latency_batch: usize,
    /// Row 3 (and row 7's contended case): length of each contended run.
    pub contended_for: Duration,
    /// Row 8 (permits on Redis): length of each contended run there.
    pub redis_contended_for: Duration,
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
    /// Row 6: entries held by another Limiter in the queue row (issue 18).
    pub queued: usize,
    /// Row 7: uncontended kazoo acquire+release pairs.
    pub peer_iterations: usize,
}

pub use crate::common::args::Parsed;

/// The bench's two parts: the semaphore rows (issue 6) and the rate-limit rows (issue 17).
/// Each writes its own block of BENCHMARKS.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    pub semaphores: bool,
    pub rates: bool,
}

impl Parts {
    fn from_flags(flags: &[String]) -> Parts {
        let only = |part: &str| flags.iter().any(|f| f == part);
        match (only("--only-semaphores"), only("--only-rates")) {
            (true, false) => Parts {
                semaphores: true,
                rates: false,
            },
            (false, true) => Parts {
                semaphores: false,
                rates: true,
            },
            _ => Parts {
                semaphores: true,
                rates: true,
            },
        }
    }
}

/// Name a `cargo test` filter is matched against.
const NAME: &str = "limiter";

const USAGE: &str = "usage: cargo bench --bench limiter [-- [--quick] [--cluster] [--only-semaphores | --only-rates] [--out PATH]]
  --quick            small sizes (CI); prints the tables, writes no file unless --out is given
  --cluster          3-node etcd and 3-node ZooKeeper instead of 1 node each
  --only-semaphores  only the semaphore rows (and their block of the file)
  --only-rates       only the rate-limit rows (and their block of the file)
  --only-fresh-keys  only the rate part's row 4b (fresh keys at the store's speed), printed
  --only-redis       only the rate rows on Redis (hot key and fresh keys beside redis-cell), printed
  --only-shards      only fresh keys on 1 vs 2 etcd clusters (a sharded store), printed
  --only-redis-permits  only the semaphore rows on Redis (rows 1-4 beside etcd's), printed
  --out PATH         markdown file to update (default for a full run: BENCHMARKS.md)";

const FLAGS: &[&str] = &[
    "--cluster",
    "--only-semaphores",
    "--only-rates",
    "--only-fresh-keys",
    "--only-redis",
    "--only-shards",
    "--only-redis-permits",
];

pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Parsed<Plan>, String> {
    Ok(
        crate::common::args::parse(NAME, USAGE, FLAGS, args)?.map(|args| {
            let cluster = args.flags.iter().any(|f| f == "--cluster");
            let fresh_keys_only = args.flags.iter().any(|f| f == "--only-fresh-keys");
            let redis_only = args.flags.iter().any(|f| f == "--only-redis");
            let shards_only = args.flags.iter().any(|f| f == "--only-shards");
            let redis_permits_only = args.flags.iter().any(|f| f == "--only-redis-permits");
            let parts = if fresh_keys_only || redis_only {
                Parts {
                    semaphores: false,
                    rates: true,
                }
            } else if redis_permits_only {
                Parts {
                    semaphores: true,
                    rates: false,
                }
            } else {
                Parts::from_flags(&args.flags)
            };
            let plan = if args.quick {
                Plan::quick(cluster, args.out)
            } else {
                Plan::full(cluster, args.out)
            };
            // Rows run alone are no block of the file: printed, never written.
            let out = if fresh_keys_only || redis_only || shards_only || redis_permits_only {
                None
            } else {
                plan.out
            };
            Plan {
                parts,
                fresh_keys_only,
                redis_only,
                shards_only,
                redis_permits_only,
                out,
                ..plan
            }
        }),
    )
}

impl Plan {
    fn full(cluster: bool, out: Option<PathBuf>) -> Plan {
        Plan {
            quick: false,
            cluster,
            out,
            parts: Parts::from_flags(&[]),
            fresh_keys_only: false,
            redis_only: false,
            shards_only: false,
            redis_permits_only: false,
            latency_rounds: 20,
            latency_batch: 50,
            contended_for: Duration::from_secs(10),
            redis_contended_for: Duration::from_secs(10),
            handoffs: 200,
            waiters: 500,
            waiter_handoffs: 100,
            semaphores: 1_000,
            steady_for: Duration::from_secs(10),
            history_past: 100_000,
            history_samples: 300,
            queued: 500,
            peer_iterations: 500,
        }
    }

    /// Every row runs, with sizes that keep a debug build (cargo test) well under 2 minutes.
    fn quick(cluster: bool, out: Option<PathBuf>) -> Plan {
        Plan {
            quick: true,
            cluster,
            out,
            parts: Parts::from_flags(&[]),
            fresh_keys_only: false,
            redis_only: false,
            shards_only: false,
            redis_permits_only: false,
            latency_rounds: 3,
            latency_batch: 10,
            contended_for: Duration::from_secs(1),
            // 4 cases (2 stores × 2 holds): the step stays a few seconds in a debug build.
            redis_contended_for: Duration::from_millis(500),
            handoffs: 10,
            waiters: 30,
            waiter_handoffs: 5,
            semaphores: 30,
            steady_for: Duration::from_secs(1),
            history_past: 200,
            history_samples: 20,
            queued: 20,
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

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

/// Result of reading the command line.
pub enum Parsed {
    Run(Plan),
    /// Nothing to run; print this and exit 0.
    Exit(String),
}

/// Name a `cargo test` filter is matched against.
const NAME: &str = "rls";

const USAGE: &str = "usage: cargo bench --bench rls [-- [--quick] [--out PATH]]
  --quick     small sizes (CI); prints the tables, writes no file unless --out is given
  --out PATH  markdown file to update (default for a full run: BENCHMARKS.md)";

/// libtest options that take a value (`cargo test -- --test-threads 1`), so it is not taken
/// for a filter.
const LIBTEST_VALUED: &[&str] = &["--test-threads", "--format", "--color", "--logfile", "-Z"];

pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Parsed, String> {
    let mut bench = false;
    let mut quick = false;
    let mut out = None;
    let mut filters = Vec::new();
    let mut skips = Vec::new();
    let mut list = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bench" => bench = true,
            "--quick" => quick = true,
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
        Plan::quick(out)
    } else {
        Plan::full(out)
    }))
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

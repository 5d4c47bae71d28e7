//! Cluster failover and fault injection with a safety history checker and a liveness judge
//! (`harness = false`).
//!
//! Twelve semaphore scenarios (leader and follower SIGKILL, whole-cluster outage, partition longer than
//! the TTL, short blips, a SIGKILLed holder process, a slow store, compaction while waiting,
//! a SIGSTOPped member, a SIGSTOPped follower every worker uses, one slow member, 200 acquires
//! cancelled during a leader restart) run on a real 3-member etcd cluster and a real 3-member
//! ZooKeeper ensemble, each under a contended workload of ≥ 8 Limiters. Every grant and every
//! wait goes into a history; a run fails if more than the capacity was ever held, a token was
//! granted twice, a call hung, the queue stood still for more than 2 × TTL outside the fault
//! windows while waiters existed, an entry of a live session stayed in the store after every
//! worker stopped (read raw, before any Limiter closes), or something stayed after every client
//! closed. Rows with a kill measure the store's own failover (a raw write) in the same run; after
//! a leader kill the first grant must come within that + 0.5 s; when ZooKeeper 3.8.0's own
//! re-election loop keeps the store down (its logs show rejected `NEWLEADER` acknowledgements),
//! the row notes it, restarts the member and judges the library from then. Five rate-limit
//! scenarios check their admitted history with `clusterlimit::testing::rate_history` (no
//! interval over GCRA's bound, no aligned window over its limit), hence the `testing` feature:
//! a hot key under GCRA and a fixed window with leader SIGKILLs (13, 14: `rate.rs`), the same
//! with leased hot keys at 5,000/s (15, 16: issue 43; the row fails unless most admissions came
//! from leases, and notes the admitted dip around each kill and the units leases lost,
//! `rate_leases.rs`), and a leased hot key while a Limiter in a process of its own is SIGKILLed
//! right after it took a lease (17: `rate_kill.rs`; the child is this binary started again,
//! `rate_child.rs`, printing each admission, so the history checked is the union of everyone's;
//! the others must be back at the quota's pace within a lease's time + 200 ms).
//! Tables of the figures are printed at the end.
//!
//! ```text
//! cargo test --all-features --test failover                      # the CI size, both stores (~6 min)
//! cargo test --all-features --test failover -- etcd partition    # only rows whose "store scenario" matches every word
//! cargo test --all-features --test failover -- rate              # the rate-limit rows
//! CLUSTERLIMIT_SOAK=1 cargo test --all-features --test failover  # soak: more workers, kills and time
//! CLUSTERLIMIT_FAILOVER_SEED=42 …                                # replay the workers' random choices
//! ```

mod support;

#[path = "failover/child.rs"]
mod child;
#[path = "failover/cluster.rs"]
mod cluster;
#[path = "failover/history.rs"]
mod history;
#[path = "failover/rate.rs"]
mod rate;
#[path = "failover/rate_child.rs"]
mod rate_child;
#[path = "failover/rate_kill.rs"]
mod rate_kill;
#[path = "failover/rate_leases.rs"]
mod rate_leases;
#[path = "failover/rate_load.rs"]
mod rate_load;
#[path = "failover/report.rs"]
mod report;
#[path = "failover/scenarios.rs"]
mod scenarios;
#[path = "failover/store_probe.rs"]
mod store_probe;
#[path = "failover/workload.rs"]
mod workload;

use cluster::Kind;
use scenarios::{Scenario, Size};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

fn main() {
    support::holder_process::hold_if_child();
    rate_child::hammer_if_child();
    if std::env::args().any(|a| a == "--list") {
        list();
        return;
    }
    let filters = word_filters();
    let exact = std::env::args().any(|a| a == "--exact");
    let soak = std::env::var("CLUSTERLIMIT_SOAK").is_ok_and(|v| !v.is_empty() && v != "0");
    let size = if soak { Size::soak() } else { Size::ci() };
    let seed = std::env::var("CLUSTERLIMIT_FAILOVER_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });

    if std::env::var_os("RUST_LOG").is_some() {
        // The library's logs, for digging into a failed scenario.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    }
    if let Err(e) = history::self_check() {
        eprintln!("failover: the history checker failed its self-check: {e}");
        std::process::exit(1);
    }
    let selected: Vec<(Kind, Scenario)> = [Kind::Etcd, Kind::Zk]
        .into_iter()
        .flat_map(|k| Scenario::ALL.into_iter().map(move |s| (k, s)))
        .filter(|(k, s)| {
            if exact {
                filters.contains(&test_name(*k, *s))
            } else {
                matches(&filters, k.name(), s.name())
            }
        })
        .collect();
    if selected.is_empty() {
        println!("failover: no scenario matches {filters:?}");
        return;
    }
    println!(
        "failover: {} scenarios, {} size ({size:?}), seed {seed} (CLUSTERLIMIT_FAILOVER_SEED replays it)",
        selected.len(),
        if soak { "soak" } else { "CI" }
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let started = Instant::now();
    let mut rows = Vec::new();
    for (kind, scenario) in selected {
        println!("failover: {} / {} …", kind.name(), scenario.name());
        let row = runtime.block_on(scenarios::run(kind, scenario, size, seed));
        println!(
            "failover: {} / {}: {} in {:.1} s",
            kind.name(),
            scenario.name(),
            if row.passed() { "ok" } else { "FAILED" },
            row.took.as_secs_f64()
        );
        rows.push(row);
    }
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));

    println!(
        "\n## Failover run ({} size, seed {seed}, {:.0} s)\n\n{}",
        if soak { "soak" } else { "CI" },
        started.elapsed().as_secs_f64(),
        report::table(&rows)
    );
    let failed: Vec<String> = rows
        .iter()
        .filter(|r| !r.passed())
        .map(|r| format!("{} / {}", r.store.name(), r.scenario))
        .collect();
    if !failed.is_empty() {
        eprintln!("failover: FAILED: {}", failed.join("; "));
        std::process::exit(1);
    }
    println!("failover: all scenarios passed with 0 safety violations");
}

/// Lists every scenario as libtest's `--list --format terse` does (`NAME: test`), so test
/// runners (cargo-nextest) run each scenario as a test of its own with `--exact NAME`. None is
/// ignored: `--ignored` lists nothing.
fn list() {
    if std::env::args().any(|a| a == "--ignored") {
        return;
    }
    for kind in [Kind::Etcd, Kind::Zk] {
        for scenario in Scenario::ALL {
            println!("{}: test", test_name(kind, scenario));
        }
    }
}

/// A scenario's name as a test: `etcd::s01_leader_sigkill`.
fn test_name(kind: Kind, scenario: Scenario) -> String {
    let (number, words) = scenario
        .name()
        .split_once(' ')
        .unwrap_or(("", scenario.name()));
    let mut slug = String::new();
    for c in words.to_lowercase().chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c);
        } else if !slug.is_empty() && !slug.ends_with('_') {
            slug.push('_');
        }
    }
    let slug = slug.trim_end_matches('_');
    format!("{}::s{number:0>2}_{slug}", kind.name().to_lowercase())
}

/// Words given on the command line (libtest flags such as `--nocapture` are ignored); with
/// `--exact`, whole test names (`etcd::s01_leader_sigkill`).
fn word_filters() -> Vec<String> {
    std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .map(|a| a.to_lowercase())
        .collect()
}

/// True if every filter word occurs in "store scenario" (case-insensitive).
fn matches(filters: &[String], store: &str, scenario: &str) -> bool {
    let hay = format!("{store} {scenario}").to_lowercase();
    filters.iter().all(|f| hay.contains(f.as_str()))
}

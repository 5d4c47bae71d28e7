//! The RLS benchmark: `cargo bench --bench rls` (release build, full sizes; writes its section
//! into BENCHMARKS.md), `-- --quick` (small sizes, prints only). `cargo test --all-targets`
//! runs the quick mode as a test.
//!
//! One process run starts a real 1-node etcd (the test support's child process) and, per store
//! (memory:// and that etcd), the real `clusterlimit serve --grpc-listen` with a one-rule
//! config, and measures: the library's own `RateLimit::check_n` and `ShouldRateLimit` through
//! the sidecar, interleaved in rounds (one caller, then many); then it kills etcd and measures
//! the sidecar's answers under `--rls-store-down fail_open` and `local:2`. Every call uses a
//! fresh key under a limit of 1,000,000 per second, so nothing is denied. Real errors (a
//! server that does not start, an answer other than OK) end the run with a non-zero exit.
//!
//! Then the edge rows (rls/edge.rs; `-- --edge-only` runs only them): a 3-member etcd, the
//! sidecar with its default settings, 64 concurrent callers on quotas that deny (one key and
//! 1,000 keys; 20 per minute and 1,000 per second), and the same load through a SIGSTOP and a
//! SIGKILL of the etcd leader. They print targets as met / not met; the run fails (and a quick
//! run as a test fails) only on what cannot flake on a loaded machine: a call that errs, or an
//! admission the interval check proves above the quota. They write their own section of
//! BENCHMARKS.md, in a full run only.

#[path = "../tests/binary/mod.rs"]
mod binary;
#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/mod.rs"]
mod support;

#[path = "rls/edge.rs"]
mod edge;
#[path = "rls/edge_report.rs"]
mod edge_report;
#[path = "rls/measure.rs"]
mod measure;
#[path = "rls/plan.rs"]
mod plan;
#[path = "rls/report.rs"]
mod report;
#[path = "rls/server.rs"]
mod server;
#[path = "rls/window_check.rs"]
mod window_check;
// The limiter bench's percentiles and number formats; it uses parts this bench does not.
#[allow(dead_code)]
#[path = "limiter/stats.rs"]
mod stats;

use anyhow::Context as _;
use clusterlimit::{Algorithm, Limiter, Quota};
use common::machine::{etcd_version, load_average, run_lines};
use plan::Plan;
use report::{Results, StoreRun};
use server::Rls;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use support::EtcdCluster;

fn main() -> ExitCode {
    common::main(plan::parse, run)
}

fn run(plan: &Plan) -> anyhow::Result<()> {
    let runtime = common::runtime()?;
    window_check::self_test().map_err(|e| anyhow::anyhow!("the interval check is broken: {e}"))?;
    if !plan.edge_only {
        let started = Instant::now();
        let load_before = load_average();
        eprintln!("rls bench: starting a 1-node etcd");
        let mut etcd = EtcdCluster::single();
        let mut results = runtime.block_on(measure_all(plan, &mut etcd))?;
        drop(etcd);
        results.about = about(plan, started.elapsed(), &load_before);
        let md = results.markdown();
        println!("{md}");
        if let Some(out) = &plan.out {
            report::update_file(out, &report::LATENCY, &md)?;
            eprintln!("rls bench: wrote {}", out.display());
        }
    }
    let started = Instant::now();
    let load_before = load_average();
    step("edge: starting a 3-member etcd");
    let mut etcd = EtcdCluster::start(3);
    let mut edge = runtime.block_on(measure_edge(plan, &mut etcd))?;
    drop(etcd);
    edge.about = edge_about(plan, started.elapsed(), &load_before);
    let md = edge.markdown();
    println!("{md}");
    match &plan.out {
        Some(out) if !plan.quick => {
            report::update_file(out, &report::EDGE, &md)?;
            eprintln!("rls bench: wrote the edge rows into {}", out.display());
        }
        _ => {}
    }
    edge_sound(&edge)
}

/// The edge rows and the leader faults on `etcd` (3 members).
async fn measure_edge(
    plan: &Plan,
    etcd: &mut EtcdCluster,
) -> anyhow::Result<edge_report::EdgeResults> {
    let dir = tempfile::tempdir().context("make a temp dir")?;
    let config = edge::write_config(dir.path())?;
    let setup = edge::Setup::start(etcd, &config, plan).await?;
    let rows = edge::rows(&setup, plan).await?;
    step("edge: the same load on one key through leader faults");
    let faults = edge::faults(&setup, etcd, plan).await?;
    Ok(edge_report::EdgeResults {
        callers: plan.edge_callers,
        connections: plan.edge_connections,
        row_for: plan.edge_for,
        rows,
        faults,
        ..Default::default()
    })
}

/// What the edge part must show on any machine, however loaded: every call answered, the
/// fail-open answers told apart as the sidecar counts them, and no window of any key above its
/// quota (the other targets are printed, not enforced).
fn edge_sound(edge: &edge_report::EdgeResults) -> anyhow::Result<()> {
    for r in edge.rows.iter().chain([&edge.faults.row]) {
        let what = format!("edge row of {} key(s), {}", r.keys, r.rule().label());
        if r.errors > 0 {
            anyhow::bail!(
                "{what}: {} of {} calls failed, e.g. {:?}",
                r.errors,
                r.calls,
                r.error_samples
            );
        }
        // The interval check leaves out the answers taken for fail-open: they must be exactly
        // the ones the sidecar counted so, or the check could miss a store admission.
        if r.fail_open_answers as u64 != r.counters.failure_mode_allowed {
            anyhow::bail!(
                "{what}: {} answers look fail-open, the sidecar counted {}: the classification \
                 (an OK with the whole limit remaining) no longer matches the sidecar",
                r.fail_open_answers,
                r.counters.failure_mode_allowed
            );
        }
        if !r.window.exact() {
            anyhow::bail!("{what}: admitted above the quota: {}", r.window.summary());
        }
    }
    Ok(())
}

async fn measure_all(plan: &Plan, etcd: &mut EtcdCluster) -> anyhow::Result<Results> {
    let dir = tempfile::tempdir().context("make a temp dir")?;
    let config = server::write_config(dir.path())?;
    let mut r = Results {
        callers: plan.callers,
        concurrent_for: plan.concurrent_for,
        ..Results::default()
    };
    let etcd_url = etcd.url("rls-bench");
    for (label, url) in [
        ("memory://", "memory://rls-bench".to_string()),
        ("etcd, 1 node", etcd_url.clone()),
    ] {
        step(&format!("{label}: library check_n vs ShouldRateLimit"));
        r.stores.push(store_run(plan, label, &url, &config).await?);
    }

    step("etcd killed: fail_open and local:2");
    // Started and warmed up while etcd is alive; each sidecar has its own circuit breaker.
    let mut open = Rls::start(&etcd_url, &config, &["--rls-store-down", "fail_open"]).await?;
    let mut local = Rls::start(&etcd_url, &config, &["--rls-store-down", "local:2"]).await?;
    for _ in 0..plan.warmup {
        server::should_rate_limit(&mut open.client).await?;
        server::should_rate_limit(&mut local.client).await?;
    }
    etcd.kill(0);
    for (policy, rls) in [("fail_open", &mut open), ("local:2", &mut local)] {
        r.down
            .push(measure::down(policy, &mut rls.client, plan.down_answers).await?);
    }
    Ok(r)
}

/// Both paths on one store: the sidecar and the library's own RateLimit with the same quota.
async fn store_run(
    plan: &Plan,
    label: &str,
    url: &str,
    config: &std::path::Path,
) -> anyhow::Result<StoreRun> {
    // A generous store timeout: a loaded machine must not trip the breaker (its answers
    // would not ask the store at all).
    let mut rls = Rls::start(url, config, &["--rls-store-timeout", "10s"]).await?;
    let limiter = Limiter::connect(url)
        .await
        .with_context(|| format!("connect the library to {url}"))?;
    // The RLS's rules are fixed windows unless they say otherwise.
    let quota = Quota::per_second(u64::from(server::PER_SECOND)).algorithm(Algorithm::FixedWindow);
    let rl = limiter
        .rate_limit("bench-library", quota)
        .await
        .context("create the library's rate limit")?;
    let sequential = measure::sequential(plan, &rl, &mut rls.client).await?;
    let library_concurrent = measure::concurrent(plan.callers, plan.concurrent_for, move || {
        let rl = rl.clone();
        async move { measure::check(&rl).await }
    })
    .await?;
    let client = rls.client.clone();
    let rls_concurrent = measure::concurrent(plan.callers, plan.concurrent_for, move || {
        let mut c = client.clone();
        async move { server::should_rate_limit(&mut c).await }
    })
    .await?;
    Ok(StoreRun {
        label: label.to_string(),
        sequential,
        library_concurrent,
        rls_concurrent,
    })
}

pub fn step(what: &str) {
    eprintln!("rls bench: {what}");
}

/// The lines under the edge section's title.
fn edge_about(plan: &Plan, took: Duration, load_before: &str) -> String {
    let mode = if plan.quick { "quick run" } else { "full run" };
    format!(
        "Made by `cargo bench --bench rls` ({mode}; `-- --edge-only` runs this part alone): a \
         3-member etcd, the real `clusterlimit serve --grpc-listen` with its default settings \
         (store timeout, store-down policy fail_open) and two fixed-window rules, called with \
         envoy-types' tonic client. Each call is one `ShouldRateLimit` of one hit; the many-keys \
         rows take their {keys} keys round-robin.\n\n\
         {run}\
         - etcd {etcd} × 3 (`--unsafe-no-fsync`, election timeout 250 ms); the sidecar, etcd and \
         this client share the same cores\n\
         - fail-open answers: the sidecar's `clusterlimit_rate_failure_mode_allowed` (+ \
         `_store_down_denied`) counters, scraped from `/metrics` before and after each row; per \
         answer, an OK whose `limit_remaining` is the whole limit (no counted admission leaves \
         that), which dates them\n\
         - interval check: per key and epoch-aligned window, the store's admissions (an OK that \
         is not fail-open) must fit under the quota. Each decision happened between the call's \
         send and receipt; the client/sidecar clock offset is bounded from every answer's \
         `duration_until_reset` (the answer's own window end, on the sidecar's clock), and a \
         decision precedes its answer. \"excess\" counts admissions that fit in no window under \
         the quota: above 0 proves an over-admission\n\
         - targets: admitted never above the quota; 0 fail-open while the store is healthy; p99 \
         ≤ 20 ms (Envoy's default filter timeout); after a leader fault, fail-open answers only \
         until the store's own recovery + {slack} ms\n",
        keys = edge::thousands(u64::from(plan.edge_keys)),
        run = run_lines(
            took,
            "the edge part",
            ", shared with other builds",
            load_before
        ),
        etcd = etcd_version(&support::etcd_binary()),
        slack = edge::RESUME_SLACK.as_millis(),
    )
}

/// The lines under the section's title: when, where, how.
fn about(plan: &Plan, took: Duration, load_before: &str) -> String {
    let mode = if plan.quick { "quick run" } else { "full run" };
    format!(
        "Made by `cargo bench --bench rls` ({mode}): one process starts a 1-node etcd and the real \
         `clusterlimit serve --grpc-listen` per store (`--rls-store-timeout 10s` while the store \
         is up), calls it with envoy-types' tonic client, and runs the library's `check_n` on the \
         same store in the same rounds. Every call takes a fresh key of a rule of 1,000,000 per \
         second (fixed window), so nothing is denied.\n\n\
         {run}\
         - etcd {etcd} (`--unsafe-no-fsync`); the sidecar, etcd and this client share the same cores\n\
         - latencies in ms, p50 / p99 by nearest rank; one caller: {warmup} calls per path unmeasured, then {rounds} interleaved rounds of {batch} per path\n",
        run = run_lines(took, "the whole run", ", shared with other builds", load_before),
        etcd = etcd_version(&support::etcd_binary()),
        warmup = plan.warmup,
        rounds = plan.rounds,
        batch = plan.batch,
    )
}

//! An uncontended rate-limit check against the store's floor, a raw compare-and-swap with the
//! same client library (etcd: a `Txn` comparing `mod_revision`, then put; ZooKeeper: `setData`
//! with a version), measured interleaved (one of each per round) on a real single-node store.
//!
//! What is asserted is what cannot flake: every check is admitted with exactly one store request
//! (no read before the write; the idle-key scan's one read may fall in the window). The key is
//! checked back to back, hot enough to be leased: leases are off here, since this measures the
//! per-check path (leases have their own cases and benchmark). The latencies and their ratio to the floor are printed for the
//! record (speed targets live in the benchmark, `cargo bench --bench limiter`).

use crate::support;

use clusterlimit::{Limiter, Quota, RateLimit};
use std::sync::atomic::{AtomicI32, AtomicI64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{EtcdCluster, ZkCluster};
use zookeeper_client::{Acls, CreateMode};

const ROUNDS: usize = 300;
const WARM_UP: usize = 20;

/// Percentile `p` (0–100) of `samples`, in microseconds.
fn percentile(samples: &mut [Duration], p: usize) -> f64 {
    samples.sort();
    let i = (samples.len() * p / 100).min(samples.len().saturating_sub(1));
    samples[i].as_secs_f64() * 1e6
}

/// A quota no sequential loop can exhaust: every check is admitted and written.
fn roomy() -> Quota {
    Quota::per_second(1_000_000).burst(1_000_000)
}

async fn timed_check(rl: &RateLimit) -> Duration {
    let started = Instant::now();
    let d = rl.check("k").await.expect("check");
    assert!(d.allowed, "{d:?}");
    started.elapsed()
}

fn report(store: &str, ours: &mut [Duration], floor: &mut [Duration]) {
    let (o50, o99) = (percentile(ours, 50), percentile(ours, 99));
    let (f50, f99) = (percentile(floor, 50), percentile(floor, 99));
    println!(
        "rate_uncontended {store}: check p50 {o50:.0} µs p99 {o99:.0} µs; raw CAS p50 {f50:.0} µs \
         p99 {f99:.0} µs; p50 ratio {:.2}×",
        o50 / f50
    );
}

/// Checks `rl` ROUNDS times, each round also running `floor_op` once; asserts one request per
/// check; returns (check latencies, floor latencies).
async fn measure<F, Fut>(
    l: &Limiter,
    rl: &RateLimit,
    mut floor_op: F,
) -> (Vec<Duration>, Vec<Duration>)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for _ in 0..WARM_UP {
        timed_check(rl).await;
        floor_op().await;
    }
    let before = l.stats();
    let (mut ours, mut floor) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        ours.push(timed_check(rl).await);
        let started = Instant::now();
        floor_op().await;
        floor.push(started.elapsed());
    }
    let used = l.stats().since(&before);
    // The idle-key scan's first pass (5 s after the first write: inside this window on a slow
    // machine) reads one page; nothing else may read.
    assert!(used.range <= 1, "no read before a write: {used:?}");
    assert_eq!(
        used.total() - used.range,
        ROUNDS as u64,
        "one request per uncontended admitted check: {used:?}"
    );
    assert_eq!(used.txn, ROUNDS as u64, "each a compare-and-swap: {used:?}");
    (ours, floor)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_check_against_a_raw_txn() {
    let cluster = EtcdCluster::single();
    let l = per_check(&cluster.url("uncontended"))
        .await
        .expect("connect");
    let rl = l.rate_limit("api", roomy()).await.expect("rate_limit");
    let mut raw = support::connect(&cluster.endpoints()).await;
    let put = raw.put("floor", "0", None).await.expect("put");
    // The next compare expects the last put's revision.
    let rev = Arc::new(AtomicI64::new(put.header().map_or(0, |h| h.revision())));
    let (mut ours, mut floor) = measure(&l, &rl, || {
        let (mut raw, rev) = (raw.clone(), rev.clone());
        async move {
            use etcd_client::{Compare, CompareOp, Txn, TxnOp};
            let expected = rev.load(Relaxed);
            let txn = Txn::new()
                .when([Compare::mod_revision("floor", CompareOp::Equal, expected)])
                .and_then([TxnOp::put("floor", "1", None)]);
            let r = raw.txn(txn).await.expect("raw txn");
            assert!(r.succeeded(), "the raw CAS is uncontended");
            rev.store(r.header().map_or(0, |h| h.revision()), Relaxed);
        }
    })
    .await;
    report("etcd", &mut ours, &mut floor);
    l.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_check_against_a_raw_set_data() {
    let zk = ZkCluster::single();
    let l = per_check(&format!("zk://{}/uncontended", zk.connect_string()))
        .await
        .expect("connect");
    let rl = l.rate_limit("api", roomy()).await.expect("rate_limit");
    let raw = support::zk_connect(&zk.connect_string()).await;
    raw.create(
        "/floor",
        b"0",
        &CreateMode::Persistent.with_acls(Acls::anyone_all()),
    )
    .await
    .expect("create the floor node");
    let version = Arc::new(AtomicI32::new(0));
    let (mut ours, mut floor) = measure(&l, &rl, || {
        let (raw, version) = (raw.clone(), version.clone());
        async move {
            let expected = version.load(Relaxed);
            let stat = raw
                .set_data("/floor", b"1", Some(expected))
                .await
                .expect("raw setData");
            version.store(stat.version, Relaxed);
        }
    })
    .await;
    report("zookeeper", &mut ours, &mut floor);
    l.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_check() {
    let l = per_check("memory://rate-uncontended")
        .await
        .expect("connect");
    let rl = l.rate_limit("api", roomy()).await.expect("rate_limit");
    let (mut ours, _) = measure(&l, &rl, || async {}).await;
    println!(
        "rate_uncontended memory: check p50 {:.0} µs p99 {:.0} µs (no network floor)",
        percentile(&mut ours, 50),
        percentile(&mut ours, 99)
    );
}

/// A Limiter that sends every admitted check to the store (no leases).
async fn per_check(url: &str) -> clusterlimit::Result<Limiter> {
    Limiter::builder(url).hot_key_leases(false).connect().await
}

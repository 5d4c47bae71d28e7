//! A hot-key hammer for the rate-limit exactness tests (`tests/rate_exactness.rs`,
//! `tests/rate_skew.rs`): many Limiters × many concurrent callers check one key in a closed
//! loop for a fixed time; every admitted check is recorded on the TRUE clock, with the cost
//! figures the issue asks for. Included with `mod rate_hammer;` (needs `mod support;`).
#![allow(dead_code)]

use crate::support;
use clusterlimit::testing::rate_history::{unix_ns, Admitted};
use clusterlimit::{Clock, Limiter, Quota, RequestStats};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// One measured run at a time in a test binary: the figures (and the 97% bar) are about the
/// store, not about two hammers sharing the 2 cores.
pub static SERIAL: Mutex<()> = Mutex::new(());

/// Longest pause after a denial: a closed loop that still hammers.
pub const MAX_PAUSE: Duration = Duration::from_millis(5);

/// A store server for the run (started here, killed on drop).
pub enum Server {
    /// `memory://NAME`; the anchor keeps the in-process store alive between Limiters.
    Memory {
        name: String,
        _anchor: Limiter,
    },
    Etcd(support::EtcdCluster),
    Zk(support::ZkCluster),
}

/// etcd key prefix / ZooKeeper chroot of the URLs.
pub const ROOT: &str = "t";

impl Server {
    pub async fn memory() -> Server {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "rate-hammer-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let anchor = Limiter::connect(&format!("memory://{name}"))
            .await
            .expect("connect the memory anchor Limiter");
        Server::Memory {
            name,
            _anchor: anchor,
        }
    }

    pub fn etcd() -> Server {
        Server::Etcd(support::EtcdCluster::single())
    }

    pub fn zk() -> Server {
        Server::Zk(support::ZkCluster::single())
    }

    pub fn label(&self) -> &'static str {
        match self {
            Server::Memory { .. } => "memory",
            Server::Etcd(_) => "etcd",
            Server::Zk(_) => "zookeeper",
        }
    }

    pub fn url(&self) -> String {
        match self {
            Server::Memory { name, .. } => format!("memory://{name}"),
            Server::Etcd(c) => c.url(ROOT),
            Server::Zk(c) => c.url(&format!("/{ROOT}")),
        }
    }

    pub async fn limiter(&self, clock: Option<Clock>) -> Limiter {
        let mut b = Limiter::builder(&self.url());
        if let Some(clock) = clock {
            b = b.clock(clock);
        }
        b.connect()
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.label()))
    }
}

/// What to run.
pub struct Hammer {
    pub limit: &'static str,
    pub quota: Quota,
    pub limiters: usize,
    pub callers_per_limiter: usize,
    pub run: Duration,
    /// Clock of each Limiter (`None`: the system clock); shorter than `limiters`: the rest use
    /// the system clock.
    pub clocks: Vec<Option<Clock>>,
    /// Limiters from this index on start their callers this long after the others.
    pub late: Option<(usize, Duration)>,
}

impl Hammer {
    /// The shape: 8 Limiters × 32 callers on one key.
    pub fn new(limit: &'static str, quota: Quota, run: Duration) -> Hammer {
        Hammer {
            limit,
            quota,
            limiters: 8,
            callers_per_limiter: 32,
            run,
            clocks: Vec::new(),
            late: None,
        }
    }
}

/// What a run saw.
pub struct Outcome {
    pub store: &'static str,
    pub events: Vec<Admitted>,
    /// Every decision's latency (ns), admitted or denied.
    pub latencies: Vec<u64>,
    pub errors: Vec<String>,
    /// Requests of all Limiters during the run.
    pub stats: RequestStats,
    /// Unix ns (true clock) when the callers were let go, and when they were told to stop.
    pub t0: u64,
    pub stop: u64,
}

impl Outcome {
    pub fn run_secs(&self) -> f64 {
        (self.stop - self.t0) as f64 / 1e9
    }

    /// Admitted cost of the checks that ended by the stop time.
    pub fn admitted_in_run(&self) -> u64 {
        self.events
            .iter()
            .filter(|e| e.end <= self.stop)
            .map(|e| e.cost)
            .sum()
    }

    /// The longest time (ns) between two admissions in a row (by end time) and when it ended:
    /// a stretch longer than the bucket's tolerance lets tokens go unused.
    pub fn longest_gap(&self) -> (u64, u64) {
        let mut ends: Vec<u64> = self.events.iter().map(|e| e.end).collect();
        ends.sort_unstable();
        ends.windows(2)
            .map(|w| (w[1] - w[0], w[1]))
            .max()
            .unwrap_or((0, 0))
    }

    fn percentile_ms(&self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let mut l = self.latencies.clone();
        l.sort_unstable();
        let i = ((l.len() - 1) as f64 * p).round() as usize;
        l[i] as f64 / 1e6
    }

    /// The per-store figures the issue asks for.
    pub fn print(&self, what: &str) {
        let secs = self.run_secs();
        let admitted = self.events.len().max(1) as f64;
        let s = &self.stats;
        println!(
            "[{what} {}] run {secs:.2} s: {:.0} decisions/s, {:.1} admitted/s ({} admitted), \
             {:.3} requests per admitted decision ({} requests: txn {} range {} put {} delete {}; \
             lease {}), {} batches, {} local answers, latency p50 {:.3} ms p99 {:.3} ms max {:.3} ms ({} decisions over 1 s), {} errors",
            self.store,
            self.latencies.len() as f64 / secs,
            self.events.len() as f64 / secs,
            self.events.len(),
            s.total() as f64 / admitted,
            s.total(),
            s.txn,
            s.range,
            s.put,
            s.delete,
            s.lease,
            s.rate_batches,
            s.rate_local_answers,
            self.percentile_ms(0.5),
            self.percentile_ms(0.99),
            self.percentile_ms(1.0),
            self.latencies.iter().filter(|&&l| l > 1_000_000_000).count(),
            self.errors.len(),
        );
        let (gap, at) = self.longest_gap();
        println!(
            "[{what} {}] longest stretch without an admission: {:.1} ms, ending {:.3} s into the run",
            self.store,
            gap as f64 / 1e6,
            at.saturating_sub(self.t0) as f64 / 1e9
        );
        if let Some(e) = self.errors.first() {
            println!("[{what} {}] first error: {e}", self.store);
        }
    }
}

/// Per caller: admitted events, latencies, errors.
type CallerLog = (Vec<Admitted>, Vec<u64>, Vec<String>);

/// Runs the hammer on `server`: every caller loops `check` until the stop time; after a denial
/// it sleeps `min(retry_after, MAX_PAUSE)`; after an error, `MAX_PAUSE`.
pub async fn hammer(server: &Server, h: &Hammer) -> Outcome {
    let mut limiters = Vec::with_capacity(h.limiters);
    for i in 0..h.limiters {
        let clock = h.clocks.get(i).cloned().flatten();
        limiters.push(server.limiter(clock).await);
    }
    let mut handles = Vec::with_capacity(h.limiters);
    for l in &limiters {
        handles.push(
            l.rate_limit(h.limit, h.quota)
                .await
                .unwrap_or_else(|e| panic!("rate_limit({}) on {}: {e}", h.limit, server.label())),
        );
    }
    let before: RequestStats = limiters.iter().map(|l| l.stats()).sum();
    let t0 = unix_ns();
    let began = Instant::now();
    let stop_at = began + h.run;
    let mut tasks = Vec::new();
    for (i, rl) in handles.iter().enumerate() {
        let delay = match h.late {
            Some((from, d)) if i >= from => d,
            _ => Duration::ZERO,
        };
        for _ in 0..h.callers_per_limiter {
            let rl = rl.clone();
            tasks.push(tokio::spawn(async move {
                let mut log: CallerLog = (Vec::new(), Vec::new(), Vec::new());
                tokio::time::sleep_until(began + delay).await;
                while Instant::now() < stop_at {
                    let start = unix_ns();
                    let t = Instant::now();
                    match rl.check("hot").await {
                        Ok(d) => {
                            log.1.push(t.elapsed().as_nanos() as u64);
                            if d.allowed {
                                log.0.push(Admitted {
                                    start,
                                    end: unix_ns(),
                                    cost: 1,
                                });
                            } else {
                                let pause = d.retry_after.unwrap_or(MAX_PAUSE).min(MAX_PAUSE);
                                tokio::time::sleep(pause).await;
                            }
                        }
                        Err(e) => {
                            log.2.push(e.to_string());
                            tokio::time::sleep(MAX_PAUSE).await;
                        }
                    }
                }
                log
            }));
        }
    }
    let mut out = Outcome {
        store: server.label(),
        events: Vec::new(),
        latencies: Vec::new(),
        errors: Vec::new(),
        stats: RequestStats::default(),
        t0,
        stop: t0 + h.run.as_nanos() as u64,
    };
    for t in tasks {
        // Bounded: every loop ends at the stop time, and every check within twice the
        // request timeout.
        let (events, latencies, errors) = tokio::time::timeout(h.run + Duration::from_secs(30), t)
            .await
            .expect("a caller outlived the run by 30 s")
            .expect("a caller panicked");
        out.events.extend(events);
        out.latencies.extend(latencies);
        out.errors.extend(errors);
    }
    let after: RequestStats = limiters.iter().map(|l| l.stats()).sum();
    out.stats = after.since(&before);
    for l in &limiters {
        let _ = l.close().await;
    }
    out
}

/// Runs `f` on a fresh 2-worker runtime, one measured test at a time.
pub fn serial<F: std::future::Future>(f: F) -> F::Output {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("build a tokio runtime")
        .block_on(f)
}

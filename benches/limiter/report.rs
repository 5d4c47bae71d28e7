//! The results of a run as markdown tables, each goal printed next to its figure as met / not
//! met (goals, not assertions), and the update of the generated block in BENCHMARKS.md.

use crate::contended;
use crate::handoff;
use crate::kazoo;
use crate::latency::PairSamples;
use crate::scale::{ManySemaphores, ManyWaiters};
use crate::stats::{kib, ms, p50_p99, ratio, times, verdict, Samples};
use crate::stores::Store;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

// The goals of issue 6.
const ETCD_VS_FLOOR: f64 = 1.2;
const ZK_VS_FLOOR: f64 = 1.5;
const FASTER_THAN_KAZOO: f64 = 2.5;
const THROUGHPUT_VS_KAZOO: f64 = 5.0;
const HANDOFF_VS_WRITE: f64 = 1.2;
const SIDECAR_ADDS: Duration = Duration::from_micros(200);
/// "Independent of the number of waiters": equal within this many requests per acquisition.
const REQUESTS_TOLERANCE: f64 = 0.1;

/// Everything one run measured.
#[derive(Debug, Default)]
pub struct Results {
    pub about: String,
    pub etcd_floor: PairSamples,
    pub zk_floor: PairSamples,
    /// Uncontended acquire+release on memory, etcd, ZooKeeper (order of `Store::ALL`).
    pub library: Vec<PairSamples>,
    pub sidecar_memory: PairSamples,
    pub sidecar_etcd: PairSamples,
    pub contention: Contention,
    /// Per store, `Store::ALL` order.
    pub handoff: Vec<handoff::Outcome>,
    pub waiters: usize,
    pub bytes_per_waiter: Vec<f64>,
    pub many_waiters: Vec<ManyWaiters>,
    pub semaphores: usize,
    pub many_semaphores: Vec<ManySemaphores>,
    pub peer: Peer,
}

/// Row 3's runs: per store (`Store::ALL` order), one outcome per hold.
#[derive(Debug, Default)]
pub struct Contention {
    pub clients: usize,
    pub capacity: u32,
    pub run_for: Duration,
    pub holds: Vec<Duration>,
    pub runs: Vec<Vec<contended::Outcome>>,
}

/// Row 7.
#[derive(Debug, Default)]
pub struct Peer {
    pub ours: Samples,
    pub kazoo: Samples,
    /// ZooKeeper packets received by the server per acquire+release.
    pub ours_packets: f64,
    pub kazoo_packets: f64,
    /// One per hold of [`Contention::holds`].
    pub kazoo_contended: Vec<kazoo::Contended>,
}

/// One line of the goals summary.
struct Goal {
    what: String,
    figure: String,
    met: bool,
}

impl Results {
    pub fn markdown(&self) -> String {
        let mut goals = Vec::new();
        let mut md = String::new();
        md.push_str(&self.about);
        self.floor(&mut md);
        self.uncontended(&mut md, &mut goals);
        self.contended(&mut md);
        self.handoffs(&mut md, &mut goals);
        self.requests(&mut md, &mut goals);
        self.scale(&mut md);
        self.peer(&mut md, &mut goals);
        md.push_str("\n### Goals\n\n| goal | figure | |\n|---|---|---|\n");
        for g in &goals {
            let _ = writeln!(md, "| {} | {} | {} |", g.what, g.figure, verdict(g.met));
        }
        md
    }

    fn floor(&self, md: &mut String) {
        md.push_str(
            "\n### 1. Floor: raw writes with the same client library\n\n\
             | store | operations | pair p50 / p99 ms | enter p50 | leave p50 |\n\
             |---|---|---|---|---|\n",
        );
        for (store, ops, s) in [
            (
                "etcd",
                "put (with a lease) + delete (etcd-client)",
                &self.etcd_floor,
            ),
            (
                "ZooKeeper",
                "create (ephemeral sequential) + delete (zookeeper-client)",
                &self.zk_floor,
            ),
        ] {
            let _ = writeln!(
                md,
                "| {store} | {ops} | {} | {} | {} |",
                p50_p99(&s.pair),
                ms(s.enter.p50()),
                ms(s.leave.p50())
            );
        }
    }

    fn uncontended(&self, md: &mut String, goals: &mut Vec<Goal>) {
        md.push_str(
            "\n### 2. Uncontended acquire + release\n\n\
             | path | p50 / p99 ms | acquire p50 | release p50 | vs the same store's floor (p50 / p99) | goal |\n\
             |---|---|---|---|---|---|\n",
        );
        let floors = [None, Some(&self.etcd_floor), Some(&self.zk_floor)];
        let limits = [None, Some(ETCD_VS_FLOOR), Some(ZK_VS_FLOOR)];
        for (i, store) in Store::ALL.iter().enumerate() {
            let lib = &self.library[i];
            let (vs, goal) = match (floors[i], limits[i]) {
                (Some(f), Some(limit)) => {
                    let r = ratio(lib.pair.p50(), f.pair.p50());
                    let met = r.is_some_and(|r| r <= limit);
                    goals.push(Goal {
                        what: format!("{} acquire+release ≤ {limit}× floor", store.label()),
                        figure: times(r),
                        met,
                    });
                    (
                        format!(
                            "{} / {}",
                            times(r),
                            times(ratio(lib.pair.p99(), f.pair.p99()))
                        ),
                        format!("≤ {limit}×: {}", verdict(met)),
                    )
                }
                _ => ("—".to_string(), "—".to_string()),
            };
            let _ = writeln!(
                md,
                "| library, {} | {} | {} | {} | {vs} | {goal} |",
                store.label(),
                p50_p99(&lib.pair),
                ms(lib.enter.p50()),
                ms(lib.leave.p50())
            );
        }
        for (store, sc, lib) in [
            ("memory", &self.sidecar_memory, &self.library[0]),
            ("etcd", &self.sidecar_etcd, &self.library[1]),
        ] {
            let adds = sc.pair.p50().saturating_sub(lib.pair.p50());
            let met = adds <= SIDECAR_ADDS;
            goals.push(Goal {
                what: format!("sidecar adds ≤ 0.2 ms ({store})"),
                figure: format!("+{} ms", ms(adds)),
                met,
            });
            let _ = writeln!(
                md,
                "| sidecar HTTP (POST + DELETE), {store} | {} | {} | {} | +{} ms over the library on {store} (p50) | ≤ +0.2 ms: {} |",
                p50_p99(&sc.pair),
                ms(sc.enter.p50()),
                ms(sc.leave.p50()),
                ms(adds),
                verdict(met)
            );
        }
    }

    fn contended(&self, md: &mut String) {
        let c = &self.contention;
        let _ = write!(
            md,
            "\n### 3. Contended throughput: capacity {}, {} clients (each its own Limiter and \
             session), {} s per case\n\n\
             | store | hold | acquisitions/s | per client min / max | max holders seen |\n\
             |---|---|---|---|---|\n",
            c.capacity,
            c.clients,
            c.run_for.as_secs_f64()
        );
        for (store, runs) in Store::ALL.iter().zip(&c.runs) {
            for (hold, o) in c.holds.iter().zip(runs) {
                let _ = writeln!(
                    md,
                    "| {} | {} ms | {:.0} | {} / {} | {} |",
                    store.label(),
                    hold.as_millis(),
                    o.per_second(),
                    o.per_client.iter().min().unwrap_or(&0),
                    o.per_client.iter().max().unwrap_or(&0),
                    o.max_holders
                );
            }
        }
        for (hold, k) in c.holds.iter().zip(&self.peer.kazoo_contended) {
            let _ = writeln!(
                md,
                "| kazoo (ZooKeeper) | {} ms | {:.0} | {} / {} | {} |",
                hold.as_millis(),
                k.per_second(),
                k.per_client.iter().min().unwrap_or(&0),
                k.per_client.iter().max().unwrap_or(&0),
                k.max_holders
            );
        }
    }

    fn handoffs(&self, md: &mut String, goals: &mut Vec<Goal>) {
        md.push_str(
            "\n### 4. Handoff: holder's release() → the next waiter's acquire() returns\n\n\
             | store | handoff p50 / p99 ms | one write (a raw delete) p50 / p99 | handoff / one write (p50) | goal |\n\
             |---|---|---|---|---|\n",
        );
        for (store, h) in Store::ALL.iter().zip(&self.handoff) {
            let (write, vs, goal) = if h.one_write.len() == 0 {
                ("—".to_string(), "—".to_string(), "—".to_string())
            } else {
                let r = ratio(h.handoff.p50(), h.one_write.p50());
                let met = r.is_some_and(|r| r <= HANDOFF_VS_WRITE);
                goals.push(Goal {
                    what: format!("{} handoff ≤ {HANDOFF_VS_WRITE}× one write", store.label()),
                    figure: times(r),
                    met,
                });
                (
                    p50_p99(&h.one_write),
                    times(r),
                    format!("≤ {HANDOFF_VS_WRITE}×: {}", verdict(met)),
                )
            };
            let _ = writeln!(
                md,
                "| {} | {} | {write} | {vs} | {goal} |",
                store.label(),
                p50_p99(&h.handoff)
            );
        }
    }

    fn requests(&self, md: &mut String, goals: &mut Vec<Goal>) {
        let c = &self.contention;
        let holds: Vec<String> = c
            .holds
            .iter()
            .map(|h| format!("{} ms", h.as_millis()))
            .collect();
        let _ = write!(
            md,
            "\n### 5. Requests, from the Limiters' counters (session keepalives not included)\n\n\
             | store | per acquisition (acquire + release), {} contending clients, hold {} | \
             per acquisition behind {} waiters (join the tail + release) | per release with {} waiters, all clients (mean / max) | goal: independent of the waiters |\n\
             |---|---|---|---|---|\n",
            c.clients,
            holds.join(" / "),
            self.waiters,
            self.waiters
        );
        for (i, store) in Store::ALL.iter().enumerate() {
            let few: Vec<f64> = c.runs[i]
                .iter()
                .map(contended::Outcome::requests_per_acquisition)
                .collect();
            let w = &self.many_waiters[i];
            let many = w.requests_per_enqueue + w.requests_per_release;
            let met = few.iter().all(|f| (f - many).abs() <= REQUESTS_TOLERANCE);
            goals.push(Goal {
                what: format!(
                    "{} requests per acquisition independent of the waiters",
                    store.label()
                ),
                figure: format!(
                    "{} with {} clients, {many:.2} with {} waiters",
                    few.iter()
                        .map(|f| format!("{f:.2}"))
                        .collect::<Vec<_>>()
                        .join(" / "),
                    c.clients,
                    self.waiters
                ),
                met,
            });
            let _ = writeln!(
                md,
                "| {} | {} | {many:.2} | {:.2} / {} | {} |",
                store.label(),
                few.iter()
                    .map(|f| format!("{f:.2}"))
                    .collect::<Vec<_>>()
                    .join(" / "),
                w.requests_per_release,
                w.max_requests_per_release,
                verdict(met)
            );
        }
    }

    fn scale(&self, md: &mut String) {
        let _ = write!(
            md,
            "\n### 6. Scale\n\n\
             One semaphore (capacity 1) with {n} waiters:\n\n\
             | store | heap per waiting acquire ({n} in one Limiter) | heap per waiting client (own Limiter and session) | connecting and queueing {n} clients | release → grant p50 / p99 ms with {n} waiting | with 1 waiting (row 4) |\n\
             |---|---|---|---|---|---|\n",
            n = self.waiters
        );
        for (i, store) in Store::ALL.iter().enumerate() {
            let w = &self.many_waiters[i];
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.1} s | {} | {} |",
                store.label(),
                kib(self.bytes_per_waiter[i]),
                kib(w.bytes_per_client),
                w.setup.as_secs_f64(),
                p50_p99(&w.handoff),
                p50_p99(&self.handoff[i].handoff)
            );
        }
        let window = self
            .many_semaphores
            .first()
            .map_or(0.0, |s| s.window.as_secs_f64());
        let _ = write!(
            md,
            "\n{n} semaphores with one holder each (one Limiter):\n\n\
             | store | setup (create + acquire each, in turn) | per semaphore | requests per semaphore | heap per held semaphore | steady: keepalive requests/s | steady: other requests in {window:.0} s |\n\
             |---|---|---|---|---|---|---|\n",
            n = self.semaphores
        );
        for (store, s) in Store::ALL.iter().zip(&self.many_semaphores) {
            let _ = writeln!(
                md,
                "| {} | {:.2} s | {} ms | {:.1} | {} | {:.2} | {} |",
                store.label(),
                s.setup.as_secs_f64(),
                ms(s.setup / self.semaphores.max(1) as u32),
                s.requests_per_semaphore,
                kib(s.bytes_per_semaphore),
                s.keepalives_per_second,
                s.other_requests
            );
        }
    }

    fn peer(&self, md: &mut String, goals: &mut Vec<Goal>) {
        let p = &self.peer;
        md.push_str(
            "\n### 7. Peer: kazoo's Semaphore on the same ZooKeeper server, same run\n\n\
             | case | clusterlimit | kazoo | clusterlimit vs kazoo | goal |\n\
             |---|---|---|---|---|\n",
        );
        let faster = ratio(p.kazoo.p50(), p.ours.p50());
        let met = faster.is_some_and(|r| r >= FASTER_THAN_KAZOO);
        goals.push(Goal {
            what: format!("≥ {FASTER_THAN_KAZOO}× faster than kazoo, uncontended"),
            figure: format!("{} faster", times(faster)),
            met,
        });
        let _ = writeln!(
            md,
            "| uncontended acquire + release, p50 / p99 ms | {} | {} | {} faster (p50) | ≥ {FASTER_THAN_KAZOO}×: {} |",
            p50_p99(&p.ours),
            p50_p99(&p.kazoo),
            times(faster),
            verdict(met)
        );
        let _ = writeln!(
            md,
            "| ZooKeeper requests per uncontended acquire + release (server's packet counter) | {:.1} | {:.1} | {} fewer | — |",
            p.ours_packets,
            p.kazoo_packets,
            times((p.ours_packets > 0.0).then(|| p.kazoo_packets / p.ours_packets))
        );
        let c = &self.contention;
        let zk = Store::ALL.iter().position(|s| *s == Store::Zk).unwrap_or(2);
        for ((hold, ours), theirs) in c.holds.iter().zip(&c.runs[zk]).zip(&p.kazoo_contended) {
            let r = (theirs.per_second() > 0.0).then(|| ours.per_second() / theirs.per_second());
            let met = r.is_some_and(|r| r >= THROUGHPUT_VS_KAZOO);
            goals.push(Goal {
                what: format!(
                    "contended throughput ≥ {THROUGHPUT_VS_KAZOO}× kazoo (hold {} ms)",
                    hold.as_millis()
                ),
                figure: times(r),
                met,
            });
            let _ = writeln!(
                md,
                "| contended, hold {} ms: acquisitions/s | {:.0} | {:.0} | {} | ≥ {THROUGHPUT_VS_KAZOO}×: {} |",
                hold.as_millis(),
                ours.per_second(),
                theirs.per_second(),
                times(r),
                verdict(met)
            );
        }
    }
}

/// Replaces the block between this run's markers in `path` (or appends it, or creates the
/// file), leaving the hand-written text around it alone.
pub fn update_file(path: &Path, key: &str, body: &str) -> anyhow::Result<()> {
    let begin = format!("<!-- generated by `cargo bench --bench limiter`: {key} begin -->");
    let end = format!("<!-- generated: {key} end -->");
    let block = format!("{begin}\n{}\n{end}", body.trim_end());
    let old = match std::fs::read_to_string(path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "# Benchmarks\n".to_string(),
        Err(e) => return Err(anyhow::anyhow!("read {}: {e}", path.display())),
    };
    let new = match (old.find(&begin), old.find(&end)) {
        (Some(b), Some(e)) if b < e => format!("{}{block}{}", &old[..b], &old[e + end.len()..]),
        _ => format!("{}\n{block}\n", old.trim_end()),
    };
    std::fs::write(path, new).map_err(|e| anyhow::anyhow!("write {}: {e}", path.display()))
}

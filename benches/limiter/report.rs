//! The results of a run as markdown tables, each goal printed next to its figure as met / not
//! met (goals, not assertions), and the update of the generated block in BENCHMARKS.md.

use crate::contended;
use crate::handoff;
use crate::history::{History, Past, Queued};
use crate::kazoo;
use crate::latency::{CpuPerPair, PairSamples};
use crate::redis_permits::{RedisPermits, Side};
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
/// Issue 18: etcd's acquire+release "flat" as its history and queue grow.
const FLAT_WITHIN: f64 = 1.1;
/// "Independent of the number of waiters": equal within this many requests per acquisition.
const REQUESTS_TOLERANCE: f64 = 0.1;
/// Issue 39: Redis's acquire+release within this many times two raw round trips (SET + DEL).
const REDIS_VS_FLOOR: f64 = 1.2;

/// Everything one run measured. Per-store vectors are in `Store::ALL` order.
#[derive(Debug, Default)]
pub struct Results {
    pub about: String,
    pub etcd_floor: PairSamples,
    pub etcd_txn_floor: PairSamples,
    pub zk_floor: PairSamples,
    /// Uncontended acquire+release.
    pub library: Vec<PairSamples>,
    pub sidecar_memory: PairSamples,
    pub sidecar_etcd: PairSamples,
    pub contention: Contention,
    pub handoff: Vec<handoff::Outcome>,
    pub waiters: usize,
    pub waiters_own: Vec<ManyWaiters>,
    pub waiters_one: Vec<ManyWaiters>,
    pub semaphores: usize,
    pub many_semaphores: Vec<ManySemaphores>,
    pub history: Vec<History>,
    pub queued: Vec<Queued>,
    pub peer: Peer,
    /// Row 8: permits on Redis beside etcd (issue 39), or why it failed.
    pub redis: Option<Result<RedisPermits, String>>,
}

/// Row 3's runs: per store, one outcome per hold.
#[derive(Debug, Default)]
pub struct Contention {
    pub clients: usize,
    pub capacity: u32,
    pub run_for: Duration,
    pub holds: Vec<Duration>,
    pub runs: Vec<Vec<contended::Outcome>>,
}

impl Contention {
    /// The most any semaphore can grant per second with this capacity and hold.
    fn ceiling(&self, hold: Duration) -> Option<f64> {
        (!hold.is_zero()).then(|| f64::from(self.capacity) / hold.as_secs_f64())
    }
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

/// Goals in the order they are met with, and the markdown so far.
#[derive(Default)]
struct Doc {
    md: String,
    goals: Vec<Goal>,
}

impl Doc {
    /// Records a goal; returns the cell printed next to its figure.
    fn goal(&mut self, what: String, figure: String, met: bool, cell: &str) -> String {
        self.goals.push(Goal { what, figure, met });
        format!("{cell}: {}", verdict(met))
    }
}

impl Results {
    pub fn markdown(&self) -> String {
        let mut d = Doc::default();
        d.md.push_str(&self.about);
        self.floor(&mut d);
        self.uncontended(&mut d);
        self.contended(&mut d);
        self.handoffs(&mut d);
        self.requests(&mut d);
        self.scale(&mut d);
        self.peer(&mut d);
        if let Some(r) = &self.redis {
            d.md.push_str(
                "\n### 8. Permits on Redis (issue 39)\n\n\
                 Rows 1–4 on one Redis, beside etcd measured again in the same step.\n",
            );
            match r {
                Ok(r) => redis_rows(&mut d, r),
                Err(e) => {
                    let failed = d.goal(
                        "row 8 (permits on Redis) ran without errors".to_string(),
                        e.clone(),
                        false,
                        "failed",
                    );
                    let _ = writeln!(d.md, "\n{failed}: {e}");
                }
            }
        }
        d.md.push_str("\n### Goals\n\n| goal | figure | |\n|---|---|---|\n");
        goals_table(&mut d);
        d.md
    }

    fn floor(&self, d: &mut Doc) {
        d.md.push_str(
            "\n### 1. Floor: raw writes with the same client library\n\n\
             | store | operations | pair p50 / p99 ms | enter p50 | leave p50 | CPU µs per pair: client / server |\n\
             |---|---|---|---|---|---|\n",
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
            (
                "etcd",
                "reference, not the floor: the Limiter's own enqueue Txn (compare + put + sorted read of the semaphore) sent raw, + delete",
                &self.etcd_txn_floor,
            ),
        ] {
            let _ = writeln!(
                d.md,
                "| {store} | {ops} | {} | {} | {} | {} |",
                p50_p99(&s.pair),
                ms(s.enter.p50()),
                ms(s.leave.p50()),
                cpu_cell(s.cpu, false)
            );
        }
    }

    fn uncontended(&self, d: &mut Doc) {
        d.md.push_str(
            "\n### 2. Uncontended acquire + release\n\n\
             | path | p50 / p99 ms | acquire p50 | release p50 | vs the same store's floor (p50 / p99) | goal | CPU µs per pair: client / sidecar / server |\n\
             |---|---|---|---|---|---|---|\n",
        );
        let floors = [None, Some(&self.etcd_floor), Some(&self.zk_floor)];
        let limits = [None, Some(ETCD_VS_FLOOR), Some(ZK_VS_FLOOR)];
        for (i, store) in Store::ALL.iter().enumerate() {
            let lib = &self.library[i];
            let (vs, goal) = match (floors[i], limits[i]) {
                (Some(f), Some(limit)) => {
                    let r = ratio(lib.pair.p50(), f.pair.p50());
                    let mut vs = format!(
                        "{} / {}",
                        times(r),
                        times(ratio(lib.pair.p99(), f.pair.p99()))
                    );
                    if *store == Store::Etcd {
                        let txn = ratio(lib.pair.p50(), self.etcd_txn_floor.pair.p50());
                        let _ = write!(vs, " ({} the raw Txn + delete)", times(txn));
                    }
                    let goal = d.goal(
                        format!("{} acquire+release ≤ {limit}× floor", store.label()),
                        times(r),
                        r.is_some_and(|r| r <= limit),
                        &format!("≤ {limit}×"),
                    );
                    (vs, goal)
                }
                _ => ("—".to_string(), "—".to_string()),
            };
            let _ = writeln!(
                d.md,
                "| library, {} | {} | {} | {} | {vs} | {goal} | {} |",
                store.label(),
                p50_p99(&lib.pair),
                ms(lib.enter.p50()),
                ms(lib.leave.p50()),
                cpu_cell(lib.cpu, true)
            );
        }
        for (store, sc, lib) in [
            ("memory", &self.sidecar_memory, &self.library[0]),
            ("etcd", &self.sidecar_etcd, &self.library[1]),
        ] {
            let adds = sc.pair.p50().saturating_sub(lib.pair.p50());
            let goal = d.goal(
                format!("sidecar adds ≤ 0.2 ms ({store})"),
                format!("+{} ms", ms(adds)),
                adds <= SIDECAR_ADDS,
                "≤ +0.2 ms",
            );
            let _ = writeln!(
                d.md,
                "| sidecar HTTP (POST + DELETE), {store} | {} | {} | {} | +{} ms over the library on {store} (p50) | {goal} | {} |",
                p50_p99(&sc.pair),
                ms(sc.enter.p50()),
                ms(sc.leave.p50()),
                ms(adds),
                cpu_cell(sc.cpu, true)
            );
        }
    }

    fn contended(&self, d: &mut Doc) {
        let c = &self.contention;
        let _ = write!(
            d.md,
            "\n### 3. Contended throughput: capacity {}, {} clients (each its own Limiter and \
             session), {} s per case\n\n\
             | store | hold | acquisitions/s | ceiling (capacity ÷ hold) | per client min / max | max holders seen |\n\
             |---|---|---|---|---|---|\n",
            c.capacity,
            c.clients,
            c.run_for.as_secs_f64()
        );
        let rows = Store::ALL.iter().zip(&c.runs).flat_map(|(store, runs)| {
            c.holds.iter().zip(runs).map(|(hold, o)| {
                let line = (o.per_second(), &o.per_client, o.max_holders);
                (store.label(), *hold, line)
            })
        });
        let kazoo = c
            .holds
            .iter()
            .zip(&self.peer.kazoo_contended)
            .map(|(hold, k)| {
                let line = (k.per_second(), &k.per_client, k.max_holders);
                ("kazoo (ZooKeeper)", *hold, line)
            });
        for (label, hold, (per_second, per_client, max_holders)) in rows.chain(kazoo) {
            let _ = writeln!(
                d.md,
                "| {label} | {} ms | {per_second:.0} | {} | {} / {} | {max_holders} |",
                hold.as_millis(),
                c.ceiling(hold)
                    .map_or("—".to_string(), |v| format!("{v:.0}")),
                per_client.iter().min().unwrap_or(&0),
                per_client.iter().max().unwrap_or(&0),
            );
        }
    }

    fn handoffs(&self, d: &mut Doc) {
        d.md.push_str(
            "\n### 4. Handoff: holder's release() → the next waiter's acquire() returns\n\n\
             | store | handoff p50 / p99 ms | the holder's own release() p50 | one write (a raw delete) p50 / p99 | raw notification (delete → another raw client's watch fires) p50 / p99 | handoff ÷ one write (p50) | handoff ÷ raw notification (p50) | split by a raw watcher of the semaphore: it sees the delete / the grant returns after that (p50) |\n\
             |---|---|---|---|---|---|---|---|\n",
        );
        for (store, h) in Store::ALL.iter().zip(&self.handoff) {
            let (write, notify, vs_write, vs_notify) = if h.one_write.len() == 0 {
                let none = || "—".to_string();
                (none(), none(), none(), none())
            } else {
                let r = ratio(h.handoff.p50(), h.one_write.p50());
                let goal = d.goal(
                    format!("{} handoff ≤ {HANDOFF_VS_WRITE}× one write", store.label()),
                    times(r),
                    r.is_some_and(|r| r <= HANDOFF_VS_WRITE),
                    &format!("{}, goal ≤ {HANDOFF_VS_WRITE}×", times(r)),
                );
                (
                    p50_p99(&h.one_write),
                    p50_p99(&h.notify),
                    goal,
                    times(ratio(h.handoff.p50(), h.notify.p50())),
                )
            };
            let split = spy_split(h);
            let _ = writeln!(
                d.md,
                "| {} | {} | {} | {write} | {notify} | {vs_write} | {vs_notify} | {split} |",
                store.label(),
                p50_p99(&h.handoff),
                ms(h.release.p50()),
            );
        }
    }

    fn requests(&self, d: &mut Doc) {
        let c = &self.contention;
        let holds: Vec<String> = c
            .holds
            .iter()
            .map(|h| format!("{} ms", h.as_millis()))
            .collect();
        let _ = write!(
            d.md,
            "\n### 5. Requests, from the Limiters' counters\n\n\
             Session keepalives are not counted, nor the watch a Limiter sets up the first time it \
             waits on a semaphore (shown apart).\n\n\
             | store | per acquisition (acquire + release), {} contending clients, hold {} | \
             per acquisition behind {n} waiters (join the tail + release) | per release with {n} waiters, all clients (mean / max) | watch setups: contended runs / per join | goal: independent of the waiters |\n\
             |---|---|---|---|---|---|\n",
            c.clients,
            holds.join(" / "),
            n = self.waiters,
        );
        for (i, store) in Store::ALL.iter().enumerate() {
            let few: Vec<f64> = c.runs[i]
                .iter()
                .map(contended::Outcome::requests_per_acquisition)
                .collect();
            let few_text = few
                .iter()
                .map(|f| format!("{f:.2}"))
                .collect::<Vec<_>>()
                .join(" / ");
            let watches = c.runs[i]
                .iter()
                .map(|o| o.requests.watch.to_string())
                .collect::<Vec<_>>()
                .join(" + ");
            let w = &self.waiters_own[i];
            let many = w.requests_per_enqueue + w.requests_per_release;
            let goal = d.goal(
                format!(
                    "{} requests per acquisition independent of the waiters",
                    store.label()
                ),
                format!(
                    "{few_text} with {} clients, {many:.2} behind {} waiters",
                    c.clients, self.waiters
                ),
                few.iter().all(|f| (f - many).abs() <= REQUESTS_TOLERANCE),
                "equal",
            );
            let _ = writeln!(
                d.md,
                "| {} | {few_text} | {many:.2} | {:.2} / {} | {watches} / {:.2} | {goal} |",
                store.label(),
                w.requests_per_release,
                w.max_requests_per_release,
                w.watches_per_enqueue,
            );
        }
    }

    fn scale(&self, d: &mut Doc) {
        let _ = write!(
            d.md,
            "\n### 6. Scale\n\n\
             One semaphore (capacity 1) with {n} waiters, either as {n} `acquire()` calls of one \
             Limiter or as {n} clients with a Limiter (session, connection) each — all in this one \
             process, so every release's {n} watch events are handled on its 2 cores:\n\n\
             | store | heap per waiting acquire (one Limiter) | heap per waiting client (own Limiter) | connecting and queueing {n} clients | release → grant p50 / p99 ms: {n} waiting in one Limiter | {n} waiting clients | 1 waiting client (row 4) |\n\
             |---|---|---|---|---|---|---|\n",
            n = self.waiters
        );
        for (i, store) in Store::ALL.iter().enumerate() {
            let (one, own) = (&self.waiters_one[i], &self.waiters_own[i]);
            let _ = writeln!(
                d.md,
                "| {} | {} | {} | {:.1} s | {} | {} | {} |",
                store.label(),
                kib(one.bytes_per_waiter),
                kib(own.bytes_per_waiter),
                own.setup.as_secs_f64(),
                p50_p99(&one.handoff),
                p50_p99(&own.handoff),
                p50_p99(&self.handoff[i].handoff)
            );
        }
        let window = self
            .many_semaphores
            .first()
            .map_or(0.0, |s| s.window.as_secs_f64());
        let _ = write!(
            d.md,
            "\n{n} semaphores with one holder each (one Limiter):\n\n\
             | store | setup (create + acquire each, in turn) | per semaphore | requests per semaphore | heap per held semaphore | steady: keepalive requests/s | steady: other requests in {window:.0} s |\n\
             |---|---|---|---|---|---|---|\n",
            n = self.semaphores
        );
        for (store, s) in Store::ALL.iter().zip(&self.many_semaphores) {
            let _ = writeln!(
                d.md,
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
        d.md.push_str(
            "\nOne semaphore's history: uncontended acquire + release on a fresh semaphore, after \
             more acquisitions, and (etcd) after compacting. etcd keeps each released entry's key \
             as a tombstone until it compacts, and a range read of the semaphore walks them; this \
             benchmark's etcd has no automatic compaction (rows 1–2 compact before every round). \
             etcd's past is made of tombstones (entry keys put and deleted in batched Txns in the \
             semaphore's queue range, as released entries leave them), the others' of real \
             acquisitions. etcd's goal is on the ratio over its own floor: a raw put + delete of \
             a key outside the semaphore, timed after each measured pair of both blocks (etcd's \
             own writes slow down after a burst of revisions, and the machine drifts between \
             blocks).\n\n\
             | store | fresh p50 / p99 ms | past acquisitions | after them | after compaction | p50 after / fresh | etcd floor p50 fresh → after ms | after / fresh over the floor | p50 growth per 1,000 past acquisitions | goal |\n\
             |---|---|---|---|---|---|---|---|---|---|\n",
        );
        for (store, h) in Store::ALL.iter().zip(&self.history) {
            let how = match h.how {
                Past::Acquisitions => "acquisitions",
                Past::Tombstones => "tombstones",
            };
            let r = ratio(h.after.p50(), h.fresh.p50());
            let over_floor = h.growth_over_floor();
            let what = format!("{} past acquisitions, over etcd's floor", h.past);
            let goal = flat_goal(d, *store, &what, over_floor);
            let floors = match (&h.floor_fresh, &h.floor_after) {
                (Some(f), Some(a)) => format!("{} → {}", ms(f.p50()), ms(a.p50())),
                _ => "—".to_string(),
            };
            let _ = writeln!(
                d.md,
                "| {} | {} | {} {how} | {} | {} | {} | {floors} | {} | {:+.0} µs | {goal} |",
                store.label(),
                p50_p99(&h.fresh),
                h.past,
                p50_p99(&h.after),
                h.compacted.as_ref().map_or("—".to_string(), p50_p99),
                times(r),
                over_floor.map_or("—".to_string(), |x| times(Some(x))),
                h.growth_per_1000()
            );
        }
        let n = self.queued.first().map_or(0, |q| q.n);
        let _ = write!(
            d.md,
            "\nOne semaphore's queue: uncontended acquire + release of one Limiter on a semaphore \
             of capacity {n} + 1, first with no other entry, then with {n} entries (permits held \
             by another Limiter) ahead of each acquisition.\n\n\
             | store | 0 entries p50 / p99 ms | {n} entries p50 / p99 ms | p50 {n} / 0 | goal |\n\
             |---|---|---|---|---|\n"
        );
        for (store, q) in Store::ALL.iter().zip(&self.queued) {
            let r = ratio(q.behind.p50(), q.empty.p50());
            let goal = flat_goal(d, *store, &format!("{n} entries ahead"), r);
            let _ = writeln!(
                d.md,
                "| {} | {} | {} | {} | {goal} |",
                store.label(),
                p50_p99(&q.empty),
                p50_p99(&q.behind),
                times(r)
            );
        }
    }

    fn peer(&self, d: &mut Doc) {
        let p = &self.peer;
        d.md.push_str(
            "\n### 7. Peer: kazoo's Semaphore on the same ZooKeeper server, same run\n\n\
             | case | clusterlimit | kazoo | clusterlimit vs kazoo | goal |\n\
             |---|---|---|---|---|\n",
        );
        let faster = ratio(p.kazoo.p50(), p.ours.p50());
        let goal = d.goal(
            format!("≥ {FASTER_THAN_KAZOO}× faster than kazoo, uncontended"),
            format!("{} faster", times(faster)),
            faster.is_some_and(|r| r >= FASTER_THAN_KAZOO),
            &format!("≥ {FASTER_THAN_KAZOO}×"),
        );
        let _ = writeln!(
            d.md,
            "| uncontended acquire + release, p50 / p99 ms | {} | {} | {} faster (p50) | {goal} |",
            p50_p99(&p.ours),
            p50_p99(&p.kazoo),
            times(faster),
        );
        let _ = writeln!(
            d.md,
            "| ZooKeeper requests per uncontended acquire + release (the server's packet counter) | {:.1} | {:.1} | {} fewer | — |",
            p.ours_packets,
            p.kazoo_packets,
            times((p.ours_packets > 0.0).then(|| p.kazoo_packets / p.ours_packets))
        );
        let c = &self.contention;
        let zk = Store::ALL.iter().position(|s| *s == Store::Zk).unwrap_or(2);
        for ((hold, ours), theirs) in c.holds.iter().zip(&c.runs[zk]).zip(&p.kazoo_contended) {
            let r = (theirs.per_second() > 0.0).then(|| ours.per_second() / theirs.per_second());
            // A goal above what any semaphore can grant with this capacity and hold.
            let unreachable = c
                .ceiling(*hold)
                .is_some_and(|top| top < THROUGHPUT_VS_KAZOO * theirs.per_second());
            let note = if unreachable {
                format!(
                    " (unreachable: {THROUGHPUT_VS_KAZOO}× kazoo is above the ceiling of {:.0}/s)",
                    c.ceiling(*hold).unwrap_or(0.0)
                )
            } else {
                String::new()
            };
            let goal = d.goal(
                format!(
                    "contended throughput ≥ {THROUGHPUT_VS_KAZOO}× kazoo (hold {} ms)",
                    hold.as_millis()
                ),
                format!("{}{note}", times(r)),
                r.is_some_and(|r| r >= THROUGHPUT_VS_KAZOO),
                &format!("≥ {THROUGHPUT_VS_KAZOO}×"),
            );
            let _ = writeln!(
                d.md,
                "| contended, hold {} ms: acquisitions/s | {:.0} | {:.0} | {}{note} | {goal} |",
                hold.as_millis(),
                ours.per_second(),
                theirs.per_second(),
                times(r),
            );
        }
    }
}

/// `--only-redis-permits`: row 8 alone, its headings one level below a section of
/// BENCHMARKS.md, as printed.
pub fn redis_permits_markdown(r: &RedisPermits) -> String {
    let mut d = Doc::default();
    d.md.push_str(&r.about);
    redis_rows(&mut d, r);
    d.md.push_str("\n#### Targets (issue 39)\n\n| target | figure | |\n|---|---|---|\n");
    goals_table(&mut d);
    d.md
}

fn goals_table(d: &mut Doc) {
    for g in &d.goals {
        let _ = writeln!(d.md, "| {} | {} | {} |", g.what, g.figure, verdict(g.met));
    }
}

/// Row 8's tables: rows 1–2, 3 and 4 on Redis and etcd.
fn redis_rows(d: &mut Doc, r: &RedisPermits) {
    let _ = write!(
        d.md,
        "\n#### Rows 1–2: floor and uncontended acquire + release\n\n\
         Interleaved in {} rounds of {} per path. The floors use the Limiter's client library: \
         etcd-client's put (with a lease) + delete; redis-rs's `SET` + `DEL` of one key on one \
         multiplexed connection (two round trips, what an acquire + release is on Redis: one \
         script call each). Requests per pair are the Limiter's counters (keepalives apart).\n\n\
         | store | path | pair p50 / p99 ms | enter p50 | leave p50 | vs the store's floor (p50 / p99) | goal | requests per pair | CPU µs per pair: client / server |\n\
         |---|---|---|---|---|---|---|---|---|\n",
        r.rounds, r.batch
    );
    for side in Side::BOTH {
        let rows = r.side(side);
        let (floor_ops, limit) = match side {
            Side::Etcd => ("floor: put (with a lease) + delete", ETCD_VS_FLOOR),
            Side::Redis => ("floor: `SET` + `DEL`", REDIS_VS_FLOOR),
        };
        let (f, l) = (&rows.floor, &rows.library);
        let _ = writeln!(
            d.md,
            "| {} | {floor_ops} | {} | {} | {} | — | — | — | {} |",
            side.label(),
            p50_p99(&f.pair),
            ms(f.enter.p50()),
            ms(f.leave.p50()),
            cpu_cell(f.cpu, false)
        );
        let ratio_p50 = ratio(l.pair.p50(), f.pair.p50());
        let what = match side {
            Side::Etcd => format!("etcd acquire+release ≤ {limit}× floor (issue 6), beside Redis"),
            Side::Redis => {
                format!("Redis acquire+release ≤ {limit}× two raw round trips (`SET` + `DEL`)")
            }
        };
        let goal = d.goal(
            what,
            times(ratio_p50),
            ratio_p50.is_some_and(|x| x <= limit),
            &format!("≤ {limit}×"),
        );
        let _ = writeln!(
            d.md,
            "| {} | library: acquire + release | {} | {} | {} | {} / {} | {goal} | {:.2} | {} |",
            side.label(),
            p50_p99(&l.pair),
            ms(l.enter.p50()),
            ms(l.leave.p50()),
            times(ratio_p50),
            times(ratio(l.pair.p99(), f.pair.p99())),
            rows.requests_per_pair,
            cpu_cell(l.cpu, false)
        );
    }
    let (etcd, redis) = (r.side(Side::Etcd), r.side(Side::Redis));
    let _ = writeln!(
        d.md,
        "\nRedis ÷ etcd, p50: floor {}, library {}.",
        times(ratio(redis.floor.pair.p50(), etcd.floor.pair.p50())),
        times(ratio(redis.library.pair.p50(), etcd.library.pair.p50()))
    );
    if !redis.server_time.is_empty() {
        let calls: Vec<String> = redis
            .server_time
            .iter()
            .map(|(c, n, us)| format!("`{c}` {us:.2} µs ({n} calls)"))
            .collect();
        let _ = writeln!(
            d.md,
            "\nRedis's own time per call in these rounds (`INFO commandstats`; `EVALSHA`: the \
             Limiter's enqueue and remove scripts, and its keepalives): {}.",
            calls.join(", ")
        );
    }

    let _ = write!(
        d.md,
        "\n#### Row 3: contended throughput: capacity {}, {} clients (each its own Limiter and \
         session), {} s per case\n\n\
         Cases alternate between the stores (etcd, Redis, at each hold). Requests per acquisition: \
         acquire + release + the reads that decide waiters (on Redis each Limiter's watch reads \
         the semaphore once per message on its channel), from the Limiters' counters without \
         keepalives and watch setups.\n\n\
         | store | hold | acquisitions/s | ceiling (capacity ÷ hold) | per client min / max | max holders seen | requests per acquisition | Redis ÷ etcd, acquisitions/s |\n\
         |---|---|---|---|---|---|---|---|\n",
        r.capacity,
        r.clients,
        r.contended_for.as_secs_f64()
    );
    for (i, hold) in r.holds.iter().enumerate() {
        let per_second = |side| {
            r.side(side)
                .contended
                .get(i)
                .map_or(0.0, contended::Outcome::per_second)
        };
        let vs = {
            let e = per_second(Side::Etcd);
            times((e > 0.0).then(|| per_second(Side::Redis) / e))
        };
        for side in Side::BOTH {
            let Some(o) = r.side(side).contended.get(i) else {
                continue;
            };
            let ceiling = (!hold.is_zero())
                .then(|| f64::from(r.capacity) / hold.as_secs_f64())
                .map_or("—".to_string(), |v| format!("{v:.0}"));
            let _ = writeln!(
                d.md,
                "| {} | {} ms | {:.0} | {ceiling} | {} / {} | {} | {:.2} | {} |",
                side.label(),
                hold.as_millis(),
                o.per_second(),
                o.per_client.iter().min().unwrap_or(&0),
                o.per_client.iter().max().unwrap_or(&0),
                o.max_holders,
                o.requests_per_acquisition(),
                if side == Side::Redis {
                    vs.as_str()
                } else {
                    "—"
                },
            );
        }
    }

    d.md.push_str(
        "\n#### Row 4: handoff: holder's release() → the next waiter's acquire() returns\n\n\
         One write: a raw delete (etcd) or `DEL` (Redis) with the same client library. Raw \
         notification: etcd, a delete → another raw client's watch fires; Redis, a `PUBLISH` → \
         another raw connection's `SUBSCRIBE` gets it (how the permit scripts wake waiters). The \
         split: a raw watcher of the semaphore's queue (etcd) or a subscriber of its channel \
         (Redis) sees the release, then the waiter's grant returns (on Redis after its Limiter \
         has read the semaphore).\n\n\
         | store | handoff p50 / p99 ms | the holder's own release() p50 | one write p50 / p99 | raw notification p50 / p99 | handoff ÷ one write (p50) | handoff ÷ raw notification (p50) | split: the spy sees the release / the grant returns after that (p50) |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for side in Side::BOTH {
        let h = &r.side(side).handoff;
        let split = spy_split(h);
        let _ = writeln!(
            d.md,
            "| {} | {} | {} | {} | {} | {} | {} | {split} |",
            side.label(),
            p50_p99(&h.handoff),
            ms(h.release.p50()),
            p50_p99(&h.one_write),
            p50_p99(&h.notify),
            times(ratio(h.handoff.p50(), h.one_write.p50())),
            times(ratio(h.handoff.p50(), h.notify.p50())),
        );
    }
    let _ = writeln!(
        d.md,
        "\nRedis ÷ etcd, handoff p50: {}.",
        times(ratio(
            redis.handoff.handoff.p50(),
            etcd.handoff.handoff.p50()
        ))
    );
}

/// etcd's goal of issue 18 for a row that adds `what`: acquire+release p50 flat within
/// [`FLAT_WITHIN`]; "—" for the other stores.
/// The handoff split by a spy (a raw watcher or subscriber): when it saw the release, and how
/// long after that the waiter's grant returned (p50); "—" without a spy.
fn spy_split(h: &handoff::Outcome) -> String {
    if h.spy_sees.len() == 0 {
        return "—".to_string();
    }
    format!(
        "{} / +{} ms",
        ms(h.spy_sees.p50()),
        ms(h.grant_after_spy.p50())
    )
}

fn flat_goal(d: &mut Doc, store: Store, what: &str, r: Option<f64>) -> String {
    if store != Store::Etcd {
        return "—".to_string();
    }
    d.goal(
        format!("etcd acquire+release flat with {what} (≤ {FLAT_WITHIN}×)"),
        times(r),
        r.is_some_and(|r| r <= FLAT_WITHIN),
        &format!("≤ {FLAT_WITHIN}×"),
    )
}

/// `client / server` or `client / sidecar / server` CPU µs per pair.
fn cpu_cell(cpu: Option<CpuPerPair>, with_sidecar: bool) -> String {
    match cpu {
        None => "?".to_string(),
        Some(c) if with_sidecar => {
            format!("{:.0} / {:.0} / {:.0}", c.client, c.sidecar, c.servers)
        }
        Some(c) => format!("{:.0} / {:.0}", c.client, c.servers),
    }
}

/// Replaces the block between this run's markers in `path` (or appends it, or creates the
/// file), leaving the hand-written text around it alone.
pub fn update_file(path: &Path, key: &str, body: &str) -> anyhow::Result<()> {
    let begin = format!("<!-- generated by `cargo bench --bench limiter`: {key} begin -->");
    let end = format!("<!-- generated: {key} end -->");
    crate::common::markdown::replace_block(path, &begin, &end, body)
}

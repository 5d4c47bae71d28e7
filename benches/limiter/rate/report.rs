//! The rate part's markdown: the tables, the targets as met / not met, and the header.

use super::fresh::{FreshRow, Who};
use super::hot::HotRow;
use super::idle::IdleRow;
use super::many::ManyRow;
use super::plan::RatePlan;
use super::protocol::{Contender, WorkerReport};
use super::uncontended::CpuPerCall;
use crate::common::machine::{etcd_version, mode, run_lines};
use crate::peers::PeerServers;
use crate::plan::Plan;
use crate::stats::{p50_p99, ratio, times, verdict, Samples};
use crate::stores::Servers;
use std::fmt::Write as _;
use std::time::Duration;

/// Uncontended checks by one worker process (ours on etcd, and each peer).
#[derive(Debug, Clone)]
pub struct PeerUncontended {
    pub who: String,
    pub contender: Contender,
    pub latency: Samples,
}

impl PeerUncontended {
    pub fn new(who: &str, contender: Contender, r: &WorkerReport) -> PeerUncontended {
        let v = r
            .latencies_us
            .iter()
            .map(|&us| Duration::from_micros(us))
            .collect();
        PeerUncontended {
            who: who.to_string(),
            contender,
            latency: Samples::new(v),
        }
    }
}

/// Everything the rate rows measured.
#[derive(Debug, Default)]
pub struct RateResults {
    pub about: String,
    pub plan: RatePlan,
    /// Rows 1–2 in this order: etcd floor, ZooKeeper floor, library on memory, etcd,
    /// ZooKeeper, sidecar HTTP (etcd), sidecar RLS (etcd).
    pub uncontended: Vec<(Samples, CpuPerCall)>,
    pub peer_uncontended: Vec<PeerUncontended>,
    pub hot: Vec<HotRow>,
    /// Row 3b: the hot key with callers that wait `retry_after`.
    pub hot_patient: Vec<HotRow>,
    pub many: Vec<ManyRow>,
    /// Row 4b: fresh keys, closed loop (issue 28).
    pub fresh: Vec<FreshRow>,
    /// Row 4b: memory per idle key.
    pub idle: Option<IdleRow>,
}

impl Default for RatePlan {
    fn default() -> RatePlan {
        RatePlan::new(true)
    }
}

const UNCONTENDED: [(&str, Option<usize>); 7] = [
    ("etcd floor: `Txn` on `mod_revision` + put", None),
    ("ZooKeeper floor: `setData` with version", None),
    ("clusterlimit, memory://", None),
    ("clusterlimit, etcd", Some(0)),
    ("clusterlimit, ZooKeeper", Some(1)),
    ("sidecar HTTP `POST …/check`, etcd", Some(0)),
    ("sidecar RLS `ShouldRateLimit` (gRPC), etcd", Some(0)),
];

/// A share as a percentage.
fn pct(v: f64) -> String {
    format!("{:.1} %", v * 100.0)
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "–".to_string(), f)
}

impl RateResults {
    pub fn markdown(&self) -> String {
        let (mut t, mut t39) = (Targets::default(), Targets::default());
        let mut s = String::new();
        s.push_str(&self.about);
        self.uncontended_md(&mut s, &mut t);
        self.hot_md(&mut s, &mut t, &mut t39);
        self.patient_md(&mut s);
        self.peers_md(&mut s);
        self.many_md(&mut s);
        let mut t28 = Targets::default();
        self.fresh_md(&mut s, &mut t28, &mut t39);
        for (issue, t) in [(17, &t), (28, &t28), (39, &t39)] {
            t.markdown(&mut s, issue);
        }
        s
    }

    /// The rows on Redis alone, with issue 39's targets (`--only-redis`): row 3 on etcd, Redis
    /// and redis-cell, row 5, row 4b on Redis.
    pub fn redis_markdown(&self) -> String {
        let mut s = self.about.clone();
        let (mut t, mut t28, mut t39) =
            (Targets::default(), Targets::default(), Targets::default());
        self.hot_md(&mut s, &mut t, &mut t39);
        self.peers_md(&mut s);
        self.fresh_md(&mut s, &mut t28, &mut t39);
        t39.markdown(&mut s, 39);
        s
    }

    fn uncontended_md(&self, s: &mut String, t: &mut Targets) {
        let _ = writeln!(
            s,
            "\n### Rows 1–2: uncontended admitted check on a cached key\n\n\
             One caller; one key under a quota of {} per second (burst as much): every check \
             admitted and written. p50 / p99 in ms; ratio of p50s to the store's floor.\n\n\
             CPU per call in µs: this client process, the sidecar, the store's server.\n\n\
             | path | p50 / p99 | ratio to floor (p50) | ≤ 1.2× | CPU µs / call: client + sidecar + store |\n|---|---|---|---|---|",
            super::uncontended::ROOMY
        );
        for ((label, floor), (sample, cpu)) in UNCONTENDED.iter().zip(&self.uncontended) {
            let r = floor.and_then(|f| ratio(sample.p50(), self.uncontended.get(f)?.0.p50()));
            let met = r.map(|r| r <= 1.2);
            let _ = writeln!(
                s,
                "| {label} | {} | {} | {} | {:.0} + {:.0} + {:.0} |",
                p50_p99(sample),
                times(r),
                met.map_or("", verdict),
                cpu.client,
                cpu.sidecar,
                cpu.store
            );
            if let (Some(r), Some(met)) = (r, met) {
                t.push(
                    format!("uncontended ≤ 1.2× floor: {label}"),
                    format!("{r:.2}×"),
                    met,
                );
            }
        }
        let _ = writeln!(
            s,
            "\nThe same check in a worker process of each contender (one caller, {} checks, \
             one process alone), p50 / p99 in ms:\n\n| contender | p50 / p99 | clusterlimit (etcd) / it, p50 |\n|---|---|---|",
            self.plan.peer_count
        );
        let ours = self.peer_uncontended.first().map(|p| p.latency.p50());
        for p in &self.peer_uncontended {
            let r = ours.and_then(|o| ratio(o, p.latency.p50()));
            let _ = writeln!(s, "| {} | {} | {} |", p.who, p50_p99(&p.latency), times(r));
            if matches!(p.contender, Contender::RlfEtcd | Contender::LimitsEtcd) {
                if let Some(r) = ours.and_then(|o| ratio(p.latency.p50(), o)) {
                    let what = format!(
                        "≥ 10× faster than {}: uncontended p50, worker processes",
                        p.who
                    );
                    t.push(what, format!("{r:.1}×"), r >= 10.0);
                }
            }
        }
    }

    fn hot_md(&self, s: &mut String, t: &mut Targets, t39: &mut Targets) {
        let p = &self.plan;
        let steady = super::hot::steady_window(p.hot_for);
        let _ = writeln!(
            s,
            "\n### Row 3: one hot key, {} processes × {} callers, closed loop, {:.0} s\n\n\
             GCRA with burst = limit, the default quota (redis-cell the same: `max_burst` = burst − 1); the \
             etcd peers run fixed windows (what they offer). Admitted/s counts the decisions \
             answered from the steady start to the end, divided by that time: GCRA's start is the \
             first admission that brought the admitted total to burst + rate × elapsed (within \
             50 ms of the rate and 1 % of the burst: the burst spent), at least {:.1} s in; fixed \
             windows start after {:.1} s. The cell says when. Requests per admitted and denials without a request are \
             clusterlimit's own counters. Over-admission: the largest excess the interval check \
             found (≤ 0 is none). CPU: the workers' and the store server's, per decision. Latencies \
             are whole µs: 0 is under 1 µs (a denial answered in the process).\n\n\
             | contender | quota/s (burst) | decisions/s | admitted/s (vs quota) | requests / admitted | denials with 0 requests | p50 / p99 ms (admitted only) | over-admission | CPU µs / decision (workers + server s) | errors |\n\
             |---|---|---|---|---|---|---|---|---|---|",
            p.processes,
            p.callers,
            p.hot_for.as_secs_f64(),
            steady.as_secs_f64(),
            steady.as_secs_f64()
        );
        for h in &self.hot {
            let quota = if h.algorithm == "gcra" {
                format!("{} ({})", h.limit, h.burst)
            } else {
                format!("{} ({})", h.limit, h.algorithm)
            };
            let _ = writeln!(
                s,
                "| {} | {quota} | {:.0} | {} | {} | {} | {} ({}) | {} |",
                h.who,
                h.decisions_per_s(),
                steady_cell(h),
                opt(h.requests_per_admitted, |v| format!("{v:.3}")),
                opt(h.local_denial_share, pct),
                p50_p99(&h.latency),
                p50_p99(&h.admitted_latency),
                last_cells(h)
            );
        }
        self.hot_targets(t, t39);
    }

    /// Row 3b: what pacing costs an admitted check when callers do not spin.
    fn patient_md(&self, s: &mut String) {
        if self.hot_patient.is_empty() {
            return;
        }
        let p = &self.plan;
        let _ = writeln!(
            s,
            "\n### Row 3b: the hot key, callers that wait `retry_after`\n\n\
             Row 3's shape ({} processes × {} callers, {:.0} s, burst = limit), but a caller denied \
             with a `retry_after` sleeps that long before its next check, as a well-behaved \
             client does: the latency an admitted check pays for pacing (its join window and \
             write) without {} callers spinning on the same cores as the store. Columns as in \
             row 3.\n\n\
             | contender | quota/s (burst) | decisions/s | admitted/s (vs quota) | requests / admitted | p50 / p99 ms (admitted only) | over-admission | CPU µs / decision (workers + server s) | errors |\n\
             |---|---|---|---|---|---|---|---|---|",
            p.processes,
            p.callers,
            p.hot_for.as_secs_f64(),
            p.processes * p.callers as usize,
        );
        for h in &self.hot_patient {
            let _ = writeln!(
                s,
                "| {}, callers wait | {} ({}) | {:.0} | {} | {} | {} | {} |",
                h.who,
                h.limit,
                h.burst,
                h.decisions_per_s(),
                steady_cell(h),
                opt(h.requests_per_admitted, |v| format!("{v:.3}")),
                p50_p99(&h.admitted_latency),
                last_cells(h)
            );
        }
    }

    /// Row 3's targets: issue 17's into `t17`, issue 39's (ours on Redis) into `t39`.
    fn hot_targets(&self, t17: &mut Targets, t39: &mut Targets) {
        let ours = || {
            self.hot
                .iter()
                .filter(|h| h.contender == Contender::Clusterlimit)
        };
        for h in ours() {
            let at = format!("{} at {}/s", h.who, h.limit);
            let same = |c: Contender, limit: u64| {
                self.hot
                    .iter()
                    .find(|o| o.contender == c && o.limit == limit)
            };
            let on_redis = h.who == super::REDIS;
            let t = if on_redis { &mut *t39 } else { &mut *t17 };
            if let Some(rc) = same(Contender::RedisCell, h.limit) {
                let r = h.decisions_per_s() / rc.decisions_per_s().max(1e-9);
                let goal = if on_redis { 10.0 } else { 1.0 };
                let what = if on_redis {
                    format!(
                        "hot-key decisions/s ≥ 10× redis-cell's ({} × {} callers)",
                        self.plan.processes, self.plan.callers
                    )
                } else {
                    "hot-key decisions/s ≥ redis-cell's".to_string()
                };
                t.push(format!("{what}: {at}"), format!("{r:.2}×"), r >= goal);
            }
            // The etcd peers' targets are issue 17's, for ours on etcd and ZooKeeper.
            for c in [Contender::RlfEtcd, Contender::LimitsEtcd]
                .into_iter()
                .filter(|_| !on_redis)
            {
                if let Some(peer) = same(c, h.limit) {
                    let r = h.decisions_per_s() / peer.decisions_per_s().max(1e-9);
                    t.push(
                        format!("≥ 10× the decisions/s of {}: {at}", peer.who),
                        format!("{r:.1}×"),
                        r >= 10.0,
                    );
                }
            }
            if h.limit == 1_000 {
                if let Some(v) = h.requests_per_admitted {
                    t.push(
                        format!("requests per admitted ≤ 0.5: {at}"),
                        format!("{v:.3}"),
                        v <= 0.5,
                    );
                }
            }
            // "Requests per admitted as on etcd": at most etcd's at the same quota, with 10 %
            // for run-to-run noise (these counts move by a few % between runs of one store).
            let etcd = self.hot.iter().find(|o| {
                o.contender == Contender::Clusterlimit && o.who == "etcd" && o.limit == h.limit
            });
            if let (true, Some(v), Some(e)) = (
                on_redis,
                h.requests_per_admitted,
                etcd.and_then(|e| e.requests_per_admitted),
            ) {
                t.push(
                    format!("requests per admitted ≤ 1.1× etcd's ({e:.3}): {at}"),
                    format!("{v:.3} ({:.2}×)", v / e.max(1e-9)),
                    v <= 1.1 * e,
                );
            }
            if let Some(v) = h.local_denial_share {
                t.push(
                    format!("0 requests for ≥ 90 % of denials: {at}"),
                    pct(v),
                    v >= 0.9,
                );
            }
            let off = (h.steady_admitted_per_s / h.limit as f64 - 1.0).abs();
            if h.burst_spent {
                t.push(
                    format!("admitted within 1 % of the quota: {at}"),
                    pct(off),
                    off <= 0.01,
                );
            } else {
                t.push(
                    format!("admitted within 1 % of the quota: {at}"),
                    "burst not spent in the run".to_string(),
                    false,
                );
            }
            t.push(
                format!("0 over-admission: {at}"),
                format!("{:.2}", h.over.max(0.0)),
                h.over <= 0.0,
            );
            if h.errors > 0 {
                t.push(format!("no errors: {at}"), h.errors.to_string(), false);
            }
        }
    }

    /// Row 5: ours over each peer, hot-key decisions/s at the same quota and callers.
    fn peers_md(&self, s: &mut String) {
        s.push_str(
            "\n### Row 5: clusterlimit ÷ the peers, hot-key decisions/s (same quota, processes, callers)\n\n\
             | quota/s | peer | peer decisions/s | etcd ÷ peer | ZooKeeper ÷ peer | Redis ÷ peer |\n|---|---|---|---|---|---|\n",
        );
        let ours = |store: &str, limit: u64| {
            self.hot
                .iter()
                .find(|h| {
                    h.contender == Contender::Clusterlimit && h.who == store && h.limit == limit
                })
                .map(HotRow::decisions_per_s)
        };
        for p in self
            .hot
            .iter()
            .filter(|h| h.contender != Contender::Clusterlimit)
        {
            let r =
                |o: Option<f64>| opt(o, |o| format!("{:.2}×", o / p.decisions_per_s().max(1e-9)));
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} | {} | {} | {} |",
                p.limit,
                p.who,
                p.decisions_per_s(),
                r(ours("etcd", p.limit)),
                r(ours("ZooKeeper", p.limit)),
                r(ours(super::REDIS, p.limit))
            );
        }
    }

    fn many_md(&self, s: &mut String) {
        let after = self.many.first().map_or(Duration::ZERO, |m| m.left_after);
        let _ = writeln!(
            s,
            "\n### Row 4: many keys\n\n\
             Distinct keys checked once each at an even rate (open loop, at most 256 in flight), \
             quota 100/s burst 10 (a key's state is back to full, its reset time, 10 ms after its \
             check). Keys left: the store's key states of the run, right after the last answer \
             and {:.0} s later; gone: the first poll (every 0.5 s) that found none. Client heap per cached key state: the \
             counting allocator's live bytes after the run over the Limiter's cached key states \
             (on memory:// the store's states are in the same heap).\n\n\
             | store | keys at rate/s | decisions/s | p50 / p99 ms | stored at end | left after {:.0} s | all gone after | cached key states | heap / cached key |\n\
             |---|---|---|---|---|---|---|---|---|",
            after.as_secs_f64(),
            after.as_secs_f64()
        );
        for m in &self.many {
            let _ = writeln!(
                s,
                "| {} | {} at {} | {:.0} | {} | {} | {} | {} | {} | {:.0} B |",
                m.store.label(),
                m.keys,
                m.rate,
                m.decisions_per_s,
                p50_p99(&m.latency),
                m.stored_at_end,
                m.left,
                m.gone_after.map_or_else(
                    || "not within 30 s".to_string(),
                    |d| format!("{:.1} s", d.as_secs_f64())
                ),
                m.cached_keys,
                m.bytes_per_cached_key
            );
        }
    }
}

impl RateResults {
    /// Row 4b alone, with its targets (`--only-fresh-keys`).
    pub fn fresh_markdown(&self) -> String {
        let (mut t28, mut t39) = (Targets::default(), Targets::default());
        let mut s = self.about.clone();
        self.fresh_md(&mut s, &mut t28, &mut t39);
        t28.markdown(&mut s, 28);
        t39.markdown(&mut s, 39);
        s
    }

    /// The fresh-key run of `who` at (processes, callers).
    fn fresh_of(&self, who: Who, processes: usize, callers: u32) -> Option<&FreshRow> {
        self.fresh
            .iter()
            .find(|r| r.who == who && r.processes == processes && r.callers == callers)
    }

    fn fresh_md(&self, s: &mut String, t: &mut Targets, t39: &mut Targets) {
        let _ = writeln!(
            s,
            "\n### Row 4b: many keys at the store's speed (issues 28, 39)\n\n\
             Worker processes × callers in a closed loop, every check of a key never checked \
             before (quota 100/s burst 10: each admitted and written), beside the store's own \
             write of a fresh key by the same client with the same processes and callers, and \
             redis-cell on Redis, in the same run. Ratios: decisions/s and p99 of clusterlimit \
             over its store's floor (etcd: plain `put`; ZooKeeper: `create`); on Redis (issue 39) \
             over redis-cell's `CL.THROTTLE` on the same Redis (one command per key), the Redis \
             floor (`SET key value PX 10010` with the same client, the lifetime of clusterlimit's \
             key) shown against it too. The Redis Cluster row runs on 3 primaries started for it, \
             its target is against clusterlimit on the one Redis. The sidecar rows: \
             one `clusterlimit serve` per worker process, each worker's callers calling its own \
             sidecar (HTTP: one `POST …/check` per decision on kept-alive connections; RLS: one \
             `ShouldRateLimit` of one descriptor per decision, one HTTP/2 connection per caller); \
             their CPU cell is client + sidecar + store, the sidecars' processes apart from the \
             workers'.\n\n\
             | processes × callers | who | decisions/s | ratio to floor (Redis: to redis-cell) | p50 / p99 ms | p99 ratio | store requests / decision | CPU µs / decision: client (+ sidecar) + store | errors |\n\
             |---|---|---|---|---|---|---|---|---|"
        );
        for r in &self.fresh {
            let base = r
                .who
                .compared_with()
                .and_then(|f| self.fresh_of(f, r.processes, r.callers));
            let rate = base.map(|f| r.decisions_per_s() / f.decisions_per_s().max(1.0));
            let p99 = base.and_then(|f| ratio(r.latency.p99(), f.latency.p99()));
            let sidecar = r
                .sidecar_cpu_us_per_decision
                .map_or_else(String::new, |v| format!("{v:.0} + "));
            let _ = writeln!(
                s,
                "| {} × {} | {} | {:.0} | {} | {} | {} | {} | {:.0} + {sidecar}{:.0} | {} |",
                r.processes,
                r.callers,
                r.who.label(),
                r.decisions_per_s(),
                times(rate),
                p50_p99(&r.latency),
                times(p99),
                opt(r.requests_per_decision, |v| format!("{v:.2}")),
                r.client_cpu_us_per_decision,
                r.server_cpu_us_per_decision,
                r.errors
            );
            let shape = format!("{} × {} callers", r.processes, r.callers);
            match (r.who, rate, p99) {
                (Who::OursRedis, Some(rate), Some(p99)) => {
                    let at = format!("{}, {shape}, fresh keys", r.who.label());
                    t39.push(
                        format!("{at}: ≥ 1.0× redis-cell's decisions/s"),
                        format!("{rate:.2}×"),
                        rate >= 1.0,
                    );
                    t39.push(
                        format!("{at}: p99 ≤ 1.5× redis-cell's"),
                        format!("{p99:.2}×"),
                        p99 <= 1.5,
                    );
                    // A fresh key under 100/s burst 10 is admitted once, never more: `fresh::run`
                    // fails on any denial, so over-admission here is 0 by construction; row 3
                    // measures it on a hot key.
                    t39.push(
                        format!("{at}: every check admitted once, no error"),
                        format!("{} errors", r.errors),
                        r.errors == 0,
                    );
                }
                (Who::OursRedisCluster, ..) => {
                    if let Some(one) = self.fresh_of(Who::OursRedis, r.processes, r.callers) {
                        let x = r.decisions_per_s() / one.decisions_per_s().max(1.0);
                        t39.push(
                            format!(
                                "{}, {shape}, fresh keys: ≥ 2.5× clusterlimit's decisions/s on one Redis",
                                r.who.label()
                            ),
                            format!("{x:.2}×"),
                            x >= 2.5,
                        );
                    }
                }
                // Shown against redis-cell; the issue sets them no target.
                (
                    Who::RedisSet | Who::RedisCell | Who::SidecarHttpRedis | Who::SidecarRlsRedis,
                    ..,
                ) => {}
                (_, Some(rate), Some(p99)) => {
                    t.push(
                        format!(
                            "{}, {shape}, fresh keys: ≥ 0.8× the floor's decisions/s",
                            r.who.label()
                        ),
                        format!("{rate:.2}×"),
                        rate >= 0.8,
                    );
                    t.push(
                        format!(
                            "{}, {shape}, fresh keys: p99 ≤ 1.5× the floor's",
                            r.who.label()
                        ),
                        format!("{p99:.2}×"),
                        p99 <= 1.5,
                    );
                }
                _ => {}
            }
        }
        if let Some(idle) = &self.idle {
            s.push_str(&idle.markdown());
        }
    }
}

/// The targets met / not met, in the order found.
#[derive(Default)]
struct Targets(Vec<(String, String, bool)>);

impl Targets {
    fn push(&mut self, what: String, figure: String, met: bool) {
        self.0.push((what, figure, met));
    }

    /// The table "Targets (issue N)"; nothing when there is no target.
    fn markdown(&self, s: &mut String, issue: u32) {
        if self.0.is_empty() {
            return;
        }
        let _ = write!(
            s,
            "\n### Targets (issue {issue})\n\n| target | figure | |\n|---|---|---|\n"
        );
        for (what, figure, met) in &self.0 {
            let _ = writeln!(s, "| {what} | {figure} | {} |", verdict(*met));
        }
    }
}

/// What ran where: the header of the part.
pub fn about(
    plan: &Plan,
    servers: &Servers,
    peers: &PeerServers,
    took: Duration,
    load_before: &str,
) -> String {
    format!(
        "## Rate limits: {n}-node etcd and {n}-node ZooKeeper, {mode}\n\n\
         {run}\
         - etcd {etcd} (`--unsafe-no-fsync`), ZooKeeper {zk} (`forceSync=no`); peers: {peers}\n",
        n = plan.nodes(),
        mode = mode(plan.quick),
        run = run_lines(took, "the rate part", "", load_before),
        etcd = etcd_version(&crate::support::etcd_binary()),
        zk = servers.zk_version(),
        peers = peers.versions(),
    )
}

/// Row 3's admitted/s cell: the steady rate, how far from the quota, from when (and a warning
/// when a GCRA run never spent its burst, so the rate includes the burst's leftover).
fn steady_cell(h: &HotRow) -> String {
    let off = h.steady_admitted_per_s / h.limit as f64 - 1.0;
    let mut cell = format!(
        "{:.1} ({:+.2} %) from {:.2} s",
        h.steady_admitted_per_s,
        off * 100.0,
        h.steady_from.as_secs_f64()
    );
    if !h.burst_spent {
        cell.push_str(", burst not spent");
    }
    cell
}

/// The last three cells of rows 3 and 3b: over-admission, CPU per decision (workers + server
/// seconds), errors.
fn last_cells(h: &HotRow) -> String {
    format!(
        "{:.2} | {:.0} ({:.1} + {:.1}) | {}",
        h.over.max(0.0),
        h.cpu_us_per_decision,
        h.worker_cpu_s,
        h.server_cpu_s,
        h.errors
    )
}

//! The fairness bench's section of BENCHMARKS.md: one table per row, a line per store, each
//! target marked met or not.

use crate::members::{Leave, Members, SIZES, TTL};
use crate::noisy::Noisy;
use crate::plain::Plain;
use crate::plan::Plan;
use crate::shares::{Reserve, Shares};
use crate::stats::{ms, p50_p99, ratio, times, verdict};
use std::fmt::Write as _;
use std::time::Duration;

pub const BEGIN: &str = "<!-- fair bench: begin -->";
pub const END: &str = "<!-- fair bench: end -->";

/// Everything measured on one store.
pub struct StoreRows {
    pub store: String,
    pub noisy: Noisy,
    pub weights: Shares,
    pub reserve: Reserve,
    pub members: Members,
    pub plain: Plain,
}

pub fn markdown(plan: &Plan, about: &str, rows: &[StoreRows]) -> String {
    let mode = crate::common::machine::mode(plan.quick);
    let mut md = format!("## Fair semaphores (issue 41), {mode}\n\n{about}\n");
    noisy_table(&mut md, plan, rows);
    weights_table(&mut md, rows);
    reserve_table(&mut md, rows);
    members_table(&mut md, rows);
    plain_table(&mut md, rows);
    md
}

fn noisy_table(md: &mut String, plan: &Plan, rows: &[StoreRows]) {
    let _ = writeln!(
        md,
        "### Row 1: noisy tenant\n\nCapacity {}, flow A keeps {} acquires queued over 4 Limiters \
         (each released at once), flow B sends one request at a time from a fifth; waits in ms \
         (p50 / p99). A handoff is the mean time a permit takes to pass to the next holder under \
         A's load (capacity ÷ A's grants per second). Target: B's p99 on the fair semaphore ≤ \
         B alone + 2 handoffs. Beside it, A's grants while each of B's fair requests waited \
         (p50 / p99: handoffs B waited, counted, whatever the machine's speed).\n\n\
         | store | B alone | B, fair | B, FIFO | A's grants/s (fair) | handoff | A's grants during B's wait | target |\n\
         |---|---|---|---|---|---|---|---|",
        crate::noisy::CAPACITY,
        plan.noisy_a
    );
    for r in rows {
        let n = &r.noisy;
        let bound = n.alone.p99() + n.handoff * 2;
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.0} | {} | {} / {} | {} (bound {} ms) |",
            r.store,
            p50_p99(&n.alone),
            p50_p99(&n.fair),
            p50_p99(&n.fifo),
            n.a_per_sec,
            ms(n.handoff),
            n.a_during_b.0,
            n.a_during_b.1,
            verdict(n.fair.p99() <= bound),
            ms(bound)
        );
    }
}

fn weights_table(md: &mut String, rows: &[StoreRows]) {
    let _ = writeln!(
        md,
        "\n### Row 2: weights 1:2:5\n\nCapacity {}, three flows of weights 1, 2 and 5 (16 looping \
         acquires each, {} ms holds), each its own Limiter: permits held, time-averaged, and each \
         flow's part of all permits held. Target: each part within ±5% of 1/8, 2/8, 5/8.\n\n\
         | store | w1 | w2 | w5 | parts | target |\n|---|---|---|---|---|---|",
        crate::shares::CAPACITY,
        crate::shares::HOLD.as_millis()
    );
    for r in rows {
        let f = &r.weights.flows;
        let total: f64 = f.iter().map(|(_, v)| v).sum::<f64>().max(1e-9);
        let want = [1.0 / 8.0, 2.0 / 8.0, 5.0 / 8.0];
        let parts: Vec<f64> = f.iter().map(|(_, v)| v / total).collect();
        let met = parts.len() == 3
            && parts
                .iter()
                .zip(want)
                .all(|(got, w)| (got - w).abs() <= 0.05 * w);
        let cells: Vec<String> = f.iter().map(|(_, v)| format!("{v:.2}")).collect();
        let parts: Vec<String> = parts.iter().map(|p| format!("{:.1}%", p * 100.0)).collect();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            r.store,
            cells.join(" | "),
            parts.join(" / "),
            verdict(met)
        );
    }
}

fn reserve_table(md: &mut String, rows: &[StoreRows]) {
    let _ = writeln!(
        md,
        "\n### Row 3: a reserved share, lent and returned\n\nCapacity 8, classes \
         `critical=25%,batch`; batch saturating (16 looping acquires, 20 ms holds). Targets: \
         (1) while critical is idle batch uses all 8: it reaches 8 held at once, and holds ≥ 90% \
         of 8 on average (a permit is free between a release and the next grant); (2) \
         critical's first request is granted within one release: it waits at most one hold (20 \
         ms) beyond its own request's time (B alone in row 1); (3) with both saturating, \
         critical never below its 2 while it has demand: no status read (every 25 ms, the \
         store's view) shows it waiting with fewer than 2 held, and it holds ≥ 2 on average. \
         The in-process samples (every ms) with critical holding < 2 also count a permit passing \
         between two of its holders.\n\n\
         | store | batch while critical idle: mean (peak) | critical's first wait (ms) | batch grants meanwhile | \
         batch / critical, both saturating | in-process samples with critical < 2 | status reads: waiting and < 2 | targets |\n\
         |---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let v = &r.reserve;
        let both: Vec<String> = v
            .both
            .flows
            .iter()
            .map(|(_, x)| format!("{x:.2}"))
            .collect();
        let critical = v.both.flows.get(1).map_or(0.0, |f| f.1);
        let first_ok = v.first_wait <= r.noisy.alone.p99() + crate::shares::HOLD;
        let met = [
            v.lent_peak >= 8 && v.lent >= 0.9 * 8.0,
            first_ok,
            critical >= 2.0 && v.store_below == 0 && v.store_reads > 0,
        ];
        let marks: Vec<&str> = met.iter().map(|&m| verdict(m)).collect();
        let _ = writeln!(
            md,
            "| {} | {:.2} ({}) | {} | {} | {} | {:.1}% | {} of {} | {} |",
            r.store,
            v.lent,
            v.lent_peak,
            ms(v.first_wait),
            v.batch_grants_meanwhile,
            both.join(" / "),
            v.critical_below_min * 100.0,
            v.store_below,
            v.store_reads,
            marks.join(", ")
        );
    }
}

fn members_table(md: &mut String, rows: &[StoreRows]) {
    let per = crate::members::PER_MEMBER;
    let [a, b, c] = SIZES.map(|n| n as u32 * per);
    let _ = writeln!(
        md,
        "\n### Row 4: capacity per live member\n\n`PerMember::new({per}).max(100)`, session TTL \
         {ttl} s (the controller counts every third of it). Members are `clusterlimit run \
         --per-member {per} --session-ttl {ttl}s` processes, each holding one permit while its \
         command runs (on memory://, which lives in one process: Limiters of this process). \
         {} join, {} more join, then {} go away, never the controller (the member that counts): \
         closed (SIGTERM: `run` releases and closes its session; in process `close()`), or \
         killed (SIGKILL: its session has to expire; in process the Limiter is dropped without \
         `close`, and its drop ends the session). Each a sequence of its own; time from the \
         change (the last joiner's command running, the signals sent) until the stored \
         capacity, read every 20 ms, is the new one (and, for the 3 that go, until their \
         announcements are gone from the board: the sessions' end, before the controller's \
         count); joins as close sequence / kill sequence. \
         Target: every step ≤ one session TTL.\n\n\
         | store | members | {} join (→ {a}) | {} more (→ {b}) | {} close (→ {c}) | {} killed (→ {c}) | target |\n\
         |---|---|---|---|---|---|---|",
        SIZES[0],
        SIZES[1] - SIZES[0],
        SIZES[1] - SIZES[2],
        SIZES[0],
        SIZES[1] - SIZES[0],
        SIZES[1] - SIZES[2],
        SIZES[1] - SIZES[2],
        ttl = TTL.as_secs()
    );
    for r in rows {
        let m = &r.members;
        let of = |leave: Leave| m.sequences.iter().find(|s| s.leave == leave);
        let step = |i: usize| -> String {
            let cells: Vec<String> = m.sequences.iter().map(|s| secs(s.steps[i])).collect();
            cells.join(" / ")
        };
        let leaving = |leave: Leave| {
            of(leave).map_or("–".to_string(), |s| {
                format!("{} (sessions gone {})", secs(s.steps[2]), secs(s.gone))
            })
        };
        let missed: Vec<String> = m
            .sequences
            .iter()
            .flat_map(|s| {
                s.steps
                    .iter()
                    .enumerate()
                    .map(move |(i, t)| (s.leave, i, t))
            })
            .filter(|(_, _, t)| !t.is_some_and(|t| t <= TTL))
            .map(|(leave, i, t)| format!("{} {}", step_name(leave, i), secs(*t)))
            .collect();
        let target = if missed.is_empty() {
            verdict(true).to_string()
        } else {
            format!("{}: {}", verdict(false), missed.join(", "))
        };
        let kind = if m.in_process {
            "Limiters in this process"
        } else {
            "processes"
        };
        let _ = writeln!(
            md,
            "| {} | {kind} | {} | {} | {} | {} | {target} |",
            r.store,
            step(0),
            step(1),
            leaving(Leave::Close),
            leaving(Leave::Kill),
        );
    }
}

fn step_name(leave: Leave, i: usize) -> &'static str {
    match (i, leave) {
        (0, Leave::Close) => "3 join (close sequence)",
        (0, Leave::Kill) => "3 join (kill sequence)",
        (1, Leave::Close) => "2 more (close sequence)",
        (1, Leave::Kill) => "2 more (kill sequence)",
        (_, Leave::Close) => "3 close",
        (_, Leave::Kill) => "3 killed",
    }
}

/// Seconds with 2 decimals, or how long it was given when it did not happen.
fn secs(t: Option<Duration>) -> String {
    t.map_or_else(
        || format!("not within {} s", crate::members::GIVE_UP.as_secs()),
        |t| format!("{:.2} s", t.as_secs_f64()),
    )
}

/// The bound of row 5: a fair semaphore used without flows costs what a plain one does.
const PLAIN_BOUND: f64 = 1.10;

fn plain_table(md: &mut String, rows: &[StoreRows]) {
    let _ = writeln!(
        md,
        "\n### Row 5: a fair semaphore without flows beside a plain one\n\nCapacity 8, one \
         caller, acquire + release one after another: a plain semaphore, and a fair one \
         (`Classes::single()`) acquired with no flow, class or weight, each from its own \
         Limiter, in interleaved rounds (the order swapped every round) after one unmeasured \
         batch each; ms per pair (p50 / p99) and store requests per pair (the Limiters' \
         counters, keepalives apart). Target: fair ÷ plain p50 ≤ {PLAIN_BOUND:.2}×.\n\n\
         | store | plain | fair, no flows | fair ÷ plain (p50) | requests per pair, plain / fair | target |\n\
         |---|---|---|---|---|---|"
    );
    for r in rows {
        let p = &r.plain;
        let x = ratio(p.fair.p50(), p.plain.p50());
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.2} / {:.2} | {} |",
            r.store,
            p50_p99(&p.plain),
            p50_p99(&p.fair),
            times(x),
            p.plain_requests,
            p.fair_requests,
            verdict(x.is_some_and(|x| x <= PLAIN_BOUND))
        );
    }
}

//! Row 3's table in the leases bench's section: the pace before, around each kill and after,
//! the units the kills lost, the killed process's unprinted tail and over-admission (the one
//! target: none).

use crate::dip::{after_kill, pace, BACK, HOLD};
use crate::failover::{Outcome, Setup};
use crate::plan::Plan;
use crate::stats::verdict;
use std::fmt::Write as _;

pub fn table(md: &mut String, plan: &Plan, rows: &[(Setup, Outcome)]) {
    let f = &plan.failover;
    let third = f.run.as_secs_f64() / 3.0;
    let _ = writeln!(
        md,
        "\n### Row 3: failover, {} Limiters × {} callers on one key of {}/s\n\n\
         A 3-member etcd started for the row; closed loop as in row 1 for {:.1} s on a key \
         emptied first. At +{third:.1} s the bench SIGKILLs etcd's leader and leaves it down \
         (the two others keep the quorum); at +{:.1} s it SIGKILLs a Limiter process: one \
         Limiter and its callers run in a process of their own (the bench binary started \
         again), the {} others in the bench's process. That process prints its admitted \
         checks per 5 ms bin every millisecond; the bench counts what it read up to the kill. \
         Its admissions after its last print are in no count (unprinted: from that print to \
         the kill, and ~ its admitted/s × that): no one outside the process saw them, as a \
         request a server admits and dies before serving. before: admitted/s \
         from +{:.1} s to the leader's kill (the second half of the time before it: leases \
         grow with the demand they see). Each kill: the dip's length, from the kill until \
         admissions are back, after the slowest 50 ms, at ≥ {BACK} × the reference for {} ms \
         (the leader's: min(before, quota); the Limiter's: the survivors' share of \
         min(the pace between the kills, quota)) (0: no 50 ms under that; not back: not \
         before the next kill or the end), the slowest 50 ms (admitted/s), and \
         admitted/s from the kill until back (–: no dip). after: admitted/s from the \
         second recovery to the end; whole run: admitted/s over the run. failed: checks answered with an error (counted, the \
         caller pauses 5 ms). lost: leased units neither spent nor given back (the Limiters' \
         count) + what the killed Limiter's leases held, as it last reported them (every \
         50 ms; how long before the kill). Over-admission as in row 1. Target: no over-admission; leases off is today's path, shown beside.\n\n\
         | leases | before | leader kill: dip ms / slowest 50 ms / during | \
         Limiter kill: dip ms / slowest 50 ms / during | after | whole run | failed | \
         lost (+ held by the killed, reported … before) | unprinted | \
         over-admission (counted) | target |\n\
         |---|---|---|---|---|---|---|---|---|---|---|",
        f.limiters,
        f.callers,
        f.quota,
        f.run.as_secs_f64(),
        2.0 * third,
        f.limiters.saturating_sub(1),
        third / 2.0,
        HOLD as u64 * crate::bins::WIDTH / 1_000_000,
    );
    for (s, o) in rows {
        line(md, s, o);
    }
}

fn line(md: &mut String, s: &Setup, o: &Outcome) {
    let before = pace(&o.series, o.leader_kill / 2, o.leader_kill);
    // "Back" is judged against what the key can give (a pace above the quota, while the
    // leases catch up with an emptied key, is no steady pace), and after the Limiter's kill
    // against the survivors' share of the pace between the two kills.
    let quota = s.quota as f64;
    let leader = after_kill(&o.series, o.leader_kill, o.limiter_kill, before.min(quota));
    let between = match leader.ms {
        Some(_) if leader.back_at < o.limiter_kill => {
            pace(&o.series, leader.back_at, o.limiter_kill)
        }
        _ => before,
    };
    let survivors = (s.limiters.saturating_sub(1)) as f64 / s.limiters.max(1) as f64;
    let limiter = after_kill(
        &o.series,
        o.limiter_kill,
        o.end,
        between.min(quota) * survivors,
    );
    let after = match limiter.ms {
        Some(_) => format!("{:.0}", pace(&o.series, limiter.back_at, o.end)),
        None => "n/a".to_string(),
    };
    let dip = |d: &crate::dip::Dip| {
        let ms =
            d.ms.map_or_else(|| "not back".to_string(), |ms| format!("{ms:.0}"));
        let during = d
            .during
            .map_or_else(|| "–".to_string(), |p| format!("{p:.0}"));
        format!("{ms} / {:.0} / {during}", d.lowest)
    };
    let x = &o.exactness;
    let _ = writeln!(
        md,
        "| {} | {before:.0} | {} | {} | {after} | {:.0} | {} | {} (+ {}, {:.0} ms) | \
         {:.1} ms, ~{:.0} | {:.0} / {:.0} ({:.1}%) | exact {} |",
        if s.leases { "on" } else { "off" },
        dip(&leader),
        dip(&limiter),
        o.admitted as f64 / o.secs,
        o.errors,
        o.used.rate_lease_lost_units,
        o.held_by_killed,
        o.held_age.as_secs_f64() * 1e3,
        o.unprinted.as_secs_f64() * 1e3,
        o.killed_per_sec * o.unprinted.as_secs_f64(),
        x.interval_excess,
        x.since_drain_excess,
        100.0 * x.counted,
        verdict(x.exact()),
    );
}

//! Scenario 17 (issue 43): a leased hot key while one of its Limiters, in a process of its own
//! (`rate_child.rs`), is SIGKILLed mid-lease, a few times over. The 8 in-process Limiters
//! (16 callers each, leases on) hammer the key throughout; each child hammers it too until it
//! is killed right after it reported a fresh lease. The union of every admission (the
//! children's as they printed them) must never exceed the quota in any interval; the units a
//! dead child held are lost to the key for at most a lease's time, so within that and a
//! margin the others must be back at the quota's pace.

use crate::cluster::{Cluster, Kind};
use crate::rate::{self, Fault, RateCase, CALLERS, LIMITERS, RATIO_FLOOR};
use crate::rate_child::{held, Killed, RateChild};
use crate::rate_leases::{self, LEASE_HOLD};
use crate::rate_load::RateLoad;
use crate::report::{ms, LeaseFigures, Row};
use crate::scenarios::Size;
use crate::workload::NAMESPACE;
use clusterlimit::testing::rate_history::{unix_ns, Admitted};
use std::time::{Duration, Instant};
use tokio::time::sleep;

/// After a kill, the next lease of each other Limiter (asked every ~100 ms) and its write.
const RECOVERY_MARGIN: Duration = Duration::from_millis(200);
/// The stretch after [`LEASE_HOLD`] + [`RECOVERY_MARGIN`] in which the others must admit at
/// least [`RATIO_FLOOR`] of the quota.
const RECOVERED_SPAN: Duration = Duration::from_millis(500);
/// How long a child may take to lease the key.
const LEASE_WAIT: Duration = Duration::from_secs(10);
/// Fresh leases looked at for one with units left, before the row fails.
const KILL_TRIES: usize = 50;

/// Runs scenario 17 on a fresh cluster and returns its row.
pub async fn run(kind: Kind, name: &'static str, size: Size, seed: u64) -> Row {
    let started = Instant::now();
    let mut row = Row::new(kind, name);
    let case = RateCase::LeasedGcra;
    let quota = case.quota();
    let cluster = tokio::task::block_in_place(|| Cluster::start(kind));
    let mut load = RateLoad::start(&cluster, quota, (LIMITERS, CALLERS), true, seed).await;
    let url = cluster.direct_url(NAMESPACE);
    let from = unix_ns();
    sleep(size.phase).await;
    let mut kills = Vec::new();
    for n in 1..=size.rate_child_kills {
        let child = RateChild::spawn(&url, quota, CALLERS, load.log.clone()).await;
        match kill_mid_lease(child, size).await {
            Ok(killed) => {
                note_kill(n, &killed, &mut row);
                kills.push(killed);
            }
            Err(why) => row.fail(format!("child {n}: {why}")),
        }
        let after = LEASE_HOLD + RECOVERY_MARGIN + RECOVERED_SPAN;
        sleep(size.phase.max(after + Duration::from_millis(200))).await;
    }
    let to = unix_ns();
    load.stop().await;
    let faults: Vec<Fault> = kills
        .iter()
        .map(|k| Fault {
            start: k.at,
            end: k.at + (LEASE_HOLD + RECOVERY_MARGIN).as_nanos() as u64,
        })
        .collect();
    let what = "child SIGKILL → its leases' time + the others' next lease";
    rate::conclude(case, &load.log, (&faults, what), (from, to), &mut row);
    let events = load.log.admitted();
    // What a child held when it was killed is lost with it: nobody is left to count it.
    let children = kills
        .iter()
        .map(|k| LeaseFigures {
            lost_units: k.leases.lost_units + held(&k.leases),
            ..k.leases
        })
        .fold(LeaseFigures::default(), add);
    let in_process = load.stats();
    let mine = LeaseFigures {
        from_leases: in_process.rate_lease_admitted,
        leases: in_process.rate_leases,
        leased_units: in_process.rate_leased_units,
        returned_units: in_process.rate_lease_returned_units,
        lost_units: in_process.rate_lease_lost_units,
    };
    rate_leases::judge_figures(add(mine, children), events.len(), &mut row);
    recovery(&events, &kills, &mut row);
    rate_leases::dips(
        &events,
        &faults,
        (rate::LEASED_RATE, None),
        (from, to),
        &mut row,
    );
    row.took = started.elapsed();
    row
}

/// Lets `child` lease the key and run for half a phase, then SIGKILLs it as soon as it
/// reports a fresh lease with units left (spendable for a lease's time yet).
async fn kill_mid_lease(child: RateChild, size: Size) -> Result<Killed, String> {
    let no_lease = || format!("no lease reported within {}", ms(LEASE_WAIT));
    child
        .lease_beyond(0, LEASE_WAIT)
        .await
        .ok_or_else(no_lease)?;
    sleep(size.phase / 2).await;
    for _ in 0..KILL_TRIES {
        let now = child.leases();
        child
            .lease_beyond(now, LEASE_WAIT)
            .await
            .ok_or_else(no_lease)?;
        if child.holding() > 0 {
            return Ok(child.kill().await);
        }
    }
    Err(format!(
        "none of {KILL_TRIES} leases in a row still had units when it was reported"
    ))
}

fn note_kill(n: usize, k: &Killed, row: &mut Row) {
    let l = k.leases;
    let held = held(&l);
    row.note(format!(
        "child {n}: SIGKILLed {} after its lease {} was read, holding {held} leased units then \
         ({} leased, {} admitted from leases, {} given back); {} admissions printed",
        ms(k.leases_age),
        l.leases,
        l.leased_units,
        l.from_leases,
        l.returned_units,
        k.admitted
    ));
}

/// After each kill: what the others admitted in the next second (noted), and in the
/// [`RECOVERED_SPAN`] from a lease's time + [`RECOVERY_MARGIN`] on (at least [`RATIO_FLOOR`]
/// of the quota).
fn recovery(events: &[Admitted], kills: &[Killed], row: &mut Row) {
    let rate = rate::LEASED_RATE as f64;
    let count = |a: u64, b: u64| events.iter().filter(|e| (a..b).contains(&e.start)).count();
    for (n, k) in kills.iter().enumerate() {
        let next_second = count(k.at, k.at + 1_000_000_000);
        let from = k.at + (LEASE_HOLD + RECOVERY_MARGIN).as_nanos() as u64;
        let got = count(from, from + RECOVERED_SPAN.as_nanos() as u64);
        let pace = rate * RECOVERED_SPAN.as_secs_f64();
        row.note(format!(
            "child {}: {next_second} admitted in the second after its kill ({:.2} of the quota), \
             {got} in the {} from +{} ({:.2})",
            n + 1,
            next_second as f64 / rate,
            ms(RECOVERED_SPAN),
            ms(LEASE_HOLD + RECOVERY_MARGIN),
            got as f64 / pace
        ));
        row.check(got as f64 >= RATIO_FLOOR * pace, || {
            format!(
                "child {}: the others admitted {got} in the {} from +{} after its kill, under \
                 {RATIO_FLOOR} of the quota ({pace:.0})",
                n + 1,
                ms(RECOVERED_SPAN),
                ms(LEASE_HOLD + RECOVERY_MARGIN)
            )
        });
    }
}

fn add(a: LeaseFigures, b: LeaseFigures) -> LeaseFigures {
    LeaseFigures {
        from_leases: a.from_leases + b.from_leases,
        leases: a.leases + b.leases,
        leased_units: a.leased_units + b.leased_units,
        returned_units: a.returned_units + b.returned_units,
        lost_units: a.lost_units + b.lost_units,
    }
}

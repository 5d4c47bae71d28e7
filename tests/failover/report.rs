//! One row per (store, scenario): the figures the issue asks for, the checks that failed, and
//! the table printed at the end of the run.

use crate::cluster::Kind;
use std::fmt::Write as _;
use std::time::Duration;

#[derive(Debug)]
pub struct Row {
    pub store: Kind,
    pub scenario: &'static str,
    /// Grants at which more than the capacity was held (must be 0).
    pub violations: usize,
    pub max_held: u32,
    /// Failure (or heal, or restart: see the scenario) → the first new grant, per injection.
    pub recovery: Vec<Duration>,
    /// Fault → a raw client's write succeeds again (the store's own failover), per kill or
    /// restart, measured in the same run.
    pub store_failover: Vec<Duration>,
    /// The liveness judge's longest pause with waiters and no grant: (in all, outside the
    /// fault windows).
    pub longest_pause: Option<(Duration, Duration)>,
    /// Scenario 4: from the partitioned holder's `lost()` to its permits being granted to
    /// another, in ms (negative: granted before `lost()` fired).
    pub margin_ms: Option<f64>,
    pub acquisitions: usize,
    /// Calls that failed (expected in outages), and how many holders saw `lost()`.
    pub failed_calls: usize,
    pub lost: usize,
    /// Scenario-specific figures.
    pub notes: Vec<String>,
    /// Checks that did not hold: the row fails if any.
    pub failures: Vec<String>,
    pub took: Duration,
    /// False for a scenario that does not apply to the store (the notes say why).
    pub applicable: bool,
    /// A rate-limit scenario's figures (its row goes in the rate table).
    pub rate: Option<RateFigures>,
}

/// What a rate-limit scenario measured.
#[derive(Debug, Default)]
pub struct RateFigures {
    /// The history check's result: GCRA's worst interval against its bound, or a window
    /// quota's fullest aligned window against its limit.
    pub exactness: String,
    pub admitted: usize,
    pub denied: u64,
    pub errors: usize,
    /// Admitted ÷ what the quota allows, outside the fault windows.
    pub ratio: Option<f64>,
    pub longest_call: Duration,
    /// A leased scenario's lease counts (all its Limiters).
    pub leases: Option<LeaseFigures>,
}

/// What the leases of a leased rate scenario did (`Limiter::stats()`, summed).
#[derive(Debug, Default, Clone, Copy)]
pub struct LeaseFigures {
    /// Checks admitted from leases.
    pub from_leases: u64,
    pub leases: u64,
    pub leased_units: u64,
    pub returned_units: u64,
    /// Units neither spent nor given back (scenario 17 adds what its killed Limiters held).
    pub lost_units: u64,
}

impl Row {
    pub fn new(store: Kind, scenario: &'static str) -> Row {
        Row {
            store,
            scenario,
            violations: 0,
            max_held: 0,
            recovery: Vec::new(),
            store_failover: Vec::new(),
            longest_pause: None,
            margin_ms: None,
            acquisitions: 0,
            failed_calls: 0,
            lost: 0,
            notes: Vec::new(),
            failures: Vec::new(),
            took: Duration::ZERO,
            applicable: true,
            rate: None,
        }
    }

    /// Records a check: `ok`, or a failure described by `what`.
    pub fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.failures.push(what());
        }
    }

    pub fn fail(&mut self, what: impl Into<String>) {
        self.failures.push(what.into());
    }

    pub fn note(&mut self, what: impl Into<String>) {
        self.notes.push(what.into());
    }

    pub fn passed(&self) -> bool {
        self.failures.is_empty() && self.violations == 0
    }

    fn recovery_cell(&self) -> String {
        p50_max(&self.recovery)
    }

    fn pause_cell(&self) -> String {
        self.longest_pause.map_or("–".into(), |(all, out)| {
            format!("{} / {}", ms(all), ms(out))
        })
    }
}

/// `p50 / max (n=…)` of some durations, `–` if none.
fn p50_max(v: &[Duration]) -> String {
    if v.is_empty() {
        return "–".into();
    }
    let mut v = v.to_vec();
    v.sort();
    let p50 = v[(v.len() - 1) / 2];
    let max = v[v.len() - 1];
    format!("{} / {} (n={})", ms(p50), ms(max), v.len())
}

impl Row {
    fn store_cell(&self) -> String {
        p50_max(&self.store_failover)
    }
}

/// `1234 ms` or `0.8 ms`.
pub fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// The markdown tables of a run (semaphore rows, then rate-limit rows), then each row's notes
/// and failures.
pub fn table(rows: &[Row]) -> String {
    let (rate, semaphore): (Vec<&Row>, Vec<&Row>) = rows.iter().partition(|r| r.rate.is_some());
    let mut out = String::new();
    if !semaphore.is_empty() {
        semaphore_table(&semaphore, &mut out);
    }
    if !rate.is_empty() {
        if !semaphore.is_empty() {
            out.push('\n');
        }
        rate_table(&rate, &mut out);
    }
    notes(rows, &mut out);
    out
}

fn rate_table(rows: &[&Row], out: &mut String) {
    out.push_str(
        "| store | scenario | history check | admitted / denied / errors | \
         admitted ÷ quota outside faults | store's own failover p50 / max | \
         kill → first admitted p50 / max | from leases / leases / units lost | longest call | \
         took | result |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let Some(f) = &r.rate else { continue };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} / {} / {} | {} | {} | {} | {} | {} | {:.1} s | {} |",
            r.store.name(),
            r.scenario,
            f.exactness,
            f.admitted,
            f.denied,
            f.errors,
            f.ratio.map_or("–".into(), |x| format!("{x:.3}")),
            r.store_cell(),
            r.recovery_cell(),
            f.leases.map_or("–".into(), |l| format!(
                "{} / {} / {}",
                l.from_leases, l.leases, l.lost_units
            )),
            ms(f.longest_call),
            r.took.as_secs_f64(),
            if r.passed() { "ok" } else { "FAILED" }
        );
    }
}

fn semaphore_table(rows: &[&Row], out: &mut String) {
    out.push_str(
        "| store | scenario | violations | max held / cap | store's own failover p50 / max | \
         failure → first new grant p50 / max | longest pause: all / outside faults | \
         lost → regrant margin | acquisitions | failed calls | lost | took | result |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        if !r.applicable {
            let _ = writeln!(
                out,
                "| {} | {} | n/a | | | | | | | | | | n/a |",
                r.store.name(),
                r.scenario
            );
            continue;
        }
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} / {} | {} | {} | {} | {} | {} | {} | {} | {:.1} s | {} |",
            r.store.name(),
            r.scenario,
            r.violations,
            r.max_held,
            crate::workload::CAPACITY,
            r.store_cell(),
            r.recovery_cell(),
            r.pause_cell(),
            r.margin_ms.map_or("–".into(), |m| format!("{m:+.0} ms")),
            r.acquisitions,
            r.failed_calls,
            r.lost,
            r.took.as_secs_f64(),
            if r.passed() { "ok" } else { "FAILED" }
        );
    }
}

fn notes(rows: &[Row], out: &mut String) {
    for r in rows {
        if r.notes.is_empty() && r.failures.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\n{} / {}:", r.store.name(), r.scenario);
        for n in &r.notes {
            let _ = writeln!(out, "  - {n}");
        }
        for f in &r.failures {
            let _ = writeln!(out, "  - FAILED: {f}");
        }
    }
}

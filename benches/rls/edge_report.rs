//! The edge rows and the leader faults as markdown (their own section of BENCHMARKS.md).

use crate::edge::{thousands, FaultRun, Row, RESUME_SLACK};
use crate::stats::{ms, verdict};
use std::fmt::Write as _;
use std::time::Duration;

/// The p99 target of one ShouldRateLimit (Envoy's rate limit filter waits 20 ms by default).
pub const P99_TARGET: Duration = Duration::from_millis(20);

/// Everything the edge part measured.
#[derive(Debug, Default)]
pub struct EdgeResults {
    pub about: String,
    pub callers: usize,
    pub connections: usize,
    pub row_for: Duration,
    pub rows: Vec<Row>,
    pub faults: FaultRun,
}

impl EdgeResults {
    pub fn markdown(&self) -> String {
        let mut md = String::from(
            "## Rate limit service at the edge: 3-member etcd, default sidecar settings\n\n",
        );
        md.push_str(&self.about);
        let _ = write!(
            md,
            "\n### {} concurrent `ShouldRateLimit` callers over {} HTTP/2 connections, {} s per row\n\n\
             | keys | quota | calls/s | latency p50 / p99 / max ms | OK / OVER_LIMIT | fail-open: sidecar metric / answers | errors | interval check | admitted ≤ quota | 0 fail-open | p99 ≤ 20 ms |\n\
             |---|---|---|---|---|---|---|---|---|---|---|\n",
            self.callers,
            self.connections,
            self.row_for.as_secs_f64()
        );
        for r in &self.rows {
            let _ = writeln!(
                md,
                "| {} | {} | {:.0} | {} | {} / {} | {} / {} | {} | {} | {} | {} | {} |",
                thousands(u64::from(r.keys)),
                r.rule().label(),
                r.per_second(),
                latency(r),
                r.admitted + r.fail_open_answers,
                r.denied,
                r.counters.policy(),
                r.fail_open_answers,
                r.errors,
                r.window.summary(),
                verdict(r.window.exact()),
                verdict(r.counters.policy() == 0 && r.fail_open_answers == 0),
                verdict(r.latency.p99() <= P99_TARGET),
            );
        }
        let f = &self.faults;
        let r = &f.row;
        let _ = write!(
            md,
            "\n### Leader faults: {} callers on one key, 1,000 per second\n\n\
             {} calls in {:.1} s ({:.0}/s), latency p50 / p99 / max {} ms; OK {} / OVER_LIMIT {}; \
             errors {}; fail-open answers: sidecar metric {}, answers {} ({} before the first \
             fault: {}); interval check of the store's admissions: {} ({}).\n\n\
             \"Store back\" is the first successful raw etcd put after the fault (one probe client \
             per surviving member, 250 ms per attempt, every 10 ms); \"exact again\" is the last \
             fail-open answer of the fault, minus the store's recovery (the policy answered no \
             more from then on); target: no fail-open answer later than the store's recovery + \
             {} ms.\n\n\
             | fault | at s | store back after, ms | fail-open answers | first / last fail-open after the fault, ms | exact again, ms after the store | first exact admission after the store, ms | fail-open later than store + {} ms | target |\n\
             |---|---|---|---|---|---|---|---|---|\n",
            self.callers,
            r.calls,
            r.took.as_secs_f64(),
            r.per_second(),
            latency(r),
            r.admitted + r.fail_open_answers,
            r.denied,
            r.errors,
            r.counters.policy(),
            r.fail_open_answers,
            f.policy_before,
            verdict(f.policy_before == 0),
            r.window.summary(),
            verdict(r.window.exact()),
            RESUME_SLACK.as_millis(),
            RESUME_SLACK.as_millis(),
        );
        for x in &f.faults {
            let opt = |d: Option<Duration>| d.map_or_else(|| "–".to_string(), ms);
            let exact_again = match (x.last_policy, x.store_back) {
                (Some(last), Some(back)) => signed_ms(last, back),
                (None, Some(_)) => "no fail-open".to_string(),
                _ => "–".to_string(),
            };
            let after_store = match (x.first_exact_admission, x.store_back) {
                (Some(first), Some(back)) => signed_ms(first, back),
                _ => "–".to_string(),
            };
            let _ = writeln!(
                md,
                "| {} | {:.1} | {} | {} | {} / {} | {} | {} | {} | {} |",
                x.what,
                x.at.as_secs_f64(),
                x.store_back
                    .map_or_else(|| "never (in 20 s)".to_string(), ms),
                x.policy_answers,
                opt(x.first_policy),
                opt(x.last_policy),
                exact_again,
                after_store,
                x.late_policy,
                verdict(x.met()),
            );
        }
        for row in self.rows.iter().chain([r]) {
            for e in &row.error_samples {
                let _ = writeln!(
                    md,
                    "\nerror ({} keys, {}): {e}",
                    row.keys,
                    row.rule().label()
                );
            }
        }
        md
    }
}

fn latency(r: &Row) -> String {
    format!(
        "{} / {} / {}",
        ms(r.latency.p50()),
        ms(r.latency.p99()),
        ms(r.latency.quantile(1.0))
    )
}

/// `a − b` in ms, signed.
fn signed_ms(a: Duration, b: Duration) -> String {
    let v = (a.as_secs_f64() - b.as_secs_f64()) * 1e3;
    format!("{v:+.0}")
}

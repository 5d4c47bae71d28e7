//! `clusterlimit rate status [NAME [KEY]]`: quotas as a table, or one key's state (a check of
//! cost 0: nothing consumed); `--json` for scripts.

use super::args::RateStatusArgs;
use super::open::{check_key, open_existing, with_limiter};
use crate::common::out::out_line;
use crate::common::quota_print::{decision_json, quota_json};
use crate::common::Failure;
use crate::common::{exit, format_duration, format_wait};
use clusterlimit::{Algorithm, Decision, Quota};
use std::fmt::Write as _;
use std::process::ExitCode;

/// Runs `rate status`.
pub async fn status(a: RateStatusArgs) -> Result<ExitCode, Failure> {
    if let Some(key) = &a.key {
        check_key(key)?;
    }
    let out = with_limiter(&a.store, async |limiter| match (&a.name, &a.key) {
        (Some(name), Some(key)) => {
            let rl = open_existing(limiter, name).await?;
            let d = rl.check_n(key, 0).await.map_err(Failure::from_lib)?;
            if a.json {
                return Ok(decision_json(name, key, 0, &d, "store").to_string());
            }
            Ok(key_line(name, key, &rl.quota(), &d))
        }
        (Some(name), None) => {
            let rl = open_existing(limiter, name).await?;
            Ok(if a.json {
                quota_json(name, &rl.quota()).to_string()
            } else {
                table(&[(name.clone(), rl.quota())])
            })
        }
        _ => {
            let names = limiter.rate_limits().await.map_err(Failure::from_lib)?;
            let mut quotas = Vec::with_capacity(names.len());
            for n in names {
                let rl = open_existing(limiter, &n).await?;
                quotas.push((n, rl.quota()));
            }
            if a.json {
                let all: Vec<_> = quotas.iter().map(|(n, q)| quota_json(n, q)).collect();
                serde_json::to_string_pretty(&all)
                    .map_err(|e| Failure::new(exit::SOFTWARE, format!("encoding JSON: {e}")))
            } else {
                Ok(table(&quotas))
            }
        }
    })
    .await?;
    out_line!("{out}");
    Ok(ExitCode::SUCCESS)
}

/// One key's state for people. With a warm-up, `remaining` is the largest single check that
/// passes, not how many requests of 1 would: a cold key paces them slower, as said.
fn key_line(name: &str, key: &str, quota: &Quota, d: &Decision) -> String {
    let full = format_wait(d.reset_after);
    let next = if d.allowed {
        "a request of 1 would be admitted now".to_string()
    } else {
        format!(
            "a request of 1 would be denied (retry after {})",
            format_wait(d.retry_after.unwrap_or_default())
        )
    };
    if quota.warmup.is_zero() {
        return format!(
            "{name} {key:?}: {} of {} left, full again in {full}; {next}",
            d.remaining, d.limit
        );
    }
    format!(
        "{name} {key:?}: one check of up to {} (of {}) would pass now, full again in {full}; \
         {next}; {}",
        d.remaining,
        d.limit,
        warmup_text(quota)
    )
}

/// What a warm-up does to a key, in the quota's numbers.
fn warmup_text(q: &Quota) -> String {
    let cold = q.limit as f64 / f64::from(q.cold_factor.max(1));
    let cold = format!("{cold:.1}");
    let cold = cold.strip_suffix(".0").unwrap_or(&cold);
    let (w, per) = (format_duration(q.warmup), format_duration(q.period));
    format!(
        "warm-up {w} ×{}: a key idle {w} is cold and admits requests one by one at {cold} per \
         {per}, rising to {} per {per} over {w} of traffic (the key's warmth is not shown)",
        q.cold_factor, q.limit
    )
}

/// One row per rate limit.
fn table(quotas: &[(String, Quota)]) -> String {
    if quotas.is_empty() {
        return "no rate limits".to_string();
    }
    let width = quotas
        .iter()
        .map(|(n, _)| n.len())
        .max()
        .unwrap_or(0)
        .max(10);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<width$}  {:>10}  {:>8}  {:>10}  {:<14}  {:<8}  WARM-UP",
        "RATE LIMIT", "LIMIT", "PER", "BURST", "ALGORITHM", "BAN"
    );
    for (name, q) in quotas {
        let burst = if q.algorithm == Algorithm::Gcra {
            q.burst.to_string()
        } else {
            "-".to_string()
        };
        let ban = if q.ban.is_zero() {
            "-".to_string()
        } else {
            format_duration(q.ban)
        };
        let warm = if q.warmup.is_zero() {
            "-".to_string()
        } else {
            format!("{} ×{}", format_duration(q.warmup), q.cold_factor)
        };
        let _ = writeln!(
            s,
            "{name:<width$}  {:>10}  {:>8}  {burst:>10}  {:<14}  {ban:<8}  {warm}",
            q.limit,
            format_duration(q.period),
            q.algorithm.to_string(),
        );
    }
    // What the columns leave out, one line per limit that has it.
    for (name, q) in quotas {
        let mut more = Vec::new();
        if !q.reserves.is_empty() {
            more.push(format!("reserve {}", q.reserves));
        }
        if q.fair_flows {
            more.push("fair flows (each key shared among the flows checking it)".to_string());
        }
        if !more.is_empty() {
            let _ = writeln!(s, "{name}: {}", more.join("; "));
        }
    }
    s.truncate(s.trim_end().len());
    s
}

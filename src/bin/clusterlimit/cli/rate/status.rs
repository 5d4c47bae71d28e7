//! `clusterlimit rate status [NAME [KEY]]`: quotas as a table, or one key's state (a check of
//! cost 0: nothing consumed); `--json` for scripts.

use super::args::RateStatusArgs;
use super::open::{check_key, open_existing, with_limiter};
use crate::common::out::out_line;
use crate::common::quota_print::{decision_json, quota_json};
use crate::common::Failure;
use crate::common::{exit, format_duration, format_wait};
use clusterlimit::{Algorithm, Quota};
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
            let next = if d.allowed {
                "a request of 1 would be admitted now".to_string()
            } else {
                format!(
                    "a request of 1 would be denied (retry after {})",
                    format_wait(d.retry_after.unwrap_or_default())
                )
            };
            Ok(format!(
                "{name} {key:?}: {} of {} left, full again in {}; {next}",
                d.remaining,
                d.limit,
                format_wait(d.reset_after)
            ))
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
        "{:<width$}  {:>10}  {:>8}  {:>10}  {:<14}  BAN",
        "RATE LIMIT", "LIMIT", "PER", "BURST", "ALGORITHM"
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
        let _ = writeln!(
            s,
            "{name:<width$}  {:>10}  {:>8}  {burst:>10}  {:<14}  {ban}",
            q.limit,
            format_duration(q.period),
            q.algorithm.to_string(),
        );
    }
    s.truncate(s.trim_end().len());
    s
}

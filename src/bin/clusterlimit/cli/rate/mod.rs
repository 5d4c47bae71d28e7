//! `clusterlimit rate check|wait|status|set-quota|reset|charge|refund`: cluster-wide rate
//! limits from the shell, straight on the store (no sidecar). `check` and `wait` exit 0 when admitted and 75
//! (EX_TEMPFAIL) when denied or timed out, so `clusterlimit rate wait nightly "$HOST" --timeout
//! 5m && job` is a fleet-wide cap on how often `job` runs.

mod adjust;
mod args;
mod open;
mod status;
mod wait;

pub use args::RateArgs;

use crate::cli::deadline::Deadline;
use crate::common::out::{err_line, out_line};
use crate::common::quota_print::{decision_json, quota_text};
use crate::common::quota_spec::QuotaParts;
use crate::common::{exit, format_duration, format_wait, Failure};
use args::{CheckArgs, QuotaFlags, RateCommand, ResetArgs, SetQuotaArgs, WaitArgs};
use clusterlimit::Waited;
use clusterlimit::{CheckOptions, Decision, Error, Limiter, Quota, RateLimit};
use open::{check_key, name_error, open_existing, open_stored, with_limiter, with_limiter_by};
use std::process::ExitCode;

/// Runs one `rate` subcommand.
pub async fn rate(args: RateArgs) -> Result<ExitCode, Failure> {
    match args.command {
        RateCommand::Check(a) => check(a).await,
        RateCommand::Wait(a) => wait(a).await,
        RateCommand::Status(a) => status::status(a).await,
        RateCommand::SetQuota(a) => set_quota(a).await,
        RateCommand::Reset(a) => reset(a).await,
        RateCommand::Charge(a) => adjust::adjust(a, false).await,
        RateCommand::Refund(a) => adjust::adjust(a, true).await,
    }
}

/// The quota the flags give, or a usage error naming the flag at fault.
fn quota_of(flags: &QuotaFlags) -> Result<Quota, Failure> {
    quota_of_parts(flags.parts())
}

/// The quota of `parts` (from the flags), or a usage error naming the flag at fault.
fn quota_of_parts(parts: QuotaParts) -> Result<Quota, Failure> {
    let missing = parts.limit.is_none() || parts.period.is_none();
    parts.to_quota().map_err(|e| {
        let flag = match e.field {
            "limit" => "--limit",
            "period" => "--per",
            "burst" => "--burst",
            "algorithm" => "--algorithm",
            "warmup" => "--warmup",
            "cold_factor" => "--cold-factor",
            "reserves" => "--reserve",
            "fair_flows" => "--fair-flows",
            _ => "--ban",
        };
        let hint = if missing {
            " (a quota needs --limit and --per)"
        } else {
            ""
        };
        Failure::usage(format!("{flag}: {}{hint}", e.message))
    })
}

/// Opens `name` for `check`/`wait`; with quota flags, creates it with that quota if absent (an
/// existing limit keeps its stored quota, as a warning says). Absent without a quota: exit 1,
/// as `status NAME`.
pub async fn open(limiter: &Limiter, name: &str, flags: &QuotaFlags) -> Result<RateLimit, Failure> {
    if !flags.any() {
        return open_stored(
            limiter,
            name,
            "give --limit and --per to create it (or `clusterlimit rate set-quota`)",
        )
        .await;
    }
    let quota = quota_of(flags)?;
    match limiter.rate_limit(name, quota).await {
        Ok(rl) => Ok(rl),
        Err(Error::QuotaMismatch { stored, .. }) => {
            err_line!(
                "clusterlimit: rate limit {name:?} exists with quota {}; keeping it \
                 (change it with `clusterlimit rate set-quota`)",
                quota_text(&stored)
            );
            limiter.open_rate_limit(name).await.map_err(name_error)
        }
        Err(e) => Err(name_error(e)),
    }
}

fn check_cost(rl: &RateLimit, cost: u64) -> Result<(), Failure> {
    let quota = rl.quota();
    if cost > quota.max_cost() {
        return Err(Failure::usage(format!(
            "--cost {cost} is above the most rate limit {:?} admits at once ({}: {})",
            rl.name(),
            quota.max_cost(),
            quota_text(&quota)
        )));
    }
    Ok(())
}

/// A decision of `check` or `wait` as JSON, with its class and flow when it has them.
fn check_json(a: &CheckArgs, d: &Decision) -> serde_json::Value {
    let mut v = decision_json(&a.target.name, &a.target.key, a.cost, d, "store");
    if let Some(class) = &a.class {
        v["class"] = serde_json::json!(class);
    }
    if let Some(flow) = &a.flow {
        v["flow"] = serde_json::json!(flow);
    }
    v
}

/// The check's options: its cost, class and flow.
fn check_options(a: &CheckArgs) -> CheckOptions {
    let opts = CheckOptions::new().cost(a.cost);
    let opts = match &a.class {
        Some(class) => opts.class(class),
        None => opts,
    };
    match &a.flow {
        Some(flow) => opts.flow(flow),
        None => opts,
    }
}

/// Prints an admission (JSON or a line) and returns exit 0.
fn admitted(a: &CheckArgs, d: &Decision) -> ExitCode {
    if a.json {
        out_line!("{}", check_json(a, d));
    } else {
        out_line!(
            "admitted: {} {:?} (cost {}), {} of {} left",
            a.target.name,
            a.target.key,
            a.cost,
            d.remaining,
            d.limit
        );
    }
    ExitCode::SUCCESS
}

async fn check(a: CheckArgs) -> Result<ExitCode, Failure> {
    check_key(&a.target.key)?;
    with_limiter(&a.target.store, async |limiter| {
        let rl = open(limiter, &a.target.name, &a.quota).await?;
        check_cost(&rl, a.cost)?;
        let d = rl
            .check_with(&a.target.key, check_options(&a))
            .await
            .map_err(Failure::from_lib)?;
        if d.allowed {
            return Ok(admitted(&a, &d));
        }
        let retry = d.retry_after.unwrap_or_default();
        if a.json {
            out_line!("{}", check_json(&a, &d));
        } else {
            out_line!(
                "denied: {} {:?} (cost {}), retry after {}",
                a.target.name,
                a.target.key,
                a.cost,
                format_wait(retry)
            );
        }
        Ok(ExitCode::from(exit::TIMEOUT))
    })
    .await
}

async fn wait(w: WaitArgs) -> Result<ExitCode, Failure> {
    let a = &w.check;
    check_key(&a.target.key)?;
    // --timeout covers connect, open and the wait (whose checks keep to it: see wait.rs).
    let deadline = Deadline::after(w.timeout);
    with_limiter_by(&a.target.store, deadline, async |limiter| {
        let opening = format!("opening rate limit {:?}", a.target.name);
        let rl = deadline
            .bound(&opening, open(limiter, &a.target.name, &a.quota))
            .await?;
        check_cost(&rl, a.cost)?;
        let options = check_options(a);
        let waited = wait::wait(&rl, &a.target.key, options, deadline.remaining())
            .await
            .map_err(Failure::from_lib)?;
        match waited {
            Waited::Admitted(d) => Ok(admitted(a, &d)),
            // (A never-admitted cost is an error of wait.rs; a plain wait is never stopped.)
            Waited::Denied(d) | Waited::Never(d) => {
                if a.json {
                    out_line!("{}", check_json(a, &d));
                }
                Err(Failure::new(
                    exit::TIMEOUT,
                    format!(
                        "{} {:?} (cost {}) not admitted within {}; nothing consumed{}",
                        a.target.name,
                        a.target.key,
                        a.cost,
                        format_duration(w.timeout.unwrap_or_default()),
                        ban_note(&rl)
                    ),
                ))
            }
            _ => Err(Failure::from_lib(Error::store(
                "the wait ended without an answer",
            ))),
        }
    })
    .await
}

async fn set_quota(a: SetQuotaArgs) -> Result<ExitCode, Failure> {
    if !a.quota.any() {
        return Err(Failure::usage(
            "give the quota fields to set (--limit, --per, --burst, --algorithm, --ban, \
             --warmup, --reserve, --fair-flows)",
        ));
    }
    let name = a.name.as_str();
    let (old, new) = with_limiter(&a.store, async |limiter| {
        let rl = match limiter.open_rate_limit(name).await {
            Ok(rl) => rl,
            Err(Error::NotFound(_)) => match create(limiter, name, &a.quota).await? {
                Created::Now(quota) => return Ok((None, *quota)),
                // Created by someone else meanwhile: change it as any existing limit.
                Created::Meanwhile(rl) => rl,
            },
            Err(e) => return Err(name_error(e)),
        };
        let old = rl.quota();
        let new = if a.replace {
            quota_of(&a.quota)?
        } else {
            quota_of_parts(a.quota.parts().over(&old))?
        };
        if new != old {
            rl.set_quota(new).await.map_err(Failure::from_lib)?;
        }
        Ok((Some(old), new))
    })
    .await?;
    let new_text = quota_text(&new);
    match old {
        None => out_line!("{name}: created with quota {new_text}"),
        Some(old) if old == new => out_line!("{name}: quota unchanged: {new_text}"),
        Some(old) => out_line!("{name}: {} → {new_text}", quota_text(&old)),
    }
    Ok(ExitCode::SUCCESS)
}

/// How `set-quota` found an absent limit.
enum Created {
    /// Created with this quota (boxed: a quota with its reserves is a few hundred bytes).
    Now(Box<Quota>),
    /// Another client created it first: the limit as stored.
    Meanwhile(RateLimit),
}

/// Creates `name` with the quota the flags give (all of it: there is nothing to keep).
async fn create(limiter: &Limiter, name: &str, flags: &QuotaFlags) -> Result<Created, Failure> {
    if flags.limit.is_none() || flags.per.is_none() {
        return Err(Failure::usage(format!(
            "rate limit {name:?} does not exist; creating it needs --limit N and --per DUR"
        )));
    }
    let quota = quota_of(flags)?;
    match limiter.rate_limit(name, quota).await {
        Ok(_) => Ok(Created::Now(Box::new(quota))),
        Err(Error::QuotaMismatch { .. }) => limiter
            .open_rate_limit(name)
            .await
            .map(Created::Meanwhile)
            .map_err(name_error),
        Err(e) => Err(name_error(e)),
    }
}

async fn reset(a: ResetArgs) -> Result<ExitCode, Failure> {
    check_key(&a.target.key)?;
    with_limiter(&a.target.store, async |limiter| {
        let rl = open_existing(limiter, &a.target.name).await?;
        rl.reset(&a.target.key).await.map_err(Failure::from_lib)?;
        out_line!("{} {:?}: reset", a.target.name, a.target.key);
        Ok(ExitCode::SUCCESS)
    })
    .await
}

/// On a quota with a ban, a denial is not free: it starts the ban.
fn ban_note(rl: &RateLimit) -> String {
    let ban = rl.quota().ban;
    if ban.is_zero() {
        return String::new();
    }
    format!(
        ", but the denial started the quota's ban of {}",
        format_duration(ban)
    )
}

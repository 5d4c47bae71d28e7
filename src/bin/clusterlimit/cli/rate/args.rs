//! The grammar of `clusterlimit rate …`.

use crate::cli::numbers::whole;
use crate::cli::store_arg::StoreArg;
use crate::common::parse_duration;
use crate::common::quota_spec::{parse_algorithm, QuotaParts};
use clap::{Args, Subcommand};
use clusterlimit::rate::{COLD_FACTORS, MAX_RATE};
use clusterlimit::{Algorithm, Reserves, MAX_CHARGE};
use std::time::Duration;

/// `clusterlimit rate SUBCOMMAND`.
#[derive(Debug, Args)]
pub struct RateArgs {
    #[command(subcommand)]
    pub command: RateCommand,
}

#[derive(Debug, Subcommand)]
pub enum RateCommand {
    /// Check one request of KEY: exit 0 admitted (and counted), 75 denied (prints when to retry;
    /// nothing consumed, but on a quota with --ban the denial starts the ban).
    Check(CheckArgs),
    /// Wait until a request of KEY is admitted: exit 0 admitted, 75 when --timeout runs out
    /// (nothing consumed, but on a quota with --ban a denial starts the ban).
    Wait(WaitArgs),
    /// Show every rate limit's quota, one limit's, or one key's state (nothing consumed).
    Status(RateStatusArgs),
    /// Set a rate limit's quota for every client (creates the limit if absent); prints the old
    /// quota and the new one.
    ///
    /// Creating a limit needs --limit and --per. On an existing limit, the flags not given keep
    /// their stored values (`--limit 10` alone keeps --per, --algorithm, --ban and a burst set
    /// on purpose; a burst at its default, equal to the limit, follows the new limit), unless
    /// --replace: then the flags are the whole quota, as when creating.
    SetQuota(SetQuotaArgs),
    /// Forget KEY: its next check starts from a full quota (and any ban ends).
    Reset(ResetArgs),
    /// Charge N to KEY after the fact (work whose cost is known only once done: tokens,
    /// bytes, rows), whatever it has left: past it, KEY goes into debt and its checks are
    /// denied until time has paid it off. Prints the balance, debt included.
    Charge(AdjustArgs),
    /// Give N back to KEY (work that cost less than it took), never past a full quota.
    /// Prints the balance.
    Refund(AdjustArgs),
}

impl RateCommand {
    /// `rate` and the subcommand's name as typed.
    pub fn name(&self) -> &'static str {
        match self {
            RateCommand::Check(_) => "rate check",
            RateCommand::Wait(_) => "rate wait",
            RateCommand::Status(_) => "rate status",
            RateCommand::SetQuota(_) => "rate set-quota",
            RateCommand::Reset(_) => "rate reset",
            RateCommand::Charge(_) => "rate charge",
            RateCommand::Refund(_) => "rate refund",
        }
    }

    /// The store URL given.
    pub fn store(&self) -> &str {
        match self {
            RateCommand::Check(a) => &a.target.store.store,
            RateCommand::Wait(a) => &a.check.target.store.store,
            RateCommand::Status(a) => &a.store.store,
            RateCommand::SetQuota(a) => &a.store.store,
            RateCommand::Reset(a) => &a.target.store.store,
            RateCommand::Charge(a) | RateCommand::Refund(a) => &a.store.store,
        }
    }
}

/// A quota on the command line.
#[derive(Debug, Args, Default)]
pub struct QuotaFlags {
    /// Requests admitted per --per, per key.
    #[arg(long, value_name = "N", value_parser = whole::<u64>(1, MAX_RATE).per_hint(), allow_negative_numbers = true)]
    pub limit: Option<u64>,
    /// The period --limit applies to (e.g. 1s, 1m, 1h).
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub per: Option<Duration>,
    /// GCRA only: how many may pass at once from a full quota [default: --limit].
    #[arg(long, value_name = "B", value_parser = whole::<u64>(1, MAX_RATE), allow_negative_numbers = true)]
    pub burst: Option<u64>,
    /// gcra, sliding_window or fixed_window [default: gcra].
    #[arg(long, value_name = "ALGORITHM", value_parser = parse_algorithm)]
    pub algorithm: Option<Algorithm>,
    /// After a denial the key stays denied this long.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub ban: Option<Duration>,
    /// GCRA only: after the key has been idle, ramp its rate from limit / --cold-factor up to
    /// limit over this long (0: no warm-up) [default: none].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub warmup: Option<Duration>,
    /// With --warmup: how much slower a fully cold key goes, 2 to 10 [default: 3].
    #[arg(long, value_name = "N", value_parser = whole::<u32>(u64::from(*COLD_FACTORS.start()), u64::from(*COLD_FACTORS.end())), allow_negative_numbers = true)]
    pub cold_factor: Option<u32>,
    /// A priority class and the units its checks must leave for the others, CLASS=N
    /// (repeat for more; `rate check --class CLASS` checks as that class) [default: none].
    #[arg(long, value_name = "CLASS=N", value_parser = parse_reserve)]
    pub reserve: Vec<(String, u64)>,
    /// Share each key max-min fairly among the flows checking it (`rate check --flow F`):
    /// a flow must leave the others what they are due this period [default: off; set-quota
    /// keeps the stored setting unless given].
    #[arg(long, conflicts_with = "no_fair_flows")]
    pub fair_flows: bool,
    /// Switch --fair-flows off (set-quota: checks' flows are then ignored).
    #[arg(long)]
    pub no_fair_flows: bool,
}

/// `CLASS=N` of `--reserve`.
fn parse_reserve(text: &str) -> Result<(String, u64), String> {
    let (class, units) = text
        .split_once('=')
        .ok_or_else(|| format!("expected CLASS=N (e.g. batch=20), got {text:?}"))?;
    let units = units
        .trim()
        .parse::<u64>()
        .map_err(|_| format!("the reserve of {class:?} must be a whole number, got {units:?}"))?;
    Ok((class.trim().to_string(), units))
}

impl QuotaFlags {
    /// Whether any quota flag was given.
    pub fn any(&self) -> bool {
        self.limit.is_some()
            || self.per.is_some()
            || self.burst.is_some()
            || self.algorithm.is_some()
            || self.ban.is_some()
            || self.warmup.is_some()
            || self.cold_factor.is_some()
            || !self.reserve.is_empty()
            || self.fair_flows
            || self.no_fair_flows
    }

    /// The flags as quota parts (numbers too large for i64 are out of range anyway).
    pub fn parts(&self) -> QuotaParts {
        let num = |n: Option<u64>| n.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        QuotaParts {
            limit: num(self.limit),
            period: self.per,
            burst: num(self.burst),
            algorithm: self.algorithm,
            ban: self.ban,
            warmup: self.warmup,
            cold_factor: self.cold_factor.map(i64::from),
            reserves: (!self.reserve.is_empty()).then(|| {
                self.reserve
                    .iter()
                    .fold(Reserves::new(), |r, (class, units)| r.with(class, *units))
            }),
            fair_flows: self.fair(),
        }
    }

    /// `--fair-flows` (true), `--no-fair-flows` (false), or neither.
    pub fn fair(&self) -> Option<bool> {
        match (self.fair_flows, self.no_fair_flows) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        }
    }
}

#[derive(Debug, Args)]
#[command(mut_arg("name", |a| a.help("Rate limit to check")))]
#[command(mut_arg("key", |a| a.help("The key counted (a user, a host, a job…): any UTF-8, 1-512 bytes")))]
pub struct CheckArgs {
    #[command(flatten)]
    pub target: KeyArgs,
    /// How much this request counts.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = whole::<u64>(1, MAX_RATE), allow_negative_numbers = true)]
    pub cost: u64,
    /// Check as this priority class of the quota (see --reserve): admitted only if the
    /// class's reserve is still left after it [default: none, the whole quota].
    #[arg(long, value_name = "CLASS")]
    pub class: Option<String>,
    /// Check as this flow (a tenant, a user; 1-128 bytes): on a quota with --fair-flows it
    /// must leave the other flows of the key their due; ignored on other quotas
    /// [default: none, one flow for all checks without one].
    #[arg(long, value_name = "F")]
    pub flow: Option<String>,
    /// With --limit and --per: create the limit with this quota if absent (an existing limit
    /// keeps its stored quota).
    #[command(flatten)]
    pub quota: QuotaFlags,
    /// Print the decision as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct WaitArgs {
    #[command(flatten)]
    pub check: CheckArgs,
    /// Give up after this long (exit 75, nothing consumed; but on a quota with --ban, a denial
    /// starts the ban); default: wait as long as it takes.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct RateStatusArgs {
    #[command(flatten)]
    pub store: StoreArg,
    /// Rate limit to show; every limit without it.
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
    /// Key whose state to show (a peek: nothing consumed).
    #[arg(value_name = "KEY", requires = "name")]
    pub key: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SetQuotaArgs {
    #[command(flatten)]
    pub store: StoreArg,
    /// Rate limit to create or change.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The quota: every flag when creating the limit (--limit and --per required); on an
    /// existing one, the flags given change those fields and the others keep their values.
    #[command(flatten)]
    pub quota: QuotaFlags,
    /// The flags are the whole quota (--limit and --per required): fields not given take
    /// their defaults instead of keeping the stored values.
    #[arg(long, requires_all = ["limit", "per"])]
    pub replace: bool,
}

#[derive(Debug, Args)]
#[command(mut_arg("name", |a| a.help("Rate limit of the key")))]
#[command(mut_arg("key", |a| a.help("Key to forget")))]
pub struct ResetArgs {
    #[command(flatten)]
    pub target: KeyArgs,
}

/// `rate charge|refund STORE NAME KEY N` (KeyArgs' fields, declared here so N comes last).
#[derive(Debug, Args)]
pub struct AdjustArgs {
    #[command(flatten)]
    pub store: StoreArg,
    /// Rate limit of the key.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The key charged or given back to: any UTF-8, 1-512 bytes.
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The units charged or given back, 0 to 1000000000.
    #[arg(value_name = "N", value_parser = whole::<u64>(0, MAX_CHARGE), allow_negative_numbers = true)]
    pub units: u64,
    /// Print the balance as JSON.
    #[arg(long)]
    pub json: bool,
}

/// One key of one rate limit in a store: `STORE NAME KEY`, what `check`, `wait` and `reset`
/// act on. Each command says what NAME and KEY are to it (`mut_arg`).
#[derive(Debug, Args)]
pub struct KeyArgs {
    #[command(flatten)]
    pub store: StoreArg,
    #[arg(value_name = "NAME")]
    pub name: String,
    #[arg(value_name = "KEY")]
    pub key: String,
}

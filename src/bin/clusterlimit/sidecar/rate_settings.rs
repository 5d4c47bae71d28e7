//! The sidecar's rate-limit settings: which header fields rate answers carry, what checks answer
//! while the store is down (and how long a check may wait for it), whether hot keys are served
//! from leases, and the `[[rate_limits]]` created at start. Flags override the config file's
//! keys of the same name.

use super::header_mode::HeaderMode;
use crate::common::quota_print::quota_text;
use crate::common::quota_spec::{duration_text, FieldError, QuotaParts};
use crate::common::{format_duration, parse_duration, Failure};
use clap::Args;
use clusterlimit::{Algorithm, Limiter, Quota, RateLimit, Reserves, StoreDownPolicy};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Default bound on one store check of a rate limit: past it the store counts as down and the
/// store-down policy answers.
pub const DEFAULT_RATE_STORE_TIMEOUT: Duration = Duration::from_secs(1);

/// The rate-limit flags of `serve`.
#[derive(Debug, Args, Default)]
pub struct RateFlags {
    /// RateLimit header fields on rate answers: ietf, legacy (X-RateLimit-*), both or off
    /// [default: ietf].
    #[arg(long, value_name = "MODE", value_parser = HeaderMode::parse_http)]
    pub rate_limit_headers: Option<HeaderMode>,
    /// What rate checks answer while the store is down: fail_open, fail_closed or local:N
    /// (this sidecar counts alone at limit/N) [default: fail_open].
    #[arg(long, value_name = "POLICY", value_parser = parse_policy)]
    pub rate_store_down: Option<StoreDownPolicy>,
    /// A rate check the store has not answered within this long counts as the store down
    /// [default: 1s].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub rate_store_timeout: Option<Duration>,
    /// Most reservations (`POST /v1/ratelimits/{name}/reservations`) open at once; past it a
    /// reservation answers 503 and takes nothing [default: 100000].
    #[arg(long, value_name = "N", value_parser = parse_max_reservations, allow_negative_numbers = true)]
    pub max_reservations: Option<u64>,
    /// Serve hot keys from leased units: a key checked 200+ times a second through this
    /// sidecar takes a slice of its units in one store write and admits from it locally (about
    /// 10 writes a second per key, never over the quota). Read at start only [default: off].
    #[arg(long)]
    pub hot_key_leases: bool,
    /// Decide hot keys locally, approximately: a key checked 200+ times a second through this
    /// sidecar is decided on this sidecar's share of the quota and reported every ~100 ms. Never
    /// waits on the store, but may over-admit (about 5% at most, measured); not with
    /// --hot-key-leases. Read at start only [default: off].
    #[arg(long)]
    pub approximate_hot_keys: bool,
}

/// The most `max_reservations` may be: a million open reservations (about 500 MB: each
/// takes about 500 bytes, measured).
pub const MAX_RESERVATIONS: u64 = 1_000_000;

/// Default of `max_reservations`.
pub const DEFAULT_MAX_RESERVATIONS: u64 = 100_000;

/// `--max-reservations N`: a whole number from 1 to [`MAX_RESERVATIONS`].
fn parse_max_reservations(s: &str) -> Result<u64, String> {
    s.trim()
        .parse::<u64>()
        .ok()
        .filter(|n| (1..=MAX_RESERVATIONS).contains(n))
        .ok_or_else(|| format!("must be a whole number from 1 to {MAX_RESERVATIONS}, got {s}"))
}

fn parse_policy(s: &str) -> Result<StoreDownPolicy, String> {
    s.parse().map_err(|e: clusterlimit::Error| e.to_string())
}

/// The config file's rate-limit keys.
#[derive(Debug, Default)]
pub struct RateFileKeys {
    pub rate_limit_headers: Option<String>,
    pub rate_store_down: Option<String>,
    pub rate_store_timeout: Option<String>,
    pub max_reservations: Option<i64>,
    pub hot_key_leases: Option<bool>,
    pub approximate_hot_keys: Option<bool>,
}

/// The rate-limit settings in force.
#[derive(Debug, Clone)]
pub struct RateSettings {
    pub headers: HeaderMode,
    pub store_down: StoreDownPolicy,
    pub store_timeout: Duration,
    /// Most reservations open at once on the HTTP API.
    pub max_reservations: usize,
    /// Hot keys served from leases (`LimiterBuilder::hot_key_leases`): a Limiter build
    /// option, so set at start only.
    pub hot_key_leases: bool,
    /// Hot keys decided locally, approximately (`LimiterBuilder::approximate_hot_keys`): a
    /// Limiter build option, so set at start only; never with `hot_key_leases`.
    pub approximate_hot_keys: bool,
}

impl RateSettings {
    /// Flags over the file's keys over the defaults; errors name the key.
    pub fn resolve(flags: RateFlags, file: RateFileKeys) -> Result<RateSettings, Failure> {
        let headers = match (flags.rate_limit_headers, file.rate_limit_headers) {
            (Some(m), _) => m,
            (None, Some(t)) => HeaderMode::parse_http(&t)
                .map_err(|e| Failure::usage(format!("config rate_limit_headers: {e}")))?,
            (None, None) => HeaderMode::HTTP_DEFAULT,
        };
        let store_down = match (flags.rate_store_down, file.rate_store_down) {
            (Some(p), _) => p,
            (None, Some(t)) => parse_policy(&t)
                .map_err(|e| Failure::usage(format!("config rate_store_down: {e}")))?,
            (None, None) => StoreDownPolicy::default(),
        };
        let store_timeout = match (flags.rate_store_timeout, file.rate_store_timeout) {
            (Some(d), _) => d,
            (None, Some(t)) => duration_text("rate_store_timeout", &t)
                .map_err(|e| Failure::usage(format!("config {}", e.message)))?,
            (None, None) => DEFAULT_RATE_STORE_TIMEOUT,
        };
        if store_timeout < Duration::from_millis(1)
            || store_timeout > clusterlimit::Limiter::MAX_REQUEST_TIMEOUT
        {
            return Err(Failure::usage(format!(
                "rate_store_timeout must be from 1ms to {}, got {}",
                format_duration(clusterlimit::Limiter::MAX_REQUEST_TIMEOUT),
                format_duration(store_timeout)
            )));
        }
        let max_reservations = max_reservations(flags.max_reservations, file.max_reservations)?;
        // The flags can only turn them on, as the sidecar's other switches.
        let hot_key_leases = flags.hot_key_leases || file.hot_key_leases.unwrap_or(false);
        let approximate_hot_keys =
            flags.approximate_hot_keys || file.approximate_hot_keys.unwrap_or(false);
        if hot_key_leases && approximate_hot_keys {
            return Err(Failure::usage(HOT_KEY_MODES_CLASH));
        }
        Ok(RateSettings {
            headers,
            store_down,
            store_timeout,
            max_reservations,
            hot_key_leases,
            approximate_hot_keys,
        })
    }
}

/// Both hot-key modes asked for: what is wrong and what to do.
const HOT_KEY_MODES_CLASH: &str = "hot_key_leases and approximate_hot_keys are both on, but a \
     hot key is served one way only: from leased units (exact, never over the quota) or decided \
     locally (approximate, may over-admit); turn one of them off (config key or \
     --hot-key-leases / --approximate-hot-keys flag)";

/// `max_reservations`: the flag over the file's key over the default, 1 to
/// [`MAX_RESERVATIONS`].
fn max_reservations(flag: Option<u64>, file: Option<i64>) -> Result<usize, Failure> {
    let n = match (flag, file) {
        (Some(n), _) => n,
        (None, Some(n)) => u64::try_from(n)
            .ok()
            .filter(|n| (1..=MAX_RESERVATIONS).contains(n))
            .ok_or_else(|| {
                Failure::usage(format!(
                    "config max_reservations must be from 1 to {MAX_RESERVATIONS}, got {n}"
                ))
            })?,
        (None, None) => DEFAULT_MAX_RESERVATIONS,
    };
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// A `[[rate_limits]]` entry: created at start if absent; an existing limit keeps its stored
/// quota (changes are explicit: `PUT`, `rate set-quota`), as `[[semaphores]]` do.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclaredRate {
    pub name: String,
    pub limit: i64,
    pub period: String,
    pub burst: Option<i64>,
    pub algorithm: Option<Algorithm>,
    pub ban: Option<String>,
    pub warmup: Option<String>,
    pub cold_factor: Option<i64>,
    /// Priority classes and the units each must leave (`reserves = { batch = 20 }`).
    pub reserves: Option<BTreeMap<String, i64>>,
    /// Each key shared max-min fairly among its flows (`fair_flows = true`; not with a warm-up).
    pub fair_flows: Option<bool>,
}

impl DeclaredRate {
    /// The declared quota, or the field at fault.
    pub fn quota(&self) -> Result<Quota, FieldError> {
        QuotaParts {
            limit: Some(self.limit),
            period: Some(duration_text("period", &self.period)?),
            burst: self.burst,
            algorithm: self.algorithm,
            ban: self
                .ban
                .as_deref()
                .map(|b| duration_text("ban", b))
                .transpose()?,
            warmup: self
                .warmup
                .as_deref()
                .map(|w| duration_text("warmup", w))
                .transpose()?,
            cold_factor: self.cold_factor,
            reserves: self.reserves().map(Some)?,
            fair_flows: self.fair_flows,
        }
        .to_quota()
    }

    /// The declared reserves (none: `None`), each a whole number of 0 or more.
    fn reserves(&self) -> Result<Reserves, FieldError> {
        let mut reserves = Reserves::new();
        for (class, units) in self.reserves.iter().flatten() {
            let Ok(units) = u64::try_from(*units) else {
                return Err(FieldError {
                    field: "reserves",
                    message: format!(
                        "reserve of class {class:?} must be a whole number of 0 or more, got {units}"
                    ),
                });
            };
            reserves = reserves.with(class, units);
        }
        Ok(reserves)
    }
}

/// Checks every declared limit without connecting: `(field, message)` of the first at fault,
/// e.g. `("rate_limits[1].burst", …)`.
pub fn check_declared(declared: &[DeclaredRate]) -> Result<(), (String, String)> {
    for (i, d) in declared.iter().enumerate() {
        clusterlimit::validate::name(&d.name)
            .map_err(|e| (format!("rate_limits[{i}].name"), e.to_string()))?;
        d.quota()
            .map_err(|e| (format!("rate_limits[{i}].{}", e.field), e.message))?;
        if declared[..i].iter().any(|o| o.name == d.name) {
            return Err((
                format!("rate_limits[{i}].name"),
                format!("rate limit {:?} is declared twice", d.name),
            ));
        }
    }
    Ok(())
}

/// One line per declared limit for `serve --check-config`.
pub fn describe(settings: &RateSettings, declared: &[DeclaredRate]) -> String {
    let limits = if declared.is_empty() {
        "-".to_string()
    } else {
        declared
            .iter()
            .map(|d| match d.quota() {
                Ok(q) => format!("{} ({q})", d.name),
                Err(_) => d.name.clone(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "rate_limits  {limits}\n\
         rate_headers {}\n\
         rate_store   down: {}, timeout {}\n\
         rate_leases  {}\n\
         rate_approx  {}\n",
        settings.headers,
        settings.store_down,
        format_duration(settings.store_timeout),
        if settings.hot_key_leases {
            "on: hot keys served from leased units (hot_key_leases)"
        } else {
            "off (hot_key_leases = true to serve hot keys from leased units)"
        },
        approx_line(settings.approximate_hot_keys)
    )
}

/// The `rate_approx` line of `--check-config`: the mode, and plainly that it may over-admit.
fn approx_line(on: bool) -> &'static str {
    if on {
        "on: hot keys decided locally, reported every ~100 ms (approximate_hot_keys); \
         may over-admit, up to about 5% measured; hot_key_leases is the exact switch"
    } else {
        "off (approximate_hot_keys = true to decide hot keys locally: never waits on the \
         store, may over-admit up to about 5%; hot_key_leases is the exact switch)"
    }
}

/// Creates the declared limits that are absent and opens them all. A limit stored with another
/// quota keeps it (with a warning), as a declared semaphore keeps its stored capacity.
pub async fn declare(
    limiter: &Limiter,
    declared: &[DeclaredRate],
) -> Result<Vec<RateLimit>, Failure> {
    let mut out = Vec::with_capacity(declared.len());
    for d in declared {
        let quota = d
            .quota()
            .map_err(|e| Failure::usage(format!("rate_limits {}: {}", d.name, e.message)))?;
        let rl = match limiter.rate_limit(&d.name, quota).await {
            Ok(rl) => {
                tracing::info!(rate_limit = %d.name, %quota, "declared");
                rl
            }
            Err(clusterlimit::Error::QuotaMismatch { stored, .. }) => {
                tracing::warn!(
                    rate_limit = %d.name, stored = %quota_text(&stored), configured = %quota_text(&quota),
                    "rate limit exists with another quota; keeping the stored one"
                );
                limiter
                    .open_rate_limit(&d.name)
                    .await
                    .map_err(Failure::from_lib)?
            }
            Err(e) => return Err(Failure::from_lib(e)),
        };
        out.push(rl);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_limits_are_checked_by_index() {
        let parse = |t: &str| -> Vec<DeclaredRate> {
            #[derive(Deserialize)]
            struct F {
                rate_limits: Vec<DeclaredRate>,
            }
            toml::from_str::<F>(t).unwrap().rate_limits
        };
        let ok = parse(
            "[[rate_limits]]\nname = \"api\"\nlimit = 5\nperiod = \"1s\"\nburst = 2\n\
             [[rate_limits]]\nname = \"login\"\nlimit = 5\nperiod = \"1m\"\nalgorithm = \"fixed_window\"\nban = \"10m\"\n",
        );
        assert_eq!(check_declared(&ok), Ok(()));
        let bad = parse(
            "[[rate_limits]]\nname = \"a\"\nlimit = 5\nperiod = \"1s\"\n\
             [[rate_limits]]\nname = \"b\"\nlimit = 5\nperiod = \"1s\"\nalgorithm = \"fixed_window\"\nburst = 2\n",
        );
        assert_eq!(check_declared(&bad).unwrap_err().0, "rate_limits[1].burst");
        let twice = parse(
            "[[rate_limits]]\nname = \"a\"\nlimit = 5\nperiod = \"1s\"\n\
             [[rate_limits]]\nname = \"a\"\nlimit = 5\nperiod = \"1s\"\n",
        );
        assert_eq!(check_declared(&twice).unwrap_err().0, "rate_limits[1].name");
        let warm = parse(
            "[[rate_limits]]\nname = \"a\"\nlimit = 5\nperiod = \"1s\"\nwarmup = \"30s\"\ncold_factor = 4\n",
        );
        let q = warm[0].quota().unwrap();
        assert_eq!((q.warmup, q.cold_factor), (Duration::from_secs(30), 4));
        let cold = parse(
            "[[rate_limits]]\nname = \"a\"\nlimit = 5\nperiod = \"1s\"\nwarmup = \"30s\"\ncold_factor = 40\n",
        );
        assert_eq!(
            check_declared(&cold).unwrap_err().0,
            "rate_limits[0].cold_factor"
        );
    }

    #[test]
    fn declared_reserves_are_checked_and_named() {
        let parse = |t: &str| -> Vec<DeclaredRate> {
            #[derive(Deserialize)]
            struct F {
                rate_limits: Vec<DeclaredRate>,
            }
            toml::from_str::<F>(t).unwrap().rate_limits
        };
        let entry = "[[rate_limits]]\nname = \"api\"\nlimit = 100\nperiod = \"1m\"\n";
        let ok = parse(&format!(
            "{entry}reserves = {{ batch = 20, critical = 0 }}\n"
        ));
        assert_eq!(check_declared(&ok), Ok(()));
        let q = ok[0].quota().unwrap();
        assert_eq!(
            q.reserves.iter().collect::<Vec<_>>(),
            [("batch", 20), ("critical", 0)]
        );
        // No reserves: none, as before.
        assert!(parse(entry)[0].quota().unwrap().reserves.is_empty());
        for (bad, why) in [
            (
                "{ batch = -1 }",
                "must be a whole number of 0 or more, got -1",
            ),
            ("{ batch = 100 }", "batch"),
            ("{ \"a b\" = 1 }", "\"a b\""),
            ("{ a = 1, b = 1, c = 1, d = 1, e = 1 }", "4"),
        ] {
            let declared = parse(&format!("{entry}reserves = {bad}\n"));
            let (field, message) = check_declared(&declared).unwrap_err();
            assert_eq!(field, "rate_limits[0].reserves", "{bad}");
            assert!(message.contains(why), "{bad}: {message}");
        }
        // Reserves and a warm-up do not combine.
        let warm = parse(&format!(
            "{entry}warmup = \"1h\"\nreserves = {{ batch = 1 }}\n"
        ));
        assert_eq!(
            check_declared(&warm).unwrap_err().0,
            "rate_limits[0].reserves"
        );
    }

    #[test]
    fn declared_fair_flows_are_checked_and_shown() {
        let parse = |t: &str| -> Vec<DeclaredRate> {
            #[derive(Deserialize)]
            struct F {
                rate_limits: Vec<DeclaredRate>,
            }
            toml::from_str::<F>(t).unwrap().rate_limits
        };
        let entry = "[[rate_limits]]\nname = \"api\"\nlimit = 100\nperiod = \"1m\"\n";
        let fair = parse(&format!("{entry}fair_flows = true\n"));
        assert_eq!(check_declared(&fair), Ok(()));
        assert!(fair[0].quota().unwrap().fair_flows);
        assert!(!parse(entry)[0].quota().unwrap().fair_flows);
        let settings = RateSettings {
            headers: HeaderMode::HTTP_DEFAULT,
            store_down: StoreDownPolicy::default(),
            store_timeout: DEFAULT_RATE_STORE_TIMEOUT,
            max_reservations: 1,
            hot_key_leases: false,
            approximate_hot_keys: false,
        };
        let shown = describe(&settings, &fair);
        assert!(shown.contains("fair flows"), "{shown}");
        // Fair flows and a warm-up do not combine: the entry and the field are named.
        let warm = parse(&format!("{entry}warmup = \"1h\"\nfair_flows = true\n"));
        let (field, message) = check_declared(&warm).unwrap_err();
        assert_eq!(field, "rate_limits[0].fair_flows");
        assert!(message.contains("without a warm-up"), "{message}");
    }
}

//! [`StoreDownPolicy`]: the answer chosen for when the store is down.

use crate::error::{Error, Result};
use crate::rate::{Algorithm, Quota, Reserves};
use std::fmt;
use std::str::FromStr;

/// Most replicas a [`StoreDownPolicy::Local`] share may be divided among.
const MAX_REPLICAS: u32 = 1_000_000;

/// What a rate limit answers while its store cannot be asked (an error, no answer in time,
/// or known down since a recent failure).
///
/// Parsed from and printed as `fail_open`, `fail_closed` or `local:N`:
///
/// ```
/// use clusterlimit::StoreDownPolicy;
/// let p: StoreDownPolicy = "local:3".parse()?;
/// assert_eq!(p, StoreDownPolicy::Local { replicas: 3 });
/// assert_eq!(p.to_string(), "local:3");
/// assert!("fail_sometimes".parse::<StoreDownPolicy>().is_err());
/// # Ok::<(), clusterlimit::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum StoreDownPolicy {
    /// Admit every request (Envoy's own default, `failure_mode_deny: false`): availability
    /// before the limit.
    #[default]
    FailOpen,
    /// Deny every request: the limit before availability.
    FailClosed,
    /// Count in this process alone, at `limit / replicas` (at least 1) per key: with
    /// `replicas` processes doing the same, the cluster stays near its limit.
    Local {
        /// How many processes share the limit.
        replicas: u32,
    },
}

impl StoreDownPolicy {
    /// The quota one of `replicas` processes applies on its own: limit and burst divided,
    /// rounded down (so the shares never add up to more than the whole), at least 1.
    pub(crate) fn local_share(quota: &Quota, replicas: u32) -> Quota {
        let share = |n: u64| (n / u64::from(replicas.max(1))).max(1);
        let limit = share(quota.limit);
        let mut local = Quota::new(limit, quota.period)
            .algorithm(quota.algorithm)
            .ban(quota.ban);
        if quota.algorithm == Algorithm::Gcra {
            local = local.burst(share(quota.burst));
            if !quota.warmup.is_zero() {
                // The same warm-up, at least one admission from cold of the share's pace.
                local = local.cold_factor(quota.cold_factor);
                local = local.warmup(quota.warmup.max(local.min_warmup()));
            }
        }
        // Each class keeps its share of its reserve, below the share's most at once (a class
        // the whole quota could admit keeps one unit it can take).
        let most = local.max_cost();
        let reserves = quota
            .reserves
            .iter()
            .fold(Reserves::new(), |r, (class, units)| {
                r.with(class, (units / u64::from(replicas.max(1))).min(most - 1))
            });
        // Fair flows stay: this process shares its slice among the flows it sees.
        let mut local = local.reserves(reserves);
        local.fair_flows = quota.fair_flows;
        local
    }
}

impl fmt::Display for StoreDownPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreDownPolicy::FailOpen => f.write_str("fail_open"),
            StoreDownPolicy::FailClosed => f.write_str("fail_closed"),
            StoreDownPolicy::Local { replicas } => write!(f, "local:{replicas}"),
        }
    }
}

impl FromStr for StoreDownPolicy {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::invalid(format!(
                "store-down policy must be fail_open, fail_closed or local:N \
                 (N replicas share the limit, 1..={MAX_REPLICAS}), got {s:?}"
            ))
        };
        match s {
            "fail_open" => Ok(StoreDownPolicy::FailOpen),
            "fail_closed" => Ok(StoreDownPolicy::FailClosed),
            _ => {
                let n = s.strip_prefix("local:").ok_or_else(bad)?;
                let replicas: u32 = n.parse().map_err(|_| bad())?;
                if replicas == 0 || replicas > MAX_REPLICAS {
                    return Err(bad());
                }
                Ok(StoreDownPolicy::Local { replicas })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn parses_what_it_prints() {
        for p in [
            StoreDownPolicy::FailOpen,
            StoreDownPolicy::FailClosed,
            StoreDownPolicy::Local { replicas: 7 },
        ] {
            assert_eq!(p.to_string().parse::<StoreDownPolicy>().unwrap(), p);
        }
        for bad in [
            "",
            "open",
            "local:",
            "local:0",
            "local:-1",
            "local:x",
            "local:2000000",
            " fail_open",
        ] {
            let e = bad.parse::<StoreDownPolicy>().unwrap_err();
            assert!(
                matches!(e, Error::InvalidArgument(ref m) if m.contains("fail_open, fail_closed or local:N")),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn a_local_share_never_adds_up_to_more_than_the_whole() {
        let q = Quota::per_second(100).burst(20);
        let local = StoreDownPolicy::local_share(&q, 3);
        assert_eq!((local.limit, local.burst), (33, 6));
        assert_eq!(local.period, Duration::from_secs(1));
        let tiny = StoreDownPolicy::local_share(&Quota::per_minute(2), 5);
        assert_eq!((tiny.limit, tiny.burst), (1, 1), "at least 1");
        // A warm-up is kept, at least one cold admission of the share's pace long.
        let warm = Quota::per_second(100)
            .warmup(Duration::from_secs(10))
            .cold_factor(4);
        let local = StoreDownPolicy::local_share(&warm, 3);
        assert_eq!(
            (local.warmup, local.cold_factor),
            (Duration::from_secs(10), 4)
        );
        let short = Quota::per_second(100).warmup(Duration::from_millis(30));
        let local = StoreDownPolicy::local_share(&short, 10);
        assert_eq!(local.warmup, Duration::from_millis(300));
        local.validate().unwrap();
        let window = Quota::per_minute(10)
            .algorithm(Algorithm::FixedWindow)
            .ban(Duration::from_secs(5));
        let local = StoreDownPolicy::local_share(&window, 2);
        assert_eq!(
            (local.limit, local.burst, local.algorithm, local.ban),
            (5, 5, Algorithm::FixedWindow, Duration::from_secs(5))
        );
        local.validate().unwrap();
    }

    #[test]
    fn a_local_share_keeps_each_class_its_share_of_its_reserve() {
        let q = Quota::per_second(100)
            .burst(20)
            .reserve("batch", 9)
            .reserve("critical", 0);
        let local = StoreDownPolicy::local_share(&q, 3);
        assert_eq!(
            local.reserves.iter().collect::<Vec<_>>(),
            [("batch", 3), ("critical", 0)]
        );
        local.validate().unwrap();
        // A share too small for the reserve keeps one unit the class can take.
        let tiny = StoreDownPolicy::local_share(&Quota::per_minute(10).reserve("batch", 9), 5);
        assert_eq!((tiny.burst, tiny.reserves.get("batch")), (2, Some(1)));
        tiny.validate().unwrap();
    }

    #[test]
    fn a_local_share_keeps_fair_flows() {
        let fair = Quota::per_minute(10).fair_flows();
        let local = StoreDownPolicy::local_share(&fair, 2);
        assert!(local.fair_flows);
        assert_eq!(local.limit, 5);
        local.validate().unwrap();
        assert!(!StoreDownPolicy::local_share(&Quota::per_minute(10), 2).fair_flows);
    }
}

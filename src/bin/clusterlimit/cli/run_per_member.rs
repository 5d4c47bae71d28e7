//! `run --per-member X`: run as one member of a per-member semaphore, whose capacity is
//! `ceil(X × live members)` within `--min`/`--max` (the flags `--adaptive` shares, defined in
//! `run_adaptive.rs`). This process counts as a member from its open to its exit.

use super::run_adaptive::AdaptiveArgs;
use clap::Args;
use clusterlimit::{PerMember, Semaphore};

/// The per-member flag of `run`.
#[derive(Debug, Args)]
pub struct PerMemberArgs {
    /// Run as one member of a per-member semaphore: its capacity is X permits per live member
    /// (every process or sidecar that has it open this way), rounded up, within --min and
    /// --max, and follows members joining and leaving within a session TTL. This process is a
    /// member while CMD runs. Give every member the same settings.
    #[arg(long, value_name = "X", conflicts_with_all = ["capacity", "adaptive"], value_parser = per_member)]
    pub per_member: Option<f64>,
}

impl PerMemberArgs {
    /// The library's settings, if `--per-member` was given, with `--min`/`--max` from the
    /// adaptive flags (checked by the library when opened).
    pub fn settings(&self, bounds: &AdaptiveArgs) -> Option<PerMember> {
        let mut config = PerMember::new(self.per_member?).min(bounds.min);
        if let Some(max) = bounds.max {
            config = config.max(max);
        }
        Some(config)
    }
}

/// `--per-member`: a number of permits above 0 (a fraction too), at most the largest capacity.
fn per_member(s: &str) -> Result<f64, String> {
    let most = f64::from(Semaphore::MAX_CAPACITY);
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= most => Ok(x),
        _ => Err(format!(
            "permits per live member must be a number above 0 and at most {most} (such as 2 or 0.5), got {s:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_member_takes_positive_numbers_only() {
        assert_eq!(per_member("2"), Ok(2.0));
        assert_eq!(per_member("0.5"), Ok(0.5));
        for bad in ["0", "-1", "NaN", "inf", "two", "", "2000000"] {
            let e = per_member(bad).unwrap_err();
            assert!(
                e.contains("above 0") && e.contains(&format!("{bad:?}")),
                "{e}"
            );
        }
    }
}

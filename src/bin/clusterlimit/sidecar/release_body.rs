//! The body of `DELETE /v1/permits/{id}`: what the work under the permit came to, for an
//! adaptive semaphore's controller (other semaphores ignore it).

use super::problem::Problem;
use clusterlimit::adaptive::Outcome;
use clusterlimit::Permit;
use serde::Deserialize;
use std::time::Duration;
use utoipa::ToSchema;

/// Longest latency a client may report: a day (the controller's histogram tops out sooner).
pub const MAX_LATENCY_MS: f64 = 86_400_000.0;

/// `{"outcome": "success" | "dropped" | "ignore", "latency_ms": <number>}`, both optional.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseBody {
    /// `success`, `dropped` or `ignore` (the default).
    // A string, matched here: serde_json calls a number given for an enum a syntax error,
    // which would name no field.
    outcome: Option<String>,
    /// With `success` only: how long the work took (default: as long as the permit was held).
    latency_ms: Option<f64>,
}

/// A checked release body: the outcome to report, the latency still to be measured when the
/// client gave none.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reported {
    /// Success after this long; `None`: the time since the grant.
    Success(Option<Duration>),
    Dropped,
    Ignore,
}

impl ReleaseBody {
    /// Checks the fields together; a 400 names the one at fault.
    pub fn check(self) -> Result<Reported, Problem> {
        let latency = match self.latency_ms {
            None => None,
            Some(ms) if ms.is_finite() && (0.0..=MAX_LATENCY_MS).contains(&ms) => {
                Some(Duration::from_secs_f64(ms / 1000.0))
            }
            Some(ms) => {
                return Err(Problem::field(
                    "latency_ms",
                    format!("latency_ms must be between 0 and {MAX_LATENCY_MS}, got {ms}"),
                ))
            }
        };
        match (self.outcome.as_deref(), latency) {
            (Some("success"), latency) => Ok(Reported::Success(latency)),
            (Some(other), _) if !matches!(other, "dropped" | "ignore") => Err(Problem::field(
                "outcome",
                format!("`outcome` must be one of: success, dropped, ignore, got {other:?}"),
            )),
            (_, Some(_)) => Err(Problem::field(
                "latency_ms",
                "latency_ms goes with \"outcome\": \"success\" only",
            )),
            (Some("dropped"), None) => Ok(Reported::Dropped),
            _ => Ok(Reported::Ignore),
        }
    }
}

impl Reported {
    /// The library's outcome for `permit` (a success without a latency took as long as the
    /// permit was held).
    pub fn outcome(self, permit: &Permit) -> Outcome {
        match self {
            Reported::Success(Some(d)) => Outcome::Success(d),
            Reported::Success(None) => Outcome::Success(permit.held_for()),
            Reported::Dropped => Outcome::Dropped,
            Reported::Ignore => Outcome::Ignore,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(body: &str) -> Result<Reported, String> {
        super::super::body::parse::<ReleaseBody>(body.as_bytes())
            .and_then(ReleaseBody::check)
            .map_err(|p| {
                serde_json::to_value(&p).unwrap()["field"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            })
    }

    #[test]
    fn each_form() {
        assert_eq!(checked(""), Ok(Reported::Ignore));
        assert_eq!(
            checked(r#"{"outcome":"success"}"#),
            Ok(Reported::Success(None))
        );
        assert_eq!(
            checked(r#"{"outcome":"success","latency_ms":12.5}"#),
            Ok(Reported::Success(Some(Duration::from_micros(12_500))))
        );
        assert_eq!(checked(r#"{"outcome":"dropped"}"#), Ok(Reported::Dropped));
        assert_eq!(checked(r#"{"outcome":"ignore"}"#), Ok(Reported::Ignore));
    }

    #[test]
    fn bad_bodies_name_the_field() {
        assert_eq!(checked(r#"{"outcome":"ok"}"#), Err("outcome".into()));
        assert_eq!(checked(r#"{"outcome":1}"#), Err("outcome".into()));
        assert_eq!(
            checked(r#"{"outcome":"success","latency_ms":-1}"#),
            Err("latency_ms".into())
        );
        assert_eq!(
            checked(r#"{"outcome":"success","latency_ms":"9"}"#),
            Err("latency_ms".into())
        );
        assert_eq!(
            checked(r#"{"outcome":"dropped","latency_ms":9}"#),
            Err("latency_ms".into())
        );
        assert_eq!(checked(r#"{"latency":9}"#), Err("latency".into()));
    }
}

//! `[adaptive.<name>]` tables of the config file: adaptive semaphores the sidecar opens at
//! start, whose capacity a controller adjusts from the outcomes clients report on release.

use crate::common::{format_duration, parse_duration, Failure};
use clusterlimit::adaptive::Adaptive;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// One `[adaptive.<name>]` table as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclaredAdaptive {
    /// `gradient` (default) or `aimd`.
    pub algorithm: Option<String>,
    pub min: Option<u32>,
    pub max: Option<u32>,
    pub initial: Option<u32>,
    /// A duration such as `"1s"` or `"200ms"`.
    pub window: Option<String>,
    pub max_step: Option<f64>,
}

/// The adaptive semaphores of the config, by name.
pub type AdaptiveTables = BTreeMap<String, DeclaredAdaptive>;

impl DeclaredAdaptive {
    /// The library's settings, or what is wrong (without the table's name).
    pub fn settings(&self) -> Result<Adaptive, String> {
        let mut a = match self.algorithm.as_deref().unwrap_or("gradient") {
            "gradient" => Adaptive::gradient(),
            "aimd" => Adaptive::aimd(),
            other => {
                return Err(format!(
                    "algorithm must be \"gradient\" or \"aimd\", got {other:?}"
                ))
            }
        };
        if let Some(v) = self.min {
            a = a.min(v);
        }
        if let Some(v) = self.max {
            a = a.max(v);
        }
        if let Some(v) = self.initial {
            a = a.initial(v);
        }
        if let Some(v) = self.max_step {
            a = a.max_step(v);
        }
        if let Some(text) = &self.window {
            a = a.window(parse_duration(text).map_err(|e| format!("window = {text:?}: {e}"))?);
        }
        Ok(a)
    }

    /// One line for `--check-config`.
    pub fn describe(&self, name: &str) -> String {
        let window = self
            .window
            .as_deref()
            .and_then(|w| parse_duration(w).ok())
            .unwrap_or(Duration::from_secs(1));
        format!(
            "{name} ({}, {}..{}, window {})",
            self.algorithm.as_deref().unwrap_or("gradient"),
            self.min.unwrap_or(1),
            self.max.unwrap_or(1000),
            format_duration(window)
        )
    }
}

/// Checks every table without touching the store, as `Limiter::adaptive_semaphore` would
/// (bad name, bounds, window). `at` words a failure for the table it names (`adaptive.<name>`).
pub fn check(tables: &AdaptiveTables, at: impl Fn(&str, String) -> Failure) -> Result<(), Failure> {
    for (name, table) in tables {
        let checked = table.settings().and_then(|settings| {
            settings.check(name).map_err(|e| match e {
                clusterlimit::Error::InvalidArgument(why) => why,
                e => e.to_string(),
            })
        });
        if let Err(why) = checked {
            return Err(at(&format!("adaptive.{name}"), why));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_name_a_bad_algorithm_and_window() {
        let t = DeclaredAdaptive {
            algorithm: Some("vegas".into()),
            ..Default::default()
        };
        assert!(t.settings().unwrap_err().contains("gradient"));
        let t = DeclaredAdaptive {
            window: Some("soon".into()),
            ..Default::default()
        };
        assert!(t.settings().unwrap_err().starts_with("window"));
    }

    #[test]
    fn check_refuses_bounds_the_library_refuses() {
        let mut tables = AdaptiveTables::new();
        tables.insert(
            "db".into(),
            DeclaredAdaptive {
                min: Some(5),
                max: Some(4),
                ..Default::default()
            },
        );
        let e = check(&tables, |f, why| Failure::usage(format!("{f}: {why}"))).unwrap_err();
        assert!(
            e.message.contains("adaptive.db: adaptive max"),
            "{}",
            e.message
        );
    }
}

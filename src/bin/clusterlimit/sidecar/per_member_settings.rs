//! `[per_member.<name>]` tables of the config file: per-member semaphores the sidecar opens at
//! start and keeps, so that each sidecar counts as one member (capacity `ceil(per_member ×
//! live members)` within `min`/`max`).

use crate::common::Failure;
use clusterlimit::PerMember;
use serde::Deserialize;
use std::collections::BTreeMap;

/// One `[per_member.<name>]` table as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclaredPerMember {
    /// Permits per live member (required; a fraction too).
    pub per_member: Option<f64>,
    pub min: Option<u32>,
    pub max: Option<u32>,
}

/// The per-member semaphores of the config, by name.
pub type PerMemberTables = BTreeMap<String, DeclaredPerMember>;

impl DeclaredPerMember {
    /// The library's settings, or what is wrong (without the table's name).
    pub fn settings(&self) -> Result<PerMember, String> {
        let Some(per_member) = self.per_member else {
            return Err("per_member = X (permits per live member) is required".to_string());
        };
        let mut config = PerMember::new(per_member);
        if let Some(v) = self.min {
            config = config.min(v);
        }
        if let Some(v) = self.max {
            config = config.max(v);
        }
        Ok(config)
    }

    /// One line for `--check-config`.
    pub fn describe(&self, name: &str) -> String {
        let max = self.max.map_or("-".to_string(), |m| m.to_string());
        format!(
            "{name} ({} per member, {}..{max})",
            self.per_member.unwrap_or(0.0),
            self.min.unwrap_or(1),
        )
    }
}

/// The `per_member` line of `--check-config`: every table, or `-`.
pub fn describe_all(tables: &PerMemberTables) -> String {
    if tables.is_empty() {
        return "-".to_string();
    }
    let all: Vec<String> = tables.iter().map(|(name, t)| t.describe(name)).collect();
    all.join(", ")
}

/// Checks every table without touching the store, as `Limiter::per_member_semaphore` would
/// (bad name, number, bounds). `at` words a failure for the table it names
/// (`per_member.<name>`).
pub fn check(
    tables: &PerMemberTables,
    at: impl Fn(&str, String) -> Failure,
) -> Result<(), Failure> {
    for (name, table) in tables {
        let checked = table.settings().and_then(|settings| {
            settings.check(name).map_err(|e| match e {
                clusterlimit::Error::InvalidArgument(why) => why,
                e => e.to_string(),
            })
        });
        if let Err(why) = checked {
            return Err(at(&format!("per_member.{name}"), why));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(per_member: Option<f64>, min: Option<u32>, max: Option<u32>) -> PerMemberTables {
        let mut t = PerMemberTables::new();
        t.insert(
            "db".into(),
            DeclaredPerMember {
                per_member,
                min,
                max,
            },
        );
        t
    }

    fn refusal(t: &PerMemberTables) -> String {
        check(t, |f, why| Failure::usage(format!("{f}: {why}")))
            .unwrap_err()
            .message
    }

    #[test]
    fn check_names_the_table_and_the_reason() {
        assert!(
            check(&table(Some(2.0), Some(4), Some(40)), |_, w| Failure::usage(
                w
            ))
            .is_ok()
        );
        let e = refusal(&table(None, None, None));
        assert!(e.starts_with("per_member.db: per_member = X"), "{e}");
        let e = refusal(&table(Some(0.0), None, None));
        assert!(e.contains("above 0"), "{e}");
        let e = refusal(&table(Some(2.0), Some(5), Some(4)));
        assert!(e.contains("per_member.db: per-member min"), "{e}");
    }

    #[test]
    fn describe_shows_the_number_and_bounds() {
        let t = DeclaredPerMember {
            per_member: Some(2.5),
            min: None,
            max: Some(40),
        };
        assert_eq!(t.describe("db"), "db (2.5 per member, 1..40)");
    }
}

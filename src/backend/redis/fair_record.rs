//! A fair semaphore's record on Redis (`{PREFIX:s:NAME}:fair`, a hash): its classes, the tokens
//! of the entries granted, and a version every grant raises. It exists only for a fair
//! semaphore, is created with its record (`lua/sem_open_fair.lua`, which also marks the record
//! fair, so a lost fair record is an error, never a plain semaphore), and every grant writes it
//! only if the version is the one its decision read (`lua/sem_grant.lua`, `fair_grants.rs`), so
//! two Limiters never grant from the same marks. A mark whose entry is gone is dropped by the
//! next grant: holding is "queued and marked".
//!
//! An entry of a fair semaphore carries its tag after the owner, `\nWEIGHT\nCLASS\nFLOW` (an
//! empty class is the first one); a plain entry's bytes are unchanged.

use crate::fair::{Classes, FairTag, VTimes};
use std::collections::HashSet;

/// What [`FairState::parse`] answers for a fair semaphore whose fair record is gone.
pub(super) const LOST: &str = "fair record lost";

/// A fair record as one script read it (its `FAIR` reply item, `lua/sem_common.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FairState {
    /// The version a grant compares.
    pub(super) ver: String,
    pub(super) classes: Classes,
    /// Tokens of the entries marked granted (some may be gone).
    pub(super) marks: HashSet<u64>,
    /// The flows' virtual times at the last grant decided in Rust (see
    /// `crate::fair::FairEntry::vtime`; an uncontended acquire that marks itself in its script
    /// leaves them as they were).
    pub(super) vtimes: VTimes,
}

impl FairState {
    /// The `FAIR` item: `Ok(None)` on a plain semaphore; an error (naming what is wrong) for a
    /// fair record that is gone or was not written by clusterlimit.
    pub(super) fn parse(item: &str) -> Result<Option<FairState>, String> {
        if item.is_empty() {
            return Ok(None);
        }
        if item == "!" {
            return Err(LOST.into());
        }
        let mut lines = item.splitn(4, '\n');
        let (ver, classes, granted) = (lines.next(), lines.next(), lines.next());
        let vtimes = match lines.next().filter(|v| !v.is_empty()) {
            None => VTimes::new(),
            Some(v) => serde_json::from_str(v)
                .map_err(|_| format!("a fair record with unreadable virtual times ({v:?})"))?,
        };
        let ver = ver
            .filter(|v| v.parse::<u64>().is_ok())
            .ok_or("a fair record without its version")?;
        let classes: Classes = classes
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("a fair record with unreadable classes ({classes:?})"))?;
        let marks = granted
            .unwrap_or_default()
            .split_whitespace()
            .map(|t| t.parse::<u64>())
            .collect::<Result<HashSet<u64>, _>>()
            .map_err(|_| format!("a fair record with unreadable grant marks ({granted:?})"))?;
        Ok(Some(FairState {
            ver: ver.to_string(),
            classes,
            marks,
            vtimes,
        }))
    }
}

/// What an entry's value ends with on a fair semaphore (`ARGV[8]` of `lua/sem_enqueue.lua`).
pub(super) fn tag_suffix(tag: &FairTag) -> String {
    format!(
        "\n{}\n{}\n{}",
        tag.weight,
        tag.class.as_deref().unwrap_or_default(),
        tag.flow
    )
}

/// Splits an entry's value into its plain part and its tag (`None`: a plain entry).
pub(super) fn split_tag(value: &str) -> Result<(&str, Option<FairTag>), String> {
    let Some((plain, tag)) = value.split_once('\n') else {
        return Ok((value, None));
    };
    let mut parts = tag.splitn(3, '\n');
    let (weight, class, flow) = (parts.next(), parts.next(), parts.next());
    let (Some(weight), Some(class), Some(flow)) =
        (weight.and_then(|w| w.parse().ok()), class, flow)
    else {
        return Err(format!("an entry with an unreadable flow tag ({tag:?})"));
    };
    let mut tag = FairTag::new(flow).weight(weight);
    tag.class = Some(class.to_string()).filter(|c| !c.is_empty());
    Ok((plain, Some(tag)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fair_records_read_or_say_what_is_wrong() {
        assert_eq!(FairState::parse(""), Ok(None));
        let f = FairState::parse("7\ncritical=25%,batch\n10 30")
            .unwrap()
            .unwrap();
        assert_eq!((f.ver.as_str(), f.classes.len()), ("7", 2));
        assert_eq!(f.marks, HashSet::from([10, 30]));
        let none = FairState::parse("1\ndefault\n").unwrap().unwrap();
        assert!(none.marks.is_empty());
        assert_eq!(FairState::parse("!"), Err(LOST.to_string()));
        assert!(FairState::parse("?\n?\n").unwrap_err().contains("version"));
        assert!(FairState::parse("1\n=,\n").unwrap_err().contains("classes"));
        assert!(FairState::parse("1\ndefault\n1 x")
            .unwrap_err()
            .contains("marks"));
    }

    #[test]
    fn tags_ride_after_the_owner() {
        let tag = FairTag::new("tenant a").class("batch").weight(3);
        let value = format!("2 s 5 host one{}", tag_suffix(&tag));
        assert_eq!(split_tag(&value), Ok(("2 s 5 host one", Some(tag))));
        let first = FairTag::new("t");
        let value = format!("1 s 5 o{}", tag_suffix(&first));
        assert_eq!(split_tag(&value), Ok(("1 s 5 o", Some(first))));
        assert_eq!(split_tag("1 s 5 o"), Ok(("1 s 5 o", None)));
        assert!(split_tag("1 s 5 o\nx\n\nf").is_err());
    }
}

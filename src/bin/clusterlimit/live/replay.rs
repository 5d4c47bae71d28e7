//! A quota change's preview: the last minutes' checks of the busiest and most denied keys
//! (as recorded per second, see `top_keys.rs`) replayed through the rate-limit meaning
//! (`clusterlimit::rate::decide`) under the current and the proposed quota.
//!
//! Only counts per second (and class) are kept, so each second's checks of each class are
//! replayed evenly spread over it, interleaved with the other classes', each as its class
//! (`decide_as`: a class the quota does not declare is denied), each key starting full at the
//! window's start: an estimate, exact for traffic that is even within each second.

use super::top_keys::{ClassTag, Second};
use clusterlimit::rate::{decide_as, KeyState};
use clusterlimit::Quota;
use serde::{Deserialize, Serialize};

/// The preview of one quota change.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Preview {
    /// Keys replayed (the tracked ones: the busiest and the most denied).
    pub keys: usize,
    /// Seconds the replay covers.
    pub seconds: u64,
    /// Checks replayed.
    pub checks: u64,
    /// Checks actually denied, as recorded.
    pub denied_recorded: u64,
    /// Checks the current quota denies in the replay (compare with `denied_recorded` to see
    /// how close the replay is).
    pub denied_current: u64,
    /// Checks the proposed quota would have denied in the replay.
    pub denied_proposed: u64,
    /// The keys whose outcome changes most, with (denied now, denied with the proposal).
    pub changed: Vec<KeyChange>,
}

/// One key's replayed denials.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct KeyChange {
    pub key: String,
    pub checks: u64,
    pub denied_current: u64,
    pub denied_proposed: u64,
}

/// Keys listed in [`Preview::changed`].
const SHOWN: usize = 10;

/// Replays `keys` under `current` and `proposed` (both valid quotas).
pub fn preview(current: &Quota, proposed: &Quota, keys: &[(String, Vec<Second>)]) -> Preview {
    let mut p = Preview {
        keys: keys.len(),
        ..Preview::default()
    };
    let (mut first, mut last) = (u64::MAX, 0);
    for (key, seconds) in keys {
        let checks: u64 = seconds.iter().map(|s| u64::from(s.checks)).sum();
        let denied_current = replay(current, seconds);
        let denied_proposed = replay(proposed, seconds);
        p.checks += checks;
        p.denied_recorded += seconds.iter().map(|s| u64::from(s.denied)).sum::<u64>();
        p.denied_current += denied_current;
        p.denied_proposed += denied_proposed;
        if let (Some(f), Some(l)) = (seconds.first(), seconds.last()) {
            first = first.min(f.unix_sec);
            last = last.max(l.unix_sec);
        }
        p.changed.push(KeyChange {
            key: key.clone(),
            checks,
            denied_current,
            denied_proposed,
        });
    }
    p.seconds = if last >= first { last - first + 1 } else { 0 };
    p.changed
        .sort_by_key(|c| std::cmp::Reverse(c.denied_proposed.abs_diff(c.denied_current)));
    p.changed.truncate(SHOWN);
    p
}

/// Checks of `seconds` (in time order) that `quota` denies, replayed evenly within each
/// second, the classes of a second interleaved.
fn replay(quota: &Quota, seconds: &[Second]) -> u64 {
    let mut state: Option<KeyState> = None;
    let mut denied = 0;
    for same_second in seconds.chunk_by(|a, b| a.unix_sec == b.unix_sec) {
        for (now, each, class) in spread(quota, same_second) {
            let v = decide_as(quota, state.as_ref(), each, class.name(), now);
            if let Some(next) = v.state {
                state = Some(next);
            }
            if !v.decision.allowed {
                denied += 1;
            }
        }
    }
    denied
}

/// One second's checks (one `Second` per class) as (time, cost, class), in time order: each
/// class's checks evenly spread over the second, each of its average cost.
fn spread(quota: &Quota, same_second: &[Second]) -> Vec<(u64, u64, ClassTag)> {
    let mut checks = Vec::new();
    for s in same_second {
        let n = u64::from(s.checks.max(1));
        let each = (s.cost / n).max(1).min(quota.max_cost());
        for i in 0..n {
            let now = s.unix_sec * 1_000_000_000 + i * 1_000_000_000 / n;
            checks.push((now, each, s.class));
        }
    }
    // Stable: at one instant, classes in the order they were first seen that second.
    checks.sort_by_key(|c| c.0);
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steady(per_sec: u32, secs: u64) -> Vec<Second> {
        (0..secs)
            .map(|s| Second {
                unix_sec: 1_700_000_000 + s,
                class: ClassTag::NONE,
                checks: per_sec,
                cost: u64::from(per_sec),
                denied: 0,
            })
            .collect()
    }

    #[test]
    fn a_lower_quota_denies_the_excess_and_a_higher_one_nothing() {
        let keys = vec![("k".to_string(), steady(20, 60))];
        let now = Quota::per_second(50);
        let halved = Quota::per_second(10);
        let p = preview(&now, &halved, &keys);
        assert_eq!((p.keys, p.seconds, p.checks), (1, 60, 1200));
        assert_eq!(p.denied_current, 0);
        // 10 of 20 per second pass once the first burst of 10 is spent.
        assert!(
            (590..=610).contains(&p.denied_proposed),
            "{}",
            p.denied_proposed
        );
        let raised = preview(&halved, &now, &keys);
        assert_eq!(raised.denied_proposed, 0);
        assert_eq!(raised.changed[0].key, "k");
    }

    /// Checks of a class replay as that class: a proposed reserve holds the class back, the
    /// unclassed checks of the same seconds keep their share, and a class the proposed quota
    /// drops is denied.
    #[test]
    fn classes_replay_as_their_class() {
        let batch = ClassTag::of(Some("batch"));
        let mut seconds = Vec::new();
        for s in steady(10, 60) {
            seconds.push(Second { class: batch, ..s });
            seconds.push(s);
        }
        let keys = vec![("k".to_string(), seconds)];
        let window = Quota::per_second(20).algorithm(clusterlimit::Algorithm::FixedWindow);
        let now = window.reserve("batch", 0);
        // Batch must leave 15 of each window of 20: with the checks alternating (batch
        // first), batch gets 3 a second (counts 1, 3, 5), the rest all of theirs.
        let reserved = window.reserve("batch", 15);
        let p = preview(&now, &reserved, &keys);
        assert_eq!((p.checks, p.denied_current), (1200, 0));
        assert_eq!(p.denied_proposed, 7 * 60);
        // Without the class, every batch check is refused.
        let p = preview(&now, &Quota::per_second(40), &keys);
        assert_eq!(p.denied_proposed, 600);
    }

    #[test]
    fn no_keys_no_checks() {
        let q = Quota::per_second(1);
        assert_eq!(preview(&q, &q, &[]), Preview::default());
    }
}

//! The two orders of the grant rule, as comparisons of held permits against a share.
//!
//! Ratios are compared by cross-multiplying in `u128` (exact: no float ties that differ between
//! machines, no overflow for any sum of `u32` weights).

use std::cmp::Ordering;

/// Classes: lower held / min first. A class with min 0 is best-effort: after every class with
/// a share, and among best-effort classes fewer held first. (A class below its min has a ratio
/// under 1, so it always comes before a class at or above its own.)
pub(crate) fn class_order(held_a: u64, min_a: u32, held_b: u64, min_b: u32) -> Ordering {
    match (min_a, min_b) {
        (0, 0) => held_a.cmp(&held_b),
        (0, _) => Ordering::Greater,
        (_, 0) => Ordering::Less,
        _ => cross(held_a, min_a, held_b, min_b),
    }
}

/// Flows within a class: lower held / weight first (a weight of 0 counts as 1).
pub(crate) fn flow_order(held_a: u64, weight_a: u32, held_b: u64, weight_b: u32) -> Ordering {
    cross(held_a, weight_a.max(1), held_b, weight_b.max(1))
}

/// A flow's virtual time after `permits` more are granted to it at `weight`.
pub(crate) fn advance(vtime: u64, permits: u32, weight: u32) -> u64 {
    vtime.saturating_add(u64::from(permits) * super::entry::VTIME_SCALE / u64::from(weight.max(1)))
}

/// `a / da` against `b / db`, both denominators at least 1.
fn cross(a: u64, da: u32, b: u64, db: u32) -> Ordering {
    (u128::from(a) * u128::from(db)).cmp(&(u128::from(b) * u128::from(da)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering::*;

    #[test]
    fn classes_below_their_min_come_first() {
        assert_eq!(class_order(1, 4, 2, 2), Less); // 1/4 < 2/2
        assert_eq!(class_order(3, 2, 1, 2), Greater);
        assert_eq!(class_order(2, 4, 1, 2), Equal); // equal standing: the caller breaks ties
    }

    #[test]
    fn best_effort_classes_come_last() {
        assert_eq!(class_order(0, 0, 100, 1), Greater);
        assert_eq!(class_order(100, 1, 0, 0), Less);
        assert_eq!(class_order(1, 0, 2, 0), Less);
    }

    #[test]
    fn flows_by_held_over_weight() {
        assert_eq!(flow_order(1, 1, 1, 2), Greater); // 1/1 > 1/2
        assert_eq!(flow_order(2, 2, 5, 5), Equal);
        assert_eq!(flow_order(1, 0, 1, 1), Equal); // weight 0 counts as 1
        assert_eq!(flow_order(u64::MAX, u32::MAX, u64::MAX, 1), Less);
    }
}

//! The last panes read (semaphores, rate limits, members, fleet), kept so that a picture
//! taken while the store does not answer shows them, marked stale, instead of nothing.

use super::picture::{FleetMember, RateLimitView, SemaphoreView, StaleView};
use clusterlimit::StoreMember;

/// A value and when it was read.
#[derive(Clone)]
pub struct Kept<T> {
    /// When it was read (Unix milliseconds).
    pub at_unix_ms: u64,
    /// What was read.
    pub value: T,
}

/// The semaphores pane: the views, and how many semaphores the store had.
pub type SemaphoresPane = (Vec<SemaphoreView>, usize);

/// The last panes read, each when it was read.
#[derive(Default)]
pub struct KeptPanes {
    /// The semaphores and how many there were.
    pub semaphores: Option<Kept<SemaphoresPane>>,
    /// The rate limits.
    pub rate_limits: Option<Kept<Vec<RateLimitView>>>,
    /// The store's members.
    pub members: Option<Kept<Vec<StoreMember>>>,
    /// The fleet's summaries.
    pub fleet: Option<Kept<Vec<FleetMember>>>,
}

/// Collects which kept panes a picture shows, to mark it stale as of the oldest.
#[derive(Default)]
pub struct Staleness {
    as_of: Option<u64>,
    why: Option<String>,
}

impl Staleness {
    /// `read`, kept as `slot`'s value at `now_ms`; or, when it could not be read (`None`),
    /// the kept value (noted as stale, for `why`), or `T::default()` if none was kept.
    pub fn fresh_or_kept<T: Clone + Default>(
        &mut self,
        slot: &mut Option<Kept<T>>,
        read: Option<T>,
        now_ms: u64,
        why: &str,
    ) -> T {
        if let Some(value) = read {
            *slot = Some(Kept {
                at_unix_ms: now_ms,
                value: value.clone(),
            });
            return value;
        }
        let Some(kept) = slot else {
            return T::default();
        };
        self.as_of = Some(
            self.as_of
                .map_or(kept.at_unix_ms, |a| a.min(kept.at_unix_ms)),
        );
        self.why.get_or_insert_with(|| why.to_string());
        kept.value.clone()
    }

    /// The picture's mark: set when one pane or more is a kept one.
    pub fn view(self) -> Option<StaleView> {
        Some(StaleView {
            as_of_unix_ms: self.as_of?,
            why: self.why.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pane_not_read_now_is_the_kept_one_marked_as_of_its_reading() {
        let mut slot: Option<Kept<Vec<u32>>> = None;
        let mut s = Staleness::default();
        assert_eq!(s.fresh_or_kept(&mut slot, Some(vec![1]), 1_000, ""), [1]);
        assert!(s.view().is_none());
        let mut s = Staleness::default();
        assert_eq!(s.fresh_or_kept(&mut slot, None, 2_000, "no answer"), [1]);
        let v = s.view().unwrap();
        assert_eq!((v.as_of_unix_ms, v.why.as_str()), (1_000, "no answer"));
        let mut empty: Option<Kept<Vec<u32>>> = None;
        let mut s = Staleness::default();
        assert!(s.fresh_or_kept(&mut empty, None, 2_000, "x").is_empty());
        assert!(s.view().is_none());
    }
}

//! What a meter's algorithm answers (GCRA in `gcra.rs`, the windows in `window.rs`), decided
//! over in `decide.rs`: its status at an instant, and the result of a take.

/// A meter as it stands at some `now`, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Status {
    /// How much more it could take now.
    pub(super) remaining: u64,
    /// Until it is back to full.
    pub(super) reset_ns: u128,
    /// The instant it is worth nothing (may be in the past).
    pub(super) worthless_at: u128,
}

/// An algorithm's answer to a check: the new meter, or the nanoseconds until the same check
/// would be admitted if nothing else happened (`u128::MAX`: never).
pub(super) type Take<M> = Result<M, u128>;

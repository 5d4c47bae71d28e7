//! [`Usage`]: what a report of the approximate mode tells the store (`approx_book.rs` makes
//! it, the key's batch carries it like a lease ask, `lease_book.rs`'s `LeaseAsk::Report`).

/// What a report tells the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Usage {
    /// Cost asked since the last report (admitted or not, here or in the store).
    pub(crate) asked: u64,
    /// Cost admitted here since the last report, not charged ahead: charged now.
    pub(crate) admitted: u64,
    /// This Limiter's demand over one of the quota's periods at its present pace.
    pub(crate) projected: u64,
    /// The first report since the local meter (re)started: it charges the meter's part of
    /// the key ahead (`rate::start_local`; on a GCRA quota every report does).
    pub(crate) first: bool,
    /// Units charged ahead by earlier reports and not admitted yet (a report charges ahead
    /// at most its demand over `AHEAD_FOR` less these).
    pub(crate) held: u64,
}

//! The store objects of a per-member semaphore `name`, beside the semaphore itself: the board
//! its members announce themselves on. (Its controller seat is the adaptive one,
//! `<name>.controller`: one seat per name, so an adaptive and a per-member controller never
//! write the same capacity at once.)

/// Put before a per-member semaphore's name to name its board.
pub(crate) const BOARD_PREFIX: &str = "per-member.";

/// The board every Limiter that has per-member semaphore `name` open announces itself on.
pub(crate) fn board_of(name: &str) -> String {
    format!("{BOARD_PREFIX}{name}")
}

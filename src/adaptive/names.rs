//! The store objects of an adaptive semaphore `name`, beside the semaphore itself: the board its
//! Limiters announce their windows on, and the capacity-1 semaphore whose holder controls it.

/// The board every Limiter of adaptive semaphore `name` announces its summaries on.
pub(crate) fn board_of(name: &str) -> String {
    format!("adaptive.{name}")
}

/// The capacity-1 semaphore whose holder is `name`'s controller.
pub(crate) fn controller_of(name: &str) -> String {
    format!("{name}{CONTROLLER_SUFFIX}")
}

/// Appended to an adaptive semaphore's name to name its controller's semaphore.
pub(crate) const CONTROLLER_SUFFIX: &str = ".controller";

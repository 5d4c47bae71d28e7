//! What every store answers the same way about fair semaphores: flows on a plain one, a class
//! the semaphore does not have, other classes than the stored ones.

use crate::error::{Error, Result};
use crate::fair::{Classes, FairTag};

/// The refusal of flows (or of opening as fair) on a plain semaphore.
pub(crate) fn not_fair(name: &str) -> Error {
    Error::invalid(format!(
        "semaphore {name:?} is a plain FIFO semaphore: flows, classes and weights need one \
         created as fair (Limiter::fair_semaphore)"
    ))
}

/// Checks an acquire's tag against the semaphore's classes.
pub(crate) fn check_tag(name: &str, classes: &Classes, tag: Option<&FairTag>) -> Result<()> {
    match tag.and_then(|t| t.class.as_ref()) {
        Some(class) if classes.id(class).is_none() => Err(Error::invalid(format!(
            "class {class:?} is not one of semaphore {name:?}'s classes ({classes})"
        ))),
        _ => Ok(()),
    }
}

/// Opening a fair semaphore with `asked` classes that differ from the `stored` ones.
pub(crate) fn classes_differ(name: &str, stored: &Classes, asked: &Classes) -> Error {
    Error::invalid(format!(
        "semaphore {name:?} has the classes {stored}, not {asked}; open it without classes or \
         with the same ones"
    ))
}

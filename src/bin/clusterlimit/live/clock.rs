//! The live view's clock: pictures, events and fleet summaries are stamped in Unix
//! milliseconds.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix milliseconds now.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

//! The live view's clock: pictures, events and fleet summaries are stamped in Unix
//! milliseconds.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix milliseconds now.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The time of day of `unix_ms`, in UTC: `14:02:11 UTC` (for "unreachable since …").
pub fn time_of_day(unix_ms: u64) -> String {
    let s = (unix_ms / 1000) % 86_400;
    format!("{:02}:{:02}:{:02} UTC", s / 3600, (s % 3600) / 60, s % 60)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_time_of_day_is_utc() {
        assert_eq!(super::time_of_day(86_400_000 + 50_531_000), "14:02:11 UTC");
    }
}

//! Durations as people type them, on the command line and in the sidecar's config file, and as
//! the binary prints them back: compact (`400d`, `1m30s`, `250ms`), in units a person types,
//! never humantime's calendar expansion (`1year 1month 4days…` for `400d`).

use std::time::Duration;

/// `10s`, `500ms`, `1m 30s` (humantime), or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if let Ok(secs) = s.trim().parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 10s, 500ms, 2m)"))
}

/// The units printed, largest first, with their length in nanoseconds. No months or years:
/// their length is a convention (humantime's month is 30.44 days), a day is not.
const UNITS: [(&str, u128); 7] = [
    ("d", 86_400_000_000_000),
    ("h", 3_600_000_000_000),
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

/// `d` compactly and exactly: `400d`, `1m30s`, `1s250ms`, `0s`. `parse_duration` reads it back
/// to the same value, so what the binary prints can be typed again.
pub fn format_duration(d: Duration) -> String {
    let mut rest = d.as_nanos();
    if rest == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    for (unit, len) in UNITS {
        let n = rest / len;
        rest %= len;
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

/// A computed wait (`retry after …`) rounded up to the millisecond, then formatted: whoever
/// waits that long is never early, and no one reads nanoseconds.
pub fn format_wait(d: Duration) -> String {
    let ms = u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
    format_duration(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn formats_compactly_and_reads_back() {
        for (typed, shown) in [
            ("400d", "400d"),
            ("90s", "1m30s"),
            ("1m 30s", "1m30s"),
            ("250ms", "250ms"),
            ("1500ms", "1s500ms"),
            ("3", "3s"),
            ("24h", "1d"),
            ("1d 2h 3m 4s 5ms 6us 7ns", "1d2h3m4s5ms6us7ns"),
            ("0s", "0s"),
        ] {
            let d = parse_duration(typed).unwrap();
            assert_eq!(format_duration(d), shown, "{typed}");
            assert_eq!(parse_duration(shown).unwrap(), d, "{shown} reads back");
        }
        assert_eq!(
            format_duration(Duration::MAX),
            "213503982334601d7h15s999ms999us999ns"
        );
    }

    #[test]
    fn waits_round_up_to_the_millisecond() {
        assert_eq!(format_wait(Duration::from_nanos(1)), "1ms");
        assert_eq!(format_wait(Duration::from_micros(33_333)), "34ms");
        assert_eq!(format_wait(Duration::from_millis(1250)), "1s250ms");
        assert_eq!(format_wait(Duration::ZERO), "0s");
    }
}

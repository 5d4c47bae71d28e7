//! `status NAME`'s lines on an adaptive semaphore: the capacity's last change with its reason,
//! then the controller, the reporters and the window's inputs.

use crate::sidecar::adaptive_view::AdaptiveView;
use std::time::{Duration, UNIX_EPOCH};

/// Two lines (one while no controller has stepped yet), each indented under the table.
pub fn lines(a: &AdaptiveView) -> String {
    let reporters = match a.reporters {
        1 => "1 reporter".to_string(),
        n => format!("{n} reporters"),
    };
    let Some(d) = &a.last else {
        return format!("  adaptive: no controller step yet ({reporters})");
    };
    let at = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(d.at_unix_ms));
    let change = if d.to == d.from {
        format!("capacity {} held at {at}", d.to)
    } else {
        format!("capacity {} → {} at {at}", d.from, d.to)
    };
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1} ms"));
    format!(
        "  adaptive: {change}: {}\n  controller {}, {reporters}; last window: {} ok, {} dropped, p50 {}, baseline {}",
        d.reason,
        d.controller,
        d.ok,
        d.dropped,
        ms(d.p50_ms),
        ms(d.baseline_ms),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sidecar::adaptive_view::DecisionView;

    #[test]
    fn says_the_change_and_its_reason() {
        let mut a = AdaptiveView {
            reporters: 2,
            last: None,
        };
        assert_eq!(
            lines(&a),
            "  adaptive: no controller step yet (2 reporters)"
        );
        a.last = Some(DecisionView {
            from: 10,
            to: 5,
            reason: "12% dropped".into(),
            ok: 7,
            dropped: 1,
            p50_ms: Some(41.25),
            peak_in_flight: 9,
            baseline_ms: None,
            controller: "host-a/1".into(),
            at_unix_ms: 0,
        });
        let text = lines(&a);
        assert!(
            text.starts_with("  adaptive: capacity 10 → 5 at 1970-01-01T00:00:00Z: 12% dropped\n"),
            "{text}"
        );
        assert!(text.ends_with("controller host-a/1, 2 reporters; last window: 7 ok, 1 dropped, p50 41.2 ms, baseline -"), "{text}");
    }
}

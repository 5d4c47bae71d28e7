//! Latency samples and their percentiles (nearest rank over a sorted Vec), and how figures are
//! printed.

use std::time::Duration;

/// Latencies of one kind of operation, sorted.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    sorted: Vec<Duration>,
}

impl Samples {
    pub fn new(mut samples: Vec<Duration>) -> Samples {
        samples.sort_unstable();
        Samples { sorted: samples }
    }

    /// Both sample sets together (e.g. the same measurement made before and after a peer's).
    pub fn merged(&self, other: &Samples) -> Samples {
        Samples::new([self.sorted.as_slice(), other.sorted.as_slice()].concat())
    }

    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    /// The `q` quantile (0..=1) by nearest rank; zero when empty.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.sorted.is_empty() {
            return Duration::ZERO;
        }
        let rank = (q * self.sorted.len() as f64).ceil() as usize;
        self.sorted[rank.clamp(1, self.sorted.len()) - 1]
    }

    pub fn p50(&self) -> Duration {
        self.quantile(0.50)
    }

    pub fn p99(&self) -> Duration {
        self.quantile(0.99)
    }
}

/// A duration in milliseconds with 3 significant digits, e.g. `0.0091`, `0.812`, `4.21`, `12.3`.
pub fn ms(d: Duration) -> String {
    let v = d.as_secs_f64() * 1e3;
    if v == 0.0 {
        "0".to_string()
    } else if v < 0.01 {
        format!("{v:.4}")
    } else if v < 1.0 {
        format!("{v:.3}")
    } else if v < 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

/// `p50 / p99` in ms.
pub fn p50_p99(s: &Samples) -> String {
    format!("{} / {}", ms(s.p50()), ms(s.p99()))
}

/// `a / b`, or `n/a` when `b` is zero.
pub fn ratio(a: Duration, b: Duration) -> Option<f64> {
    (!b.is_zero()).then(|| a.as_secs_f64() / b.as_secs_f64())
}

/// A ratio as `1.23×`, or `n/a`.
pub fn times(r: Option<f64>) -> String {
    r.map_or_else(|| "n/a".to_string(), |r| format!("{r:.2}×"))
}

/// A goal printed next to its figure: goals, not assertions.
pub fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "**not met**"
    }
}

/// Bytes in KiB with one decimal.
pub fn kib(bytes: f64) -> String {
    format!("{:.1} KiB", bytes / 1024.0)
}

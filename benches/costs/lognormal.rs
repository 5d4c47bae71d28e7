//! Token costs drawn from a lognormal distribution of mean 800 and 99th percentile 8,000
//! (issue 42's LLM scenario), by Box-Muller over `fastrand`.

/// The distribution's mean and 99th percentile.
pub const MEAN: f64 = 800.0;
pub const P99: f64 = 8_000.0;
/// The standard normal's 99th percentile.
const Z99: f64 = 2.326_347_874;
/// The most a call may use: a model's context window.
pub const CONTEXT: u64 = 32_000;

/// `(mu, sigma)` of the underlying normal: mean = e^(mu + sigma²/2), p99 = e^(mu + z99·sigma),
/// so sigma²/2 − z99·sigma + ln(p99/mean) = 0 (the smaller root).
pub fn parameters() -> (f64, f64) {
    let c = (P99 / MEAN).ln();
    let sigma = Z99 - (Z99 * Z99 - 2.0 * c).sqrt();
    ((MEAN).ln() - sigma * sigma / 2.0, sigma)
}

/// One cost, at least 1, at most [`CONTEXT`].
pub fn draw(rng: &mut fastrand::Rng, (mu, sigma): (f64, f64)) -> u64 {
    let (u1, u2) = (rng.f64().max(f64::MIN_POSITIVE), rng.f64());
    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    ((mu + sigma * z).exp().round() as u64).clamp(1, CONTEXT)
}

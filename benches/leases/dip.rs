//! Row 3's pace around a kill, from the admitted checks counted per 5 ms bin (by their end):
//! the pace before, the dip's depth (the slowest 50 ms) and its length (from the kill until
//! admissions are back at ≥ `BACK` × the pace before for `HOLD`).

use crate::bins::WIDTH;

/// "Back": at least this share of the pace before the kills.
pub const BACK: f64 = 0.9;
/// … for this long, in bins (200 ms).
pub const HOLD: usize = (200_000_000 / WIDTH) as usize;
/// The dip's depth is the slowest window of this many bins (50 ms).
const LOW: usize = (50_000_000 / WIDTH) as usize;

/// Admitted checks a second over bins `from..to` (0 when empty).
pub fn pace(series: &[u64], from: usize, to: usize) -> f64 {
    let to = to.min(series.len());
    if from >= to {
        return 0.0;
    }
    let n: u64 = series[from..to].iter().sum();
    n as f64 / ((to - from) as f64 * WIDTH as f64 / 1e9)
}

/// What followed one kill, within its phase (until the next kill or the run's end).
#[derive(Debug, Clone, Copy)]
pub struct Dip {
    /// Admitted/s in the slowest 50 ms of the phase.
    pub lowest: f64,
    /// From the kill until admissions were back, ms; `None`: not back within the phase.
    pub ms: Option<f64>,
    /// Admitted/s from the kill until they were back (`None`: no dip).
    pub during: Option<f64>,
    /// The bin where admissions were back (the phase's end when they were not).
    pub back_at: usize,
}

/// The dip after a kill at bin `kill`, looked for in bins `kill..end`, against `before`
/// (admitted/s). No 50 ms window under `BACK × before`: no dip (0 ms). Otherwise back is the
/// first bin after the slowest window that starts `HOLD` bins at ≥ `BACK × before`.
pub fn after_kill(series: &[u64], kill: usize, end: usize, before: f64) -> Dip {
    let end = end.min(series.len());
    let want = BACK * before;
    let (low_at, lowest) = (kill..end.saturating_sub(LOW).max(kill + 1))
        .map(|i| (i, pace(series, i, i + LOW)))
        .fold((kill, f64::INFINITY), |m, w| if w.1 < m.1 { w } else { m });
    let back = if lowest >= want {
        Some(kill)
    } else {
        (low_at + LOW..end.saturating_sub(HOLD)).find(|&i| pace(series, i, i + HOLD) >= want)
    };
    let back_at = back.unwrap_or(end);
    Dip {
        lowest: if lowest.is_finite() { lowest } else { 0.0 },
        ms: back.map(|b| ((b - kill) as u64 * WIDTH) as f64 / 1e6),
        during: (back_at > kill).then(|| pace(series, kill, back_at)),
        back_at,
    }
}

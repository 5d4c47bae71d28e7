//! Over-admission with bounded memory: at 1,000,000/s a run admits millions of checks, too
//! many to keep each one's (start, end) for `rate_history::worst_excess` (O(n²)). Each caller
//! counts its admitted checks instead in bins of `WIDTH` from the run's start: by the bin
//! holding the whole [start, end] (a check straddling a bin edge is counted in none: it can
//! only make the check more lenient, never blame the limiter), and by the bin of its end.
//!
//! Two checks, both sound: every interval made of whole bins against GCRA's `burst + len / T`
//! (`worst_excess` over one event per bin), and, since the run starts on a bucket the bench
//! emptied (one `check_n(burst)` at `drained`), the checks ended by each bin's end against
//! `(bin end − drained) / T`: no burst left to hide an excess in.

use clusterlimit::testing::rate_history::{gcra_bound, worst_excess, Admitted};
use clusterlimit::Quota;

/// Bin width, ns: 5 ms (1,000 bins in a 5 s run; the interval check is O(bins²)).
pub const WIDTH: u64 = 5_000_000;

/// Admitted checks counted per bin.
#[derive(Debug, Clone)]
pub struct Bins {
    /// Unix ns of bin 0's start.
    base: u64,
    inside: Vec<u64>,
    by_end: Vec<u64>,
    /// Checks counted in no `inside` bin (across an edge, or outside the run).
    pub straddled: u64,
}

/// What the two checks found, in admitted units above the bound (≤ 0: exact).
#[derive(Debug, Clone, Copy)]
pub struct Exactness {
    pub interval_excess: f64,
    pub since_drain_excess: f64,
    /// Share of the admitted checks the interval check counted.
    pub counted: f64,
}

impl Exactness {
    pub fn exact(&self) -> bool {
        self.interval_excess <= 0.0 && self.since_drain_excess <= 0.0
    }
}

impl Bins {
    /// Bins covering `len_ns` from `base` (a little more: a check ending after the run).
    pub fn new(base: u64, len_ns: u64) -> Bins {
        let n = (len_ns / WIDTH + 200) as usize;
        Bins {
            base,
            inside: vec![0; n],
            by_end: vec![0; n],
            straddled: 0,
        }
    }

    fn bin(&self, ns: u64) -> Option<usize> {
        let i = usize::try_from(ns.checked_sub(self.base)? / WIDTH).ok()?;
        (i < self.inside.len()).then_some(i)
    }

    /// One admitted check that ran from `start` to `end` (Unix ns).
    pub fn record(&mut self, start: u64, end: u64) {
        let (inside, by_end) = self.place(start, end);
        match inside {
            Some(a) => self.inside[a] += 1,
            None => self.straddled += 1,
        }
        if let Some(b) = by_end {
            self.by_end[b] += 1;
        }
    }

    /// Where a check from `start` to `end` counts: its `inside` bin (`None`: across an edge
    /// or outside the run, a straddled one) and its bin by end (`None` past the last bin:
    /// counted nowhere by end, which only loosens the check).
    pub fn place(&self, start: u64, end: u64) -> (Option<usize>, Option<usize>) {
        let inside = match (self.bin(start), self.bin(end)) {
            (Some(a), Some(b)) if a == b => Some(a),
            _ => None,
        };
        (inside, self.bin(end))
    }

    /// Adds counts another process made in bins like these (same base and length): `inside`
    /// and `by_end` checks in bin `i`. False when there is no bin `i`.
    pub fn add_at(&mut self, i: usize, inside: u64, by_end: u64) -> bool {
        if i >= self.inside.len() {
            return false;
        }
        self.inside[i] += inside;
        self.by_end[i] += by_end;
        true
    }

    /// Admitted checks counted per bin by their end (row 3's pace over time).
    pub fn by_end(&self) -> &[u64] {
        &self.by_end
    }

    /// The bin of Unix ns `ns` (0 before the run; the last bin after it).
    pub fn bin_at(&self, ns: u64) -> usize {
        let i = ns.saturating_sub(self.base) / WIDTH;
        usize::try_from(i).map_or(self.inside.len() - 1, |i| i.min(self.inside.len() - 1))
    }

    /// Adds another caller's counts (same base and length).
    pub fn merge(&mut self, other: &Bins) {
        for (a, b) in self.inside.iter_mut().zip(&other.inside) {
            *a += b;
        }
        for (a, b) in self.by_end.iter_mut().zip(&other.by_end) {
            *a += b;
        }
        self.straddled += other.straddled;
    }

    /// Both checks for `quota`, its bucket emptied at `drained` (Unix ns, the drain's start).
    pub fn exactness(&self, quota: &Quota, drained: u64) -> Exactness {
        let events: Vec<Admitted> = (self.inside.iter().enumerate())
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| Admitted {
                start: self.base + i as u64 * WIDTH,
                end: self.base + (i as u64 + 1) * WIDTH,
                cost: n,
            })
            .collect();
        let interval = worst_excess(&events, |len| gcra_bound(quota, len)).over;
        let t = quota.emission_interval_ns() as f64;
        let mut ended = 0u64;
        let mut since_drain = f64::MIN;
        for (i, &n) in self.by_end.iter().enumerate() {
            ended += n;
            let bin_end = self.base + (i as u64 + 1) * WIDTH;
            since_drain =
                since_drain.max(ended as f64 - bin_end.saturating_sub(drained) as f64 / t);
        }
        let inside: u64 = self.inside.iter().sum();
        Exactness {
            interval_excess: if events.is_empty() { 0.0 } else { interval },
            since_drain_excess: since_drain,
            counted: inside as f64 / (inside + self.straddled).max(1) as f64,
        }
    }
}

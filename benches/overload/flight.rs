//! Calls in flight across all replicas of a run, and each admission's history for the check
//! against the stored capacity (record.rs). A call counts from the moment its gate admitted
//! it (the acquire returned) until its answer, before its permit is released: a sub-interval
//! of the time the store counts its permit as held, so this count never exceeds the store's.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use tokio::time::Instant;

/// One admission: when its call started waiting and was admitted (seconds from the run's
/// start), and the calls in flight with it.
#[derive(Debug, Clone, Copy)]
pub struct Admission {
    pub asked: f64,
    pub admitted: f64,
    pub in_flight: usize,
}

pub struct Flight {
    start: Instant,
    now: AtomicUsize,
    admissions: Mutex<Vec<Admission>>,
}

impl Flight {
    pub fn new(start: Instant) -> Flight {
        Flight {
            start,
            now: AtomicUsize::new(0),
            admissions: Mutex::new(Vec::new()),
        }
    }

    /// A call admitted now that asked at `asked`; it leaves the count when the guard drops.
    pub fn enter(&self, asked: Instant) -> InFlight<'_> {
        let in_flight = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        let admission = Admission {
            asked: self.secs(asked),
            admitted: self.secs(Instant::now()),
            in_flight,
        };
        self.admissions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(admission);
        InFlight(self)
    }

    /// Seconds from the run's start to `t`.
    pub fn secs(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.start).as_secs_f64()
    }

    /// The admissions so far, in order.
    pub fn admissions(&self) -> Vec<Admission> {
        self.admissions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// A call in flight; dropping it takes it out of the count.
pub struct InFlight<'a>(&'a Flight);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

//! What one Limiter saw of one adaptive semaphore during the current window: the outcomes its
//! holders reported and the most permits it held at once. Permits write here on release; the
//! window task (`control.rs`) takes the sum at each window's end.

use super::window::{Outcome, WindowSummary};
use std::sync::{Arc, Mutex, PoisonError};

/// This Limiter's window in progress. Cheap to share; never blocks for long (one short lock).
#[derive(Debug, Default)]
pub(crate) struct Reporter {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    window: WindowSummary,
    /// Permits held now through this Limiter.
    held: u64,
}

impl Reporter {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `permits` were granted: counted in flight until [`Held`] goes.
    pub(crate) fn granted(self: &Arc<Self>, permits: u32) -> Held {
        let mut st = self.state();
        st.held = st.held.saturating_add(u64::from(permits));
        let held = st.held;
        st.window.in_flight(held);
        Held {
            reporter: self.clone(),
            permits,
            outcome: Outcome::Ignore,
        }
    }

    /// The window that just ended; the next one starts with the permits held now.
    pub(crate) fn take(&self) -> WindowSummary {
        let mut st = self.state();
        let mut next = WindowSummary::default();
        next.in_flight(st.held);
        std::mem::replace(&mut st.window, next)
    }

    /// Permits held now through this Limiter.
    #[cfg(test)]
    pub(crate) fn held(&self) -> u64 {
        self.state().held
    }
}

/// One grant's share of the window: records its outcome when the permit goes (released,
/// dropped or lost), so every permit leaves the in-flight count exactly once.
#[derive(Debug)]
pub(crate) struct Held {
    reporter: Arc<Reporter>,
    permits: u32,
    outcome: Outcome,
}

impl Held {
    /// What the work under the permit came to (the last call wins).
    pub(crate) fn set(&mut self, outcome: Outcome) {
        self.outcome = outcome;
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut st = self.reporter.state();
        st.held = st.held.saturating_sub(u64::from(self.permits));
        st.window.record(self.outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn outcomes_land_in_the_window_and_permits_leave_the_count_once() {
        let r = Arc::new(Reporter::default());
        let mut a = r.granted(2);
        let b = r.granted(1);
        assert_eq!(r.held(), 3);
        a.set(Outcome::Success(Duration::from_millis(8)));
        drop(a);
        drop(b); // no outcome said: not counted
        let w = r.take();
        assert_eq!((w.ok, w.dropped, w.peak_in_flight), (1, 0, 3));
        assert_eq!(r.held(), 0);
        let c = r.granted(1);
        let next = r.take();
        assert_eq!((next.samples(), next.peak_in_flight), (0, 1));
        drop(c);
        assert_eq!(r.take().peak_in_flight, 1, "held at the window's start");
    }
}

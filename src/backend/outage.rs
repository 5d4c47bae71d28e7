//! Logging of a store that keeps failing: one warning when failures start, one line when they
//! stop (with how many there were), and only debug lines in between. A keeper that retries
//! every 200 ms during a 30 s outage logs 2 lines, not 150.

/// Counts consecutive failures of one background loop (a keepalive, a watch, a probe).
#[derive(Debug, Default)]
pub(crate) struct Outage {
    failures: u64,
    /// The store address the run of failures was against (for the recovery line).
    store: String,
}

impl Outage {
    /// Records a failure of `what` against the store at `store` (its address, as the user
    /// gave it); warns on the first of a run, logs the rest at debug level.
    pub(crate) fn failed(&mut self, what: &str, store: &str, error: &dyn std::fmt::Display) {
        self.failures += 1;
        if self.failures == 1 {
            self.store = store.to_string();
            tracing::warn!(%store, "{what} to {store} failed: {error}; retrying (warning once until it recovers)");
        } else {
            tracing::debug!(%store, failures = self.failures, "{what} to {store} failed again: {error}");
        }
    }

    /// Records a success; after a run of failures, says it recovered and after how many.
    pub(crate) fn ok(&mut self, what: &str) {
        if self.failures > 0 {
            let store = &self.store;
            tracing::info!(%store, failures = self.failures, "{what} to {store} works again after {} failed attempt(s)", self.failures);
            self.failures = 0;
        }
    }

    /// Failures since the last success.
    #[cfg(test)]
    pub(crate) fn failures(&self) -> u64 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_a_run_and_resets_on_success() {
        let mut o = Outage::default();
        o.failed("probe", "etcd at http://127.0.0.1:2379", &"boom");
        o.failed("probe", "etcd at http://127.0.0.1:2379", &"boom");
        assert_eq!(o.failures(), 2);
        o.ok("probe");
        assert_eq!(o.failures(), 0);
    }
}

//! The keys a sweeper will delete, each with its target and due time, under one lock (the
//! sweep takes them, a failed delete puts them back, the scan skips them).

use crate::backend::due_queue::DueQueue;
use crate::backend::expiry::{nanos, unix_nanos_now};
use crate::backend::lock;
use std::sync::Mutex;
use std::time::Duration;

/// Pause before a key whose delete failed is tried again.
pub(crate) const RETRY: Duration = Duration::from_secs(1);

/// The keys remembered for deletion (see [`DueQueue`]).
pub(crate) struct Remembered<T>(Mutex<DueQueue<T>>);

impl<T> Default for Remembered<T> {
    fn default() -> Self {
        Remembered(Mutex::new(DueQueue::default()))
    }
}

impl<T: Copy> Remembered<T> {
    /// Whether the sweep will delete `key` (so the scan leaves it).
    pub(crate) fn contains(&self, key: &str) -> bool {
        lock(&self.0).contains(key)
    }

    /// Puts back a key whose delete failed, [`RETRY`] from now, unless it was written again
    /// meanwhile (that record supersedes this one).
    pub(crate) fn again(&self, key: &str, target: T) {
        let at = unix_nanos_now().saturating_add(nanos(RETRY));
        let mut queue = lock(&self.0);
        if !queue.contains(key) {
            queue.insert(key, target, at);
        }
    }

    pub(super) fn insert_all<'a>(&self, records: impl IntoIterator<Item = (&'a str, T, u64)>) {
        let mut queue = lock(&self.0);
        for (key, target, due) in records {
            queue.insert(key, target, due);
        }
    }

    pub(super) fn len(&self) -> usize {
        lock(&self.0).len()
    }

    pub(super) fn next_due(&self) -> Option<u64> {
        lock(&self.0).next_due()
    }

    pub(super) fn take_due(&self, now: u64, most: usize) -> Vec<(String, T)> {
        lock(&self.0).take_due(now, most)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_never_overrides_a_newer_write() {
        let remembered = Remembered::default();
        remembered.again("/r/a/k", 1u32);
        assert!(remembered.contains("/r/a/k"));
        assert!(
            remembered.take_due(0, 10).is_empty(),
            "due a retry pause later"
        );
        assert_eq!(
            remembered.take_due(u64::MAX, 10),
            vec![("/r/a/k".to_string(), 1)]
        );
        remembered.insert_all([("/r/a/k", 3u32, 9)]);
        remembered.again("/r/a/k", 1);
        assert_eq!(
            remembered.take_due(u64::MAX, 10),
            vec![("/r/a/k".to_string(), 3)]
        );
    }
}

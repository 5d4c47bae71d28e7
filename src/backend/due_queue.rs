//! The keys a writer must delete later, each at its due time: one record per key (the
//! latest write wins), earliest due first, bounded in size. Shared by the sweepers of the
//! stores that delete idle rate-limit keys themselves (etcd, ZooKeeper); what a record holds
//! (`T`: the version to delete at) is the store's business.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

/// Most keys remembered at once; later ones are refused (left to the store's slow scan).
pub(crate) const MAX_RECORDS: usize = 1_000_000;

#[derive(Debug, Clone, Copy)]
struct Record<T> {
    target: T,
    due: u64,
    /// Matches the heap entry that is this record's (older entries of the key are stale).
    seq: u64,
}

/// Keys waiting for their due time (Unix ns).
#[derive(Debug)]
pub(crate) struct DueQueue<T> {
    records: HashMap<Arc<str>, Record<T>>,
    /// (due, seq, key), earliest first; entries whose seq no longer matches are skipped.
    heap: BinaryHeap<Reverse<(u64, u64, Arc<str>)>>,
    next_seq: u64,
    full_warned: bool,
}

impl<T> Default for DueQueue<T> {
    fn default() -> Self {
        DueQueue {
            records: HashMap::new(),
            heap: BinaryHeap::new(),
            next_seq: 0,
            full_warned: false,
        }
    }
}

impl<T: Copy> DueQueue<T> {
    /// Remembers `key` with `target`, due at `due`, replacing what was remembered of it.
    /// Past [`MAX_RECORDS`] a new key is not remembered (logged once).
    pub(crate) fn insert(&mut self, key: &str, target: T, due: u64) {
        let key: Arc<str> = match self.records.get_key_value(key) {
            Some((k, _)) => k.clone(),
            None if self.records.len() >= MAX_RECORDS => {
                if !self.full_warned {
                    self.full_warned = true;
                    tracing::warn!(
                        "more than {MAX_RECORDS} rate-limit keys wait for their expiry; later keys \
                         are left to the store's slow scan"
                    );
                }
                return;
            }
            None => Arc::from(key),
        };
        self.next_seq += 1;
        let seq = self.next_seq;
        self.records
            .insert(key.clone(), Record { target, due, seq });
        self.heap.push(Reverse((due, seq, key)));
        // Rewrites of hot keys leave stale heap entries: rebuild before they outgrow the map.
        if self.heap.len() > 2 * self.records.len() + 1024 {
            self.heap = self
                .records
                .iter()
                .map(|(k, r)| Reverse((r.due, r.seq, k.clone())))
                .collect();
        }
    }

    /// Whether `key` is remembered.
    pub(crate) fn contains(&self, key: &str) -> bool {
        self.records.contains_key(key)
    }

    /// Keys remembered.
    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }

    /// The earliest due time, if any key is remembered.
    pub(crate) fn next_due(&mut self) -> Option<u64> {
        // Skip stale entries so the answer is a live record's.
        while let Some(Reverse((_, seq, key))) = self.heap.peek() {
            if self.records.get(key).is_some_and(|r| r.seq == *seq) {
                break;
            }
            self.heap.pop();
        }
        self.heap.peek().map(|Reverse((due, _, _))| *due)
    }

    /// Takes out up to `most` records due at `now`, earliest first.
    pub(crate) fn take_due(&mut self, now: u64, most: usize) -> Vec<(String, T)> {
        let mut out = Vec::new();
        while out.len() < most {
            match self.heap.peek() {
                Some(Reverse((due, _, _))) if *due <= now => {}
                _ => break,
            }
            let Some(Reverse((_, seq, key))) = self.heap.pop() else {
                break;
            };
            if self.records.get(&key).is_some_and(|r| r.seq == seq) {
                if let Some(r) = self.records.remove(&key) {
                    out.push((key.to_string(), r.target));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_record_per_key_the_latest() {
        let mut q = DueQueue::default();
        for v in 0..5000u64 {
            q.insert("/r/a/k", v, 10 + v);
        }
        q.insert("/r/a/j", 7, 5);
        assert_eq!(q.len(), 2);
        assert!(q.heap.len() <= 2 * 2 + 1024 + 1, "stale entries pruned");
        assert_eq!(q.next_due(), Some(5));
        assert_eq!(q.take_due(100, 10), vec![("/r/a/j".to_string(), 7)]);
        assert_eq!(q.next_due(), Some(10 + 4999), "stale entries are skipped");
        assert_eq!(q.take_due(u64::MAX, 10), vec![("/r/a/k".to_string(), 4999)]);
        assert_eq!(q.len(), 0);
        assert!(q.take_due(u64::MAX, 10).is_empty());
        assert_eq!(q.next_due(), None);
    }

    #[test]
    fn takes_at_most_what_is_asked_earliest_first() {
        let mut q = DueQueue::default();
        for i in 0..10u64 {
            q.insert(&format!("k{i}"), i, 100 - i);
        }
        let first = q.take_due(u64::MAX, 3);
        assert_eq!(
            first,
            vec![
                ("k9".to_string(), 9),
                ("k8".to_string(), 8),
                ("k7".to_string(), 7)
            ]
        );
        assert!(q.contains("k0") && !q.contains("k9"));
        assert_eq!(q.take_due(95, 100).len(), 2, "only what is due");
    }
}

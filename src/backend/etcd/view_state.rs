//! A semaphore as a watch-fed view holds it at one revision (`View`): capacity, queue, and on a
//! fair semaphore its record and the entries' tags; what it says about one entry (`Seen`); and
//! the grant the fair rule makes on it (`GrantPlan`). `view.rs` keeps it up to date.

use super::fair_record::{FairState, Tagged};
use super::keys::EntryValue;
use crate::backend::capacity::CapValue;
use crate::backend::waiters::{QueueView, Waiters};
use crate::queue;
use etcd_client::KeyValue;
use std::collections::{BTreeMap, HashMap};

/// Semaphore state at one revision.
#[derive(Debug, Default, Clone)]
pub(super) struct View {
    pub revision: i64,
    pub(super) cap: Option<CapValue>,
    /// The capacity key's `mod_revision` (a grant compares it: no grant decided before a
    /// resize lands after it).
    cap_revision: i64,
    /// create revision → weight
    entries: BTreeMap<i64, u32>,
    /// key → create revision, to place delete events
    pub(super) by_key: HashMap<Vec<u8>, i64>,
    /// A fair semaphore's record (classes and marks); `None` on a plain one.
    pub(super) fair: Option<FairState>,
    /// create revision → flow, class and weight, of the entries that name them
    tags: HashMap<i64, crate::fair::FairTag>,
}

/// A grant decided from a view: the fair record to write if it is still at `fair_revision`.
#[derive(Debug, Clone)]
pub(super) struct GrantPlan {
    pub fair_revision: i64,
    /// The capacity key's revision the decision read: a grant decided before a shrink must not
    /// land after it.
    pub cap_revision: i64,
    /// The revision the decision's queue is exact at: a grant applies only if no entry was
    /// queued since (one the decision did not see might be next by the rule).
    pub seen_revision: i64,
    pub record: super::fair_record::FairRecord,
    pub grants: Vec<u64>,
}

/// Where a semaphore's keys are, for a view to tell them apart.
#[derive(Debug, Clone)]
pub(super) struct ViewKeys {
    pub cap: String,
    pub fair: String,
    pub queue_prefix: String,
}

impl View {
    /// Builds a view from a range read of the semaphore's prefix at `revision`.
    pub(super) fn from_kvs(revision: i64, keys: &ViewKeys, kvs: &[KeyValue]) -> View {
        let mut view = View {
            revision,
            ..View::default()
        };
        for kv in kvs {
            view.put(keys, kv);
        }
        view
    }

    pub(super) fn put(&mut self, keys: &ViewKeys, kv: &KeyValue) {
        if kv.key() == keys.cap.as_bytes() {
            // Unreadable capacity: keep the last good one rather than guess.
            if let Some(cap) = CapValue::parse(kv.value()) {
                self.cap = Some(cap);
                self.cap_revision = kv.mod_revision();
            }
        } else if kv.key() == keys.fair.as_bytes() {
            // Unreadable: no marks known, so nothing granted from the view (never a guess).
            self.fair = FairState::parse(kv);
        } else if kv.key().starts_with(keys.queue_prefix.as_bytes()) {
            let rev = kv.create_revision();
            let value = EntryValue::parse(kv.value());
            let tag = value.as_ref().and_then(EntryValue::tag);
            self.entries
                .insert(rev, value.map_or(u32::MAX, |v| v.permits));
            self.by_key.insert(kv.key().to_vec(), rev);
            match tag {
                Some(tag) => self.tags.insert(rev, tag),
                None => self.tags.remove(&rev),
            };
        }
    }

    /// The marks of a fair semaphore (`None`: a plain one).
    pub(super) fn marks(&self) -> Option<&std::collections::HashSet<u64>> {
        self.fair.as_ref().map(|f| &f.marks)
    }

    /// When the fair rule, applied to this view, grants one of our `waiters` now: the grant
    /// to write (`fair_grants.rs`). Always `None` on a plain semaphore.
    pub(super) fn plan_for(&self, waiters: &Waiters) -> Option<GrantPlan> {
        if self.fair.is_none() || waiters.is_empty() {
            return None;
        }
        let ours = waiters.tokens();
        self.plan(None)
            .filter(|p| p.grants.iter().any(|t| ours.contains(t)))
    }

    /// The grant the fair rule makes on this view (without the entry at `key`: a release
    /// writes it with its delete), if any.
    pub(super) fn plan(&self, without: Option<&[u8]>) -> Option<GrantPlan> {
        let (Some(fair), Some(cap)) = (&self.fair, self.cap) else {
            return None;
        };
        let gone = without.and_then(|k| self.by_key.get(k)).copied();
        let queue: Vec<Tagged> = self
            .entries
            .iter()
            .filter(|(&rev, _)| Some(rev) != gone)
            .map(|(&rev, &permits)| (rev as u64, permits, self.tags.get(&rev).cloned()))
            .collect();
        let (grants, vtimes) = super::fair_record::next_grants(&queue, cap.capacity, fair);
        if grants.is_empty() {
            return None;
        }
        let queued = queue.iter().map(|e| e.0).collect();
        Some(GrantPlan {
            fair_revision: fair.mod_revision,
            cap_revision: self.cap_revision,
            seen_revision: self.revision,
            record: fair.with_grants(&queued, &grants, vtimes),
            grants,
        })
    }

    /// See [`SemWatch::decide_own_put`].
    pub(super) fn decide_own_put(&self, token: u64, permits: u32) -> Option<Seen> {
        let revision = u64::try_from(self.revision).unwrap_or(0);
        if revision >= token {
            return Some(Seen::decide(self.cap, self.entries(), self.marks(), token));
        }
        if revision.checked_add(1) != Some(token) {
            return None;
        }
        let own = queue::Entry { token, permits };
        let entries = self.entries().chain(std::iter::once(own));
        Some(Seen::decide(self.cap, entries, self.marks(), token))
    }

    pub(super) fn delete(&mut self, keys: &ViewKeys, key: &[u8]) {
        if key == keys.cap.as_bytes() {
            self.cap = None;
        } else if key == keys.fair.as_bytes() {
            self.fair = None;
        } else if let Some(rev) = self.by_key.remove(key) {
            self.entries.remove(&rev);
            self.tags.remove(&rev);
        }
    }
}

/// What a view (or a read) at a revision at or past an entry's says about that entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    /// No capacity key: the semaphore does not exist.
    NoSemaphore,
    /// The semaphore's capacity, whether the entry holds, and whether the semaphore is fair
    /// (then holding is its grant mark).
    Entry {
        capacity: u32,
        granted: bool,
        fair: bool,
    },
}

impl Seen {
    /// Decides for entry `token` from a capacity and the queue in token order, and on a fair
    /// semaphore its grant marks (`marks`: then an entry holds when queued and marked).
    pub(super) fn decide(
        cap: Option<CapValue>,
        entries: impl IntoIterator<Item = queue::Entry>,
        marks: Option<&std::collections::HashSet<u64>>,
        token: u64,
    ) -> Seen {
        match (cap, marks) {
            (None, _) => Seen::NoSemaphore,
            (Some(c), Some(marks)) => Seen::Entry {
                capacity: c.capacity,
                granted: marks.contains(&token) && entries.into_iter().any(|e| e.token == token),
                fair: true,
            },
            (Some(c), None) => Seen::Entry {
                capacity: c.capacity,
                granted: queue::holds(entries, c.capacity, c.floor, token) == Some(true),
                fair: false,
            },
        }
    }
}

impl QueueView for View {
    fn capacity(&self) -> Option<(u32, u64)> {
        self.cap.map(|c| (c.capacity, c.floor))
    }
    fn entries(&self) -> impl Iterator<Item = queue::Entry> + '_ {
        self.entries.iter().map(|(&rev, &permits)| queue::Entry {
            token: rev as u64,
            permits,
        })
    }
    fn contains(&self, token: u64) -> bool {
        self.entries.contains_key(&(token as i64))
    }
    fn has_seen(&self, token: u64) -> bool {
        self.revision >= token as i64
    }
    fn marked(&self, token: u64) -> Option<bool> {
        self.marks().map(|m| m.contains(&token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::waiters::{outcome, WaitOutcome};

    fn view(cap: u32, entries: &[(i64, u32)], revision: i64) -> View {
        View {
            revision,
            cap: Some(CapValue {
                capacity: cap,
                floor: 0,
            }),
            entries: entries.iter().copied().collect(),
            by_key: entries
                .iter()
                .map(|&(r, _)| (format!("k{r}").into_bytes(), r))
                .collect(),
            fair: None,
            tags: HashMap::new(),
            cap_revision: 0,
        }
    }

    #[test]
    fn own_put_right_after_the_view_is_decided_without_its_event() {
        let entry = |granted| {
            Some(Seen::Entry {
                capacity: 2,
                granted,
                fair: false,
            })
        };
        // view at 9, our put is revision 10: the view plus our entry is the semaphore at 10
        let v = view(2, &[(5, 1), (9, 1)], 9);
        assert_eq!(v.decide_own_put(10, 1), entry(false), "two ahead of us");
        let v = view(2, &[(5, 1)], 9);
        assert_eq!(v.decide_own_put(10, 1), entry(true));
        assert_eq!(
            v.decide_own_put(10, 2),
            entry(false),
            "weight 2 behind 1 of 2"
        );
        // a write we have not seen (revision 10) may be ahead of our put at 11: wait
        assert_eq!(v.decide_own_put(11, 1), None);
        // the view already applied our put: decide from it
        let v = view(2, &[(5, 1), (10, 1)], 12);
        assert_eq!(v.decide_own_put(10, 1), entry(true));
        assert_eq!(
            View::default().decide_own_put(1, 1),
            Some(Seen::NoSemaphore),
            "revision 0, put 1: no capacity key"
        );
    }

    #[test]
    fn seen_decides_as_a_read_at_the_views_revision_would() {
        let v = view(2, &[(5, 1), (7, 1), (9, 1)], 9);
        let entry = |granted| Seen::Entry {
            capacity: 2,
            granted,
            fair: false,
        };
        assert_eq!(Seen::decide(v.cap, v.entries(), None, 7), entry(true));
        assert_eq!(Seen::decide(v.cap, v.entries(), None, 9), entry(false));
        assert_eq!(
            Seen::decide(v.cap, v.entries(), None, 8),
            entry(false),
            "gone"
        );
        assert_eq!(Seen::decide(None, v.entries(), None, 7), Seen::NoSemaphore);
    }

    #[test]
    fn outcomes() {
        let v = view(2, &[(5, 1), (7, 1), (9, 1)], 9);
        assert_eq!(outcome(&v, 7, 1), Some(WaitOutcome::Granted));
        assert_eq!(outcome(&v, 9, 1), None);
        assert_eq!(outcome(&v, 8, 1), Some(WaitOutcome::Gone));
        assert_eq!(outcome(&v, 12, 1), None, "not seen yet");
        let v = view(1, &[(5, 1), (7, 2)], 9);
        assert_eq!(outcome(&v, 7, 2), Some(WaitOutcome::TooHeavy(1)));
        let mut v = view(1, &[(5, 1)], 9);
        let keys = ViewKeys {
            cap: "cap".into(),
            fair: "fair".into(),
            queue_prefix: "q/".into(),
        };
        v.delete(&keys, b"cap");
        assert_eq!(outcome(&v, 5, 1), Some(WaitOutcome::NoSemaphore));
    }
}

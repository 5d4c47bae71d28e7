//! Property test of the fair grant rule (`clusterlimit::fair::next_grants`): random sequences of
//! arrivals, releases, cancellations and resizes, with `next_grants` applied after every event
//! (its grants are marked, as a store would), checked against a deliberately simple reference
//! (the rule as one sort of candidates, recomputed from scratch) and against the rule's
//! promises: no grant beyond the capacity, no revocation, FIFO within a flow, no starvation once
//! arrivals stop, and exactly the FIFO rule (`queue::holders`) with one flow and one class.
//! The scenarios with their numbers are in `fair_model/scenarios.rs`.

use clusterlimit::fair::{next_grants, Classes, FairEntry, Share};
use clusterlimit::queue::{self, Entry};
use proptest::prelude::*;
use std::cmp::Ordering;
use std::collections::BTreeMap;

#[path = "fair_model/scenarios.rs"]
mod scenarios;

// --- The reference: the rule written as a sort -------------------------------------------------

/// `num / den`, compared exactly; `den` is at least 1.
#[derive(Debug, Clone, Copy)]
struct Frac(u64, u64);

impl Ord for Frac {
    fn cmp(&self, o: &Frac) -> Ordering {
        (u128::from(self.0) * u128::from(o.1)).cmp(&(u128::from(o.0) * u128::from(self.1)))
    }
}
impl PartialOrd for Frac {
    fn partial_cmp(&self, o: &Frac) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl PartialEq for Frac {
    fn eq(&self, o: &Frac) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Frac {}

/// Every flow's earliest waiter is a candidate, sorted by (its class's held / min with min 0
/// last, its class's earliest waiter, its flow's held / weight, its token); the first is granted
/// if it fits, else nothing more is. Recomputed from scratch after each grant.
fn reference(entries: &[FairEntry], capacity: u32, floor: u64, mins: &[u32]) -> Vec<u64> {
    let mut held: Vec<bool> = entries
        .iter()
        .map(|e| e.granted || e.token <= floor)
        .collect();
    let mut out = Vec::new();
    loop {
        let sum = |f: &dyn Fn(&FairEntry) -> bool| -> u64 {
            let it = entries.iter().zip(&held).filter(|(e, &h)| h && f(e));
            it.map(|(e, _)| u64::from(e.permits)).sum()
        };
        let waiting: Vec<usize> = (0..entries.len()).filter(|&i| !held[i]).collect();
        let mut candidates = Vec::new();
        for &i in &waiting {
            let e = entries[i];
            let same_flow = |o: &FairEntry| o.class == e.class && o.flow == e.flow;
            if waiting
                .iter()
                .any(|&j| same_flow(&entries[j]) && entries[j].token < e.token)
            {
                continue; // not the flow's earliest waiter
            }
            let min = u64::from(mins.get(e.class).copied().unwrap_or(0));
            let class_held = sum(&|o| o.class == e.class);
            let class_key = if min == 0 {
                (1, Frac(class_held, 1))
            } else {
                (0, Frac(class_held, min))
            };
            let class_first = waiting
                .iter()
                .map(|&j| entries[j])
                .filter(|o| o.class == e.class);
            let class_first = class_first.map(|o| o.token).min().unwrap();
            let newest = entries
                .iter()
                .filter(|o| same_flow(o))
                .max_by_key(|o| o.token)
                .unwrap();
            let weight = u64::from(newest.weight.max(1));
            let flow_key = Frac(sum(&same_flow), weight);
            // Virtual time: nothing recorded, so every flow starts at 0 and advances by each
            // grant of this call (permits × scale / weight, rounded down per grant).
            let vtime: u64 = entries
                .iter()
                .zip(&held)
                .filter(|(o, &h)| h && same_flow(o) && !(o.granted || o.token <= floor))
                .map(|(o, _)| u64::from(o.permits) * clusterlimit::fair::VTIME_SCALE / weight)
                .sum();
            candidates.push(((class_key, class_first, flow_key, vtime, e.token), i));
        }
        candidates.sort();
        let Some(&(_, i)) = candidates.first() else {
            break;
        };
        if sum(&|_| true) + u64::from(entries[i].permits) > u64::from(capacity) {
            break;
        }
        held[i] = true;
        out.push(entries[i].token);
    }
    out
}

// --- A run: events, the rule after each, the checks -------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    Arrive {
        flow: u64,
        class: usize,
        permits: u32,
        weight: u32,
    },
    /// Release the n-th holder (mod count).
    Release(usize),
    /// Cancel the n-th waiter (mod count).
    Cancel(usize),
    Resize(u32),
}

struct Run {
    capacity: u32,
    floor: u64,
    classes: Classes,
    entries: Vec<FairEntry>,
    next_token: u64,
    /// The FIFO rule's floor is kept (and passed) only with one flow and one class, where it
    /// must change nothing; a fair semaphore's marks make it unnecessary.
    fifo: bool,
    /// Per (class, flow): the last token granted.
    last_granted: BTreeMap<(usize, u64), u64>,
}

impl Run {
    fn new(capacity: u32, classes: Classes, fifo: bool) -> Run {
        assert!(classes.check(capacity).is_ok());
        let (floor, entries, next_token) = (0, Vec::new(), 1);
        let last_granted = BTreeMap::new();
        Run {
            capacity,
            floor,
            classes,
            entries,
            next_token,
            fifo,
            last_granted,
        }
    }

    fn used(&self) -> u64 {
        let held = self.entries.iter().filter(|e| e.granted);
        held.map(|e| u64::from(e.permits)).sum()
    }

    fn apply(&mut self, op: &Op) {
        let holders: Vec<usize> = (0..self.entries.len())
            .filter(|&i| self.entries[i].granted)
            .collect();
        let waiters: Vec<usize> = (0..self.entries.len())
            .filter(|&i| !self.entries[i].granted)
            .collect();
        match *op {
            Op::Arrive {
                flow,
                class,
                permits,
                weight,
            } => {
                let e = FairEntry::new(self.next_token, permits)
                    .in_flow(flow)
                    .in_class(class);
                self.entries.push(e.with_weight(weight));
                self.next_token += 1;
            }
            Op::Release(n) if !holders.is_empty() => {
                self.entries.remove(holders[n % holders.len()]);
            }
            Op::Cancel(n) if !waiters.is_empty() => {
                self.entries.remove(waiters[n % waiters.len()]);
            }
            Op::Resize(new) => {
                if self.fifo {
                    let q: Vec<Entry> = self.entries.iter().map(entry).collect();
                    self.floor = queue::floor_after_resize(&q, self.capacity, new, self.floor);
                }
                self.capacity = new;
            }
            _ => {}
        }
        self.settle();
    }

    /// `next_grants`, checked, and its grants marked.
    fn settle(&mut self) {
        let before = self.used();
        let grants = next_grants(&self.entries, self.capacity, self.floor, &self.classes);
        let mins = self.classes.mins(self.capacity);
        assert_eq!(
            grants,
            reference(&self.entries, self.capacity, self.floor, &mins)
        );
        for &t in &grants {
            let i = self
                .entries
                .iter()
                .position(|e| e.token == t)
                .expect("granted token exists");
            let e = self.entries[i];
            assert!(!e.granted && e.token > self.floor, "{t} granted twice");
            let key = (e.class, e.flow);
            let earlier = self
                .entries
                .iter()
                .any(|o| (o.class, o.flow) == key && !o.granted && o.token < t);
            assert!(!earlier, "{t} granted before an earlier waiter of its flow");
            assert!(
                self.last_granted.get(&key).is_none_or(|&last| last < t),
                "FIFO in the flow"
            );
            self.last_granted.insert(key, t);
            self.entries[i].granted = true; // whole: all its permits count from now on
        }
        let after = self.used();
        assert!(
            after <= u64::from(self.capacity).max(before),
            "grant beyond the capacity"
        );
        if !grants.is_empty() {
            assert!(
                after <= u64::from(self.capacity),
                "granted into a shrunk capacity"
            );
        }
        if self.fifo {
            let q: Vec<Entry> = self.entries.iter().map(entry).collect();
            let n = queue::holders(q, self.capacity, self.floor);
            let marked: Vec<bool> = self.entries.iter().map(|e| e.granted).collect();
            assert_eq!(
                marked,
                (0..marked.len()).map(|i| i < n).collect::<Vec<_>>(),
                "FIFO rule"
            );
        }
    }

    /// Arrivals have stopped: the oldest holder releases, again and again. Each waiter is
    /// granted within as many releases as there are entries now.
    fn drain(&mut self) {
        let bound = self.entries.len();
        for _ in 0..=bound {
            if self.entries.iter().all(|e| e.granted) {
                return;
            }
            let oldest = self.entries.iter().position(|e| e.granted);
            let oldest = oldest.expect("waiters but no holder: starved");
            self.entries.remove(oldest);
            self.settle();
        }
        panic!("waiters left after {bound} releases");
    }
}

fn entry(e: &FairEntry) -> Entry {
    Entry {
        token: e.token,
        permits: e.permits,
    }
}

fn share() -> impl Strategy<Value = Share> {
    // Up to 3 classes of at most 1 permit or 33% each: they always fit in capacities 3..=8.
    prop_oneof![
        (0u32..=1).prop_map(Share::Permits),
        (0u32..=33).prop_map(Share::percent)
    ]
}

fn op(flows: u64, classes: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..flows, 0..classes, 1u32..=3, 1u32..=3)
            .prop_map(|(flow, class, permits, weight)| Op::Arrive { flow, class, permits, weight }),
        4 => any::<usize>().prop_map(Op::Release),
        1 => any::<usize>().prop_map(Op::Cancel),
        1 => (3u32..=8).prop_map(Op::Resize),
    ]
}

fn case(flows: u64, classes: usize) -> impl Strategy<Value = (u32, Vec<Share>, Vec<Op>)> {
    (
        3u32..=8,
        prop::collection::vec(share(), classes),
        prop::collection::vec(op(flows, classes), 1..200),
    )
}

fn run(capacity: u32, shares: Vec<Share>, ops: &[Op], fifo: bool) {
    let names = (0..shares.len()).map(|i| format!("c{i}"));
    let classes = Classes::new(names.zip(shares)).unwrap();
    let mut run = Run::new(capacity, classes, fifo);
    for op in ops {
        run.apply(op);
    }
    run.drain();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn flows_and_classes_follow_the_reference(
        (capacity, shares, ops) in (1u64..=4, 1usize..=3).prop_flat_map(|(f, c)| case(f, c)),
    ) {
        run(capacity, shares, &ops, false);
    }

    #[test]
    fn one_flow_one_class_is_the_fifo_rule((capacity, shares, ops) in case(1, 1)) {
        run(capacity, shares, &ops, true);
    }

    #[test]
    fn unmarked_queue_with_floor_is_queue_holders(
        permits in prop::collection::vec(0u32..=4, 0..30), capacity in 1u32..=10, floor in 0u64..=35,
    ) {
        let q: Vec<FairEntry> = permits.iter().enumerate().map(|(i, &p)| FairEntry::new(i as u64 + 1, p)).collect();
        let n = queue::holders(q.iter().map(entry), capacity, floor);
        let fifo: Vec<u64> = q[..n].iter().map(|e| e.token).filter(|&t| t > floor).collect();
        prop_assert_eq!(next_grants(&q, capacity, floor, &Classes::single()), fifo);
    }
}

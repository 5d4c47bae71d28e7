//! [`next_grants`]: the fair rule applied to one snapshot of the queue.

use super::classes::Classes;
use super::entry::FairEntry;
use super::rank::{advance, class_order, flow_order};
use std::collections::{BTreeMap, VecDeque};

/// The waiting entries to grant now, in grant order (their tokens): the store marks each one
/// granted. Entries already granted, or with a token at or below `floor` (holding since the
/// capacity was last shrunk), hold and are never returned; nothing is ever revoked.
///
/// Each grant goes to the earliest waiter of the flow chosen by the rule in [`fair`](super):
/// the class with the lowest held / min (ties: its earliest waiter), then within it the flow with
/// the lowest held / weight (ties: its earliest waiter). That entry is granted whole if its
/// permits fit in `capacity` beside everything held; if not, the grants stop there (a heavy
/// entry waits for room and blocks the others, so lighter entries never starve it). `entries`
/// may come in any order; tokens are unique. `classes` gives each class index its guaranteed
/// share ([`Classes::mins`] at this capacity).
///
/// ```
/// use clusterlimit::fair::{next_grants, Classes, FairEntry};
/// // Flow 1 holds 2 of 2 and queues more; flow 2 arrives later. When one permit frees up, the
/// // newcomer of the idle flow is next, and the holder is not revoked.
/// let queue = [
///     FairEntry::new(1, 1).in_flow(1).as_granted(),
///     FairEntry::new(3, 1).in_flow(1),
///     FairEntry::new(4, 1).in_flow(1),
///     FairEntry::new(5, 1).in_flow(2),
/// ];
/// assert_eq!(next_grants(&queue, 2, 0, &Classes::single()), vec![5]);
/// ```
pub fn next_grants(
    entries: &[FairEntry],
    capacity: u32,
    floor: u64,
    classes: &Classes,
) -> Vec<u64> {
    next_grants_and_vtimes(entries, capacity, floor, classes).0
}

/// A flow (its class and flow ids) and its virtual time.
pub type FlowVTime = ((usize, u64), u64);

/// [`next_grants`], and each flow's virtual time after these grants, as `((class, flow),
/// vtime)` for every flow with entries: what the store records for the next decision (see
/// [`FairEntry::vtime`]).
pub fn next_grants_and_vtimes(
    entries: &[FairEntry],
    capacity: u32,
    floor: u64,
    classes: &Classes,
) -> (Vec<u64>, Vec<FlowVTime>) {
    let mut snapshot = Snapshot::new(entries, floor, &classes.mins(capacity));
    let mut grants = Vec::new();
    while let Some((class, flow)) = snapshot.choose() {
        let Some(head) = snapshot.head(class, flow) else {
            break; // (choose only picks a flow with a waiter)
        };
        if snapshot.used.saturating_add(u64::from(head.permits)) > u64::from(capacity) {
            break; // The chosen entry waits for room, and nobody passes it meanwhile.
        }
        snapshot.grant(class, flow);
        grants.push(head.token);
    }
    (grants, snapshot.vtimes())
}

/// One flow: what it holds, its weight, its virtual time, and its waiters in token order.
struct Flow<'a> {
    held: u64,
    weight: u32,
    vtime: Option<u64>,
    waiting: VecDeque<&'a FairEntry>,
}

/// One class: what it holds, its guaranteed permits, its flows by id.
struct Class<'a> {
    held: u64,
    min: u32,
    flows: BTreeMap<u64, Flow<'a>>,
}

impl Class<'_> {
    /// The token of the class's earliest waiter.
    fn first_waiting(&self) -> Option<u64> {
        let heads = self.flows.values().filter_map(|f| f.waiting.front());
        heads.map(|e| e.token).min()
    }
}

/// The queue grouped by class and flow, updated as grants are decided.
struct Snapshot<'a> {
    used: u64,
    classes: BTreeMap<usize, Class<'a>>,
}

impl<'a> Snapshot<'a> {
    fn new(entries: &'a [FairEntry], floor: u64, mins: &[u32]) -> Snapshot<'a> {
        let mut sorted: Vec<&FairEntry> = entries.iter().collect();
        sorted.sort_by_key(|e| e.token);
        let mut snapshot = Snapshot {
            used: 0,
            classes: BTreeMap::new(),
        };
        for e in sorted {
            let class = snapshot.classes.entry(e.class).or_insert_with(|| Class {
                held: 0,
                // A class index beyond the table is best-effort.
                min: mins.get(e.class).copied().unwrap_or(0),
                flows: BTreeMap::new(),
            });
            let flow = class.flows.entry(e.flow).or_insert_with(|| Flow {
                held: 0,
                weight: 1,
                vtime: None,
                waiting: VecDeque::new(),
            });
            // In token order, so the newest entry's weight and virtual time are the ones left.
            flow.weight = e.weight.max(1);
            flow.vtime = e.vtime.or(flow.vtime);
            if e.granted || e.token <= floor {
                let permits = u64::from(e.permits);
                flow.held += permits;
                class.held += permits;
                snapshot.used = snapshot.used.saturating_add(permits);
            } else {
                flow.waiting.push_back(e);
            }
        }
        snapshot.start_new_flows();
        snapshot
    }

    /// A flow without a recorded virtual time (new, or back after it had no entries) starts one
    /// permit ahead of the least served of its class (at 0 if none is recorded): its request is
    /// next, as a flow holding nothing is, but its idle past earns it no run of grants.
    fn start_new_flows(&mut self) {
        for class in self.classes.values_mut() {
            let least = class.flows.values().filter_map(|f| f.vtime).min();
            let start = least.map_or(0, |v| v.saturating_sub(super::entry::VTIME_SCALE));
            for flow in class.flows.values_mut() {
                flow.vtime.get_or_insert(start);
            }
        }
    }

    /// Every flow's virtual time now.
    fn vtimes(&self) -> Vec<FlowVTime> {
        let flows = self.classes.iter().flat_map(|(&c, class)| {
            class
                .flows
                .iter()
                .map(move |(&f, flow)| ((c, f), flow.vtime.unwrap_or(0)))
        });
        flows.collect()
    }

    /// The class and flow whose earliest waiter is next by the rule, if anyone waits.
    fn choose(&self) -> Option<(usize, u64)> {
        let (&class_id, class, _) = self
            .classes
            .iter()
            .filter_map(|(id, c)| c.first_waiting().map(|t| (id, c, t)))
            .min_by(|(_, a, ta), (_, b, tb)| {
                class_order(a.held, a.min, b.held, b.min).then(ta.cmp(tb))
            })?;
        let (&flow_id, _) = class
            .flows
            .iter()
            .filter_map(|(id, f)| f.waiting.front().map(|head| (id, (f, head.token))))
            .min_by(|(_, (a, ta)), (_, (b, tb))| {
                flow_order(a.held, a.weight, b.held, b.weight)
                    .then(a.vtime.cmp(&b.vtime))
                    .then(ta.cmp(tb))
            })?;
        Some((class_id, flow_id))
    }

    /// The earliest waiter of `flow` in `class`.
    fn head(&self, class: usize, flow: u64) -> Option<&'a FairEntry> {
        self.classes
            .get(&class)?
            .flows
            .get(&flow)?
            .waiting
            .front()
            .copied()
    }

    /// Grants the earliest waiter of `flow` in `class` (one `head` returned): no panic path,
    /// whatever the ids.
    fn grant(&mut self, class: usize, flow: u64) {
        let Some(class) = self.classes.get_mut(&class) else {
            return;
        };
        let Some(flow) = class.flows.get_mut(&flow) else {
            return;
        };
        let Some(e) = flow.waiting.pop_front() else {
            return;
        };
        let permits = u64::from(e.permits);
        flow.vtime = Some(advance(flow.vtime.unwrap_or(0), e.permits, flow.weight));
        flow.held += permits;
        class.held += permits;
        self.used = self.used.saturating_add(permits);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fair::{Share, VTIME_SCALE};

    fn grants(queue: &[FairEntry], capacity: u32) -> Vec<u64> {
        next_grants(queue, capacity, 0, &Classes::single())
    }

    #[test]
    fn one_flow_is_fifo_and_a_heavy_head_blocks() {
        let q = [
            FairEntry::new(1, 1),
            FairEntry::new(2, 3),
            FairEntry::new(3, 1),
        ];
        assert_eq!(grants(&q, 5), vec![1, 2, 3]);
        assert_eq!(grants(&q, 3), vec![1]); // 2 needs 3 with 1 used: 3 waits behind it
    }

    #[test]
    fn newcomer_of_an_idle_flow_goes_next_without_revoking() {
        let mut q: Vec<FairEntry> = (1..=4).map(|t| FairEntry::new(t, 1).in_flow(1)).collect();
        q[0] = q[0].as_granted();
        q.push(FairEntry::new(9, 1).in_flow(2));
        assert_eq!(grants(&q, 2), vec![9]);
        assert_eq!(grants(&q, 4), vec![9, 2, 3]);
    }

    #[test]
    fn flows_share_free_permits_by_weight() {
        let q: Vec<FairEntry> = (1..=20)
            .map(|t| {
                FairEntry::new(t, 1)
                    .in_flow(t % 2)
                    .with_weight(1 + 2 * (t % 2) as u32)
            })
            .collect();
        let g = grants(&q, 8);
        let odd = g.iter().filter(|t| *t % 2 == 1).count();
        assert_eq!((odd, g.len() - odd), (6, 2)); // weights 3:1
    }

    #[test]
    fn newest_entry_states_the_flow_weight() {
        let q = [
            FairEntry::new(1, 1).in_flow(1).with_weight(1).as_granted(),
            FairEntry::new(2, 1).in_flow(2).with_weight(1).as_granted(),
            FairEntry::new(3, 1).in_flow(2).with_weight(1),
            FairEntry::new(4, 1).in_flow(1).with_weight(1),
            FairEntry::new(5, 1).in_flow(2).with_weight(4), // flow 2 now weighs 4
        ];
        assert_eq!(grants(&q, 3), vec![3]); // 1/4 < 1/1 though flow 1 waits earlier
    }

    #[test]
    fn nothing_is_granted_until_a_shrunk_capacity_has_room() {
        let mut q: Vec<FairEntry> = (1..=4).map(|t| FairEntry::new(t, 1).as_granted()).collect();
        q.push(FairEntry::new(5, 1).in_flow(7));
        assert_eq!(grants(&q, 2), Vec::<u64>::new());
        assert_eq!(grants(&q[2..], 2), Vec::<u64>::new()); // 2 held of 2
        assert_eq!(grants(&q[3..], 2), vec![5]);
    }

    #[test]
    fn entries_under_the_floor_hold_unmarked() {
        let q: Vec<FairEntry> = (1..=4).map(|t| FairEntry::new(t, 1)).collect();
        assert_eq!(next_grants(&q, 2, 3, &Classes::single()), Vec::<u64>::new());
        assert_eq!(next_grants(&q[1..], 3, 3, &Classes::single()), vec![4]);
    }

    #[test]
    fn class_below_its_min_is_served_first_and_best_effort_borrows() {
        let classes = Classes::new([
            ("critical", Share::percent(25)),
            ("batch", Share::Permits(0)),
        ])
        .unwrap();
        let mut q: Vec<FairEntry> = (1..=8).map(|t| FairEntry::new(t, 1).in_class(1)).collect();
        // Critical idle: batch borrows all 8.
        assert_eq!(next_grants(&q, 8, 0, &classes).len(), 8);
        q.iter_mut().take(7).for_each(|e| e.granted = true);
        q.push(FairEntry::new(20, 1).in_class(1));
        q.push(FairEntry::new(21, 1)); // critical, behind batch's waiters
        assert_eq!(next_grants(&q, 8, 0, &classes), vec![21]);
    }

    #[test]
    fn a_class_index_beyond_the_table_is_best_effort() {
        let classes = Classes::new([("only", Share::Permits(1))]).unwrap();
        let q = [FairEntry::new(1, 1).in_class(5), FairEntry::new(2, 1)];
        assert_eq!(next_grants(&q, 1, 0, &classes), vec![2]);
    }

    /// Capacity 1, releases at once: nothing is held at a grant, so held / weight ties and
    /// the recorded virtual times decide: flows take turns (by weight), a newcomer starts at
    /// the least served and gets no credit for its idle past.
    #[test]
    fn recorded_virtual_times_make_flows_take_turns() {
        use std::collections::HashMap;
        // Flow 1 has 6 waiters queued first, flow 2 (weight 2) 6 behind them.
        let mut queue: Vec<FairEntry> = (1..=6).map(|t| FairEntry::new(t, 1).in_flow(1)).collect();
        queue.extend((7..=12).map(|t| FairEntry::new(t, 1).in_flow(2).with_weight(2)));
        let mut vtimes: HashMap<u64, u64> = HashMap::new();
        let mut order = Vec::new();
        for _ in 0..9 {
            let q: Vec<FairEntry> = queue
                .iter()
                .map(|e| vtimes.get(&e.flow).map_or(*e, |&v| e.with_vtime(v)))
                .collect();
            let (g, after) = next_grants_and_vtimes(&q, 1, 0, &Classes::single());
            let granted = g[0];
            order.push(if granted <= 6 { 1 } else { 2 });
            vtimes.extend(after.into_iter().map(|((_, f), v)| (f, v)));
            queue.retain(|e| e.token != granted); // held, then released at once
        }
        // Weight 2 gets two turns for each of flow 1's, though flow 1 queued first.
        assert_eq!(order, vec![1, 2, 2, 1, 2, 2, 1, 2, 2]);
        // A newcomer starts one permit ahead of the least served of its class, not at 0.
        let newcomer = [
            FairEntry::new(20, 1).in_flow(1).with_vtime(5 * VTIME_SCALE),
            FairEntry::new(21, 1).in_flow(2).with_vtime(4 * VTIME_SCALE),
            FairEntry::new(22, 1).in_flow(3),
        ];
        let (g, after) = next_grants_and_vtimes(&newcomer, 1, 0, &Classes::single());
        assert_eq!(
            g,
            vec![22],
            "the newcomer starts at 3, one permit ahead of flow 2's 4"
        );
        assert!(after.contains(&((0, 3), 4 * VTIME_SCALE)), "{after:?}");
        // ... and then ties with flow 2 at 4: flow 2, waiting first, is next.
        let next = [
            newcomer[0],
            newcomer[1],
            FairEntry::new(23, 1).in_flow(3).with_vtime(4 * VTIME_SCALE),
        ];
        assert_eq!(next_grants(&next, 1, 0, &Classes::single()), vec![21]);
    }
}

//! The grant rule over entries as stores keep them: flows and classes by name.

use super::classes::Classes;
use super::entry::FairEntry;
use super::grant::next_grants_and_vtimes;
use std::collections::HashMap;

/// Flows' virtual times as a store records them (see [`FairEntry::vtime`]), keyed by
/// [`vtime_key`]: only flows with entries are kept, so the record stays as small as the queue.
pub type VTimes = HashMap<String, u64>;

/// The key of a flow in [`VTimes`]: its class and flow names, joined by a character neither
/// may contain (names have no control characters).
pub fn vtime_key(class: &str, flow: &str) -> String {
    format!("{class}\u{1f}{flow}")
}

/// One queue entry of a fair semaphore as a store keeps it: names, not ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct NamedEntry<'a> {
    /// Store-assigned token (arrival order, fencing token).
    pub token: u64,
    /// Weight requested.
    pub permits: u32,
    /// The flow's name.
    pub flow: &'a str,
    /// The class's name; `None`: the first class.
    pub class: Option<&'a str>,
    /// The flow's weight as this entry states it.
    pub weight: u32,
    /// Whether the store has marked it granted.
    pub granted: bool,
}

impl<'a> NamedEntry<'a> {
    /// An entry as a store keeps it.
    pub fn new(
        token: u64,
        permits: u32,
        flow: &'a str,
        class: Option<&'a str>,
        weight: u32,
        granted: bool,
    ) -> NamedEntry<'a> {
        NamedEntry {
            token,
            permits,
            flow,
            class,
            weight,
            granted,
        }
    }
}

impl<'a> NamedEntry<'a> {
    /// An entry with the tag its acquire gave (`None`: the flow `"default"` of the first
    /// class, weight 1), as a store keeps it.
    pub fn tagged(
        token: u64,
        permits: u32,
        tag: Option<&'a super::tag::FairTag>,
        granted: bool,
    ) -> NamedEntry<'a> {
        match tag {
            Some(t) => NamedEntry::new(
                token,
                permits,
                &t.flow,
                t.class.as_deref(),
                t.weight,
                granted,
            ),
            None => NamedEntry::new(token, permits, "default", None, 1, granted),
        }
    }
}

/// [`next_grants`](super::next_grants) for entries named as the store keeps them: flows are interned per call (two
/// names are never merged) and a class is looked up in `classes` (a name it does not know is a
/// best-effort class of its own, so the rule stays total; stores refuse such requests first).
///
/// ```
/// use clusterlimit::fair::{next_grants_named, Classes, NamedEntry};
/// let queue = [
///     NamedEntry::new(1, 1, "a", None, 1, true),
///     NamedEntry::new(2, 1, "a", None, 1, false),
///     NamedEntry::new(3, 1, "b", None, 1, false),
/// ];
/// assert_eq!(next_grants_named(&queue, 2, &Classes::single()), vec![3]);
/// ```
pub fn next_grants_named(entries: &[NamedEntry<'_>], capacity: u32, classes: &Classes) -> Vec<u64> {
    next_grants_recorded(entries, capacity, classes, &VTimes::new()).0
}

/// [`next_grants_named`] with the flows' virtual times the store recorded (`recorded`), and
/// the virtual times to record with these grants: what a store that keeps them writes in the
/// same compare-and-swap as the marks, so that flows take turns also when nothing is held at
/// the moment of a grant.
pub fn next_grants_recorded(
    entries: &[NamedEntry<'_>],
    capacity: u32,
    classes: &Classes,
    recorded: &VTimes,
) -> (Vec<u64>, VTimes) {
    let mut flows: HashMap<(usize, &str), u64> = HashMap::new();
    let unknown_class = classes.len();
    let first = classes.name(0).unwrap_or_default();
    let ids: Vec<FairEntry> = entries
        .iter()
        .map(|e| {
            let class = e
                .class
                .map_or(0, |c| classes.id(c).unwrap_or(unknown_class));
            let next = flows.len() as u64;
            let flow = *flows.entry((class, e.flow)).or_insert(next);
            let mut entry = FairEntry::new(e.token, e.permits)
                .in_flow(flow)
                .in_class(class)
                .with_weight(e.weight);
            let key = vtime_key(e.class.unwrap_or(first), e.flow);
            if let Some(&v) = recorded.get(&key) {
                entry = entry.with_vtime(v);
            }
            if e.granted {
                entry = entry.as_granted();
            }
            entry
        })
        .collect();
    let (grants, vtimes) = next_grants_and_vtimes(&ids, capacity, 0, classes);
    let names: HashMap<(usize, u64), (usize, &str)> = flows
        .iter()
        .map(|(&(c, f), &id)| ((c, id), (c, f)))
        .collect();
    let vtimes = vtimes
        .into_iter()
        .filter_map(|((c, id), v)| {
            let (class, flow) = names.get(&(c, id))?;
            Some((vtime_key(classes.name(*class).unwrap_or(""), flow), v))
        })
        .collect();
    (grants, vtimes)
}

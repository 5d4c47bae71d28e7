//! The grant rule over entries as stores keep them: flows and classes by name.

use super::classes::Classes;
use super::entry::FairEntry;
use super::grant::next_grants;
use std::collections::HashMap;

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

/// [`next_grants`] for entries named as the store keeps them: flows are interned per call (two
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
    let mut flows: HashMap<&str, u64> = HashMap::new();
    let unknown_class = classes.len();
    let ids: Vec<FairEntry> = entries
        .iter()
        .map(|e| {
            let next = flows.len() as u64;
            let flow = *flows.entry(e.flow).or_insert(next);
            let class = e
                .class
                .map_or(0, |c| classes.id(c).unwrap_or(unknown_class));
            let entry = FairEntry::new(e.token, e.permits)
                .in_flow(flow)
                .in_class(class)
                .with_weight(e.weight);
            if e.granted {
                entry.as_granted()
            } else {
                entry
            }
        })
        .collect();
    next_grants(&ids, capacity, 0, classes)
}

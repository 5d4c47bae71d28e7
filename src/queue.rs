//! The semaphore's meaning, written once: which queue entries hold permits.
//!
//! Every backend keeps, per semaphore, a queue of entries ordered by a store-assigned token
//! (etcd create revision, ZooKeeper sequence number + 1, memory counter) plus the capacity and a
//! `floor`. Tokens are at least 1: a `floor` of 0 means "nobody grandfathered".
//! An entry holds its permits iff
//!
//! * its token is `<= floor` (it was holding when the capacity was last shrunk; shrinking never
//!   revokes), or
//! * the weights of all entries up to and including it sum to at most the capacity.
//!
//! Both sets are prefixes of the queue, so holders are always a prefix and waiters the rest:
//! grants happen in strict FIFO order and a heavy entry at the head blocks lighter ones behind it.
//! A waiter needs nothing but a consistent snapshot of the queue to decide whether it holds.

/// One queue entry as the rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Store-assigned position, at least 1; also the fencing token.
    pub token: u64,
    /// Weight requested.
    pub permits: u32,
}

/// Number of leading entries that hold permits. `entries` must be sorted by token.
pub fn holders(entries: impl IntoIterator<Item = Entry>, capacity: u32, floor: u64) -> usize {
    let mut used: u64 = 0;
    let mut count = 0;
    for e in entries {
        used = used.saturating_add(u64::from(e.permits));
        if e.token <= floor || used <= u64::from(capacity) {
            count += 1;
        } else {
            break;
        }
    }
    count
}

/// Whether the entry with `token` holds, or `None` if it is not in the queue.
pub fn holds(
    entries: impl IntoIterator<Item = Entry>,
    capacity: u32,
    floor: u64,
    token: u64,
) -> Option<bool> {
    let mut used: u64 = 0;
    let mut blocked = false;
    for e in entries {
        used = used.saturating_add(u64::from(e.permits));
        blocked |= !(e.token <= floor || used <= u64::from(capacity));
        if e.token == token {
            return Some(!blocked);
        }
        if e.token > token {
            return None;
        }
    }
    None
}

/// The floor to store when the capacity changes from `old` to `new`: on a shrink, everything
/// holding now keeps holding (its token goes under the floor); growing changes nothing.
pub fn floor_after_resize(entries: &[Entry], old: u32, new: u32, floor: u64) -> u64 {
    if new >= old {
        return floor;
    }
    let n = holders(entries.iter().copied(), old, floor);
    match n.checked_sub(1).and_then(|last| entries.get(last)) {
        Some(last) => floor.max(last.token),
        None => floor,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(ws: &[u32]) -> Vec<Entry> {
        ws.iter()
            .enumerate()
            .map(|(i, &permits)| Entry {
                token: i as u64 + 10,
                permits,
            })
            .collect()
    }

    #[test]
    fn prefix_rule() {
        assert_eq!(holders(q(&[1, 1, 1]), 2, 0), 2);
        // A heavy head blocks lighter entries behind it (strict FIFO).
        assert_eq!(holders(q(&[1, 3, 1]), 3, 0), 1);
        assert_eq!(holds(q(&[1, 3, 1]), 3, 0, 12), Some(false));
        assert_eq!(holds(q(&[1, 3, 1]), 3, 0, 10), Some(true));
        assert_eq!(holds(q(&[1, 3, 1]), 3, 0, 99), None);
    }

    #[test]
    fn shrink_keeps_holders() {
        let e = q(&[1, 1, 1, 1]);
        let floor = floor_after_resize(&e, 4, 2, 0);
        assert_eq!(floor, 13);
        assert_eq!(holders(e.iter().copied(), 2, floor), 4);
        // Growing keeps the floor.
        assert_eq!(floor_after_resize(&e, 2, 5, 7), 7);
        // New entries behind the grandfathered ones wait until usage fits again.
        let mut e2 = e.clone();
        e2.push(Entry {
            token: 20,
            permits: 1,
        });
        assert_eq!(holds(e2.iter().copied(), 2, floor, 20), Some(false));
        assert_eq!(holds(e2[3..].iter().copied(), 2, floor, 20), Some(true));
    }
}

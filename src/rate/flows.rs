//! A per-flow share of a key (`Quota::fair_flows`, issue 41): the flows checking a key now
//! split its quota max-min fairly. Pure: the flow table a key's state keeps, and the share a
//! check's flow may take; `decide.rs` decides a check with the reserve it leaves for others.
//!
//! Per key, per fairness window (the quota's period, aligned to the Unix epoch like the
//! fixed window), each flow's `asked` (units it asked for: admitted, plus denied while below
//! its level), `prev` (what it asked in the window before) and `used` (admitted). Another
//! flow's demand is `d_g = max(asked, prev)`. The checking flow `f`, with infinite demand, and
//! the other flows water-fill the quota `Q`: level `L` with `Σ_{g≠f} min(d_g, L) + L = Q`.
//! The others' allocations `a_g = min(d_g, L)` (rounded down) less what they used is the
//! reserve `f` must leave: `R_f = Σ_{g≠f} max(0, a_g − used_g)`, so `f` may take at most
//! `Q − Σ used − R_f` more this window (its room; the meter still paces it). Rounding the
//! others' allocations down (and so `f`'s up) keeps every flow's `⌊L⌋` and leaves no unit to
//! nobody. A flow alone, or a key whose flows used `Q` already this window, is not limited by
//! flow (GCRA refills within a window are anybody's).
//!
//! One refinement: a flow that already used more than its allocation (it was alone earlier
//! in the window) cannot give it back, so the fill counts it at what it used, `clamp(L, used,
//! demand)`, and `f` at `max(used_f, L)`. Without it, the flows below their level would keep
//! units for each other that are no longer there, and both be refused with units left. With
//! nobody over, it is the fill above. Whether a denial counts as asked uses the level of the
//! demands alone (`f`'s max-min share, whatever was used), so next window's demand is right.

use std::fmt;

/// Most flows a key's table names; beyond them, new flows share one more entry ("others").
pub const MAX_FLOWS: usize = 64;
/// Longest flow name, in bytes (as for fair semaphores' flows).
pub const MAX_FLOW_LEN: usize = 128;

/// The id of the entry the flows beyond [`MAX_FLOWS`] share.
const OTHERS: u64 = 0;

/// A flow as a rate limit counts it: its name hashed with 64-bit FNV-1a, the same in every
/// process, platform and build.
///
/// ```
/// use clusterlimit::rate::FlowId;
/// let a = FlowId::of("tenant-a").unwrap();
/// assert_eq!(a, FlowId::of("tenant-a").unwrap());
/// assert_eq!(a.get(), 0xc2ef_8128_e3eb_9efb); // FNV-1a of the bytes
/// assert!(FlowId::of("").is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowId(u64);

impl FlowId {
    /// The flow named `name`: 1 ..= [`MAX_FLOW_LEN`] bytes without control characters, or why
    /// not (a sentence naming it).
    pub fn of(name: &str) -> Result<FlowId, String> {
        if name.is_empty() || name.len() > MAX_FLOW_LEN {
            return Err(format!(
                "a flow name must be 1-{MAX_FLOW_LEN} bytes, got {}",
                name.len()
            ));
        }
        if name.chars().any(char::is_control) {
            return Err(format!(
                "the flow name {name:?} contains a control character"
            ));
        }
        Ok(FlowId(fnv1a(name.as_bytes())))
    }

    /// The flow of checks that name none: one flow for all of them.
    pub fn anonymous() -> FlowId {
        // No flow name is empty, so no named flow is this one (but by a hash collision).
        FlowId(fnv1a(b""))
    }

    /// The hash.
    pub fn get(&self) -> u64 {
        self.0
    }
}

/// 64-bit FNV-1a, written out: stable across processes, platforms and Rust versions.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// One flow's counts in a [`FlowTable`]'s window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FlowEntry {
    /// The flow ([`FlowId::get`]); 0 is the entry the flows beyond [`MAX_FLOWS`] share.
    pub id: u64,
    /// Units asked this window: admitted, and denied while below the flow's level.
    pub asked: u64,
    /// Units asked in the window before.
    pub prev: u64,
    /// Units admitted this window.
    pub used: u64,
}

/// The flows of one key on a quota that shares by flow: for the window `window` (`now /
/// period`), each flow seen in it or the one before, by id. At most [`MAX_FLOWS`] named
/// flows, plus one entry the rest share (so beyond 64 flows seen in two periods, the rest
/// share one flow's share).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct FlowTable {
    /// The fairness window every entry is counted in.
    pub window: u64,
    entries: Vec<FlowEntry>,
}

/// What the flows let one check of flow `f` take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Share {
    /// The entry `f` counts in (itself, or the shared one).
    pub(crate) id: u64,
    /// Units `f` may still take this window: the quota less what every flow used less what
    /// the others are due (`R_f`). `None`: no limit by flow (no other flow, or the flows used
    /// the whole quota already: the meter alone decides).
    pub(crate) room: Option<u64>,
    /// What `f` used this window.
    pub(crate) used: u64,
    /// `f`'s level `L` as a fraction (numerator, denominator ≥ 1).
    level: (u128, u128),
}

/// [`FlowTable::pace_left`] takes what a flow asked so far in a window at that pace for the
/// whole window, at most this many times over.
const EXTRAPOLATED_AT_MOST: u128 = 10;

/// What [`FlowTable::pace_left`] found: units left of the asking flow's pace, and of the
/// other flows' together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PaceLeft {
    pub(crate) mine: u64,
    pub(crate) others: u64,
}

impl Share {
    /// The flow's level `L` (numerator, denominator ≥ 1): its max-min share of the quota's
    /// units this window given the others' demands, were its own demand unbounded.
    pub(crate) fn level(&self) -> (u128, u128) {
        self.level
    }
}

impl FlowTable {
    /// No flows.
    pub fn new() -> FlowTable {
        FlowTable::default()
    }

    /// The entries, by id.
    pub fn iter(&self) -> impl Iterator<Item = &FlowEntry> + '_ {
        self.entries.iter()
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No entries: the state has no table.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The table as read in window `window`: entries of the window before roll over (what
    /// they asked becomes `prev`), older ones and empty ones drop.
    pub(crate) fn rolled(&self, window: u64) -> FlowTable {
        let entries = if self.window == window {
            self.entries.clone()
        } else if self.window.checked_add(1) == Some(window) {
            self.entries
                .iter()
                .map(|e| FlowEntry {
                    id: e.id,
                    asked: 0,
                    prev: e.asked,
                    used: 0,
                })
                .filter(|e| e.prev > 0)
                .collect()
        } else {
            Vec::new()
        };
        FlowTable { window, entries }
    }

    /// The entry `flow` counts in: its own, or, with [`MAX_FLOWS`] named already and none its
    /// own, the shared one.
    fn slot(&self, flow: FlowId) -> u64 {
        let id = flow.get();
        let named = self.entries.iter().filter(|e| e.id != OTHERS).count();
        if id == OTHERS || self.find(id).is_ok() || named < MAX_FLOWS {
            id
        } else {
            OTHERS
        }
    }

    fn find(&self, id: u64) -> Result<usize, usize> {
        self.entries.binary_search_by_key(&id, |e| e.id)
    }

    /// What `flow` may take from a quota of `q` units per window (see the module).
    pub(crate) fn share(&self, flow: FlowId, q: u64) -> Share {
        let id = self.slot(flow);
        let q = u128::from(q);
        let mine = self
            .find(id)
            .map_or(0, |i| u128::from(self.entries[i].used));
        // (used, demand) of every other flow, by id; what a flow asked includes its used.
        let others: Vec<(u128, u128)> = self
            .entries
            .iter()
            .filter(|e| e.id != id)
            .map(|e| {
                let used = u128::from(e.used);
                (used, u128::from(e.asked.max(e.prev)).max(used))
            })
            .collect();
        let demands: Vec<(u128, u128)> = others.iter().map(|&(_, d)| (0, d)).collect();
        let used: u128 = mine + others.iter().map(|&(u, _)| u).sum::<u128>();
        // Alone, or with the quota used this window: the meter alone decides.
        let limited = !others.is_empty() && used < q;
        let room = limited.then(|| (q - used).saturating_sub(kept_for_others(q, &others, mine)));
        Share {
            id,
            room: room.map(|r| u64::try_from(r).unwrap_or(u64::MAX)),
            used: u64::try_from(mine).unwrap_or(u64::MAX),
            level: level(q, &demands, 0).0,
        }
    }

    /// What `flow` and the other flows have left of their pace by `part` of the window
    /// (numerator, denominator ≥ 1), of a quota of `q` units per window: each one's max-min
    /// allocation (`min(d_g, L)`, `L` the level of the others' demands with `flow`'s
    /// infinite; `d_g` what it asked this window at its pace so far, what it asked in the one
    /// before, or what it used) times `part`, less what it used, rounded down. Unlike the reserve of
    /// [`FlowTable::share`], it does not lapse when some flows took more than their part:
    /// what the others are due stays theirs.
    pub(crate) fn pace_left(&self, flow: FlowId, q: u64, (num, den): (u128, u128)) -> PaceLeft {
        let id = self.slot(flow);
        // What a flow asked so far this window, at that pace for the whole window (at most
        // tenfold): early in a window (the first one above all, with nothing asked in the one
        // before) the few units asked so far would make every other flow look light.
        let elapsed = num.max(den / EXTRAPOLATED_AT_MOST).max(1);
        let demand = |e: &FlowEntry| {
            let paced = u128::from(e.asked).saturating_mul(den) / elapsed;
            paced.max(u128::from(e.prev)).max(u128::from(e.used))
        };
        let others: Vec<(u128, u128)> = self
            .entries
            .iter()
            .filter(|e| e.id != id)
            .map(|e| (0, demand(e)))
            .collect();
        let ((l_num, l_den), _) = level(u128::from(q), &others, 0);
        let left = |alloc: u128, used: u64| -> u128 {
            let by_now = alloc.saturating_mul(num) / l_den.saturating_mul(den).max(1);
            by_now.saturating_sub(u128::from(used))
        };
        let others: u128 = self
            .entries
            .iter()
            .filter(|e| e.id != id)
            .map(|e| left(demand(e).saturating_mul(l_den).min(l_num), e.used))
            .sum();
        let used = self.find(id).map_or(0, |i| self.entries[i].used);
        let clip = |n: u128| u64::try_from(n).unwrap_or(u64::MAX);
        PaceLeft {
            mine: clip(left(l_num, used)),
            others: clip(others),
        }
    }

    /// Whether what the flow of `share` asked so far is below its level: then a denial of it
    /// counts as asked (it raises what the others leave it).
    pub(crate) fn below_level(&self, share: &Share) -> bool {
        let asked = self.find(share.id).map_or(0, |i| self.entries[i].asked);
        u128::from(asked).saturating_mul(share.level.1) < share.level.0
    }

    /// Sets what the flow of `share` asked this window to `asked` (the approximate mode
    /// writes a holder's demand as its pace over the window: `rate/approximate.rs`).
    pub(crate) fn set_asked(&mut self, share: &Share, asked: u64) {
        self.count(share, 0, 0);
        if let Ok(at) = self.find(share.id) {
            self.entries[at].asked = asked;
        }
    }

    /// Counts a check of the flow of `share`: `asked` units asked, `used` of them admitted.
    pub(crate) fn count(&mut self, share: &Share, asked: u64, used: u64) {
        let at = match self.find(share.id) {
            Ok(at) => at,
            Err(at) => {
                self.entries.insert(
                    at,
                    FlowEntry {
                        id: share.id,
                        asked: 0,
                        prev: 0,
                        used: 0,
                    },
                );
                at
            }
        };
        let e = &mut self.entries[at];
        e.asked = e.asked.saturating_add(asked);
        e.used = e.used.saturating_add(used);
    }

    /// The instant (Unix ns) the table is worth nothing, with windows of `period` ns: the
    /// end of the window after its own (0 when empty).
    pub(crate) fn worthless_at(&self, period: u128) -> u128 {
        if self.is_empty() {
            return 0;
        }
        u128::from(self.window)
            .saturating_add(2)
            .saturating_mul(period)
    }

    /// Appends ` F <window> <id>:<asked>:<prev>:<used> …` (ids in hex) to a stored state.
    pub(crate) fn encode_into(&self, out: &mut String) {
        use fmt::Write as _;
        let _ = write!(out, " F {}", self.window);
        for e in &self.entries {
            let _ = write!(out, " {:x}:{}:{}:{}", e.id, e.asked, e.prev, e.used);
        }
    }

    /// The table from the words after `F`; `None` if they are not one (unsorted ids, a
    /// repeated id, more than [`MAX_FLOWS`] named flows, or no entry).
    pub(crate) fn decode<'a>(mut words: impl Iterator<Item = &'a str>) -> Option<FlowTable> {
        let window = words.next()?.parse().ok()?;
        let mut entries: Vec<FlowEntry> = Vec::new();
        for w in words {
            let mut parts = w.split(':');
            let id = u64::from_str_radix(parts.next()?, 16).ok()?;
            let mut num = || parts.next().and_then(|p| p.parse::<u64>().ok());
            let (asked, prev, used) = (num()?, num()?, num()?);
            if parts.next().is_some() || entries.last().is_some_and(|l| l.id >= id) {
                return None;
            }
            entries.push(FlowEntry {
                id,
                asked,
                prev,
                used,
            });
        }
        let named = entries.iter().filter(|e| e.id != OTHERS).count();
        (!entries.is_empty() && named <= MAX_FLOWS).then_some(FlowTable { window, entries })
    }
}

/// What the checking flow (having used `mine`) must leave the `others` ((used, demand) each):
/// their allocations at the level of [`level`] less what they used. The level's fraction
/// goes one unit each to the flows at the level: first the checking flow, then the others
/// that used least, so every flow's allocation is `⌊L⌋` or `⌈L⌉` and they add up to `q`.
fn kept_for_others(q: u128, others: &[(u128, u128)], mine: u128) -> u128 {
    let ((num, den), lo) = level(q, others, mine);
    let floor = num / den;
    let mut extra = num % den;
    if lo >= mine && extra > 0 {
        extra -= 1;
    }
    let mut at_level: Vec<(u128, usize)> = others
        .iter()
        .enumerate()
        .filter(|(_, &(u, d))| u <= lo && lo < d)
        .map(|(i, &(u, _))| (u, i))
        .collect();
    at_level.sort_unstable();
    let plus = at_level
        .len()
        .min(usize::try_from(extra).unwrap_or(usize::MAX));
    let base: u128 = others.iter().map(|&(u, d)| floor.clamp(u, d) - u).sum();
    base + plus as u128
}

/// The water level `L` (numerator, denominator ≥ 1) that fills `q` with the other flows'
/// allocations `clamp(L, used, demand)` and the checking flow's `max(mine, L)` (its own
/// demand infinite): `Σ clamp(L, u_g, d_g) + max(u_f, L) = q`; 0 when the flows used `q`
/// already. A flow that used more than the level keeps what it used (it cannot be given
/// back), so the allocations always add up to `q` and no unit is kept for nobody. Also the
/// last point where the fill bends at or below `L` (the flows growing with `L` are the
/// others with `used ≤ it < demand`, and the checking flow if `mine ≤ it`).
fn level(q: u128, others: &[(u128, u128)], mine: u128) -> ((u128, u128), u128) {
    let fill = |l: u128| -> u128 {
        others.iter().map(|&(u, d)| l.clamp(u, d)).sum::<u128>() + mine.max(l)
    };
    if fill(0) >= q {
        return ((0, 1), 0);
    }
    // `fill` grows piecewise linearly, bending only at the flows' used and demands: the
    // last such point at most `q`, then the slope above it.
    let lo = others
        .iter()
        .flat_map(|&(u, d)| [u, d])
        .chain([mine])
        .filter(|&p| fill(p) <= q)
        .max()
        .unwrap_or(0);
    let growing = others.iter().filter(|&&(u, d)| u <= lo && lo < d).count() as u128;
    // ≥ 1: past `lo` the fill reaches `q`, so something grows there.
    let slope = (growing + u128::from(lo >= mine)).max(1);
    ((lo * slope + (q - fill(lo)), slope), lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(name: &str) -> FlowId {
        FlowId::of(name).expect("a flow name")
    }

    /// A table in window 5 with (name, asked, prev, used) entries.
    fn table(rows: &[(&str, u64, u64, u64)]) -> FlowTable {
        let mut t = FlowTable {
            window: 5,
            entries: Vec::new(),
        };
        for &(name, asked, prev, used) in rows {
            let share = t.share(flow(name), 100);
            t.count(&share, asked, used);
            let at = t.find(flow(name).get()).expect("counted");
            t.entries[at].prev = prev;
        }
        t
    }

    #[test]
    fn names_hash_with_fnv1a_and_bad_ones_say_why() {
        // FNV-1a's published test vectors.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(FlowId::anonymous().get(), 0xcbf2_9ce4_8422_2325);
        assert_eq!(flow("ü-tenant"), flow("ü-tenant"));
        let long = "x".repeat(MAX_FLOW_LEN + 1);
        let err = |n: &str| FlowId::of(n).err().unwrap_or_default();
        assert_eq!(err(""), "a flow name must be 1-128 bytes, got 0");
        assert!(err(&long).contains("got 129"), "{}", err(&long));
        assert!(err("a\nb").contains("control character"));
        assert!(FlowId::of(&"x".repeat(MAX_FLOW_LEN)).is_ok());
    }

    /// What the flow `name` must leave the others of 100: the rest less its room.
    fn reserve(t: &FlowTable, name: &str) -> u64 {
        let s = t.share(flow(name), 100);
        let used: u64 = t.iter().map(|e| e.used).sum();
        100 - used - s.room.expect("limited by flow")
    }

    #[test]
    fn alone_a_flow_is_not_limited_by_flow() {
        let t = FlowTable::new();
        let s = t.share(flow("a"), 100);
        assert_eq!((s.room, s.level), (None, (100, 1)));
        let t = table(&[("a", 70, 0, 70)]);
        assert_eq!(t.share(flow("a"), 100).room, None);
    }

    #[test]
    fn water_fill_keeps_the_light_flows_demand_and_splits_the_rest() {
        // Light asked 10 (used 4), heavy b asked 80 (used 30); a checks.
        let t = table(&[("light", 10, 0, 4), ("b", 80, 0, 30)]);
        let s = t.share(flow("a"), 100);
        // Level: 10 + L + L = 100: L = 45. Light keeps 10 − 4, b 45 − 30.
        assert_eq!(s.level, (90, 2));
        assert_eq!(reserve(&t, "a"), 6 + 15);
        assert_eq!(s.room, Some(45));
        // The previous window's demand counts too.
        let t = table(&[("light", 0, 10, 0), ("b", 0, 80, 0)]);
        assert_eq!(reserve(&t, "a"), 10 + 45);
        // A fraction: three heavy flows of 100: the others keep ⌊33.3⌋ each, a may take 34.
        let t = table(&[("b", 100, 0, 0), ("c", 100, 0, 0)]);
        let s = t.share(flow("a"), 100);
        assert_eq!((s.room, s.level), (Some(34), (100, 3)));
        // Over their allocation, others keep nothing.
        let t = table(&[("b", 100, 0, 90)]);
        assert_eq!(reserve(&t, "a"), 0);
    }

    #[test]
    fn a_flow_over_its_allocation_keeps_what_it_used_and_the_rest_is_shared() {
        // h1 took 60 alone; light asked 50 (denied): h2 and light share the 40 left.
        let t = table(&[("h1", 60, 0, 60), ("light", 50, 0, 0)]);
        let s = t.share(flow("h2"), 100);
        assert_eq!(
            reserve(&t, "h2"),
            20,
            "light is kept 20, not its max-min 33 that is gone"
        );
        assert_eq!(s.level, (100, 3), "a denial counts up to the max-min level");
        assert_eq!(reserve(&t, "light"), 0, "h2 asked nothing yet");
        // Everyone used the quota: no limit by flow (GCRA refills are anybody's).
        let t = table(&[("a", 70, 0, 70), ("b", 40, 0, 40)]);
        assert_eq!(t.share(flow("c"), 100).room, None);
        assert_eq!(level(100, &[(70, 70), (40, 40)], 0).0, (0, 1));
    }

    #[test]
    fn a_denial_counts_as_asked_only_below_the_level() {
        let mut t = table(&[("b", 80, 0, 0)]);
        let s = t.share(flow("a"), 100);
        assert!(t.below_level(&s));
        t.count(&s, 49, 0);
        assert!(t.below_level(&s), "49 < 50");
        t.count(&s, 1, 0);
        assert!(!t.below_level(&s), "50 is the level");
    }

    #[test]
    fn the_65th_flow_counts_in_the_shared_entry() {
        let mut t = FlowTable::new();
        for i in 0..MAX_FLOWS {
            let s = t.share(flow(&format!("f{i}")), 1000);
            assert_ne!(s.id, OTHERS);
            t.count(&s, 1, 1);
        }
        let s65 = t.share(flow("f64"), 1000);
        assert_eq!(s65.id, OTHERS);
        t.count(&s65, 1, 1);
        let s66 = t.share(flow("f65"), 1000);
        assert_eq!(s66.id, OTHERS, "the rest share it");
        t.count(&s66, 2, 2);
        assert_eq!(t.len(), MAX_FLOWS + 1);
        assert_eq!(t.find(OTHERS).map(|i| t.entries[i].used), Ok(3));
        // A flow already named keeps its own entry.
        assert_eq!(t.share(flow("f3"), 1000).id, flow("f3").get());
        // Once old flows roll out, new ones get their own again.
        let next = t.rolled(t.window + 2);
        assert!(next.is_empty());
        assert_eq!(next.share(flow("f64"), 1000).id, flow("f64").get());
    }

    #[test]
    fn rolling_moves_asked_to_prev_and_drops_the_old() {
        let t = table(&[("a", 7, 3, 5), ("b", 0, 4, 0)]);
        assert_eq!(t.rolled(5), t);
        let next = t.rolled(6);
        assert_eq!(next.window, 6);
        let rows: Vec<(u64, u64, u64, u64)> = next
            .iter()
            .map(|e| (e.id, e.asked, e.prev, e.used))
            .collect();
        assert_eq!(rows, [(flow("a").get(), 0, 7, 0)], "b asked nothing in 5");
        assert!(t.rolled(7).is_empty());
        assert!(t.rolled(4).is_empty(), "a clock behind: nothing known");
        assert_eq!(t.worthless_at(10), 70);
        assert_eq!(FlowTable::new().worthless_at(10), 0);
    }

    #[test]
    fn encoding_round_trips_and_refuses_garbage() {
        let t = table(&[("a", 7, 3, 5), ("b", 1, 0, 0)]);
        let mut text = String::new();
        t.encode_into(&mut text);
        let words: Vec<&str> = text.split(' ').skip(2).collect();
        assert_eq!(FlowTable::decode(words.into_iter()), Some(t));
        for bad in [
            "",
            "5",
            "x 1:1:1:1",
            "5 1:1:1",
            "5 1:1:1:1:1",
            "5 g:1:1:1",
            "5 2:1:1:1 1:1:1:1",
            "5 1:1:1:1 1:1:1:1",
        ] {
            assert_eq!(FlowTable::decode(bad.split(' ')), None, "{bad:?}");
        }
        let many: Vec<String> = (1..=MAX_FLOWS as u64 + 1)
            .map(|i| format!("{i:x}:1:0:1"))
            .collect();
        let text = format!("5 {}", many.join(" "));
        assert_eq!(FlowTable::decode(text.split(' ')), None, "65 named flows");
        let text = format!("5 0:1:0:1 {}", many[..MAX_FLOWS].join(" "));
        assert!(FlowTable::decode(text.split(' ')).is_some(), "64 + others");
    }
}

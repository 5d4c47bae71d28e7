//! A bounded table of the heaviest keys of one rate limit (Space-Saving: a new key takes the
//! place of the lightest one), with what the live view shows of each and the per-second counts
//! a quota preview replays. Memory is bounded by [`TopKeys::new`]'s capacity, whatever the
//! number of keys checked.

use std::collections::{HashMap, VecDeque};

/// Seconds of per-key counts kept for a quota preview.
pub const REPLAY_SECONDS: u64 = 120;
/// "Now" for the live view: what happened in the last this many seconds.
pub const RECENT_SECONDS: u64 = 10;

/// A check's priority class (`Quota::reserve`), kept inline so that counts stay `Copy`: the
/// library refuses a class name longer than [`MAX_CLASS_LEN`] bytes before it is recorded.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ClassTag {
    len: u8,
    bytes: [u8; MAX_CLASS_LEN],
}

/// Longest class name the library accepts, in bytes.
const MAX_CLASS_LEN: usize = clusterlimit::rate::MAX_CLASS_LEN;

impl ClassTag {
    /// No class.
    pub const NONE: ClassTag = ClassTag {
        len: 0,
        bytes: [0; MAX_CLASS_LEN],
    };

    /// The tag of `class` (`None`, or a name too long to be a class: no class).
    pub fn of(class: Option<&str>) -> ClassTag {
        let Some(name) = class.filter(|c| c.len() <= MAX_CLASS_LEN) else {
            return ClassTag::NONE;
        };
        let mut bytes = [0; MAX_CLASS_LEN];
        bytes[..name.len()].copy_from_slice(name.as_bytes());
        ClassTag {
            len: u8::try_from(name.len()).unwrap_or(0),
            bytes,
        }
    }

    /// The class's name, `None` for no class.
    pub fn name(&self) -> Option<&str> {
        let name = std::str::from_utf8(&self.bytes[..usize::from(self.len)]).ok()?;
        (!name.is_empty()).then_some(name)
    }
}

impl std::fmt::Debug for ClassTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.name(), f)
    }
}

/// What one check of a key did.
#[derive(Debug, Clone, Copy)]
pub struct Hit {
    pub cost: u64,
    /// The check's priority class, replayed as such by a quota preview.
    pub class: ClassTag,
    pub allowed: bool,
    pub remaining: u64,
    pub limit: u64,
    pub reset_ms: u64,
    pub now_ms: u64,
}

/// Checks of one key of one class in one second (a second with checks of several classes has
/// one of these per class, at most the quota's classes and none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Second {
    pub unix_sec: u64,
    pub class: ClassTag,
    pub checks: u32,
    pub cost: u64,
    pub denied: u32,
}

/// One tracked key.
#[derive(Debug, Clone)]
pub struct Tracked {
    pub key: String,
    /// Space-Saving weight (an over-estimate by at most the weight of the key it replaced),
    /// halved every half-life so the table follows what is heavy now.
    score: u64,
    pub last: Hit,
    pub last_denied_ms: Option<u64>,
    /// The last [`REPLAY_SECONDS`] seconds with checks, oldest first.
    pub seconds: VecDeque<Second>,
}

impl Tracked {
    /// (checks, denied) in the [`RECENT_SECONDS`] before `now_ms`.
    pub fn recent(&self, now_ms: u64) -> (u64, u64) {
        let from = (now_ms / 1000).saturating_sub(RECENT_SECONDS);
        self.seconds
            .iter()
            .filter(|s| s.unix_sec >= from)
            .fold((0, 0), |(c, d), s| {
                (c + u64::from(s.checks), d + u64::from(s.denied))
            })
    }

    fn count(&mut self, hit: &Hit) {
        let sec = hit.now_ms / 1000;
        let denied = u32::from(!hit.allowed);
        // This second's counts of the hit's class, among this second's (one per class).
        let same = self
            .seconds
            .iter_mut()
            .rev()
            .take_while(|s| s.unix_sec == sec)
            .find(|s| s.class == hit.class);
        match same {
            Some(s) => {
                s.checks = s.checks.saturating_add(1);
                s.cost = s.cost.saturating_add(hit.cost);
                s.denied = s.denied.saturating_add(denied);
            }
            None => self.seconds.push_back(Second {
                unix_sec: sec,
                class: hit.class,
                checks: 1,
                cost: hit.cost,
                denied,
            }),
        }
        let from = sec.saturating_sub(REPLAY_SECONDS);
        while self.seconds.front().is_some_and(|s| s.unix_sec < from) {
            self.seconds.pop_front();
        }
        self.last = *hit;
        if !hit.allowed {
            self.last_denied_ms = Some(hit.now_ms);
        }
    }
}

/// The table.
#[derive(Debug)]
pub struct TopKeys {
    capacity: usize,
    half_life_ms: u64,
    decay_at_ms: u64,
    keys: HashMap<String, Tracked>,
}

impl TopKeys {
    /// A table of at most `capacity` keys whose weights halve every `half_life_ms`.
    pub fn new(capacity: usize, half_life_ms: u64) -> TopKeys {
        TopKeys {
            capacity: capacity.max(1),
            half_life_ms: half_life_ms.max(1),
            decay_at_ms: 0,
            keys: HashMap::new(),
        }
    }

    /// Counts `hit` of `key` with `weight`: a tracked key gains it; an untracked one with a
    /// weight takes the lightest key's place when the table is full (weight 0: counted only if
    /// tracked already).
    pub fn record(&mut self, key: &str, weight: u64, hit: &Hit) {
        self.decay(hit.now_ms);
        if let Some(t) = self.keys.get_mut(key) {
            t.score = t.score.saturating_add(weight);
            t.count(hit);
            return;
        }
        if weight == 0 {
            return;
        }
        let mut floor = 0;
        if self.keys.len() >= self.capacity {
            let Some(lightest) = self
                .keys
                .values()
                .min_by_key(|t| t.score)
                .map(|t| (t.key.clone(), t.score))
            else {
                return;
            };
            self.keys.remove(&lightest.0);
            floor = lightest.1;
        }
        let mut t = Tracked {
            key: key.to_string(),
            score: floor.saturating_add(weight),
            last: *hit,
            last_denied_ms: None,
            seconds: VecDeque::new(),
        };
        t.count(hit);
        self.keys.insert(key.to_string(), t);
    }

    fn decay(&mut self, now_ms: u64) {
        if now_ms < self.decay_at_ms {
            return;
        }
        if self.decay_at_ms != 0 {
            for t in self.keys.values_mut() {
                t.score /= 2;
            }
        }
        self.decay_at_ms = now_ms + self.half_life_ms;
    }

    /// Every tracked key, heaviest first.
    pub fn tracked(&self) -> Vec<&Tracked> {
        let mut v: Vec<&Tracked> = self.keys.values().collect();
        v.sort_by(|a, b| b.score.cmp(&a.score).then_with(|| a.key.cmp(&b.key)));
        v
    }

    /// How many keys are tracked.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.keys.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(now_ms: u64, allowed: bool) -> Hit {
        Hit {
            cost: 1,
            class: ClassTag::NONE,
            allowed,
            remaining: 0,
            limit: 10,
            reset_ms: 100,
            now_ms,
        }
    }

    #[test]
    fn stays_bounded_and_keeps_the_heavy_keys() {
        let mut t = TopKeys::new(8, 60_000);
        for i in 0..100_000u64 {
            // "hot" every other check, the rest spread over 50,000 keys.
            let key = if i % 2 == 0 {
                "hot".to_string()
            } else {
                format!("k{}", i % 50_000)
            };
            t.record(&key, 1, &hit(1_000_000 + i / 100, true));
        }
        assert_eq!(t.len(), 8);
        assert_eq!(t.tracked()[0].key, "hot");
    }

    #[test]
    fn weight_zero_only_updates_tracked_keys() {
        let mut t = TopKeys::new(4, 60_000);
        t.record("a", 0, &hit(1_000, true));
        assert_eq!(t.len(), 0);
        t.record("a", 1, &hit(1_000, false));
        t.record("a", 0, &hit(2_500, true));
        let a = t.tracked()[0];
        assert_eq!(a.seconds.len(), 2);
        assert_eq!(a.last_denied_ms, Some(1_000));
        assert_eq!(a.recent(2_500), (2, 1));
    }

    #[test]
    fn seconds_older_than_the_replay_window_are_dropped() {
        let mut t = TopKeys::new(4, 60_000);
        for s in 0..(REPLAY_SECONDS + 30) {
            t.record("a", 1, &hit(s * 1000, true));
        }
        let a = t.tracked()[0];
        assert_eq!(a.seconds.len() as u64, REPLAY_SECONDS + 1);
        assert_eq!(a.recent((REPLAY_SECONDS + 29) * 1000), (11, 0));
    }

    #[test]
    fn each_second_counts_each_class_apart() {
        let mut t = TopKeys::new(4, 60_000);
        let batch = ClassTag::of(Some("batch"));
        // Classes interleaved within one second: one count per class, not per alternation.
        for i in 0..10 {
            let class = if i % 2 == 0 { batch } else { ClassTag::NONE };
            t.record(
                "a",
                1,
                &Hit {
                    class,
                    ..hit(5_000 + i, i < 8)
                },
            );
        }
        t.record(
            "a",
            1,
            &Hit {
                class: batch,
                ..hit(6_000, true)
            },
        );
        let a = t.tracked()[0];
        let seen: Vec<(u64, Option<&str>, u32, u32)> = a
            .seconds
            .iter()
            .map(|s| (s.unix_sec, s.class.name(), s.checks, s.denied))
            .collect();
        assert_eq!(
            seen,
            [
                (5, Some("batch"), 5, 1),
                (5, None, 5, 1),
                (6, Some("batch"), 1, 0)
            ]
        );
        assert_eq!(a.recent(6_500), (11, 2));
        // A name too long to be a class is no class.
        assert_eq!(ClassTag::of(Some(&"x".repeat(25))), ClassTag::NONE);
        assert_eq!(ClassTag::of(None).name(), None);
    }

    #[test]
    fn weights_decay_so_a_new_heavy_key_wins() {
        let mut t = TopKeys::new(2, 1_000);
        for i in 0..1_000 {
            t.record("old", 1, &hit(i, true));
        }
        // Long after: "old" decays; "new" becomes the heaviest.
        for i in 0..200 {
            t.record("new", 1, &hit(20_000 + i * 20, true));
        }
        assert_eq!(t.tracked()[0].key, "new");
    }
}

//! [`KeyState`]: what a store keeps per key, and its encoding (short text, readable with
//! `etcdctl get` or `zkCli get`).

use super::flows::FlowTable;
use super::quota::Algorithm;
use crate::error::{Error, Result};

/// Unix time in nanoseconds: the one time unit of rate-limit state, absolute so that every
/// process sharing a key reads the same instants.
pub type UnixNanos = u64;

/// The counting state of one key, per algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Meter {
    /// GCRA: the theoretical arrival time of the next request.
    Gcra {
        /// Theoretical arrival time.
        tat: UnixNanos,
    },
    /// GCRA with a warm-up (`Quota::warmup`): the theoretical arrival time and how cold the
    /// key was at that instant. Idle time after `tat` adds to the coldness; admissions take it
    /// away (`gcra.rs`). A quota without a warm-up reads it as `Gcra { tat }`, one with a
    /// warm-up reads `Gcra { tat }` as warm (`cold` 0) at `tat`.
    GcraWarmUp {
        /// Theoretical arrival time.
        tat: UnixNanos,
        /// Coldness at `tat`, in nanoseconds of idle time (0: warm; the warm-up period: fully
        /// cold; more reads as fully cold).
        cold: u64,
    },
    /// A fixed window and its count.
    Fixed {
        /// Window index: `now / period`.
        window: u64,
        /// Admitted cost in that window.
        count: u64,
    },
    /// The sliding window's two counters.
    Sliding {
        /// Index of the current window: `now / period`.
        window: u64,
        /// Admitted cost in the current window.
        count: u64,
        /// Admitted cost in the window before it.
        previous: u64,
    },
}

impl Meter {
    /// The algorithm this meter belongs to.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            Meter::Gcra { .. } | Meter::GcraWarmUp { .. } => Algorithm::Gcra,
            Meter::Fixed { .. } => Algorithm::FixedWindow,
            Meter::Sliding { .. } => Algorithm::SlidingWindow,
        }
    }
}

/// The stored state of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyState {
    /// The counting state.
    pub meter: Meter,
    /// Denied until then (0: no ban).
    pub banned_until: UnixNanos,
    /// The latest `now` any writer used: time never runs backwards per key, whatever the
    /// writers' clocks (see `decide`).
    pub stamp: UnixNanos,
    /// A random number per write, so a writer that retries a write whose reply was lost
    /// recognises its own write instead of counting it twice.
    pub tag: u64,
    /// On a quota that shares by flow (`Quota::fair_flows`): the flows checking the key in
    /// this fairness window and the one before (empty otherwise).
    pub flows: FlowTable,
    /// GCRA: what refunds and leases did to the key's slots (empty otherwise).
    pub slots: SlotLog,
}

/// What a GCRA key's refunds must know of its past to give back only slots that nobody
/// admitted later stands on (`adjust.rs`): a refund moves the arrival time back, and with it
/// the slots of every unit admitted after the refunded ones, which must never start before
/// the instant those units are spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SlotLog {
    /// When the first refund of this state's life moved slots back (0: none yet). A
    /// reservation whose check saw another value was checked on an earlier life of the key.
    pub since: UnixNanos,
    /// Nanoseconds of slots given back by refunds since then: how far, at most, the slots of
    /// anything admitted before them have moved back.
    pub given_back: u64,
    /// The latest instant a lease taken on the key may be spent until (0: none): no refund
    /// moves a slot before it.
    pub leased_until: UnixNanos,
}

/// How long a key whose slots refunds moved is kept after its last write, at least: a
/// reservation checked before the first of those refunds can tell the key's life from a later
/// one for this long after (`SlotLog::moved_since`). Ten minutes, the default time limit of
/// a reservation.
pub const SLOT_LOG_KEPT: std::time::Duration = std::time::Duration::from_secs(600);

impl SlotLog {
    /// Until when a state with this log must be kept, whatever its meter says (0: no need).
    pub(crate) fn kept_until(&self, now: UnixNanos) -> UnixNanos {
        if self.given_back == 0 {
            return 0;
        }
        now.saturating_add(SLOT_LOG_KEPT.as_nanos() as u64)
    }

    /// How far, at most, the slots of a unit whose check saw `seen` at `taken_at` (at the
    /// latest) have moved back since, by this log at `now`; `None`: unknown (another life of
    /// the key, or one too old to tell), so nothing can be given back safely.
    ///
    /// Refunds only ever move slots back, each by what it gave back, so the slots of a unit
    /// have moved by at most what was given back since its check. A state forgotten by the
    /// store and written anew starts an empty log: a check that saw an empty log can only be
    /// told from that for [`SLOT_LOG_KEPT`] after it.
    pub(crate) fn moved_since(
        &self,
        seen: &SlotLog,
        taken_at: UnixNanos,
        now: UnixNanos,
    ) -> Option<u64> {
        if seen.since != 0 {
            return (self.since == seen.since)
                .then(|| self.given_back.checked_sub(seen.given_back))
                .flatten();
        }
        let young = now.saturating_sub(taken_at) < SLOT_LOG_KEPT.as_nanos() as u64;
        young.then_some(self.given_back)
    }

    /// This log after an adjustment moved GCRA's arrival time from `before` to `after` at
    /// `now` (a refund records how far it moved slots back; anything else changes nothing).
    pub(crate) fn after(
        self,
        before: Option<UnixNanos>,
        after: Option<UnixNanos>,
        now: UnixNanos,
    ) -> SlotLog {
        let back = match (before, after) {
            (Some(b), Some(a)) => b.saturating_sub(a),
            _ => 0,
        };
        if back == 0 {
            return self;
        }
        SlotLog {
            since: if self.since == 0 {
                now.max(1)
            } else {
                self.since
            },
            given_back: self.given_back.saturating_add(back),
            ..self
        }
    }

    /// Whether anything is recorded (else the state is encoded as before refunds existed).
    pub fn is_empty(&self) -> bool {
        *self == SlotLog::default()
    }
}

impl KeyState {
    /// A state without flows.
    pub fn new(meter: Meter, banned_until: UnixNanos, stamp: UnixNanos, tag: u64) -> KeyState {
        KeyState {
            meter,
            banned_until,
            stamp,
            tag,
            flows: FlowTable::new(),
            slots: SlotLog::default(),
        }
    }

    /// This state with the flows and the slot log of `before` (the state it replaces).
    pub(crate) fn carrying(mut self, before: Option<&KeyState>) -> KeyState {
        if let Some(b) = before {
            self.flows = b.flows.clone();
            self.slots = b.slots;
        }
        self
    }

    /// `1 <kind> <stamp> <banned_until> <tag> <fields…>`, all decimal: kind `g` (fields `tat`),
    /// `w` (`tat cold`: GCRA with a warm-up), `f` (`window count`), `s` (`window count
    /// previous`). Builds before warm-ups refuse `w` as unreadable (a store error). A state
    /// with flows starts with `2` instead and ends with ` F <window> <id>:<asked>:<prev>:<used>
    /// …` (ids in hex), so builds before flows refuse it rather than drop the table. A state
    /// with a slot log (refunds or leases moved its slots) starts with `3` and has ` R <since>
    /// <given_back> <leased_until>` after the meter's fields, before any flows, so builds
    /// before refunds refuse it rather than drop the log.
    pub fn encode(&self) -> Vec<u8> {
        let v = match (self.slots.is_empty(), self.flows.is_empty()) {
            (false, _) => 3,
            (true, true) => 1,
            (true, false) => 2,
        };
        let head = |k: &str| format!("{v} {k} {} {} {}", self.stamp, self.banned_until, self.tag);
        let mut text = match self.meter {
            Meter::Gcra { tat } => format!("{} {tat}", head("g")),
            Meter::GcraWarmUp { tat, cold } => format!("{} {tat} {cold}", head("w")),
            Meter::Fixed { window, count } => format!("{} {window} {count}", head("f")),
            Meter::Sliding {
                window,
                count,
                previous,
            } => format!("{} {window} {count} {previous}", head("s")),
        };
        if !self.slots.is_empty() {
            let l = &self.slots;
            text.push_str(&format!(
                " R {} {} {}",
                l.since, l.given_back, l.leased_until
            ));
        }
        if !self.flows.is_empty() {
            self.flows.encode_into(&mut text);
        }
        text.into_bytes()
    }

    /// Parses a stored state; anything else is a store error naming the value.
    pub fn decode(raw: &[u8]) -> Result<KeyState> {
        let bad = || {
            Error::store(format!(
                "stored rate-limit state {:?} is unreadable",
                String::from_utf8_lossy(raw)
            ))
        };
        let text = std::str::from_utf8(raw).map_err(|_| bad())?;
        let (version, text) = text.split_once(' ').ok_or_else(bad)?;
        let (text, flows) = match (version, text.split_once(" F ")) {
            ("1", None) => (text, FlowTable::new()),
            ("2" | "3", Some((meter, table))) => {
                (meter, FlowTable::decode(table.split(' ')).ok_or_else(bad)?)
            }
            ("3", None) => (text, FlowTable::new()),
            _ => return Err(bad()),
        };
        let (text, slots) = match (version, text.split_once(" R ")) {
            ("3", Some((meter, log))) => (meter, SlotLog::decode(log).ok_or_else(bad)?),
            (_, None) if version != "3" => (text, SlotLog::default()),
            _ => return Err(bad()),
        };
        let mut parts = text.split(' ');
        let kind = parts.next().ok_or_else(bad)?;
        let nums: Vec<u64> = parts
            .map(|p| p.parse::<u64>().map_err(|_| bad()))
            .collect::<Result<_>>()?;
        let meter = match (kind, &nums[..]) {
            ("g", [_, _, _, tat]) => Meter::Gcra { tat: *tat },
            ("w", [_, _, _, tat, cold]) => Meter::GcraWarmUp {
                tat: *tat,
                cold: *cold,
            },
            ("f", [_, _, _, window, count]) => Meter::Fixed {
                window: *window,
                count: *count,
            },
            ("s", [_, _, _, window, count, previous]) => Meter::Sliding {
                window: *window,
                count: *count,
                previous: *previous,
            },
            _ => return Err(bad()),
        };
        Ok(KeyState {
            meter,
            stamp: nums[0],
            banned_until: nums[1],
            tag: nums[2],
            flows,
            slots,
        })
    }
}

impl SlotLog {
    /// `<since> <given_back> <leased_until>`; an empty log is not written, so reading one is
    /// an error.
    fn decode(text: &str) -> Option<SlotLog> {
        let nums: Vec<u64> = text
            .split(' ')
            .map(|p| p.parse().ok())
            .collect::<Option<_>>()?;
        let log = match nums[..] {
            [since, given_back, leased_until] => SlotLog {
                since,
                given_back,
                leased_until,
            },
            _ => return None,
        };
        (!log.is_empty()).then_some(log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_meter() {
        for meter in [
            Meter::Gcra { tat: u64::MAX },
            Meter::GcraWarmUp {
                tat: 11,
                cold: u64::MAX,
            },
            Meter::Fixed {
                window: 7,
                count: 3,
            },
            Meter::Sliding {
                window: 9,
                count: 1,
                previous: 4,
            },
        ] {
            let s = KeyState::new(meter, 5, 6, 42);
            assert_eq!(KeyState::decode(&s.encode()).ok(), Some(s));
        }
        let warm = KeyState::new(Meter::GcraWarmUp { tat: 9, cold: 30 }, 0, 8, 7);
        assert_eq!(warm.encode(), b"1 w 8 0 7 9 30");
        assert_eq!(warm.meter.algorithm(), Algorithm::Gcra);
    }

    #[test]
    fn without_flows_the_bytes_are_todays_with_flows_version_2() {
        // Byte for byte what builds before flows wrote and read.
        let plain = KeyState::new(
            Meter::Fixed {
                window: 7,
                count: 3,
            },
            0,
            6,
            42,
        );
        assert_eq!(plain.encode(), b"1 f 6 0 42 7 3");
        let raw = b"2 f 6 0 42 7 3 F 9 a:5:2:4 cbf29ce484222325:1:0:1";
        let with = KeyState::decode(raw).expect("a state with flows");
        assert_eq!(with.meter, plain.meter);
        assert_eq!((with.stamp, with.tag, with.flows.window), (6, 42, 9));
        let rows: Vec<(u64, u64, u64, u64)> = with
            .flows
            .iter()
            .map(|e| (e.id, e.asked, e.prev, e.used))
            .collect();
        assert_eq!(rows, [(10, 5, 2, 4), (0xcbf2_9ce4_8422_2325, 1, 0, 1)]);
        assert_eq!(with.encode(), raw.to_vec());
    }

    #[test]
    fn a_slot_log_is_version_3_before_any_flows() {
        let mut s = KeyState::new(Meter::Gcra { tat: 9 }, 0, 8, 7);
        s.slots = SlotLog {
            since: 5,
            given_back: 40,
            leased_until: 0,
        };
        assert_eq!(s.encode(), b"3 g 8 0 7 9 R 5 40 0");
        assert_eq!(KeyState::decode(&s.encode()).ok(), Some(s.clone()));
        let raw = b"3 g 8 0 7 9 R 5 40 0 F 9 a:5:2:4";
        let with = KeyState::decode(raw).expect("a state with a log and flows");
        assert_eq!((with.slots, with.flows.window), (s.slots, 9));
        assert_eq!(with.encode(), raw.to_vec());
    }

    #[test]
    fn garbage_is_a_store_error() {
        for raw in [
            &b""[..],
            b"1",
            b"2 g 1 2 3 4",
            b"1 g 1 2 3",
            b"1 g 1 2 3 x",
            b"1 g 1 2 3 4 5",
            b"1 w 1 2 3 4",
            b"1 w 1 2 3 4 5 6",
            b"1 f 1 2 3 4",
            b"1 q 1 2 3 4",
            b"1 f 1 2 3 4 5 F 9 a:1:1:1",
            b"2 f 1 2 3 4 5",
            b"2 f 1 2 3 4 5 F 9",
            b"2 f 1 2 3 4 5 F 9 a:1:1",
            b"2 f 1 2 3 4 F 9 a:1:1:1",
            b"2 f 1 2 3 4 5 F 9 b:1:1:1 a:1:1:1",
            b"3 f 1 2 3 4 5",
            b"3 g 1 2 3 4 R 0 0 0",
            b"3 g 1 2 3 4 R 1 2",
            b"3 g 1 2 3 4 F 9 a:1:1:1",
            b"1 g 1 2 3 4 R 1 2 3",
            b"2 g 1 2 3 4 R 1 2 3 F 9 a:1:1:1",
            b"\xff",
        ] {
            assert!(
                matches!(KeyState::decode(raw), Err(Error::Store(_))),
                "{raw:?}"
            );
        }
    }
}

//! Reading the permit scripts' replies (`lua/sem_*.lua`): lists of strings, an entry's value
//! `PERMITS SESSION SINCE_MS OWNER` (and a fair semaphore's tag, `fair_record.rs`). A reply
//! that does not read is a store error naming what was wrong, never a panic.

use super::fair_record::{split_tag, FairState};
use crate::backend::QueueView;
use crate::fair::{FairTag, NamedEntry};
use crate::queue;
use crate::status::{Holder, Status};
use std::time::Duration;

/// One queued entry as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StoredEntry {
    pub(super) token: u64,
    pub(super) permits: u32,
    pub(super) since_unix_ms: u64,
    pub(super) owner: String,
    /// Flow, class and weight, on a fair semaphore's entries that name them.
    pub(super) tag: Option<FairTag>,
}

/// A semaphore as one read saw it: the picture waiters are decided from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SemState {
    pub(super) capacity: u32,
    pub(super) floor: u64,
    /// The last token handed out: every entry up to it is in `entries` or gone.
    pub(super) last: u64,
    /// The record's version, for a capacity change's compare-and-set.
    pub(super) ver: String,
    /// When the earliest session with entries here lapses, from the read.
    pub(super) next_expiry: Option<Duration>,
    /// The read stopped at this token (a watch reads up to its last waiter).
    pub(super) upto: Option<u64>,
    pub(super) entries: Vec<StoredEntry>,
    /// A fair semaphore's record (`None`: a plain semaphore).
    pub(super) fair: Option<FairState>,
}

impl QueueView for SemState {
    fn capacity(&self) -> Option<(u32, u64)> {
        Some((self.capacity, self.floor))
    }
    fn entries(&self) -> impl Iterator<Item = queue::Entry> + '_ {
        self.entries.iter().map(|e| queue::Entry {
            token: e.token,
            permits: e.permits,
        })
    }
    fn contains(&self, token: u64) -> bool {
        self.entries
            .binary_search_by_key(&token, |e| e.token)
            .is_ok()
    }
    fn has_seen(&self, token: u64) -> bool {
        token <= self.last && self.upto.is_none_or(|u| token <= u)
    }
    fn marked(&self, token: u64) -> Option<bool> {
        self.fair.as_ref().map(|f| f.marks.contains(&token))
    }
}

impl SemState {
    /// `sem_read.lua`'s reply to a read up to `upto` (all: `None`); `None` when the
    /// semaphore does not exist.
    pub(super) fn parse(items: &[String], upto: Option<u64>) -> Result<Option<SemState>, String> {
        let [capacity, floor, last, ver, next, fair, rest @ ..] = items else {
            return match items.is_empty() {
                true => Ok(None),
                false => Err(format!("a semaphore read of {} items", items.len())),
            };
        };
        let next: i64 = number(next, "expiry")?;
        let fair = FairState::parse(fair)?;
        Ok(Some(SemState {
            capacity: number(capacity, "capacity")?,
            floor: number(floor, "floor")?,
            last: number(last, "last token")?,
            ver: ver.clone(),
            next_expiry: u64::try_from(next).ok().map(Duration::from_millis),
            // A fair semaphore's read is of the whole queue.
            upto: upto.filter(|_| fair.is_none()),
            entries: entries(rest)?,
            fair,
        }))
    }

    /// The semaphore as `status` reports it.
    pub(super) fn status(&self, name: &str) -> Status {
        if let Some(fair) = &self.fair {
            return self.fair_status(name, fair);
        }
        let n = queue::holders(self.entries(), self.capacity, self.floor);
        let mut rows: Vec<Holder> = self
            .entries
            .iter()
            .map(|e| Holder::new(&e.owner, e.permits, e.token, e.since_unix_ms))
            .collect();
        let waiters = rows.split_off(n);
        Status::from_queue(name, self.capacity, rows, waiters)
    }

    /// A fair semaphore's status: the marked entries hold, the others wait.
    fn fair_status(&self, name: &str, fair: &FairState) -> Status {
        let first = fair.classes.name(0).unwrap_or_default();
        let (mut holders, mut waiters) = (Vec::new(), Vec::new());
        for e in &self.entries {
            let tag = e.tag.clone().unwrap_or_default();
            let row = Holder::new(&e.owner, e.permits, e.token, e.since_unix_ms)
                .in_flow(&tag.flow, tag.class.as_deref().unwrap_or(first));
            match fair.marks.contains(&e.token) {
                true => holders.push(row),
                false => waiters.push(row),
            }
        }
        Status::from_queue(name, self.capacity, holders, waiters).with_classes(&fair.classes)
    }

    /// The entries the fair rule grants now (none on a plain semaphore).
    pub(super) fn next_grants(&self) -> Vec<u64> {
        self.next_grants_and_vtimes().0
    }

    /// [`next_grants`](Self::next_grants), and the flows' virtual times to record with them.
    pub(super) fn next_grants_and_vtimes(&self) -> (Vec<u64>, crate::fair::VTimes) {
        let Some(fair) = &self.fair else {
            return Default::default();
        };
        let named: Vec<NamedEntry<'_>> = self
            .entries
            .iter()
            .map(|e| {
                let marked = fair.marks.contains(&e.token);
                NamedEntry::tagged(e.token, e.permits, e.tag.as_ref(), marked)
            })
            .collect();
        crate::fair::next_grants_recorded(&named, self.capacity, &fair.classes, &fair.vtimes)
    }
}

/// `TOKEN, VALUE` pairs, in token order.
pub(super) fn entries(pairs: &[String]) -> Result<Vec<StoredEntry>, String> {
    if !pairs.len().is_multiple_of(2) {
        return Err("a queue of unpaired items".into());
    }
    pairs
        .chunks(2)
        .map(|pair| {
            let (value, tag) = split_tag(&pair[1])?;
            let mut parts = value.splitn(4, ' ');
            let mut next = |what| parts.next().ok_or(format!("an entry without its {what}"));
            let permits = number(next("permits")?, "permits")?;
            let _session = next("session")?;
            let since_unix_ms = number(next("start time")?, "start time")?;
            Ok(StoredEntry {
                token: number(&pair[0], "token")?,
                permits,
                since_unix_ms,
                owner: next("owner")?.to_string(),
                tag,
            })
        })
        .collect()
}

/// What an enqueue came to (`sem_enqueue.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Enqueue {
    NoSemaphore,
    /// Heavier than the capacity: nothing is queued.
    Heavy(u32),
    /// Queued with `token`; whether it holds, from the queue up to it.
    Queued {
        token: u64,
        holds: bool,
    },
    /// A flow on a plain semaphore: nothing is queued.
    Plain,
    /// A class the fair semaphore lacks (its classes as stored): nothing is queued.
    NoClass(String),
    /// Queued with `token` on a fair semaphore, which the enqueue saw as `state` (the whole
    /// queue and the fair record; not the record's version).
    Fair {
        token: u64,
        state: Box<SemState>,
    },
}

impl Enqueue {
    pub(super) fn parse(items: &[String]) -> Result<Enqueue, String> {
        match items {
            [tag] if tag == "nosem" => Ok(Enqueue::NoSemaphore),
            [tag] if tag == "plain" => Ok(Enqueue::Plain),
            [tag, classes] if tag == "noclass" => Ok(Enqueue::NoClass(classes.clone())),
            [tag, capacity] if tag == "heavy" => Ok(Enqueue::Heavy(number(capacity, "capacity")?)),
            [tag, token, capacity, floor, fair, rest @ ..] if tag == "fair" => {
                let token = number(token, "token")?;
                let entries = entries(rest)?;
                let state = SemState {
                    capacity: number(capacity, "capacity")?,
                    floor: number(floor, "floor")?,
                    last: entries.iter().map(|e| e.token).fold(token, u64::max),
                    ver: String::new(),
                    next_expiry: None,
                    upto: None,
                    entries,
                    fair: Some(FairState::parse(fair)?.ok_or("a fair enqueue without its record")?),
                };
                if !state.contains(token) {
                    return Err("an enqueue whose entry is not in the queue it returned".into());
                }
                Ok(Enqueue::Fair {
                    token,
                    state: Box::new(state),
                })
            }
            [tag, token, capacity, floor, rest @ ..] if tag == "ok" => {
                let token = number(token, "token")?;
                let ahead = entries(rest)?;
                let holds = queue::holds(
                    ahead.iter().map(|e| queue::Entry {
                        token: e.token,
                        permits: e.permits,
                    }),
                    number(capacity, "capacity")?,
                    number(floor, "floor")?,
                    token,
                );
                Ok(Enqueue::Queued {
                    token,
                    holds: holds.ok_or("an enqueue whose entry is not in the queue it returned")?,
                })
            }
            _ => Err(format!("an enqueue answer of {} items", items.len())),
        }
    }
}

/// What a capacity write came to (`sem_resize.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Resize {
    NoSemaphore,
    /// Another capacity write came first.
    Conflict,
    /// Written: the record's new version and the queue the write saw.
    Done {
        ver: String,
        queue: Vec<queue::Entry>,
    },
}

impl Resize {
    pub(super) fn parse(items: &[String]) -> Result<Resize, String> {
        match items {
            [tag] if tag == "nosem" => Ok(Resize::NoSemaphore),
            [tag] if tag == "conflict" => Ok(Resize::Conflict),
            [tag, ver, rest @ ..] if tag == "ok" => Ok(Resize::Done {
                ver: ver.clone(),
                queue: entries(rest)?
                    .iter()
                    .map(|e| queue::Entry {
                        token: e.token,
                        permits: e.permits,
                    })
                    .collect(),
            }),
            _ => Err(format!("a capacity write answer of {} items", items.len())),
        }
    }
}

fn number<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, String> {
    s.parse()
        .map_err(|_| format!("a {what} that is not a number ({s:?})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(items: &[&str]) -> Vec<String> {
        items.iter().map(|i| i.to_string()).collect()
    }

    #[test]
    fn reads_a_semaphore_and_decides_from_it() {
        let st = SemState::parse(
            &s(&[
                "2",
                "0",
                "30",
                "4",
                "1500",
                "",
                "10",
                "1 a 5 me",
                "20",
                "2 b 6 you two",
                "30",
                "1 a 7 x",
            ]),
            None,
        )
        .unwrap()
        .unwrap();
        assert_eq!(st.next_expiry, Some(Duration::from_millis(1500)));
        assert_eq!(st.entries[1].owner, "you two");
        assert!(st.contains(20) && !st.contains(25) && st.has_seen(30) && !st.has_seen(31));
        let status = st.status("db");
        assert_eq!((status.holders.len(), status.waiters.len()), (1, 2));
        assert_eq!(SemState::parse(&[], None).unwrap(), None);
        assert!(SemState::parse(&s(&["2", "0"]), None).is_err());
        assert!(SemState::parse(&s(&["x", "0", "1", "1", "-1", ""]), None).is_err());
        // A read up to token 10 has not seen 20, though 20 was handed out before it.
        let part = SemState::parse(
            &s(&["2", "0", "30", "4", "-1", "", "10", "1 a 5 me"]),
            Some(10),
        )
        .unwrap()
        .unwrap();
        assert!(part.has_seen(10) && !part.has_seen(20));
    }

    #[test]
    fn reads_enqueues_and_resizes() {
        // Entry 20 (1 permit) behind entry 10 (1 permit): it holds at capacity 2, waits at 1.
        let queued_at = |capacity: &str| {
            Enqueue::parse(&s(&[
                "ok",
                "20",
                capacity,
                "0",
                "10",
                "1 a 5 me",
                "20",
                "1 b 6 you",
            ]))
        };
        let holds = |holds| Ok(Enqueue::Queued { token: 20, holds });
        assert_eq!(queued_at("2"), holds(true));
        assert_eq!(queued_at("1"), holds(false));
        assert_eq!(Enqueue::parse(&s(&["heavy", "3"])), Ok(Enqueue::Heavy(3)));
        assert_eq!(Enqueue::parse(&s(&["nosem"])), Ok(Enqueue::NoSemaphore));
        assert!(Enqueue::parse(&s(&["ok", "20", "1", "0"])).is_err());
        assert_eq!(Resize::parse(&s(&["conflict"])), Ok(Resize::Conflict));
        assert!(matches!(
            Resize::parse(&s(&["ok", "5", "10", "1 a 5 me"])),
            Ok(Resize::Done { ver, queue }) if ver == "5" && queue.len() == 1
        ));
    }

    #[test]
    fn reads_a_fair_semaphore_holding_by_marks() {
        // Capacity 2, flow a holds 1 (token 10, marked); a's second entry and b's wait: the
        // rule grants b's (class low holds nothing). A read up to 10 is of the whole queue.
        let items = s(&[
            "2",
            "0",
            "30",
            "4",
            "-1",
            "3\nhigh=0,low=0\n10 99",
            "10",
            "1 s 5 me\n1\n\na",
            "20",
            "1 s 6 me\n1\n\na",
            "30",
            "1 t 7 you\n2\nlow\nb",
        ]);
        let st = SemState::parse(&items, Some(10)).unwrap().unwrap();
        assert_eq!(
            (st.upto, st.marked(10), st.marked(20)),
            (None, Some(true), Some(false))
        );
        assert_eq!(st.next_grants(), vec![30]);
        let status = st.status("db");
        assert_eq!((status.holders.len(), status.waiters.len()), (1, 2));
        assert_eq!(status.holders[0].class.as_deref(), Some("high"));
        assert_eq!(status.waiters[1].flow.as_deref(), Some("b"));
        assert_eq!(status.classes.len(), 2);
        // The enqueue's reply on a fair semaphore carries the same picture.
        let mut reply = s(&["fair", "30", "2", "0"]);
        reply.extend(items[5..].iter().cloned());
        let Ok(Enqueue::Fair { token, state }) = Enqueue::parse(&reply) else {
            panic!("a fair enqueue reply: {reply:?}");
        };
        assert_eq!((token, state.next_grants()), (30, vec![30]));
        assert_eq!(Enqueue::parse(&s(&["plain"])), Ok(Enqueue::Plain));
        assert_eq!(
            Enqueue::parse(&s(&["noclass", "a=0"])),
            Ok(Enqueue::NoClass("a=0".into()))
        );
        assert!(Enqueue::parse(&s(&["fair", "40", "2", "0", ""])).is_err());
    }
}

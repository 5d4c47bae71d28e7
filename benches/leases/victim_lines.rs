//! The lines row 3's Limiter process (victim_child.rs) prints on its stdout for the bench
//! (victim.rs), one per line:
//!
//! - `READY` once its Limiter is connected and the rate limit open;
//! - every `FLUSH` of the run, what its callers did since the last flush: `B <bin> <inside>
//!   <by_end>`, admitted checks to add to a 5 ms bin (bins.rs's two counts), then `N <at>
//!   <straddled> <failed>`: Unix ns when it took those counts from its callers, checks counted
//!   in no `inside` bin, checks that failed;
//! - every `STATS_EVERY`, `S <units left in its leases> <its RequestStats since the run's
//!   start, the fields in `FIELDS`' order>`.

use clusterlimit::RequestStats;
use std::fmt;
use std::time::Duration;

/// How often the child prints its new admissions: what a SIGKILL can cut is what its callers
/// were admitted in the last flush interval (at 1,000,000/s over 8 Limiters, ~125 checks).
pub const FLUSH: Duration = Duration::from_millis(1);
/// How often it prints its stats and the units left in its leases.
pub const STATS_EVERY: Duration = Duration::from_millis(50);
pub const READY: &str = "READY";

/// One line of the child's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Line {
    Ready,
    Bin {
        bin: usize,
        inside: u64,
        by_end: u64,
    },
    Counts {
        at: u64,
        straddled: u64,
        failed: u64,
    },
    Stats {
        held: u64,
        used: RequestStats,
    },
}

/// The counters of `RequestStats`, in the order an `S` line gives them.
const FIELDS: [fn(&mut RequestStats) -> &mut u64; 17] = [
    |s| &mut s.put,
    |s| &mut s.txn,
    |s| &mut s.range,
    |s| &mut s.delete,
    |s| &mut s.watch,
    |s| &mut s.lease,
    |s| &mut s.pending_removals,
    |s| &mut s.removal_session_ends,
    |s| &mut s.rate_batches,
    |s| &mut s.rate_local_answers,
    |s| &mut s.view_decisions,
    |s| &mut s.acquires_refused_store_busy,
    |s| &mut s.rate_lease_admitted,
    |s| &mut s.rate_leases,
    |s| &mut s.rate_leased_units,
    |s| &mut s.rate_lease_returned_units,
    |s| &mut s.rate_lease_lost_units,
];

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Line::Ready => write!(f, "{READY}"),
            Line::Bin {
                bin,
                inside,
                by_end,
            } => write!(f, "B {bin} {inside} {by_end}"),
            Line::Counts {
                at,
                straddled,
                failed,
            } => write!(f, "N {at} {straddled} {failed}"),
            Line::Stats { held, mut used } => {
                write!(f, "S {held}")?;
                FIELDS
                    .iter()
                    .try_for_each(|field| write!(f, " {}", field(&mut used)))
            }
        }
    }
}

/// The line `text` (without its newline); `None` when it is no line of the child's.
pub fn parse(text: &str) -> Option<Line> {
    let mut words = text.split(' ');
    let kind = words.next()?;
    let numbers: Vec<u64> = words.map(|w| w.parse().ok()).collect::<Option<_>>()?;
    match (kind, numbers.as_slice()) {
        (READY, []) => Some(Line::Ready),
        ("B", &[bin, inside, by_end]) => Some(Line::Bin {
            bin: usize::try_from(bin).ok()?,
            inside,
            by_end,
        }),
        ("N", &[at, straddled, failed]) => Some(Line::Counts {
            at,
            straddled,
            failed,
        }),
        ("S", [held, rest @ ..]) if rest.len() == FIELDS.len() => {
            let mut used = RequestStats::default();
            for (field, &n) in FIELDS.iter().zip(rest) {
                *field(&mut used) = n;
            }
            Some(Line::Stats { held: *held, used })
        }
        _ => None,
    }
}

//! One queue entry of a fair semaphore as the grant rule sees it.

/// The flow of entries that name none: a semaphore without flows is this one flow.
pub const DEFAULT_FLOW: u64 = 0;
/// The class of entries that name none: index 0 of [`Classes`](super::Classes).
pub const DEFAULT_CLASS: usize = 0;

/// One entry of a fair semaphore's queue: a request of `permits`, in a flow and a class, holding
/// if `granted`.
///
/// Flows and classes are small ids, not names: the rule only compares them, entries are `Copy`
/// and a snapshot of thousands of waiters needs no allocation per entry. A store keeps the names
/// and interns them per snapshot (any injective map to `u64` will do); a class id is an index
/// into the semaphore's [`Classes`](super::Classes).
///
/// ```
/// use clusterlimit::fair::FairEntry;
/// let e = FairEntry::new(7, 2).in_flow(3).in_class(1).with_weight(5);
/// assert_eq!((e.token, e.permits, e.flow, e.class, e.weight, e.granted), (7, 2, 3, 1, 5, false));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FairEntry {
    /// Store-assigned position, at least 1: the arrival order and the fencing token.
    pub token: u64,
    /// Weight requested, granted whole or not at all.
    pub permits: u32,
    /// The flow (tenant, user, job family) the entry belongs to, within its class.
    pub flow: u64,
    /// Index of the entry's class in the semaphore's [`Classes`](super::Classes); an index
    /// beyond the table is a best-effort class of its own (min 0).
    pub class: usize,
    /// The flow's weight as this entry states it: a flow's weight is that of its newest entry
    /// (so a changed weight takes effect with the next request). 0 counts as 1.
    pub weight: u32,
    /// Whether the store has recorded the entry as granted: it holds, and is never revoked.
    pub granted: bool,
    /// The flow's virtual time as the store recorded it at its last grant (permits granted ×
    /// [`VTIME_SCALE`] / weight, summed while the flow has entries); `None` for a flow the store
    /// has no record of, which starts at the lowest virtual time of its class. It breaks ties
    /// between flows holding equally much (held / weight): the least served goes first, so flows
    /// take turns even when nothing is held at the moment of a grant (capacity 1, instant
    /// releases). A flow's virtual time is that of its newest entry.
    pub vtime: Option<u64>,
}

/// Virtual time of one permit granted to a flow of weight 1 (a flow of weight `w` advances by
/// `VTIME_SCALE / w` per permit): integers, so every store and machine ranks alike.
pub const VTIME_SCALE: u64 = 1_000_000;

impl FairEntry {
    /// A waiting entry in the default flow and class, of weight 1.
    pub fn new(token: u64, permits: u32) -> FairEntry {
        FairEntry {
            token,
            permits,
            flow: DEFAULT_FLOW,
            class: DEFAULT_CLASS,
            weight: 1,
            granted: false,
            vtime: None,
        }
    }

    /// The same entry with its flow's recorded virtual time.
    pub fn with_vtime(mut self, vtime: u64) -> FairEntry {
        self.vtime = Some(vtime);
        self
    }

    /// The same entry in `flow`.
    pub fn in_flow(mut self, flow: u64) -> FairEntry {
        self.flow = flow;
        self
    }

    /// The same entry in class `class` (an index into [`Classes`](super::Classes)).
    pub fn in_class(mut self, class: usize) -> FairEntry {
        self.class = class;
        self
    }

    /// The same entry stating its flow's weight as `weight`.
    pub fn with_weight(mut self, weight: u32) -> FairEntry {
        self.weight = weight;
        self
    }

    /// The same entry, marked granted.
    pub fn as_granted(mut self) -> FairEntry {
        self.granted = true;
        self
    }
}

//! The fair semaphore's meaning, written once: which waiting entries to grant next.
//!
//! A plain semaphore is one FIFO queue and [`queue::holders`](crate::queue::holders) decides
//! holding from a snapshot alone. A fair order cannot: a newcomer of an idle flow sorts ahead of
//! entries that already hold, so recomputing "who holds" from scratch would revoke them. In a fair
//! semaphore each entry therefore carries a `granted` mark, written by whoever grants it, and
//! this module decides only who is granted *next* ([`next_grants`]); marked entries are never
//! revoked.
//!
//! The rule is stateless: a function of the current holders and waiters, with no history or
//! counters kept elsewhere. Each grant goes to the head (earliest waiter) of one flow, chosen
//! in two steps:
//!
//! 1. **Class**: the class with waiters whose held / min ratio is lowest (a class below its
//!    guaranteed `min` thus comes before every class at or above its own; a class with min 0 is
//!    best-effort and comes after every class with a share, fewer held first); ties by the
//!    earliest waiting token of the class.
//! 2. **Flow** within that class: the flow with the lowest held / weight; ties by the token of
//!    its first waiter. A flow's waiters are granted in token order.
//!
//! The chosen entry is granted whole if `used + permits <= capacity`; otherwise it waits and no
//! other entry is granted before it (a heavy head blocks, as in the FIFO rule: it is never
//! starved by lighter entries behind it). Entries with a token at or below `floor` count as
//! holding even unmarked, and nothing is granted while the held weights leave no room for the
//! chosen entry (after a shrink: until enough has been released).
//!
//! What the class order gives: a class with waiters below its min is served before any other
//! class gets a permit, so a class borrows only while every class with waiters has its min (an
//! idle class's reserve is lent, and comes back to it release by release, never by revoking).
//! The one exception is weight: an entry of a class below its min that needs more than the class
//! is still owed is granted whole, borrowing the rest, possibly from another class's reserve.
//! With one flow and one class the rule is exactly [`queue::holders`](crate::queue::holders).

mod classes;
mod classes_text;
mod entry;
mod grant;
mod named;
mod rank;
mod tag;

pub use classes::{Classes, Share};
pub use entry::{FairEntry, DEFAULT_CLASS, DEFAULT_FLOW, VTIME_SCALE};
pub use grant::{next_grants, next_grants_and_vtimes, FlowVTime};
pub use named::{next_grants_named, next_grants_recorded, vtime_key, NamedEntry, VTimes};
pub use tag::{FairTag, MAX_FAIR_NAME_LEN};

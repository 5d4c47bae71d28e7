//! `status` without NAME: each semaphore with its controller seat (`NAME.controller`, see
//! `crate::live::seats`) folded in, as one row of the table and one object of `--json` (its
//! `"controller"` field; the seat is then not an entry of its own). A seat whose semaphore is
//! absent stays an entry.

use crate::live::seats;
use clusterlimit::{Holder, Status};
use serde::Serialize;
use std::fmt::Write as _;

/// One semaphore of `status --json`: its status, and its controller seat if it is adaptive.
#[derive(Debug, Serialize)]
pub struct StatusRow {
    /// The semaphore's status, as before.
    #[serde(flatten)]
    pub status: Status,
    /// Who controls it, for an adaptive semaphore.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller: Option<ControllerSeat>,
}

/// The `"controller"` object: the seat's holder, and the Limiters queued to take over.
#[derive(Debug, Serialize)]
pub struct ControllerSeat {
    /// The controller; `null` while nobody holds the seat.
    pub holder: Option<Holder>,
    /// Limiters waiting to take over.
    pub waiting: usize,
}

/// The statuses with each seat folded into its semaphore.
pub fn rows(statuses: Vec<Status>) -> Vec<StatusRow> {
    seats::group(statuses, |s| s.name.as_str())
        .into_iter()
        .map(|(status, seat)| StatusRow {
            status,
            controller: seat.map(|s| ControllerSeat {
                waiting: s.waiting,
                holder: s.holders.into_iter().next(),
            }),
        })
        .collect()
}

/// The table's line under an adaptive semaphore: `  controller: held by host-a/1 (fencing
/// token 7)`, with how many wait to take over.
pub fn controller_line(s: &mut String, c: &ControllerSeat) {
    let holder = match &c.holder {
        Some(h) => format!("held by {} (fencing token {})", h.owner, h.fencing_token),
        None => "nobody holds the seat".to_string(),
    };
    let _ = match c.waiting {
        0 => writeln!(s, "  controller: {holder}"),
        n => writeln!(s, "  controller: {holder}; {n} waiting to take over"),
    };
}

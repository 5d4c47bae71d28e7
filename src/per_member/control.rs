//! The task of one per-member semaphore in one Limiter: keeps this Limiter's announcement on
//! the semaphore's board (again at once when its session ends, and every session TTL), and,
//! while this Limiter holds the controller seat, counts the live announcements every third of
//! a session TTL (at most a second) and stores `ceil(per_member × members)`, within the
//! bounds, when the stored capacity differs.
//!
//! **One controller at a time:** the holder of the seat `<name>.controller` (`adaptive/seat.rs`).
//! A controller that may have lost its permit does not write. A member that dies without
//! closing is counted until its session expires: the capacity follows within the session's
//! expiry (about one session TTL) and a count.

use super::announced::{Count, Member};
use super::config::PerMember;
use super::names::board_of;
use crate::adaptive::seat::{campaign, Election};
use crate::error::Result;
use crate::limiter_inner::LimiterInner;
use crate::lost::LostSignal;
use crate::semaphore::Semaphore;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The pause between two counts: a third of the session TTL, within these bounds (a third of
/// the shortest TTL is above the floor; the ceiling makes a join count within a second
/// whatever the TTL, for two reads a second by the one controller).
const MIN_TICK: Duration = Duration::from_millis(100);
const MAX_TICK: Duration = Duration::from_secs(1);

/// Puts this Limiter's announcement `member` on `name`'s board; the session it is bound to.
pub(crate) async fn announce(
    limiter: &LimiterInner,
    name: &str,
    member: &Member,
) -> Result<Option<LostSignal>> {
    let value = serde_json::to_vec(member)
        .map_err(|e| crate::error::Error::invalid(format!("encoding an announcement: {e}")))?;
    let put = limiter
        .backend
        .announce(&board_of(name), &limiter.id, &value)
        .await;
    limiter.closed_or_result(put)?;
    Ok(limiter.backend.session_signal().await)
}

/// The task of per-member semaphore `name` in `limiter`, once `open.rs` announced it (bound to
/// `session`); ends when `stop` fires or the Limiter closes, withdrawing the announcement.
pub(crate) async fn run(
    limiter: Arc<LimiterInner>,
    name: String,
    config: PerMember,
    seat: Semaphore,
    session: Option<LostSignal>,
    stop: CancellationToken,
) {
    let election = Arc::new(Election::default());
    let ttl = limiter.backend.session_ttl();
    let tick = (ttl / 3).clamp(MIN_TICK, MAX_TICK);
    limiter.runtime.spawn(campaign(
        seat,
        election.clone(),
        stop.clone(),
        tick,
        "per-member",
    ));
    let mut task = Task {
        limiter,
        name,
        config,
        election,
        session,
        shown: None,
    };
    // Announced again every session TTL, besides at once when the session ends.
    let announce_every = (ttl.as_millis() / tick.as_millis()).max(1);
    task.tick_until(&stop, tick, announce_every).await;
    task.election.set(None);
    if !task.limiter.is_closed() {
        let _ = task
            .limiter
            .backend
            .withdraw(&board_of(&task.name), &task.limiter.id)
            .await;
    }
}

/// The task's state from one tick to the next.
struct Task {
    limiter: Arc<LimiterInner>,
    name: String,
    config: PerMember,
    election: Arc<Election>,
    /// The session this Limiter's announcement is bound to, if it is known to live.
    session: Option<LostSignal>,
    /// The count this Limiter's announcement shows (only while it controls).
    shown: Option<Count>,
}

impl Task {
    /// Each `tick` (and at once when the session ends): announces again if due, and counts
    /// while this Limiter controls; returns when `stop` fires or the Limiter closes.
    async fn tick_until(&mut self, stop: &CancellationToken, tick: Duration, announce_every: u128) {
        // The first tick announces again: the task of a membership this Limiter just gave up
        // (its last handle dropped, the name opened again at once) may withdraw after `open`
        // announced.
        let mut ticks = announce_every - 1;
        loop {
            let session = self.session.clone();
            let session_ended = async move {
                match session {
                    Some(s) => s.lost().await,
                    None => std::future::pending().await,
                }
            };
            let again = tokio::select! {
                _ = stop.cancelled() => return,
                _ = session_ended => true,
                _ = tokio::time::sleep(tick) => {
                    ticks += 1;
                    ticks >= announce_every || self.session.is_none()
                }
            };
            if self.limiter.is_closed() {
                return;
            }
            if again {
                ticks = 0;
                self.announce().await;
            }
            self.control().await;
        }
    }

    /// Announces this Limiter again (with its count while it controls); failures are retried
    /// on the next tick.
    async fn announce(&mut self) {
        let member = Member {
            owner: self.limiter.owner.clone(),
            count: self.shown,
        };
        match announce(&self.limiter, &self.name, &member).await {
            Ok(session) => self.session = session,
            Err(e) => {
                self.session = None;
                tracing::debug!(semaphore = %self.name, error = %e, "announcing this member failed; retrying");
            }
        }
    }

    /// While this Limiter controls: counts the members, stores the capacity they make if the
    /// stored one differs, and shows the count on its announcement when it changed.
    async fn control(&mut self) {
        if !self.election.holds() {
            if self.shown.take().is_some() {
                self.announce().await; // no stale count beside the next controller's
            }
            return;
        }
        let Some(members) = self.members().await else {
            return;
        };
        let capacity = self.config.capacity_for(members);
        let backend = &self.limiter.backend;
        let current = match backend.ensure_semaphore(&self.name, None).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(semaphore = %self.name, error = %e, "reading the capacity failed; counting again next tick");
                return;
            }
        };
        if capacity != current {
            // A controller that may have lost its permit must not write: another may be in
            // control already.
            if !self.election.holds() {
                return;
            }
            if let Err(e) = backend.set_capacity(&self.name, capacity).await {
                tracing::warn!(semaphore = %self.name, error = %e, "storing the per-member capacity failed; trying again next tick");
                return;
            }
            tracing::info!(semaphore = %self.name, members, from = current, to = capacity, "per-member capacity changed");
        }
        let count = Count { members, capacity };
        if self.shown != Some(count) {
            self.shown = Some(count);
            self.announce().await;
        }
    }

    /// The live members: every Limiter on the board, this one included even if its
    /// announcement is not (yet, again) there. `None` if the board cannot be read.
    async fn members(&self) -> Option<usize> {
        match self
            .limiter
            .backend
            .announcements(&board_of(&self.name))
            .await
        {
            Ok(values) => {
                let mut ids: BTreeSet<String> = values.into_iter().map(|(id, _)| id).collect();
                ids.insert(self.limiter.id.clone());
                Some(ids.len())
            }
            Err(e) => {
                tracing::debug!(semaphore = %self.name, error = %e, "reading the members failed; counting again next tick");
                None
            }
        }
    }
}

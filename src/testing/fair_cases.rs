//! The contract cases of fair semaphores (`Limiter::fair_semaphore`, see [`crate::fair`]):
//! flows share by weight and a busy flow holds up another by at most one grant; classes get
//! their guaranteed share first and lend it while idle; holders are never revoked, a dead
//! holder's permits go to the next in the fair order, and bad input is refused before anything
//! is queued. Run by [`fair_contract_suite!`](crate::fair_contract_suite) on every store that
//! keeps fair semaphores; each case crosses Limiters, as a fleet would.

mod bad_input;
mod classes;
mod flows;
mod load;
mod permit_shrink;
mod setup;

pub use bad_input::{fair_bad_input, fair_refused_where_not_kept};
pub use classes::{fair_reserve_is_lent_and_returned, fair_shrink_keeps_holders};
pub use flows::{
    fair_busy_flow_delays_another_by_one_grant, fair_dead_holder_and_heavy_entry,
    fair_turns_at_capacity_one, fair_weights_share,
};
pub use load::fair_safety_under_load;
pub use permit_shrink::fair_permit_shrink;

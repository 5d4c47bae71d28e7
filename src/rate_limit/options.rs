//! [`CheckOptions`]: how a check asks ([`RateLimit::check_with`](super::handle::RateLimit::check_with)):
//! its cost, its priority class, its flow, its budget. A form that can grow without new
//! methods. And [`Asker`]: who a check is (class and flow), as it travels with the check.

use crate::error::{Error, Result};
use crate::rate::reserves::ClassName;
use crate::rate::{decide_flow, FlowId, KeyState, Quota, UnixNanos, Verdict};
use std::time::Duration;

/// How [`RateLimit::check_with`](crate::RateLimit::check_with) checks: a cost (default 1), a
/// priority class (default none: the check may use the whole quota), a flow (default none:
/// the anonymous flow), a budget (default none).
///
/// ```
/// use clusterlimit::CheckOptions;
/// use std::time::Duration;
/// let opts = CheckOptions::new().cost(5).class("batch").flow("tenant-a").within(Duration::from_millis(20));
/// assert_eq!((opts.cost_of(), opts.class_of(), opts.flow_of()), (5, Some("batch"), Some("tenant-a")));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct CheckOptions {
    cost: u64,
    class: Option<String>,
    flow: Option<String>,
    budget: Option<Duration>,
    settle_within: Option<Duration>,
    /// Taken for a reservation: never from a lease (`rate_limit/lease_book.rs`).
    reserving: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            cost: 1,
            class: None,
            flow: None,
            budget: None,
            settle_within: None,
            reserving: false,
        }
    }
}

impl CheckOptions {
    /// A check of 1, without a class or budget: the same as `check`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The request's cost, all or nothing (0: a peek, as for `check_n`).
    pub fn cost(mut self, cost: u64) -> Self {
        self.cost = cost;
        self
    }

    /// The priority class the check belongs to: admitted only if at least the class's reserve
    /// ([`Quota::reserve`](crate::Quota::reserve)) is left after it. A class the quota does
    /// not declare is refused with `InvalidArgument`.
    pub fn class(mut self, class: impl Into<String>) -> Self {
        self.class = Some(class.into());
        self
    }

    /// The flow (tenant, user, client) the check belongs to: on a quota with fair flows
    /// ([`Quota::fair_flows`](crate::Quota::fair_flows)) the key is shared max-min fairly
    /// among the flows checking it, and this check must leave the others their due. On any
    /// other quota the flow is accepted and ignored, so fairness can be switched on and off
    /// with `set_quota` without changing callers. A name is 1–128 bytes without control
    /// characters (else `InvalidArgument`); it is hashed, not stored.
    pub fn flow(mut self, flow: impl Into<String>) -> Self {
        self.flow = Some(flow.into());
        self
    }

    /// Answer within `budget` or fail with `Timeout`, as
    /// [`check_within`](crate::RateLimit::check_within).
    pub fn within(mut self, budget: Duration) -> Self {
        self.budget = Some(budget);
        self
    }

    /// For [`RateLimit::reserve_with`](crate::RateLimit::reserve_with): how long the
    /// reservation may be settled (default [`DEFAULT_SETTLE_WITHIN`](crate::DEFAULT_SETTLE_WITHIN));
    /// past it, it counts as settled at its estimate. Checks ignore it.
    pub fn settle_within(mut self, limit: Duration) -> Self {
        self.settle_within = Some(limit);
        self
    }

    /// The cost set.
    pub fn cost_of(&self) -> u64 {
        self.cost
    }

    /// The class set, if any.
    pub fn class_of(&self) -> Option<&str> {
        self.class.as_deref()
    }

    /// The flow set, if any.
    pub fn flow_of(&self) -> Option<&str> {
        self.flow.as_deref()
    }

    /// The budget set, if any.
    pub fn budget_of(&self) -> Option<Duration> {
        self.budget
    }

    /// The same check, taken for a reservation: a later refund gives back what it took, so
    /// it is never admitted from a lease (a lease's units may be given back only at its own
    /// end, `rate/lease.rs`).
    pub(crate) fn reserving(mut self) -> Self {
        self.reserving = true;
        self
    }

    /// Whether the check is taken for a reservation.
    pub(crate) fn is_reserving(&self) -> bool {
        self.reserving
    }

    /// The reservation time limit set, if any.
    pub fn settle_within_of(&self) -> Option<Duration> {
        self.settle_within
    }
}

/// Who a check is: its priority class and its flow, validated, as it travels with the check
/// (queued in a batch, in a joint call) to be decided with `decide_flow`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Asker {
    pub(crate) class: Option<ClassName>,
    pub(crate) flow: Option<FlowId>,
}

impl Asker {
    /// A check of `class` (not validated against a quota here) and `flow`: `InvalidArgument`
    /// for a name that is neither.
    pub(crate) fn new(class: Option<&str>, flow: Option<&str>) -> Result<Asker> {
        Ok(Asker {
            class: class
                .map(ClassName::new)
                .transpose()
                .map_err(Error::invalid)?,
            flow: flow.map(FlowId::of).transpose().map_err(Error::invalid)?,
        })
    }

    /// A check of `class` without a flow.
    pub(crate) fn of_class(class: Option<ClassName>) -> Asker {
        Asker { class, flow: None }
    }

    /// The class's name.
    pub(crate) fn class_name(&self) -> Option<&str> {
        self.class.as_ref().map(ClassName::as_str)
    }

    /// A check of `cost` by this asker, decided on `state`.
    pub(crate) fn decide(
        &self,
        quota: &Quota,
        state: Option<&KeyState>,
        cost: u64,
        now: UnixNanos,
    ) -> Verdict {
        decide_flow(quota, state, cost, self.class_name(), self.flow, now)
    }
}

//! [`CheckOptions`]: how a check asks ([`RateLimit::check_with`](super::handle::RateLimit::check_with)):
//! its cost, its priority class, its budget. A form that can grow without new methods.

use std::time::Duration;

/// How [`RateLimit::check_with`](crate::RateLimit::check_with) checks: a cost (default 1), a
/// priority class (default none: the check may use the whole quota), a budget (default none).
///
/// ```
/// use clusterlimit::CheckOptions;
/// use std::time::Duration;
/// let opts = CheckOptions::new().cost(5).class("batch").within(Duration::from_millis(20));
/// assert_eq!((opts.cost_of(), opts.class_of()), (5, Some("batch")));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct CheckOptions {
    cost: u64,
    class: Option<String>,
    budget: Option<Duration>,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            cost: 1,
            class: None,
            budget: None,
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

    /// Answer within `budget` or fail with `Timeout`, as
    /// [`check_within`](crate::RateLimit::check_within).
    pub fn within(mut self, budget: Duration) -> Self {
        self.budget = Some(budget);
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

    /// The budget set, if any.
    pub fn budget_of(&self) -> Option<Duration> {
        self.budget
    }
}

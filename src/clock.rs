//! The clock rate limits read: the caller's wall clock, as Unix nanoseconds.

use crate::rate::UnixNanos;
use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The wall clock a Limiter's rate limits read (default: the system clock). Replace it with
/// [`LimiterBuilder::clock`](crate::LimiterBuilder::clock) for a better time source, or to
/// test how a skewed host behaves:
///
/// ```
/// use clusterlimit::Clock;
/// use std::time::{Duration, SystemTime};
/// let ahead = Clock::new(|| SystemTime::now() + Duration::from_millis(250));
/// assert!(ahead.now() > SystemTime::now());
/// ```
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> SystemTime + Send + Sync>);

impl Clock {
    /// A clock that reads `now`.
    pub fn new(now: impl Fn() -> SystemTime + Send + Sync + 'static) -> Clock {
        Clock(Arc::new(now))
    }

    /// The system clock.
    pub fn system() -> Clock {
        Clock::new(SystemTime::now)
    }

    /// The time now.
    pub fn now(&self) -> SystemTime {
        (self.0)()
    }

    /// The time now in Unix nanoseconds; before 1970 reads as 0, past 2554 as the maximum.
    pub(crate) fn unix_ns(&self) -> UnixNanos {
        self.now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

/// Clocks are equal when they are the same clock (clones of one `Clock`).
impl PartialEq for Clock {
    fn eq(&self, other: &Clock) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Clock {}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Clock")
    }
}

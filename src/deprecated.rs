//! Root names that were renamed, kept for one release: each is an alias that warns when used.
//! (The tower layer's old names are in `tower/deprecated.rs`.)

use crate::announce::Announcement;
use crate::limiter::Limiter;
use crate::lost::SessionDeadline;
use crate::rate_limit::check_all::KeyCheck;
use crate::rate_limit::handle::RateLimit;
use crate::semaphore::Semaphore;
use crate::store_down::guard::{ClusterBreaker, StoreDownGuard};
use crate::store_down::guard::{DecisionSource, GuardedDecision};
use std::time::Duration;

/// Old name of [`KeyCheck`] (one check of [`Limiter::check_all`](crate::Limiter::check_all));
/// using it warns.
///
/// ```compile_fail
/// #![deny(deprecated)]
/// let _: Option<clusterlimit::Check<'static>> = None;
/// ```
#[deprecated(since = "0.1.0", note = "renamed to `KeyCheck`")]
pub type Check<'a> = KeyCheck<'a>;

/// Old name of [`GuardedDecision`]; using it warns.
///
/// ```compile_fail
/// #![deny(deprecated)]
/// let _: Option<clusterlimit::Guarded> = None;
/// ```
#[deprecated(since = "0.1.0", note = "renamed to `GuardedDecision`")]
pub type Guarded = GuardedDecision;

/// Old name of [`DecisionSource`]; using it warns.
///
/// ```compile_fail
/// #![deny(deprecated)]
/// let _: Option<clusterlimit::Source> = None;
/// ```
#[deprecated(since = "0.1.0", note = "renamed to `DecisionSource`")]
pub type Source = DecisionSource;

/// Old name of [`SessionDeadline`] (the instant a session could expire, which a
/// [`LostSignal`](crate::LostSignal) watches); using it warns.
///
/// ```compile_fail
/// #![deny(deprecated)]
/// let _ = clusterlimit::Deadline::none();
/// ```
#[deprecated(since = "0.1.0", note = "renamed to `SessionDeadline`")]
pub type Deadline = SessionDeadline;

// The root constants: each moved onto the type it describes (src/limits.rs).

/// Old name of [`Limiter::DEFAULT_SESSION_TTL`]; using it warns.
///
/// ```compile_fail
/// #![deny(deprecated)]
/// let _ = clusterlimit::DEFAULT_SESSION_TTL;
/// ```
#[deprecated(since = "0.1.0", note = "use `Limiter::DEFAULT_SESSION_TTL`")]
pub const DEFAULT_SESSION_TTL: Duration = Limiter::DEFAULT_SESSION_TTL;

/// Old name of [`Limiter::MIN_SESSION_TTL`]; using it warns.
#[deprecated(since = "0.1.0", note = "use `Limiter::MIN_SESSION_TTL`")]
pub const MIN_SESSION_TTL: Duration = Limiter::MIN_SESSION_TTL;

/// Old name of [`Limiter::DEFAULT_REQUEST_TIMEOUT`]; using it warns.
#[deprecated(since = "0.1.0", note = "use `Limiter::DEFAULT_REQUEST_TIMEOUT`")]
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Limiter::DEFAULT_REQUEST_TIMEOUT;

/// Old name of [`Limiter::MAX_REQUEST_TIMEOUT`]; using it warns.
#[deprecated(since = "0.1.0", note = "use `Limiter::MAX_REQUEST_TIMEOUT`")]
pub const MAX_REQUEST_TIMEOUT: Duration = Limiter::MAX_REQUEST_TIMEOUT;

/// Old name of [`Limiter::MAX_NAME_LEN`]; using it warns.
#[deprecated(since = "0.1.0", note = "use `Limiter::MAX_NAME_LEN`")]
pub const MAX_NAME_LEN: usize = Limiter::MAX_NAME_LEN;

/// Old name of [`Limiter::MAX_OWNER_LEN`]; using it warns.
#[deprecated(since = "0.1.0", note = "use `Limiter::MAX_OWNER_LEN`")]
pub const MAX_OWNER_LEN: usize = Limiter::MAX_OWNER_LEN;

/// Old name of [`Semaphore::MAX_CAPACITY`]; using it warns.
#[deprecated(since = "0.1.0", note = "use `Semaphore::MAX_CAPACITY`")]
pub const MAX_CAPACITY: u32 = Semaphore::MAX_CAPACITY;

/// Old name of [`RateLimit::MAX_KEY_LEN`]; using it warns.
#[deprecated(since = "0.1.0", note = "use `RateLimit::MAX_KEY_LEN`")]
pub const MAX_KEY_LEN: usize = RateLimit::MAX_KEY_LEN;

/// Old name of [`Announcement::MAX_BYTES`]; using it warns.
#[deprecated(since = "0.1.0", note = "use `Announcement::MAX_BYTES`")]
pub const MAX_ANNOUNCEMENT_BYTES: usize = Announcement::MAX_BYTES;

/// Old name of [`StoreDownGuard::DEFAULT_RETRY_INTERVAL`]; using it warns.
#[deprecated(since = "0.1.0", note = "use `StoreDownGuard::DEFAULT_RETRY_INTERVAL`")]
pub const DEFAULT_GUARD_RETRY_INTERVAL: Duration = StoreDownGuard::DEFAULT_RETRY_INTERVAL;

/// Old name of [`ClusterBreaker::SLOW_TO_OPEN`]; using it warns.
#[deprecated(since = "0.1.0", note = "use `ClusterBreaker::SLOW_TO_OPEN`")]
pub const SLOW_TO_OPEN: u32 = ClusterBreaker::SLOW_TO_OPEN;

/// Old name of [`ClusterBreaker::SLOW_OPEN_AFTER`]; using it warns.
#[deprecated(since = "0.1.0", note = "use `ClusterBreaker::SLOW_OPEN_AFTER`")]
pub const SLOW_OPEN_AFTER: Duration = ClusterBreaker::SLOW_OPEN_AFTER;

//! Root names that were renamed, kept for one release: each is an alias that warns when used.
//! (The tower layer's old names are in `tower/deprecated.rs`.)

use crate::lost::SessionDeadline;
use crate::rate_limit::check_all::KeyCheck;
use crate::store_down::guard::{DecisionSource, GuardedDecision};

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

//! The bounds of one call to etcd: which failures are tried again, how long each attempt may
//! take, and when the attempts stop early (the retries themselves are in `calls.rs`).

use crate::lost::LostSignal;
use std::time::Duration;

/// Errors after which the same idempotent request may be sent again (refusals by TLS,
/// authentication or permissions are caught before this by
/// [`Security::refusal`](super::security::Security::refusal)).
pub(super) fn is_transient(e: &etcd_client::Error) -> bool {
    use tonic::Code;
    match e {
        etcd_client::Error::GRpcStatus(s) => matches!(
            s.code(),
            Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Unknown
                | Code::Cancelled
                | Code::Aborted
                | Code::Internal
        ),
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        _ => false,
    }
}

/// Upper bound on one attempt of a request whose whole call may take `request_timeout`.
pub(super) fn attempt_timeout(request_timeout: Duration) -> Duration {
    (request_timeout / 3)
        .max(Duration::from_millis(500))
        .min(request_timeout)
}

/// Bound on a call's first attempts. A request that reached a follower just as the leader
/// died is forwarded to the dead leader and never answered, and so is one sent to the other
/// follower until it, too, notices (etcd's randomized election timeout, up to 2× the
/// configured one); the new leader is up a few hundred ms after the kill, and this bound
/// decides how soon after that we ask again. It is ~100× a normal request's latency, and at
/// least [`LATENCY_FACTOR`] × the latency seen lately (a slow link is not a dead member). After
/// [`SHORT_ATTEMPTS`] attempts that timed out, each further one doubles it up to
/// [`attempt_timeout`], so a request that is only slow (every retried request is idempotent)
/// gets the time it needs.
pub(super) const FIRST_ATTEMPT: Duration = Duration::from_millis(200);
pub(super) const LATENCY_FACTOR: u32 = 4;
/// Multiple of the slowest authentication seen that an attempt allows (see
/// `Endpoints::auth_time`): an authenticating client's first attempts are that much longer.
pub(super) const AUTH_FACTOR: u32 = 2;
pub(super) const SHORT_ATTEMPTS: u32 = 3;
// Three short attempts fit in one call's deadline with the default request timeout.
const _: () = assert!(
    FIRST_ATTEMPT.as_millis() * (SHORT_ATTEMPTS as u128)
        < crate::timing::DEFAULT_REQUEST_TIMEOUT.as_millis()
);

/// When a call's attempts stop early, besides the call's deadline (see
/// [`Attempts`](crate::backend::retry::Attempts)).
#[derive(Debug, Clone, Copy)]
pub(super) enum Until<'a> {
    /// Only the deadline, or the backend's stop.
    Deadline,
    /// Also once this session is lost: a write bound to its lease is pointless then.
    SessionLive(&'a LostSignal),
    /// The close itself: goes on after the backend has stopped.
    Closing,
}

//! A library error as the gRPC status the RLS answers with.

use clusterlimit::Error;
use tonic::Status;

/// Bad input is INVALID_ARGUMENT; a store the guard could not cover (a limit that cannot be
/// opened while it is down) UNAVAILABLE, so Envoy applies its own `failure_mode_deny`.
pub fn status(e: Error) -> Status {
    match e {
        Error::InvalidArgument(why) => Status::invalid_argument(why),
        Error::Store(_) | Error::SessionLost | Error::Timeout | Error::Closed => {
            Status::unavailable(e.to_string())
        }
        e => Status::internal(e.to_string()),
    }
}

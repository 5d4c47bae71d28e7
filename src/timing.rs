//! Durations the whole crate agrees on, in a module that depends on nothing, so any layer can
//! check a relation against them at compile time (see docs/design.md, "Timing rules").

use std::time::Duration;

/// Default session TTL: permits of a dead process come back within this time.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(10);
/// Shortest session TTL accepted.
pub const MIN_SESSION_TTL: Duration = Duration::from_secs(2);
/// Default bound on one store request.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest request timeout a Limiter takes (deadlines built from it must fit a clock).
pub const MAX_REQUEST_TIMEOUT: Duration = Duration::from_secs(3600);

/// How many session TTLs a background removal may stay unconfirmed before its session is
/// ended (see `release.rs`). Two TTLs let a store ride out a failover or a blip (each well under
/// one TTL) without losing a session, while an entry stuck longer frees the queue within about
/// three TTLs in all.
pub(crate) const GIVE_UP_AFTER_TTLS: u32 = 2;
// A store failover or blip (each under one TTL) must never end a session by itself.
const _: () = assert!(GIVE_UP_AFTER_TTLS >= 2);

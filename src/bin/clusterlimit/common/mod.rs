//! What the binary's two front ends, `cli` (one-shot commands) and `sidecar` (`serve`), have
//! in common as one process speaking to a user: the exit codes and the [`Failure`] that
//! carries one to `main`, connecting to the store with the command-line options (credentials
//! as file paths, timeouts), durations and rate-limit quotas read from flags, TOML or JSON and
//! printed back, and the one poison-ignoring [`lock`] of the binary's shared tables.
//!
//! A leaf: it imports only the library and std, never `cli`, `sidecar` or `live`. Nothing here
//! knows the command-line grammar: a usage failure only says that the usage line belongs
//! after it, and `cli::main`, which knows the subcommand, prints it.

// Connecting to the store (`connect`, or `builder` then `open` to set more options).
pub mod connect;
mod duration;
pub mod exit;
mod failure;
mod lock;
// Writing stdout and stderr without panicking on a closed reader.
pub mod out;
// Rate-limit quotas and decisions as the sidecar and `clusterlimit rate` read them, and print.
pub mod quota_print;
pub mod quota_spec;
mod store_security;

pub use connect::{connect, refuse_userinfo, StoreTimeouts};
pub use duration::{format_duration, format_wait, parse_duration};
pub use failure::Failure;
pub use lock::lock;
pub use store_security::StoreSecurity;

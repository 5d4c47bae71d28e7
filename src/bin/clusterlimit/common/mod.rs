//! What the binary's two front ends, `cli` (one-shot commands) and `sidecar` (`serve`), both
//! need from a process: exit codes and the failure that carries one to `main`, connecting to
//! the store with the command-line options (credentials as file paths), duration parsing, and
//! locks that survive poison.
//!
//! Dependencies go one way: `cli` → `sidecar` → `common` → the library. Nothing here knows
//! the command-line grammar: a usage failure only says that the usage line belongs after it,
//! and `cli::main`, which knows the subcommand, prints it.

mod connect;
mod duration;
pub mod exit;
mod failure;
mod lock;
// Rate-limit quotas and decisions as the sidecar and `clusterlimit rate` read and print them.
pub mod quota_spec;
mod store_security;

pub use connect::{connect, refuse_userinfo, StoreTimeouts};
pub use duration::{format_duration, format_wait, parse_duration};
pub use failure::Failure;
pub use lock::lock;
pub use store_security::StoreSecurity;

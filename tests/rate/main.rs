//! Rate limits under load and against models: exactness, clock skew, idle keys, the
//! uncontended cost, the reference models, and the rate benchmark's peers.
//!
//! One test binary for this area (tower's `tests/<area>/main.rs` shape): each former test
//! file is a module, still at its path under tests/, and the helpers are compiled once.
//! A test's name is its former name under its file's module (`etcd_faults::…`).

#[path = "../rate_hammer/mod.rs"]
mod rate_hammer;
#[path = "../support/mod.rs"]
mod support;

#[path = "../bench_peers.rs"]
mod bench_peers;
#[path = "../rate_exactness.rs"]
mod rate_exactness;
// Counts memory:// key states with backend::memory::rate_key_count (feature `testing`).
#[path = "../rate_idle_keys.rs"]
#[cfg(feature = "testing")]
mod rate_idle_keys;
#[path = "../rate_model.rs"]
mod rate_model;
#[path = "../rate_skew.rs"]
mod rate_skew;
#[path = "../rate_uncontended.rs"]
mod rate_uncontended;

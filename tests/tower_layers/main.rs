//! The tower layers (`clusterlimit::tower`): the concurrency layer and the rate layer.
//!
//! One test binary for this area (tower's `tests/<area>/main.rs` shape): each former test
//! file is a module, still at its path under tests/, and the helpers are compiled once.
//! A test's name is its former name under its file's module (`etcd_faults::…`).

#[path = "../support/mod.rs"]
#[cfg(any(feature = "axum", feature = "testing"))]
mod support;

// Ends memory:// sessions with backend::memory::expire_sessions (feature `testing`).
#[path = "../tower_layer.rs"]
#[cfg(feature = "testing")]
mod tower_layer;
#[path = "../tower_rate_layer.rs"]
#[cfg(feature = "axum")]
mod tower_rate_layer;
// `classes` on a rate limit with reserves (etcd).
#[path = "../tower_rate_classes.rs"]
#[cfg(feature = "axum")]
mod tower_rate_classes;
// `flows` on a rate limit with fair flows (etcd).
#[path = "../tower_rate_flows.rs"]
#[cfg(feature = "axum")]
mod tower_rate_flows;
// `settle`: costs known from the response (memory://, etcd, Redis).
#[path = "../tower_rate_settle.rs"]
#[cfg(feature = "axum")]
mod tower_rate_settle;
// `flows` on a fair semaphore (memory://).
#[path = "../tower_fair_layer.rs"]
mod tower_fair_layer;

//! The library's meaning on every backend: the contract suites (also on a backend defined
//! here), the model, capacity, sharding, the store-down guard, adaptive failover.
//!
//! One test binary for this area (tower's `tests/<area>/main.rs` shape): each former test
//! file is a module, still at its path under tests/, and the helpers are compiled once.
//! A test's name is its former name under its file's module (`etcd_faults::…`).

#[path = "../binary/mod.rs"]
#[cfg(feature = "cli")]
mod binary;
#[path = "../support/mod.rs"]
mod support;

// Waits on adaptive statuses with clusterlimit::testing::adaptive_cases::wait_adaptive.
#[path = "../adaptive_failover.rs"]
#[cfg(feature = "testing")]
mod adaptive_failover;
#[path = "../capacity_under_load.rs"]
mod capacity_under_load;
#[path = "../check_all_lone.rs"]
mod check_all_lone;
#[path = "../contract.rs"]
#[cfg(feature = "testing")]
mod contract;
#[path = "../external_backend.rs"]
#[cfg(feature = "testing")]
mod external_backend;
#[path = "../fair_model.rs"]
mod fair_model;
#[path = "../foreign_executor.rs"]
mod foreign_executor;
#[path = "../model.rs"]
mod model;
#[path = "../set_capacity.rs"]
mod set_capacity;
// Ends sessions and counts key states with the memory:// test hooks (feature `testing`).
#[path = "../sharded.rs"]
#[cfg(feature = "testing")]
mod sharded;
#[path = "../sharded_failover.rs"]
mod sharded_failover;
// Runs the real binary too.
#[path = "../sharded_partial.rs"]
#[cfg(feature = "cli")]
mod sharded_partial;
#[path = "../store_down_guard.rs"]
mod store_down_guard;

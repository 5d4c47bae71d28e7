//! What is particular to each store: the etcd and ZooKeeper harnesses and fault proxy,
//! faults of one store, request counts, the rate stores, ZooKeeper TLS, members, background
//! removal, timeouts against a hung store.
//!
//! One test binary for this area (tower's `tests/<area>/main.rs` shape): each former test
//! file is a module, still at its path under tests/, and the helpers are compiled once.
//! A test's name is its former name under its file's module (`etcd_faults::…`).

#[path = "../support/mod.rs"]
mod support;

#[path = "../background_removal.rs"]
mod background_removal;
#[path = "../etcd_costs.rs"]
mod etcd_costs;
#[path = "../etcd_faults.rs"]
mod etcd_faults;
#[path = "../etcd_rate_store.rs"]
mod etcd_rate_store;
#[path = "../etcd_shrink.rs"]
mod etcd_shrink;
#[path = "../harness_smoke.rs"]
mod harness_smoke;
#[path = "../hung_store_timeouts.rs"]
#[cfg(feature = "tower")]
mod hung_store_timeouts;
#[path = "../redis_store.rs"]
#[cfg(feature = "testing")]
mod redis_store;
#[path = "../store_members.rs"]
mod store_members;
#[path = "../zk_costs.rs"]
mod zk_costs;
#[path = "../zk_faults.rs"]
mod zk_faults;
#[path = "../zk_harness_smoke.rs"]
mod zk_harness_smoke;
#[path = "../zk_rate_store.rs"]
mod zk_rate_store;
#[path = "../zk_shrink.rs"]
mod zk_shrink;
#[path = "../zk_tls.rs"]
mod zk_tls;

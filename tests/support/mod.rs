//! Shared test support, included from integration tests with `mod support;`.
//!
//! Every test crate compiles its own copy of this module and most use only part of it,
//! hence the crate-wide allowances below (they keep `-D warnings` builds clean).
#![allow(dead_code, unused_imports)]

/// Real etcd servers as child processes (no Docker, no mocks).
pub mod etcd;

pub use etcd::{connect, count_keys, etcd_binary, revoke_all_leases, EtcdCluster};

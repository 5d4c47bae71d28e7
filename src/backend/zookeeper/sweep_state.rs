//! ZooKeeper's part of the sweeper (`sweeper.rs`) and the slow scan (`scan.rs`): what a delete
//! must find, the session's client, the limits written, and what the sweep deleted while a
//! scan runs. (The keys remembered are the crate's sweeper's.)

use crate::backend::lock;
use crate::backend::sweeper::Remembered;
use crate::stats::RequestCounters;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

/// What a delete must find to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Target {
    /// The version we wrote.
    pub version: i32,
    /// The zxid of our write (0: unknown). Unlike versions, zxids are never reused.
    pub mzxid: i64,
    /// Set after a delete whose outcome is unknown (a lost reply, a session that ended under
    /// it): it may have applied, and a node re-created since may be back at our version, so
    /// the retry deletes only a node that still carries our write's zxid (read first).
    pub verify: bool,
}

#[derive(Default)]
pub(super) struct State {
    /// The current session's client and the token cancelled when that session ends.
    pub(super) client: Option<(zk::Client, CancellationToken)>,
    /// Parents of the keys written: the limits the scan visits.
    pub(super) limits: HashSet<String>,
    /// While a scan runs: paths the sweep has dealt with since it listed.
    pub(super) swept: Option<HashSet<String>>,
}

impl State {
    /// The client, unless its session ended (then it is dropped here).
    pub(super) fn live_client(&mut self) -> Option<zk::Client> {
        if self.client.as_ref().is_some_and(|(_, t)| t.is_cancelled()) {
            self.client = None;
        }
        self.client.as_ref().map(|(c, _)| c.clone())
    }
}

/// What the sweep and the scan reach ZooKeeper with, and what they share besides the keys.
pub(super) struct ZkSweep {
    pub(super) state: Mutex<State>,
    pub(super) stats: Arc<RequestCounters>,
    pub(super) request_timeout: Duration,
}

impl ZkSweep {
    pub(super) fn new(stats: Arc<RequestCounters>, request_timeout: Duration) -> ZkSweep {
        ZkSweep {
            state: Mutex::new(State::default()),
            stats,
            request_timeout,
        }
    }

    /// The current session's client, if it lives.
    pub(super) fn client(&self) -> Option<zk::Client> {
        lock(&self.state).live_client()
    }

    /// Whether this backend remembers a write of `path` (then the sweep removes it), or the
    /// sweep has dealt with it since [`scan_started`](Self::scan_started).
    pub(super) fn is_ours(&self, path: &str, remembered: &Remembered<Target>) -> bool {
        remembered.contains(path)
            || lock(&self.state)
                .swept
                .as_ref()
                .is_some_and(|s| s.contains(path))
    }

    /// A scan listed a limit: from now on, remember what the sweep deletes, so the scan does
    /// not read it again.
    pub(super) fn scan_started(&self) {
        lock(&self.state).swept = Some(HashSet::new());
    }

    pub(super) fn scan_ended(&self) {
        lock(&self.state).swept = None;
    }

    /// The limits (node paths) this backend has written keys of.
    pub(super) fn limits(&self) -> Vec<String> {
        lock(&self.state).limits.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sweeper::SweepStore;

    fn t(version: i32, mzxid: i64) -> Target {
        Target {
            version,
            mzxid,
            verify: false,
        }
    }

    #[test]
    fn a_retry_verifies_the_zxid() {
        assert_eq!(ZkSweep::retry(t(0, 0)), None, "zxid unknown: not retried");
        let want = Target {
            verify: true,
            ..t(0, 42)
        };
        assert_eq!(ZkSweep::retry(t(0, 42)), Some(want));
    }
}

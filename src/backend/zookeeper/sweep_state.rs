//! What the sweep (`sweeper.rs`) and the slow scan (`scan.rs`) share: the keys this backend
//! wrote and will delete, each with the version to delete at, the session's client, and the
//! limits written.

use crate::backend::due_queue::DueQueue;
use crate::backend::lock;
use crate::stats::RequestCounters;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

/// Most deletes taken per round (between two looks at the clock and the stop token).
const ROUND: usize = 1024;

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
    /// The keys we wrote, each with the version to delete at.
    pub(super) queue: DueQueue<Target>,
    /// The current session's client and the token cancelled when that session ends.
    pub(super) client: Option<(zk::Client, CancellationToken)>,
    /// Parents of the keys written: the limits the scan visits.
    pub(super) limits: HashSet<String>,
    /// While a scan runs: paths the sweep has dealt with since it listed.
    pub(super) swept: Option<HashSet<String>>,
}

impl State {
    pub(super) fn insert(&mut self, path: String, target: Target, due: u64) {
        self.queue.insert(&path, target, due);
    }

    /// Puts back a delete whose outcome is unknown, unless we wrote the key again meanwhile
    /// (that record supersedes it) or the zxid that makes a retry safe is unknown (then the
    /// key is left to whoever writes it next).
    pub(super) fn retry(&mut self, path: String, target: Target, due: u64) {
        if self.queue.contains(&path) || target.mzxid == 0 {
            return;
        }
        let target = Target {
            verify: true,
            ..target
        };
        self.insert(path, target, due);
    }

    /// The client, unless its session ended (then it is dropped here).
    pub(super) fn live_client(&mut self) -> Option<zk::Client> {
        if self.client.as_ref().is_some_and(|(_, t)| t.is_cancelled()) {
            self.client = None;
        }
        self.client.as_ref().map(|(c, _)| c.clone())
    }

    /// Takes out up to [`ROUND`] records due at `now`.
    pub(super) fn take_due(&mut self, now: u64) -> Vec<(String, Target)> {
        self.queue.take_due(now, ROUND)
    }
}

/// What the sweeper's tasks (the sweep here, the scan in `scan.rs`) share.
pub(super) struct Shared {
    pub(super) state: Mutex<State>,
    pub(super) stop: CancellationToken,
    pub(super) stats: Arc<RequestCounters>,
    pub(super) request_timeout: Duration,
}

impl Shared {
    /// The current session's client, if it lives.
    pub(super) fn client(&self) -> Option<zk::Client> {
        lock(&self.state).live_client()
    }

    /// Whether this backend remembers a write of `path` (then the sweep removes it), or the
    /// sweep has dealt with it since [`scan_started`](Self::scan_started).
    pub(super) fn is_ours(&self, path: &str) -> bool {
        let st = lock(&self.state);
        st.queue.contains(path) || st.swept.as_ref().is_some_and(|s| s.contains(path))
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

    fn t(version: i32, mzxid: i64) -> Target {
        Target {
            version,
            mzxid,
            verify: false,
        }
    }

    #[test]
    fn a_retry_verifies_the_zxid_and_never_overrides_a_newer_write() {
        let mut st = State::default();
        st.retry("/r/a/k".into(), t(0, 0), 1);
        assert_eq!(st.queue.len(), 0, "zxid unknown: not retried");
        st.retry("/r/a/k".into(), t(0, 42), 1);
        let want = Target {
            verify: true,
            ..t(0, 42)
        };
        assert_eq!(st.take_due(1), vec![("/r/a/k".to_string(), want)]);
        st.insert("/r/a/k".into(), t(3, 50), 9);
        st.retry("/r/a/k".into(), t(0, 42), 1);
        assert_eq!(
            st.take_due(u64::MAX),
            vec![("/r/a/k".to_string(), t(3, 50))]
        );
    }
}

//! [`RateStore`] on ZooKeeper (layout in `nodes.rs`): a limit is a persistent node whose data
//! is the quota, a key a persistent child whose data is the state; versions are the nodes'
//! data versions.
//!
//! * `write_keys`: one `multi`, per write `check(limit, quota_version)` and `setData(key,
//!   expected)` (or `create(key)` for "must be absent"). On a failed condition, one multi-read
//!   of every key and quota (counted as a read) gives the caller what it needs to recompute.
//! * `write_each` (writes of different keys ready together): one `multi` of them all; a failed
//!   condition applies none and names the failed write, which is taken out and the rest sent
//!   again, so k conflicts cost k + 1 multis, plus one multi-read for what they found.
//! * `read_key`: one multi-read of the quota and the key.
//! * Idle keys: removed by this backend's sweeper after their expiry (`sweeper.rs`), and those
//!   of writers that died by a slow scan (`scan.rs`); a key node's data carries its expiry.
//! * Versions are znode data versions, so a deleted and re-created key restarts at 0: why the
//!   sweep's deletes keep that safe, and what a reset (`delete_key`) does not cover, is in
//!   `sweeper.rs`.
//! * Every call is retried across connection errors and a lost session (rate nodes are
//!   persistent: nothing goes with the session) within the shared [`Attempts`] bound; a retried
//!   write whose first attempt applied fails its version check, and the caller recognises its
//!   own value in the conflict (the trait's contract). `NoAuth` is named, never retried.
//!
//! [`Rates`] is the backend's rate store: the link, and the sweeper of the keys it wrote
//! (the backend's own [`RateStore`] impl hands every call to it).

use super::calls::Link;
use super::sweep_state::ZkSweep;
use super::sweeper::Sweeper;
use crate::backend::expiry::{split_expiry, unix_nanos_now, with_expiry, MIN_MARGIN};
use crate::backend::rate_store::{before_write, before_write_each, limit_found};
use crate::backend::retry::Attempts;
use crate::backend::{Current, KeyOutcome, KeyWrite, RateStore, Versioned, WriteOutcome};
use crate::error::{Error, Result};
use crate::stats::RequestKind;
use async_trait::async_trait;
use std::future::Future;
use std::sync::Arc;
use zookeeper_client::{
    self as zk, CreateMode, MultiReadResult, MultiWriteError, MultiWriteResult,
};

/// Failures of a write's condition: the key's version, the key's (non-)existence, the limit.
fn is_condition(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::BadVersion | zk::Error::NoNode | zk::Error::NodeExists
    )
}

/// A znode version as the trait's version.
fn version_of(v: i32) -> Result<u64> {
    u64::try_from(v).map_err(|_| Error::store(format!("ZooKeeper returned the version {v}")))
}

/// A data result of a multi-read: `None` for an absent node. A key's expiry suffix is cut
/// off (`is_key`).
fn versioned(
    r: MultiReadResult,
    is_key: bool,
) -> std::result::Result<Option<Versioned>, zk::Error> {
    match r {
        MultiReadResult::Data { data, stat } => Ok(Some(Versioned {
            value: if is_key { split_expiry(data).0 } else { data },
            version: u64::try_from(stat.version)
                .map_err(|_| zk::Error::BadArguments(&"version"))?,
        })),
        MultiReadResult::Error {
            err: zk::Error::NoNode,
        } => Ok(None),
        MultiReadResult::Error { err } => Err(err),
        _ => Err(zk::Error::UnexpectedError(
            "children where data was asked".into(),
        )),
    }
}

/// One write as the multi sends it.
struct Op<'a> {
    limit: String,
    key: String,
    /// Quota and key versions as znode versions; `None` if they cannot be one (then the write
    /// cannot apply: no znode has that version).
    quota_version: Option<i32>,
    expected: Option<Option<i32>>,
    /// The node's data: the state and its expiry (`nodes.rs`).
    data: Vec<u8>,
    w: &'a KeyWrite,
}

impl Op<'_> {
    /// Whether the write can apply at all (its versions fit a znode's).
    fn possible(&self) -> bool {
        self.quota_version.is_some() && self.expected.is_some()
    }
}

/// The rate-limit nodes of a backend.
#[derive(Debug)]
pub(super) struct Rates {
    link: Arc<Link>,
    /// Deletes the rate-limit keys we wrote once expired (`sweeper.rs`).
    sweeper: Sweeper,
}

impl Rates {
    /// Lets go of the session's client (see [`Sweeper::forget_client`]).
    pub(super) fn forget_client(&self) {
        self.sweeper.forget_client();
    }

    /// The rate store on `link`; its sweeper stops with the backend.
    pub(super) fn new(link: Arc<Link>) -> Rates {
        let sweep = ZkSweep::new(link.stats.clone(), link.config.request_timeout);
        let sweeper = Sweeper::new(sweep, link.stop.child_token());
        Rates { sweeper, link }
    }

    /// The multi operations of `writes`.
    fn ops<'a>(&self, writes: &'a [KeyWrite]) -> Vec<Op<'a>> {
        writes
            .iter()
            .map(|w| Op {
                limit: self.link.paths.rate_limit(&w.limit),
                key: self.link.paths.rate_key(&w.limit, &w.key),
                quota_version: i32::try_from(w.quota_version).ok(),
                expected: match w.expected {
                    None => Some(None),
                    Some(v) => i32::try_from(v).ok().map(Some),
                },
                data: with_expiry(&w.value, w.expires_at),
                w,
            })
            .collect()
    }

    /// The new versions of applied `ops`, each handed to the sweeper.
    fn written(&self, ops: &[&Op<'_>], written: &[(i32, i64)]) -> Result<Vec<u64>> {
        let mut versions = Vec::with_capacity(written.len());
        for (op, &(v, zxid)) in ops.iter().zip(written) {
            versions.push(version_of(v)?);
            self.sweeper.wrote(op.key.clone(), v, zxid, op.w.expires_at);
        }
        Ok(versions)
    }

    /// What the store holds for writes that did not apply (one multi-read).
    async fn conflicts(&self, ops: &[&Op<'_>]) -> Result<Vec<Current>> {
        let pairs: Vec<(String, String)> = ops
            .iter()
            .map(|o| (o.limit.clone(), o.key.clone()))
            .collect();
        let currents = self.read_currents(&pairs).await?;
        // A retried write whose first attempt applied shows our own value: sweep it too.
        for (op, c) in ops.iter().zip(&currents) {
            if let Some(k) = c.key.as_ref().filter(|k| k.value == op.w.value) {
                if let Ok(v) = i32::try_from(k.version) {
                    self.sweeper.wrote(op.key.clone(), v, 0, op.w.expires_at);
                }
            }
        }
        Ok(currents)
    }

    /// Runs one request (`op` on the session's client) with the retries of a rate-limit call:
    /// connection errors and a lost session are retried within [`Attempts`]; `NoAuth` is named
    /// after `what`. Each attempt counts as `kind`.
    async fn rate_call<T, F, Fut>(&self, kind: RequestKind, what: &str, op: F) -> Result<T>
    where
        F: FnMut(zk::Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, zk::Error>>,
    {
        self.link
            .session_call(kind, what, Some(&self.sweeper), op)
            .await
    }

    /// Reads each (limit, key): one multi-read, counted as a read.
    async fn read_currents(&self, pairs: &[(String, String)]) -> Result<Vec<Current>> {
        let results = self
            .rate_call(
                RequestKind::Range,
                "reading rate-limit state",
                |c| async move {
                    let mut reader = c.new_multi_reader();
                    for (limit, key) in pairs {
                        reader.add_get_data(limit)?;
                        reader.add_get_data(key)?;
                    }
                    let results = reader.commit().await?;
                    let mut out = Vec::with_capacity(pairs.len());
                    let mut it = results.into_iter();
                    while let (Some(q), Some(k)) = (it.next(), it.next()) {
                        out.push(Current {
                            quota: versioned(q, false)?,
                            key: versioned(k, true)?,
                        });
                    }
                    Ok(out)
                },
            )
            .await?;
        if results.len() != pairs.len() {
            return Err(Error::store(
                "ZooKeeper answered a multi-read with too few results",
            ));
        }
        Ok(results)
    }

    /// Creates `<root>/r` (once per tree; a lost race is fine).
    async fn make_limits_dir(&self) -> Result<()> {
        let dir = self.link.paths.rate_limits();
        let acls = self.link.acls;
        self.rate_call(RequestKind::Put, "creating the rate limits' node", |c| {
            let dir = dir.clone();
            async move {
                match c.mkdir(&dir, &CreateMode::Persistent.with_acls(acls)).await {
                    Ok(()) | Err(zk::Error::NodeExists) => Ok(()),
                    Err(e) => Err(e),
                }
            }
        })
        .await
    }

    /// Creates the limit's node with `quota`: `Ok(true)` created, `Ok(false)` it exists.
    async fn create_limit(&self, name: &str, quota: &[u8]) -> Result<bool> {
        let path = self.link.paths.rate_limit(name);
        let acls = self.link.acls;
        let what = format!("creating rate limit {name:?}");
        for _ in 0..2 {
            let created = self
                .rate_call(RequestKind::Put, &what, |c| {
                    let path = path.clone();
                    async move {
                        let options = CreateMode::Persistent.with_acls(acls);
                        match c.create(&path, quota, &options).await {
                            Ok(_) => Ok(Some(true)),
                            Err(zk::Error::NodeExists) => Ok(Some(false)),
                            Err(zk::Error::NoNode) => Ok(None),
                            Err(e) => Err(e),
                        }
                    }
                })
                .await?;
            match created {
                Some(made) => return Ok(made),
                // The first rate limit of this tree: make `<root>/r`, then create again.
                None => self.make_limits_dir().await?,
            }
        }
        Err(Error::store(format!(
            "the node {} vanished while creating rate limit {name:?}",
            self.link.paths.rate_limits()
        )))
    }

    /// A node's data and version: `None` if absent. Counted as a read.
    async fn get_node(&self, path: &str, what: &str) -> Result<Option<(Vec<u8>, i32)>> {
        self.rate_call(RequestKind::Range, what, |c| {
            let path = path.to_string();
            async move {
                match c.get_data(&path).await {
                    Ok((data, stat)) => Ok(Some((data, stat.version))),
                    Err(zk::Error::NoNode) => Ok(None),
                    Err(e) => Err(e),
                }
            }
        })
        .await
    }

    /// The limit's node: `None` if absent.
    async fn read_limit(&self, name: &str) -> Result<Option<Versioned>> {
        let read = self
            .get_node(&self.link.paths.rate_limit(name), "reading a rate limit")
            .await?;
        read.map(|(value, v)| {
            Ok(Versioned {
                value,
                version: version_of(v)?,
            })
        })
        .transpose()
    }

    /// Sends the multi of `ops`: `Ok((version, zxid) per write)` (zxid 0: unknown) or, if a
    /// condition failed, `Err(the failed write's index in ops)` (nothing applied: a multi is
    /// all or nothing).
    async fn commit_writes(
        &self,
        ops: &[&Op<'_>],
    ) -> Result<std::result::Result<Vec<(i32, i64)>, usize>> {
        let acls = self.link.acls;
        let results = self
            .rate_call(
                RequestKind::Txn,
                "writing rate-limit state",
                |c| async move {
                    let mut writer = c.new_multi_writer();
                    for op in ops {
                        let (Some(qv), Some(expected)) = (op.quota_version, op.expected) else {
                            continue;
                        };
                        writer.add_check_version(&op.limit, qv)?;
                        match expected {
                            Some(v) => writer.add_set_data(&op.key, &op.data, Some(v))?,
                            None => writer.add_create(
                                &op.key,
                                &op.data,
                                &CreateMode::Persistent.with_acls(acls),
                            )?,
                        }
                    }
                    match writer.commit().await {
                        Ok(r) => Ok(Ok(r)),
                        // Two operations per write: the quota's check, the key's write.
                        Err(MultiWriteError::OperationFailed { source, index })
                            if is_condition(&source) =>
                        {
                            Ok(Err(index / 2))
                        }
                        Err(e) => Err(zk::Error::from(e)),
                    }
                },
            )
            .await?;
        let results = match results {
            Ok(r) => r,
            Err(failed) => return Ok(Err(failed.min(ops.len().saturating_sub(1)))),
        };
        // Per write: the check's result, then the set's or the create's.
        let mut versions = Vec::with_capacity(ops.len());
        for r in results.into_iter().skip(1).step_by(2) {
            versions.push(match r {
                MultiWriteResult::SetData { stat } => (stat.version, stat.mzxid),
                // A created node is at version 0 (the create's stat may be invalid:
                // ZOOKEEPER-4026, then its zxid is unknown).
                MultiWriteResult::Create { stat, .. } if stat.is_invalid() => (0, 0),
                MultiWriteResult::Create { stat, .. } => (0, stat.mzxid),
                _ => return Err(Error::store("ZooKeeper answered a multi out of order")),
            });
        }
        if versions.len() != ops.len() {
            return Err(Error::store(
                "ZooKeeper answered a multi with too few results",
            ));
        }
        Ok(Ok(versions))
    }
}

#[async_trait]
impl RateStore for Rates {
    async fn ensure_limit(&self, name: &str, quota: Option<&[u8]>) -> Result<Versioned> {
        if let Some(q) = quota {
            match self.create_limit(name, q).await {
                Ok(true) => {
                    return Ok(Versioned {
                        value: q.to_vec(),
                        version: 0,
                    })
                }
                Ok(false) => {}
                // ZooKeeper checks the parent's ACL before whether the node exists: a reader
                // gets NoAuth for a limit that is there. The read below tells.
                Err(e) => {
                    return match self.read_limit(name).await {
                        Ok(Some(v)) => Ok(v),
                        _ => Err(e),
                    }
                }
            }
        }
        self.read_limit(name)
            .await?
            .ok_or_else(|| Error::NotFound(name.to_string()))
    }

    async fn put_limit(&self, name: &str, quota: &[u8]) -> Result<u64> {
        let path = self.link.paths.rate_limit(name);
        let what = format!("setting the quota of rate limit {name:?}");
        // Set, or create if absent; a create that loses a race sets again.
        for _ in 0..3 {
            let set = self
                .rate_call(RequestKind::Put, &what, |c| {
                    let path = path.clone();
                    async move {
                        match c.set_data(&path, quota, None).await {
                            Ok(stat) => Ok(Some(stat.version)),
                            Err(zk::Error::NoNode) => Ok(None),
                            Err(e) => Err(e),
                        }
                    }
                })
                .await?;
            match set {
                Some(v) => return version_of(v),
                None => {
                    if self.create_limit(name, quota).await? {
                        return Ok(0);
                    }
                }
            }
        }
        Err(Error::store(format!(
            "rate limit {name:?} kept appearing and vanishing; quota not set, try again"
        )))
    }

    async fn limits(&self) -> Result<Vec<String>> {
        let dir = self.link.paths.rate_limits();
        let mut names = self
            .rate_call(RequestKind::Range, "listing rate limits", |c| {
                let dir = dir.clone();
                async move {
                    match c.list_children(&dir).await {
                        Ok(names) => Ok(names),
                        Err(zk::Error::NoNode) => Ok(Vec::new()),
                        Err(e) => Err(e),
                    }
                }
            })
            .await?;
        names.sort();
        Ok(names)
    }

    async fn read_key(&self, limit: &str, key: &str) -> Result<Current> {
        let pair = [(
            self.link.paths.rate_limit(limit),
            self.link.paths.rate_key(limit, key),
        )];
        let current = self
            .read_currents(&pair)
            .await?
            .pop()
            .ok_or_else(|| Error::store("ZooKeeper answered a multi-read with no result"))?;
        limit_found(limit, current)
    }

    async fn write_keys(&self, writes: &[KeyWrite]) -> Result<WriteOutcome> {
        if let Some(settled) = before_write(writes)? {
            return Ok(settled);
        }
        let ops = self.ops(writes);
        if ops.iter().all(Op::possible) {
            let all: Vec<&Op<'_>> = ops.iter().collect();
            if let Ok(written) = self.commit_writes(&all).await? {
                return Ok(WriteOutcome::Written(self.written(&all, &written)?));
            }
        }
        let all: Vec<&Op<'_>> = ops.iter().collect();
        Ok(WriteOutcome::Conflict(self.conflicts(&all).await?))
    }

    /// One `multi` for all the writes; when a condition fails, ZooKeeper names the failed
    /// operation and applies none, so that write is taken out and the multi sent again
    /// without it: k conflicts cost k + 1 multis (and one multi-read for what they found).
    async fn write_each(&self, writes: &[KeyWrite]) -> Vec<Result<KeyOutcome>> {
        if let Some(settled) = before_write_each(writes) {
            return settled;
        }
        let ops = self.ops(writes);
        let (mut live, mut lost): (Vec<usize>, Vec<usize>) =
            (0..ops.len()).partition(|&i| ops[i].possible());
        let mut outcomes: Vec<Option<Result<KeyOutcome>>> = (0..ops.len()).map(|_| None).collect();
        // Each round applies every live write or takes one out: at most `ops.len()` rounds.
        while !live.is_empty() {
            let batch: Vec<&Op<'_>> = live.iter().map(|&i| &ops[i]).collect();
            match self.commit_writes(&batch).await {
                Ok(Ok(written)) => {
                    match self.written(&batch, &written) {
                        Ok(versions) => {
                            for (&i, v) in live.iter().zip(versions) {
                                outcomes[i] = Some(Ok(KeyOutcome::Written(v)));
                            }
                        }
                        Err(e) => live.iter().for_each(|&i| outcomes[i] = Some(Err(e.copy()))),
                    }
                    break;
                }
                Ok(Err(failed)) => lost.push(live.remove(failed.min(live.len() - 1))),
                Err(e) => {
                    live.iter().for_each(|&i| outcomes[i] = Some(Err(e.copy())));
                    break;
                }
            }
        }
        if !lost.is_empty() {
            lost.sort_unstable();
            let batch: Vec<&Op<'_>> = lost.iter().map(|&i| &ops[i]).collect();
            match self.conflicts(&batch).await {
                Ok(found) => {
                    for (&i, current) in lost.iter().zip(found) {
                        outcomes[i] = Some(Ok(KeyOutcome::Conflict(current)));
                    }
                }
                Err(e) => lost.iter().for_each(|&i| outcomes[i] = Some(Err(e.copy()))),
            }
        }
        outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Err(Error::store("a rate-limit write got no outcome"))))
            .collect()
    }

    /// A re-created node restarts at version 0, so a version may be reused once the sweeper
    /// deleted an expired key: it never does before `expires_at` + `MIN_MARGIN` (on the
    /// writer's clock), so half of that leaves room for clock skew between hosts.
    fn version_life(&self) -> std::time::Duration {
        version_life()
    }

    /// A reset does not delete the node: it writes an empty value (which means "absent" to
    /// the caller, see `RateStore::delete_key`) with the old state's expiry, so the node's
    /// version keeps growing. Deleting it would restart the version at 0 on re-creation, and a
    /// client still holding a state from before the reset could then write over the new one
    /// with a version that matches again. The sweeper deletes the empty node once the old
    /// state has expired, when nobody can hold it any more.
    async fn delete_key(&self, limit: &str, key: &str) -> Result<()> {
        let path = self.link.paths.rate_key(limit, key);
        let mut attempts = Attempts::new(self.link.config.request_timeout);
        loop {
            let read = self
                .get_node(&path, "reading a rate-limit key to reset it")
                .await?;
            let Some((data, version)) = read else {
                return Ok(());
            };
            let (value, expires_at) = split_expiry(data);
            if value.is_empty() {
                return Ok(());
            }
            let expires_at = expires_at.unwrap_or_else(unix_nanos_now);
            let written = self
                .rate_call(RequestKind::Txn, "resetting a rate-limit key", |c| {
                    let path = path.clone();
                    let data = with_expiry(b"", expires_at);
                    async move {
                        match c.set_data(&path, &data, Some(version)).await {
                            Ok(stat) => Ok(Some((stat.version, stat.mzxid))),
                            Err(zk::Error::BadVersion) | Err(zk::Error::NoNode) => Ok(None),
                            Err(e) => Err(e),
                        }
                    }
                })
                .await?;
            match written {
                Some((v, mzxid)) => {
                    self.sweeper.wrote(path, v, mzxid, expires_at);
                    return Ok(());
                }
                // Written or deleted meanwhile: reset what is there now.
                None if attempts.again(false).await => continue,
                None => {
                    return Err(Error::store(
                        "resetting a rate-limit key: it kept changing under concurrent writes",
                    ))
                }
            }
        }
    }
}

/// [`RateStore::version_life`] of every ZooKeeper store (known before one is connected, see
/// `sharded/lazy.rs`).
pub(crate) fn version_life() -> std::time::Duration {
    MIN_MARGIN / 2
}

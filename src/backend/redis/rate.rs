//! Rate limits on Redis: the [`RateStore`] over the scripts in `lua/` and the layout of
//! `keys.rs`. Each write of a batch is one script call per bucket (hash slot), carrying every
//! key of that bucket: the quota check and the writes are one atomic step on the server, and
//! Redis expires each key on its own (`PXAT`), so no sweeper runs.
//!
//! A bucket's copy of a quota can lag the reference (a new limit not yet copied there, a quota
//! change that failed half-way): a write that finds it older than the quota it was decided
//! with brings the copy up to date from the reference and is sent once more.

use super::keys::GRACE;
use super::link::Link;
use super::reply::{self, Found};
use super::RedisBackend;
use crate::backend::rate_store::{before_write, before_write_each};
use crate::backend::{Current, KeyOutcome, KeyWrite, RateStore, Versioned, WriteOutcome};
use crate::error::{Error, Result};
use crate::stats::RequestKind;
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

impl RedisBackend {
    fn deadline(&self) -> Instant {
        Instant::now() + self.link.request_timeout()
    }

    /// Sends one bucket's writes (`joint`: all or none) and reads what each found.
    async fn write_bucket(
        &self,
        bucket: u32,
        writes: &[&KeyWrite],
        joint: bool,
    ) -> Result<Vec<Found>> {
        let quotas = self.keys.bucket_quotas(bucket);
        let mode = if joint { "joint" } else { "each" };
        let grace = GRACE.as_millis() as u64;
        let deadline = self.deadline();
        let wait = self.link.wait_replicas();
        // The script takes a limit and its quota version once per group of writes.
        let mut order: Vec<usize> = (0..writes.len()).collect();
        order.sort_by(|&a, &b| {
            let (a, b) = (writes[a], writes[b]);
            (&a.limit, a.quota_version).cmp(&(&b.limit, b.quota_version))
        });
        let groups: Vec<&[usize]> = order
            .chunk_by(|&a, &b| {
                (&writes[a].limit, writes[a].quota_version)
                    == (&writes[b].limit, writes[b].quota_version)
            })
            .collect();
        let (value, acked): (redis::Value, i64) = self
            .link
            .run(RequestKind::Txn, deadline, |mut c| {
                let mut inv = self.scripts.write.prepare_invoke();
                inv.key(&quotas).arg(mode).arg(groups.len());
                for group in &groups {
                    let w = writes[group[0]];
                    inv.arg(&w.limit).arg(w.quota_version).arg(group.len());
                }
                for &i in &order {
                    let w = writes[i];
                    let expected = w.expected.map_or(String::new(), |v| v.to_string());
                    inv.key(self.keys.key_in(bucket, &w.limit, &w.key))
                        .arg(expected)
                        .arg(&w.value[..])
                        .arg(w.expires_at.div_ceil(1_000_000) + grace);
                }
                async move {
                    let value = inv.invoke_async(&mut c).await?;
                    Ok((value, Link::acked(&mut c, wait, deadline).await?))
                }
            })
            .await?;
        let sorted = reply::writes(value, writes.len()).map_err(|why| self.bad_reply(why))?;
        let mut found = vec![None; writes.len()];
        for (i, f) in order.into_iter().zip(sorted) {
            found[i] = Some(f);
        }
        let found: Vec<Found> = found.into_iter().flatten().collect();
        if acked < i64::from(wait) && found.iter().any(|f| matches!(f, Found::Written(_))) {
            return Err(Error::store(format!(
                "{}: the write is on the primary but only {acked} of {wait} replicas acknowledged it in time; it does not count as admitted (a failover could lose it)",
                self.link.shown()
            )));
        }
        Ok(found)
    }

    /// Writes to `bucket`, bringing its quota copies up to date and sending once more the
    /// writes that found their copy older than the quota they were decided with (all of them
    /// when `joint`: then none was written; alone otherwise, the others' outcomes kept).
    async fn write_fresh(
        &self,
        bucket: u32,
        writes: &[&KeyWrite],
        joint: bool,
    ) -> Result<Vec<Found>> {
        let mut found = self.write_bucket(bucket, writes, joint).await?;
        let stale: Vec<usize> = (0..writes.len())
            .filter(|&i| found[i].copy_older_than(writes[i].quota_version))
            .collect();
        if stale.is_empty() {
            return Ok(found);
        }
        let mut limits: Vec<&str> = stale.iter().map(|&i| writes[i].limit.as_str()).collect();
        limits.sort_unstable();
        limits.dedup();
        for limit in limits {
            self.refresh_copy(bucket, limit).await?;
        }
        if joint {
            return self.write_bucket(bucket, writes, joint).await;
        }
        let again: Vec<&KeyWrite> = stale.iter().map(|&i| writes[i]).collect();
        let refound = self.write_bucket(bucket, &again, joint).await?;
        for (i, f) in stale.into_iter().zip(refound) {
            found[i] = f;
        }
        Ok(found)
    }

    /// Copies the reference quota of `limit` to `bucket` (never back to an older one); the
    /// reference, or `None` if the limit is gone.
    async fn refresh_copy(&self, bucket: u32, limit: &str) -> Result<Option<Versioned>> {
        let Some(stored) = self.reference_quota(limit).await? else {
            return Ok(None);
        };
        self.copy_to(bucket, limit, &stored).await?;
        reply::versioned(stored)
            .map(Some)
            .map_err(|why| self.bad_reply(why))
    }

    async fn reference_quota(&self, limit: &str) -> Result<Option<Vec<u8>>> {
        let quotas = self.keys.quotas();
        self.link
            .run(RequestKind::Range, self.deadline(), |mut c| {
                let quotas = quotas.clone();
                async move {
                    redis::cmd("HGET")
                        .arg(quotas)
                        .arg(limit)
                        .query_async(&mut c)
                        .await
                }
            })
            .await
    }

    async fn copy_to(&self, bucket: u32, limit: &str, stored: &[u8]) -> Result<()> {
        let copies = self.keys.bucket_quotas(bucket);
        self.link
            .run(RequestKind::Put, self.deadline(), |mut c| {
                let mut inv = self.scripts.copy_quota.prepare_invoke();
                inv.key(&copies).arg(limit).arg(stored);
                async move { inv.invoke_async::<i64>(&mut c).await }
            })
            .await
            .map(|_| ())
    }

    /// Copies `stored` to every bucket, concurrently; how many copies failed, and one reason.
    async fn copy_everywhere(&self, limit: &str, stored: &[u8]) -> Result<()> {
        let copies = (0..self.keys.buckets()).map(|b| self.copy_to(b, limit, stored));
        let failed: Vec<Error> = futures::future::join_all(copies)
            .await
            .into_iter()
            .filter_map(Result::err)
            .collect();
        match failed.into_iter().next() {
            None => Ok(()),
            Some(first) => Err(Error::store(format!(
                "the quota of {limit} is stored, but not yet in every part of {} ({first}); set it again",
                self.link.shown()
            ))),
        }
    }

    /// A key the script would not touch, in the words `describe` gives the same refusal when
    /// it fails a whole call.
    fn unusable(&self, why: &str) -> Error {
        let (code, detail) = why.split_once(' ').unwrap_or((why, ""));
        let what = match code {
            "FOREIGN" => format!("key {detail}; use another prefix, or remove that key"),
            "WRONGTYPE" => format!(
                "a key under the prefix holds another type of value ({detail}); use another prefix"
            ),
            _ => format!("the server refused the request: {why}"),
        };
        Error::store(format!("{}: {what}", self.link.shown()))
    }

    fn bad_reply(&self, why: String) -> Error {
        Error::store(format!(
            "{} answered a script unexpectedly: {why}",
            self.link.shown()
        ))
    }

    /// Splits `writes` by bucket, keeping each write's position.
    fn by_bucket<'a>(&self, writes: &'a [KeyWrite]) -> BTreeMap<u32, Vec<(usize, &'a KeyWrite)>> {
        let mut buckets: BTreeMap<u32, Vec<(usize, &KeyWrite)>> = BTreeMap::new();
        for (i, w) in writes.iter().enumerate() {
            buckets
                .entry(self.keys.bucket_of(&w.limit, &w.key))
                .or_default()
                .push((i, w));
        }
        buckets
    }
}

#[async_trait]
impl RateStore for RedisBackend {
    async fn ensure_limit(&self, name: &str, quota: Option<&[u8]>) -> Result<Versioned> {
        let quotas = self.keys.quotas();
        let (stored, created): (Option<Vec<u8>>, bool) = self
            .link
            .run(RequestKind::Txn, self.deadline(), |mut c| {
                let mut inv = self.scripts.ensure_limit.prepare_invoke();
                inv.key(&quotas).arg(name);
                if let Some(q) = quota {
                    inv.arg(q);
                }
                async move { inv.invoke_async(&mut c).await }
            })
            .await?;
        let Some(stored) = stored else {
            return Err(Error::NotFound(name.to_string()));
        };
        if created {
            self.copy_everywhere(name, &stored).await?;
        }
        reply::versioned(stored).map_err(|why| self.bad_reply(why))
    }

    async fn put_limit(&self, name: &str, quota: &[u8]) -> Result<u64> {
        let quotas = self.keys.quotas();
        let version: u64 = self
            .link
            .run(RequestKind::Put, self.deadline(), |mut c| {
                let mut inv = self.scripts.put_limit.prepare_invoke();
                inv.key(&quotas).arg(name).arg(quota);
                async move { inv.invoke_async(&mut c).await }
            })
            .await?;
        let mut stored = format!("{version}:").into_bytes();
        stored.extend_from_slice(quota);
        self.copy_everywhere(name, &stored).await?;
        Ok(version)
    }

    async fn limits(&self) -> Result<Vec<String>> {
        let quotas = self.keys.quotas();
        let mut names: Vec<String> = self
            .link
            .run(RequestKind::Range, self.deadline(), |mut c| {
                let quotas = quotas.clone();
                async move { redis::cmd("HKEYS").arg(quotas).query_async(&mut c).await }
            })
            .await?;
        names.sort_unstable();
        Ok(names)
    }

    async fn read_key(&self, limit: &str, key: &str) -> Result<Current> {
        let bucket = self.keys.bucket_of(limit, key);
        let (copies, rkey) = (self.keys.bucket_quotas(bucket), self.keys.key(limit, key));
        let (copy, state): (Option<Vec<u8>>, Option<Vec<u8>>) = self
            .link
            .run(RequestKind::Range, self.deadline(), |mut c| {
                let mut inv = self.scripts.read.prepare_invoke();
                inv.key(&copies).key(&rkey).arg(limit);
                async move { inv.invoke_async(&mut c).await }
            })
            .await?;
        let bad = |why| self.bad_reply(why);
        let quota = match copy {
            Some(copy) => Some(reply::versioned(copy).map_err(bad)?),
            None => self.refresh_copy(bucket, limit).await?,
        };
        let Some(quota) = quota else {
            return Err(Error::NotFound(limit.to_string()));
        };
        let foreign = |_| {
            Error::store(format!(
                "{}: key {rkey} holds a value clusterlimit did not write; use another prefix, or remove that key",
                self.link.shown()
            ))
        };
        Ok(Current {
            quota: Some(quota),
            key: state.map(reply::versioned).transpose().map_err(foreign)?,
        })
    }

    async fn write_keys(&self, writes: &[KeyWrite]) -> Result<WriteOutcome> {
        if let Some(answer) = before_write(writes)? {
            return Ok(answer);
        }
        let buckets = self.by_bucket(writes);
        let mut buckets = buckets.into_iter();
        let Some((bucket, first)) = buckets.next() else {
            return Ok(WriteOutcome::Written(Vec::new()));
        };
        if buckets.next().is_some() {
            return Err(Error::invalid(
                "keys of several Redis Cluster slots cannot be written together; give them one {hash tag}",
            ));
        }
        let writes: Vec<&KeyWrite> = first.into_iter().map(|(_, w)| w).collect();
        let found = self.write_fresh(bucket, &writes, true).await?;
        reply::joint_outcome(found).map_err(|why| self.bad_reply(why))
    }

    async fn write_each(&self, writes: &[KeyWrite]) -> Vec<Result<KeyOutcome>> {
        if let Some(answer) = before_write_each(writes) {
            return answer;
        }
        let buckets = self.by_bucket(writes);
        let sent = buckets.iter().map(|(bucket, ws)| async move {
            let only: Vec<&KeyWrite> = ws.iter().map(|(_, w)| *w).collect();
            (ws, self.write_fresh(*bucket, &only, false).await)
        });
        let mut out: Vec<Option<Result<KeyOutcome>>> = writes.iter().map(|_| None).collect();
        for (ws, result) in futures::future::join_all(sent).await {
            match result {
                Ok(found) => {
                    for ((i, _), f) in ws.iter().zip(found) {
                        out[*i] = Some(match f {
                            Found::Written(v) => Ok(KeyOutcome::Written(v)),
                            Found::Conflict(c) => Ok(KeyOutcome::Conflict(c)),
                            Found::Unusable(why) => Err(self.unusable(&why)),
                        });
                    }
                }
                Err(e) => {
                    for (i, _) in ws {
                        out[*i] = Some(Err(e.copy()));
                    }
                }
            }
        }
        out.into_iter()
            .map(|o| o.unwrap_or_else(|| Err(Error::store("a write was not sent"))))
            .collect()
    }

    fn joint_keys(&self, keys: &[(&str, &str)]) -> Result<()> {
        let mut buckets = keys.iter().map(|(l, k)| self.keys.bucket_of(l, k));
        let Some(first) = buckets.next() else {
            return Ok(());
        };
        if buckets.all(|b| b == first) {
            return Ok(());
        }
        let shown: Vec<String> = keys.iter().map(|(l, k)| format!("{l}:{k}")).collect();
        Err(Error::invalid(format!(
            "keys {} are in different slots of {}; a check of several keys is all-or-nothing only within one slot: give them one {{hash tag}} (e.g. {{user42}}:ip and {{user42}}:path)",
            shown.join(", "),
            self.link.shown()
        )))
    }

    fn version_life(&self) -> Duration {
        GRACE
    }

    async fn delete_key(&self, limit: &str, key: &str) -> Result<()> {
        let rkey = self.keys.key(limit, key);
        self.link
            .run(RequestKind::Delete, self.deadline(), |mut c| {
                let rkey = rkey.clone();
                async move { redis::cmd("DEL").arg(rkey).query_async::<i64>(&mut c).await }
            })
            .await
            .map(|_| ())
    }
}

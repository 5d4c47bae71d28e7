//! Hot reload of the RLS rules: the `--rls-config` files and directories are polled, and
//! `SIGHUP` reloads at once. A new set is loaded and validated whole, its rate limits opened,
//! and only then put in force ([`Rls::reload`]); a set that fails keeps the old one in force
//! and says why in the log, the metrics and the health routes.
//!
//! Why polling rather than inotify: editors replace a file by renaming another over it, and
//! Kubernetes swaps a ConfigMap's `..data` symlink; both escape a watch on the old inode, and
//! a poll of a few small files twice a second sees them all with no dependency.

use super::reload_report::{Outcome, ReloadError, ReloadReport, Reloaded};
use super::rules::{Loading, Rules};
use super::service::Rls;
use crate::sidecar::metrics::Metrics;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// How often the files are looked at. A change is applied once it has been seen unchanged
/// for one more poll (a file being written is not loaded half way), so within about 1 s.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// Bound on opening a new set's rate limits: past it the store counts as failing.
const STORE_BUDGET: Duration = Duration::from_secs(10);
/// First wait before a set the store failed to open is tried again; doubles up to the next.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// What the configured paths hold now: each YAML file's path, size, modification time and
/// content hash (following symlinks), or why it could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(Vec<(PathBuf, Result<FileState, String>)>);

/// A file's size, modification time and content hash.
type FileState = (u64, Option<SystemTime>, u64);

impl Fingerprint {
    /// Reads what `paths` hold now.
    pub fn take(paths: &[PathBuf]) -> Fingerprint {
        let mut out = Vec::new();
        for path in paths {
            match std::fs::read_dir(path) {
                // As `Rules::load`: the directory's *.yaml and *.yml files. The `..data`
                // and `..2024_…` entries of a ConfigMap are directories, skipped; the files'
                // symlinks through `..data` are followed, so a swap changes what is read.
                Ok(entries) => {
                    let mut files: Vec<PathBuf> = entries
                        .filter_map(|e| e.ok().map(|e| e.path()))
                        .filter(|p| {
                            matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
                        })
                        .filter(|p| p.is_file())
                        .collect();
                    files.sort();
                    for f in files {
                        let seen = file_state(&f);
                        out.push((f, seen));
                    }
                }
                Err(_) => {
                    let seen = file_state(path);
                    out.push((path.clone(), seen));
                }
            }
        }
        Fingerprint(out)
    }
}

fn file_state(path: &Path) -> Result<FileState, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let mtime = std::fs::metadata(path).ok().and_then(|m| m.modified().ok());
    Ok((bytes.len() as u64, mtime, super::rules::fnv1a(&bytes)))
}

/// The reloader's task: polls `files`, reloads on a settled change or `SIGHUP`, forever.
/// Every failure is reported and the loop goes on.
/// `seen`: what the files held when the rules in force were read; `loading`: how they were
/// loaded (domain merging), the same on every reload.
pub fn spawn(
    rls: Arc<Rls>,
    files: Vec<PathBuf>,
    loading: Loading,
    seen: Fingerprint,
    metrics: Arc<Metrics>,
) {
    metrics.rls_reload.started(&rls.rules());
    // Registered now, before the sidecar says it listens: a SIGHUP from then on reloads
    // instead of ending the process (its default).
    let mut hangup = catch_hangup();
    tokio::spawn(async move {
        let mut seen = seen;
        loop {
            let task = tokio::spawn(watch(
                rls.clone(),
                files.clone(),
                loading,
                seen,
                metrics.clone(),
                hangup.take(),
            ));
            // The loop never ends; should a bug make it panic, reloads must not stop quietly.
            if let Err(e) = task.await {
                tracing::error!(error = %e, "the rls_config reloader failed; restarting it in 1 s");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            // Unknown: the restarted loop loads the files once more.
            seen = Fingerprint(Vec::new());
            hangup = catch_hangup();
        }
    });
}

fn catch_hangup() -> Option<tokio::signal::unix::Signal> {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot catch SIGHUP; the rls_config files are still watched");
            None
        }
    }
}

async fn watch(
    rls: Arc<Rls>,
    files: Vec<PathBuf>,
    loading: Loading,
    mut applied: Fingerprint,
    metrics: Arc<Metrics>,
    mut hangup: Option<tokio::signal::unix::Signal>,
) {
    let report = &metrics.rls_reload;
    let mut seen = applied.clone();
    // After a store error: when to try again, and the wait after that.
    let mut retry: Option<(Instant, Duration)> = None;
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let Some(forced) = woken(&mut tick, &mut hangup).await else {
            continue;
        };
        let paths = files.clone();
        let now = match tokio::task::spawn_blocking(move || Fingerprint::take(&paths)).await {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(error = %e, "reading the rls_config files failed; trying again");
                continue;
            }
        };
        let settled = now == seen;
        seen = now.clone();
        let due = retry.is_some_and(|(at, _)| Instant::now() >= at);
        if !(forced || (settled && now != applied) || due) {
            continue;
        }
        // Whatever comes of it, this state has been tried: only a change, a SIGHUP or a due
        // retry tries again.
        applied = now;
        retry = reported(report, reload_once(&rls, &files, loading).await, retry);
    }
}

/// Waits for the next poll tick (`Some(false)`) or a SIGHUP (`Some(true)`: reload even if
/// nothing changed); `None` when the SIGHUP stream ended (no more are caught).
async fn woken(
    tick: &mut tokio::time::Interval,
    hangup: &mut Option<tokio::signal::unix::Signal>,
) -> Option<bool> {
    let hup = async {
        match hangup.as_mut() {
            Some(h) => h.recv().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tick.tick() => Some(false),
        got = hup => {
            if got.is_none() {
                *hangup = None;
                return None;
            }
            tracing::info!("SIGHUP: reloading the rls_config rules");
            Some(true)
        }
    }
}

/// Reports one reload's `result` (metrics and log); the retry that follows: after a store
/// error, when to try again and the wait after that (backing off from `retry`), else none.
fn reported(
    report: &ReloadReport,
    result: Result<Reloaded, (Outcome, String)>,
    retry: Option<(Instant, Duration)>,
) -> Option<(Instant, Duration)> {
    match result {
        Ok(done) => {
            report.reloaded(&done);
            tracing::info!(
                domains = done.domains,
                rules = done.rules,
                opened = done.opened,
                quota_changed = done.changed,
                unchanged = done.unchanged,
                "rls_config reloaded"
            );
            None
        }
        Err((Outcome::StoreError, why)) => {
            let wait = retry.map_or(RETRY_FIRST, |(_, w)| (w * 2).min(RETRY_MAX));
            let again_at = Instant::now() + wait;
            report.failed(Outcome::StoreError, &why);
            tracing::warn!(
                error = %why,
                retry_in_ms = wait.as_millis() as u64,
                "rls_config reload: the store failed while opening the new rules' limits; \
                 the rules in force stay, trying again"
            );
            Some((again_at, wait))
        }
        Err((outcome, why)) => {
            report.failed(outcome, &why);
            tracing::warn!(
                error = %why,
                "rls_config reload: the new rules are invalid; the rules in force stay \
                 (fix the file, it is read again on its next change or on SIGHUP)"
            );
            None
        }
    }
}

/// Loads the rules and puts them in force; the outcome and message when it fails.
async fn reload_once(
    rls: &Rls,
    files: &[PathBuf],
    loading: Loading,
) -> Result<Reloaded, (Outcome, String)> {
    let paths = files.to_vec();
    let loaded = tokio::task::spawn_blocking(move || Rules::load(&paths, loading))
        .await
        .map_err(|e| (Outcome::Invalid, format!("loading the rules failed: {e}")))?;
    let rules = loaded.map_err(|e| (Outcome::Invalid, e))?;
    match tokio::time::timeout(STORE_BUDGET, rls.reload(rules)).await {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(ReloadError::Invalid(why))) => Err((Outcome::Invalid, why)),
        Ok(Err(ReloadError::Store(e))) => Err((
            Outcome::StoreError,
            format!("the store failed while opening the new rules' rate limits: {e}"),
        )),
        Err(_) => Err((
            Outcome::StoreError,
            format!("the store did not open the new rules' rate limits within {STORE_BUDGET:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_swap_changes_the_fingerprint() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // A ConfigMap volume: web.yaml -> ..data/web.yaml, ..data -> ..v1.
        std::fs::create_dir(d.join("..v1")).unwrap();
        std::fs::write(d.join("..v1/web.yaml"), "domain: a\n").unwrap();
        std::os::unix::fs::symlink("..v1", d.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/web.yaml", d.join("web.yaml")).unwrap();
        let before = Fingerprint::take(&[d.to_path_buf()]);
        assert_eq!(before.0.len(), 1, "{before:?}");
        assert!(before.0[0].1.is_ok(), "{before:?}");
        std::fs::create_dir(d.join("..v2")).unwrap();
        std::fs::write(d.join("..v2/web.yaml"), "domain: b\n").unwrap();
        std::os::unix::fs::symlink("..v2", d.join("..tmp")).unwrap();
        std::fs::rename(d.join("..tmp"), d.join("..data")).unwrap();
        let after = Fingerprint::take(&[d.to_path_buf()]);
        assert_ne!(before, after);
        assert_eq!(after, Fingerprint::take(&[d.to_path_buf()]));
    }
}

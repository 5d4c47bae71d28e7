//! [`DoomedHolder`]: a permit holder that a case kills without giving it a chance to clean up.

use super::within::within;
use crate::Limiter;
use futures::future::BoxFuture;
use std::time::Duration;
use tokio::task::JoinHandle;

/// Bound on a kill: the holder is gone (task ended, process reaped) within it.
const KILL_LIMIT: Duration = Duration::from_secs(5);
/// Bound on [`DoomedHolder::hold_in_task`] getting its permit.
const HOLD_LIMIT: Duration = Duration::from_secs(5);

/// How a harness ends its holder: the "kill me" half of a [`DoomedHolder`].
///
/// Dropping a victim must end the holder as well (abort the task, `kill_on_drop` the child
/// process), so a failing case leaves nothing running.
pub trait Victim: Send + 'static {
    /// Ends the holder abruptly (no release, no close) and completes once it is gone; panics
    /// if it cannot.
    fn kill(self: Box<Self>) -> BoxFuture<'static, ()>;
}

/// A holder of one permit that [`DoomedHolder::kill`] ends abruptly; what
/// [`Harness::spawn_holder`](super::Harness::spawn_holder) returns. Dropping it ends the
/// holder too (through its [`Victim`]'s drop).
pub struct DoomedHolder {
    token: u64,
    victim: Box<dyn Victim>,
}

impl std::fmt::Debug for DoomedHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DoomedHolder")
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl DoomedHolder {
    /// A holder that already holds the permit with fencing token `token`, ended by `victim`.
    pub fn new(token: u64, victim: impl Victim) -> DoomedHolder {
        DoomedHolder {
            token,
            victim: Box::new(victim),
        }
    }

    /// The built-in holder: a task that owns `limiter`, acquires one permit of the existing
    /// semaphore `sem` and holds it until killed (`JoinHandle::abort`). Returns once it holds.
    ///
    /// Aborting a task still drops its `Limiter` and `Permit`, so the library's drop paths
    /// run: this proves that a vanished holder's permit comes back, not that the store frees
    /// the permits of a process that died. For a network store, hand the harness a
    /// [`Victim`] that SIGKILLs a child process instead (as the crate's own etcd and
    /// ZooKeeper harnesses do).
    pub async fn hold_in_task(limiter: Limiter, sem: &str) -> DoomedHolder {
        let sem = sem.to_string();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let s = limiter
                .open_semaphore(&sem)
                .await
                .unwrap_or_else(|e| panic!("holder task: open_semaphore({sem:?}): {e}"));
            let permit = s
                .acquire()
                .await
                .unwrap_or_else(|e| panic!("holder task: acquire on {sem:?}: {e}"));
            let _ = tx.send(permit.fencing_token());
            // Hold until aborted; the permit and the Limiter are dropped with the task.
            std::future::pending::<()>().await;
            drop((permit, limiter));
        });
        // Built first, so the task is aborted if it never gets to hold.
        let victim = TaskVictim(task);
        let token = within("in-process holder acquires", HOLD_LIMIT, rx)
            .await
            .unwrap_or_else(|_| panic!("holder task died before holding"));
        DoomedHolder::new(token, victim)
    }

    /// Fencing token of the permit it holds.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Kills the holder and returns once it is gone.
    pub async fn kill(self) {
        self.victim.kill().await;
    }
}

/// The victim of [`DoomedHolder::hold_in_task`]: aborted on kill and on drop.
struct TaskVictim(JoinHandle<()>);

impl Drop for TaskVictim {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Victim for TaskVictim {
    fn kill(mut self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            self.0.abort();
            let res = within("aborted holder task ends", KILL_LIMIT, &mut self.0).await;
            assert!(
                res.as_ref().is_err_and(|e| e.is_cancelled()),
                "holder task was not cancelled: {res:?}"
            );
        })
    }
}

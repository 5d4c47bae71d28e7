//! Which etcd member a Limiter talks to: one `Client` (one HTTP/2 connection) per endpoint,
//! all requests and streams on the current one, and the next one after a failure or timeout.
//!
//! Why not etcd-client's balanced channel: it spreads requests over every member and keeps
//! sending to a member that hangs (SIGSTOP, frozen VM, dead link), because the connection still
//! looks ready. The only way it notices is HTTP/2 pings often enough to matter within a session
//! TTL, and etcd's default policy (`--grpc-keepalive-min-time` 5 s, no pings without streams)
//! answers those with `GOAWAY too_many_pings`. So: no pings at all. A hung or dead member is
//! found by what we wait for anyway (a request attempt, a lease keepalive round, a watch
//! progress reply) not arriving in time; whoever sees that calls [`Endpoints::failed`], and
//! every later call goes to the next member.

use etcd_client::{Client, ConnectOptions};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The members of one Limiter, and the one in use.
pub(super) struct Endpoints {
    clients: Vec<Client>,
    current: AtomicUsize,
    /// Moving average of answered requests' latency, in µs: a slow link (or a loaded store)
    /// must not look like a dead member to the short first attempts.
    latency_us: AtomicU64,
}

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoints")
            .field("members", &self.clients.len())
            .field("current", &self.current.load(Ordering::Relaxed))
            .finish()
    }
}

impl Endpoints {
    /// One lazily connected client per endpoint (nothing is sent yet).
    pub(super) async fn connect(
        urls: &[String],
        opts: &ConnectOptions,
    ) -> Result<Endpoints, etcd_client::Error> {
        let mut clients = Vec::with_capacity(urls.len());
        for url in urls {
            clients.push(Client::connect([url], Some(opts.clone())).await?);
        }
        if clients.is_empty() {
            return Err(etcd_client::Error::InvalidArgs("no etcd endpoints".into()));
        }
        // Limiters start on different members, so a fleet does not load the first one only.
        let start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos() as usize)
            % clients.len();
        Ok(Endpoints {
            clients,
            current: AtomicUsize::new(start),
            latency_us: AtomicU64::new(0),
        })
    }

    /// The member in use: its index (to report a failure) and its client.
    pub(super) fn pick(&self) -> (usize, Client) {
        let i = self.current.load(Ordering::Acquire) % self.clients.len();
        (i, self.clients[i].clone())
    }

    /// Records how long an answered request took (moves the average a quarter of the way).
    pub(super) fn answered_in(&self, took: Duration) {
        let sample = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let _ = self
            .latency_us
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                Some(if sample >= old {
                    old + (sample - old) / 4
                } else {
                    old - (old - sample) / 4
                })
            });
    }

    /// The usual latency of an answered request lately.
    pub(super) fn latency(&self) -> Duration {
        Duration::from_micros(self.latency_us.load(Ordering::Relaxed))
    }

    /// Member `index` failed or did not answer in time: move on to the next one, unless
    /// someone already did (many calls see one failure; it must move us once, not n times).
    pub(super) fn failed(&self, index: usize) {
        let next = (index + 1) % self.clients.len();
        if self
            .current
            .compare_exchange(index, next, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
            && self.clients.len() > 1
        {
            tracing::debug!(
                from = index,
                to = next,
                "etcd member failed; using the next one"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failure_moves_on_once() {
        // Clients connect lazily: nothing needs to listen here.
        let urls: Vec<String> = (1..=3).map(|p| format!("http://127.0.0.1:{p}")).collect();
        let eps = Endpoints::connect(&urls, &ConnectOptions::new())
            .await
            .expect("lazy connect");
        let (first, _) = eps.pick();
        eps.failed(first);
        let (second, _) = eps.pick();
        assert_eq!(second, (first + 1) % 3);
        // A second report of the same failure (another call saw it too) changes nothing.
        eps.failed(first);
        assert_eq!(eps.pick().0, second);
        eps.answered_in(Duration::from_millis(400));
        assert_eq!(eps.latency(), Duration::from_millis(100));
    }
}

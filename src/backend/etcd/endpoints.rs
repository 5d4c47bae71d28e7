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
//!
//! With an etcd user, creating a member's client authenticates against that member (a simple
//! token is valid only on the member that issued it). A member that cannot be reached then is
//! skipped and authenticated again in the background until it answers, so a member down at
//! connect is not lost for failover later.

use etcd_client::{Client, ConnectOptions};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Pause between two rounds of authenticating the members that could not be reached.
const REAUTH_PAUSE: Duration = Duration::from_secs(1);
/// First pause before authenticating again at connect, when no member answered (doubles).
const CONNECT_PAUSE: Duration = Duration::from_millis(50);

/// The members of one Limiter, and the one in use.
pub(super) struct Endpoints {
    members: Vec<Member>,
    urls: Vec<String>,
    current: AtomicUsize,
    /// Moving average of answered requests' latency, in µs: a slow link (or a loaded store)
    /// must not look like a dead member to the short first attempts.
    latency_us: AtomicU64,
    /// The slowest authentication seen (µs; 0 without a user). A request sent with an
    /// expired token re-authenticates inside its attempt (etcd checks the password with
    /// bcrypt, ~100 ms, more under load), so attempts must allow for one.
    auth_us: AtomicU64,
}

/// One member's client; not `ready` while it is a placeholder still to be authenticated.
struct Member {
    client: RwLock<Client>,
    ready: AtomicBool,
}

impl Member {
    fn client(&self) -> Client {
        self.client
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// The members' clients while connecting: `None` for one not reached yet.
struct Reached {
    clients: Vec<Option<Client>>,
    /// The slowest authentication seen, in µs (0 without a user).
    auth_us: u64,
}

impl Reached {
    /// Rounds of connecting the members not reached yet until one is (any will do), with
    /// pauses between rounds: the clients, and one that is ready.
    async fn connect(
        urls: &[String],
        opts: &ConnectOptions,
        authenticates: bool,
        deadline: tokio::time::Instant,
        refused: &(dyn Fn(&etcd_client::Error) -> bool + Sync),
    ) -> Result<(Reached, Client), etcd_client::Error> {
        let mut reached = Reached {
            clients: vec![None; urls.len()],
            auth_us: 0,
        };
        let mut pause = CONNECT_PAUSE;
        loop {
            let last_error = reached.round(urls, opts, authenticates, refused).await?;
            if let Some(ready) = reached.clients.iter().flatten().next().cloned() {
                return Ok((reached, ready));
            }
            let Some(e) = last_error else {
                return Err(etcd_client::Error::InvalidArgs("no etcd endpoints".into()));
            };
            if tokio::time::Instant::now() + pause >= deadline {
                return Err(e);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(REAUTH_PAUSE / 4);
        }
    }

    /// Connects every member not reached yet, at once. Returns the last failure worth
    /// another round, if any; any other failure is the error.
    async fn round(
        &mut self,
        urls: &[String],
        opts: &ConnectOptions,
        authenticates: bool,
        refused: &(dyn Fn(&etcd_client::Error) -> bool + Sync),
    ) -> Result<Option<etcd_client::Error>, etcd_client::Error> {
        let pending: Vec<usize> = (0..urls.len())
            .filter(|&i| self.clients[i].is_none())
            .collect();
        let connects = pending.iter().map(|&i| async move {
            let sent = tokio::time::Instant::now();
            let connected = Client::connect([&urls[i]], Some(opts.clone())).await;
            (connected, sent.elapsed())
        });
        let mut last_error = None;
        for (&i, (connected, took)) in pending
            .iter()
            .zip(futures::future::join_all(connects).await)
        {
            if authenticates && connected.is_ok() {
                self.auth_us = self.auth_us.max(micros(took));
            }
            match connected {
                Ok(client) => self.clients[i] = Some(client),
                // Unreachable or no leader now: tried again next round or in the background.
                Err(e) if authenticates && super::attempt::is_transient(&e) && !refused(&e) => {
                    last_error = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(last_error)
    }
}

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the options: they hold the password.
        f.debug_struct("Endpoints")
            .field("members", &self.members.len())
            .field("current", &self.current.load(Ordering::Relaxed))
            .finish()
    }
}

impl Endpoints {
    /// One client per endpoint. Without a user nothing is sent yet (clients connect lazily);
    /// with one, every member is authenticated at once, and it is enough that one answers (the
    /// others are tried again, with pauses, until one does or `deadline` passes). An error
    /// that `refused` says no retry changes is returned at once.
    pub(super) async fn connect(
        urls: &[String],
        opts: &ConnectOptions,
        authenticates: bool,
        deadline: tokio::time::Instant,
        refused: impl Fn(&etcd_client::Error) -> bool + Sync,
    ) -> Result<Arc<Endpoints>, etcd_client::Error> {
        if urls.is_empty() {
            return Err(etcd_client::Error::InvalidArgs("no etcd endpoints".into()));
        }
        let (reached, any_ready) =
            Reached::connect(urls, opts, authenticates, deadline, &refused).await?;
        let unready: Vec<usize> = (0..reached.clients.len())
            .filter(|&i| reached.clients[i].is_none())
            .collect();
        let endpoints = Endpoints::new(urls, reached, any_ready);
        if !unready.is_empty() {
            tracing::debug!(
                members = ?unready,
                "etcd members not reached at connect; authenticating them in the background"
            );
            let urls: Vec<String> = unready.iter().map(|&i| urls[i].clone()).collect();
            tokio::spawn(authenticate_later(
                Arc::downgrade(&endpoints),
                unready.into_iter().zip(urls).collect(),
                opts.clone(),
            ));
        }
        Ok(endpoints)
    }

    /// The endpoints of the clients `reached`, `any_ready` in the place of each one not
    /// reached yet (it is never picked for it).
    fn new(urls: &[String], reached: Reached, any_ready: Client) -> Arc<Endpoints> {
        let members: Vec<Member> = reached
            .clients
            .into_iter()
            .map(|c| Member {
                ready: AtomicBool::new(c.is_some()),
                client: RwLock::new(c.unwrap_or_else(|| any_ready.clone())),
            })
            .collect();
        // Limiters start on different members, so a fleet does not load the first one only.
        let start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos() as usize)
            % members.len();
        Arc::new(Endpoints {
            members,
            urls: urls.to_vec(),
            current: AtomicUsize::new(start),
            latency_us: AtomicU64::new(0),
            auth_us: AtomicU64::new(reached.auth_us),
        })
    }

    /// The member in use (or the next ready one): its index (to report a failure) and client.
    pub(super) fn pick(&self) -> (usize, Client) {
        let n = self.members.len();
        let current = self.current.load(Ordering::Acquire) % n;
        let i = (0..n)
            .map(|k| (current + k) % n)
            .find(|&i| self.members[i].ready.load(Ordering::Acquire))
            .unwrap_or(current);
        (i, self.members[i].client())
    }

    /// Every member's URL, for messages about the cluster: `http://a:2379,http://b:2379`.
    pub(super) fn all_urls(&self) -> String {
        self.urls.join(",")
    }

    /// The URL of member `index`.
    pub(super) fn url(&self, index: usize) -> &str {
        self.urls.get(index).map_or("", String::as_str)
    }

    /// Records how long an answered request took (moves the average a quarter of the way).
    pub(super) fn answered_in(&self, took: Duration) {
        let sample = micros(took);
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

    /// How long an authentication may take (zero without a user).
    pub(super) fn auth_time(&self) -> Duration {
        Duration::from_micros(self.auth_us.load(Ordering::Relaxed))
    }

    /// The usual latency of an answered request lately.
    pub(super) fn latency(&self) -> Duration {
        Duration::from_micros(self.latency_us.load(Ordering::Relaxed))
    }

    /// Member `index` failed or did not answer in time: move on to the next one, unless
    /// someone already did (many calls see one failure; it must move us once, not n times).
    pub(super) fn failed(&self, index: usize) {
        let next = (index + 1) % self.members.len();
        if self
            .current
            .compare_exchange(index, next, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
            && self.members.len() > 1
        {
            tracing::debug!(
                from = index,
                to = next,
                "etcd member failed; using the next one"
            );
        }
    }
}

/// Authenticates the members `pending` (index, URL) until each has answered, then puts their
/// clients in place; ends early once the Limiter's endpoints are gone.
async fn authenticate_later(
    endpoints: Weak<Endpoints>,
    mut pending: Vec<(usize, String)>,
    opts: ConnectOptions,
) {
    while !pending.is_empty() {
        tokio::time::sleep(REAUTH_PAUSE).await;
        if endpoints.strong_count() == 0 {
            return;
        }
        let mut still = Vec::new();
        for (i, url) in pending {
            let sent = tokio::time::Instant::now();
            match Client::connect([&url], Some(opts.clone())).await {
                Ok(client) => {
                    let Some(eps) = endpoints.upgrade() else {
                        return;
                    };
                    eps.auth_us
                        .fetch_max(micros(sent.elapsed()), Ordering::Relaxed);
                    *eps.members[i]
                        .client
                        .write()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = client;
                    eps.members[i].ready.store(true, Ordering::Release);
                    tracing::debug!(member = i, "etcd member authenticated");
                }
                Err(e) => {
                    tracing::debug!(member = i, error = %e, "etcd member still not authenticated");
                    still.push((i, url));
                }
            }
        }
        pending = still;
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failure_moves_on_once() {
        // Clients connect lazily: nothing needs to listen here.
        let urls: Vec<String> = (1..=3).map(|p| format!("http://127.0.0.1:{p}")).collect();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        let eps = Endpoints::connect(&urls, &ConnectOptions::new(), false, deadline, |_| false)
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

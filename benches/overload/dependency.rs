//! The simulated dependency: an HTTP/1 server (axum) on 127.0.0.1, on its own thread and
//! runtime, with `workers` workers, a bounded FIFO queue (full: 503 at once) and lognormal
//! service times from a seeded generator. `set_workers` changes the number of workers during a
//! run: a decrease lets the calls in service finish, an increase takes queued calls at once.
//! Dropping it stops the server within a second.

use crate::plan::DependencySize;
use anyhow::Context as _;
use axum::extract::State;
use axum::http::StatusCode;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::oneshot;

/// A running dependency; `url` is what the replicas call.
pub struct Dependency {
    pub url: String,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    size: DependencySize,
    state: Mutex<Workers>,
    rng: Mutex<fastrand::Rng>,
}

struct Workers {
    workers: usize,
    busy: usize,
    /// Calls waiting for a worker, oldest first; a worker is handed over by sending on it.
    queue: VecDeque<oneshot::Sender<()>>,
}

impl Dependency {
    /// Starts a fresh dependency of `size` on a free port; `seed` fixes its service times.
    pub fn start(size: DependencySize, seed: u64) -> anyhow::Result<Dependency> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("bind the dependency")?;
        listener
            .set_nonblocking(true)
            .context("make the dependency's socket non-blocking")?;
        let url = format!(
            "http://{}/call",
            listener.local_addr().context("dependency address")?
        );
        let shared = Arc::new(Shared {
            size,
            state: Mutex::new(Workers {
                workers: size.workers,
                busy: 0,
                queue: VecDeque::new(),
            }),
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("build the dependency's runtime")?;
        let (stop, stopped) = oneshot::channel::<()>();
        let app = axum::Router::new()
            .route("/call", axum::routing::get(call))
            .with_state(shared.clone());
        let thread = std::thread::Builder::new()
            .name("dependency".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => return eprintln!("overload bench: dependency socket: {e}"),
                    };
                    tokio::select! {
                        r = axum::serve(listener, app) => {
                            if let Err(e) = r {
                                eprintln!("overload bench: dependency server: {e}");
                            }
                        }
                        _ = stopped => {}
                    }
                });
                // Calls still in service are abandoned: their clients are gone too.
                runtime.shutdown_timeout(Duration::from_secs(1));
            })
            .context("start the dependency's thread")?;
        Ok(Dependency {
            url,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Changes the number of workers now.
    pub fn set_workers(&self, workers: usize) {
        let mut st = self.shared.lock();
        st.workers = workers;
        st.hand_over();
    }
}

impl Drop for Dependency {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Workers> {
        // A panic elsewhere cannot leave the counts half-written: keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A lognormal service time with the configured mean.
    fn service_time(&self) -> Duration {
        let (u1, u2) = {
            let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
            (rng.f64(), rng.f64())
        };
        // Box–Muller; 1 - u1 is in (0, 1], so the log is finite.
        let z = (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        let sigma = self.size.sigma;
        // The median that makes the mean come out right: mean = median · e^(σ²/2).
        let median = self.size.mean_service.as_secs_f64() / (sigma * sigma / 2.0).exp();
        Duration::from_secs_f64(median * (sigma * z).exp())
    }
}

impl Workers {
    /// Gives free workers to the oldest queued calls.
    fn hand_over(&mut self) {
        while self.busy < self.workers {
            let Some(next) = self.queue.pop_front() else {
                return;
            };
            // A call whose task is gone (server shutting down) takes no worker.
            if next.send(()).is_ok() {
                self.busy += 1;
            }
        }
    }
}

/// A worker held by a call; dropping it frees the worker for the next queued call.
struct Worker(Arc<Shared>);

impl Drop for Worker {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.busy -= 1;
        st.hand_over();
    }
}

/// One call: a worker now, a place in the queue, or 503 at once when the queue is full.
async fn call(State(shared): State<Arc<Shared>>) -> StatusCode {
    // The work runs in its own task: a client that gives up does not free the worker early,
    // as a real dependency goes on with a request whose caller timed out.
    let work = tokio::spawn(async move {
        let queued = {
            let mut st = shared.lock();
            if st.busy < st.workers && st.queue.is_empty() {
                st.busy += 1;
                None
            } else if st.queue.len() < shared.size.queue {
                let (tx, rx) = oneshot::channel();
                st.queue.push_back(tx);
                Some(rx)
            } else {
                return StatusCode::SERVICE_UNAVAILABLE;
            }
        };
        if let Some(rx) = queued {
            if rx.await.is_err() {
                return StatusCode::SERVICE_UNAVAILABLE;
            }
        }
        let worker = Worker(shared.clone());
        tokio::time::sleep(shared.service_time()).await;
        drop(worker);
        StatusCode::OK
    });
    work.await.unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

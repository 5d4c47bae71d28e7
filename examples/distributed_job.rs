//! A batch worker: takes the one permit of "nightly-export" from `$CLUSTERLIMIT_STORE`, exports
//! in chunks while it holds it, stops the moment `lost()` fires, and stamps every write with the
//! permit's fencing token so that a stale holder's late write is refused.
//!
//! ```sh
//! cargo run --example distributed_job          # memory://: two workers, one simulated session loss
//! CLUSTERLIMIT_STORE=etcd://127.0.0.1:2379/demo cargo run --example distributed_job   # one worker per process
//! ```
//!
//! On `memory://` the example runs two workers (two Limiters: two sessions, as two hosts would
//! have) and, after two chunks, ends every session the way a store losing them would, to show
//! the worker stopping, the queue moving on with a higher token, and the stale write refused.

use clusterlimit::{Error, Limiter, StoreUrl};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CHUNKS: u32 = 6;
const SEMAPHORE: &str = "nightly-export";

/// Stand-in for the resource the job writes to (a table, a bucket): it remembers the highest
/// fencing token it has seen and refuses writes with a lower one, so a worker that lost its
/// permit but does not know it yet (paused, partitioned) cannot overwrite newer work.
#[derive(Default)]
struct FencedSink {
    state: Mutex<SinkState>,
}

#[derive(Default)]
struct SinkState {
    highest_token: u64,
    /// Chunks exported so far, in order, with the token of the worker that wrote each.
    chunks: Vec<(u32, u64)>,
}

#[derive(Debug)]
struct StaleToken {
    token: u64,
    highest: u64,
}

impl FencedSink {
    fn write(&self, token: u64, chunk: u32) -> Result<(), StaleToken> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if token < st.highest_token {
            return Err(StaleToken {
                token,
                highest: st.highest_token,
            });
        }
        st.highest_token = token;
        st.chunks.push((chunk, token));
        Ok(())
    }

    /// The next chunk to export: a new holder resumes where the last one stopped.
    fn next_chunk(&self) -> u32 {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.chunks.len() as u32
    }
}

/// Exports one chunk: some work, then one fenced write.
async fn export_chunk(sink: &FencedSink, token: u64, chunk: u32) -> Result<(), StaleToken> {
    tokio::time::sleep(Duration::from_millis(50)).await;
    sink.write(token, chunk)
}

/// Takes the permit, exports chunks until the job is done, and starts over (queueing again)
/// when the permit is lost. Bounded: at most 5 grants.
async fn worker(name: &str, limiter: Limiter, sink: Arc<FencedSink>) -> clusterlimit::Result<()> {
    let sem = limiter.semaphore(SEMAPHORE, 1).await?;
    for _grant in 0..5 {
        if sink.next_chunk() >= CHUNKS {
            println!("{name}: job already done");
            break;
        }
        let permit = match sem.acquire_timeout(Duration::from_secs(30)).await {
            Ok(permit) => permit,
            // Our session ended while we waited: queue again on a new one.
            Err(Error::SessionLost) => continue,
            Err(e) => return Err(e),
        };
        let token = permit.fencing_token();
        println!("{name}: holds the permit, fencing token {token}");
        loop {
            let chunk = sink.next_chunk();
            if chunk >= CHUNKS {
                println!("{name}: nothing left to export; releasing");
                permit.release().await?;
                return Ok(());
            }
            tokio::select! {
                written = export_chunk(&sink, token, chunk) => match written {
                    Ok(()) => println!("{name}: exported chunk {chunk}"),
                    Err(stale) => {
                        println!("{name}: write refused (token {} < {}): someone newer holds the job", stale.token, stale.highest);
                        break;
                    }
                },
                // The store may give the permit to someone else from now on: stop writing.
                _ = permit.lost() => {
                    println!("{name}: permit lost during chunk {chunk}: stopping work");
                    break;
                }
            }
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let store =
        std::env::var("CLUSTERLIMIT_STORE").unwrap_or_else(|_| "memory://distributed-job".into());
    let memory_store = match StoreUrl::parse(&store)? {
        StoreUrl::Memory { name } => Some(name),
        _ => None,
    };
    let sink = Arc::new(FencedSink::default());
    let names: &[&str] = if memory_store.is_some() {
        &["worker-a", "worker-b"]
    } else {
        &["worker"]
    };
    let mut workers = tokio::task::JoinSet::new();
    let mut limiters = Vec::new();
    for &name in names {
        // One Limiter per worker: its own session, as a separate process would have.
        let limiter = Limiter::builder(&store).owner(name).connect().await?;
        limiters.push(limiter.clone());
        let sink = sink.clone();
        workers.spawn(async move { worker(name, limiter, sink).await });
        // Let worker-a queue first, so the story reads the same every run.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    if let Some(name) = &memory_store {
        // Simulate the store losing every session after two chunks.
        for _ in 0..200 {
            if sink.next_chunk() >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let ended = clusterlimit::backend::memory::expire_sessions(name);
        println!("-- simulated: the store lost {ended} sessions --");
    }

    while let Some(joined) = workers.join_next().await {
        joined??;
    }
    for limiter in limiters {
        limiter.close().await?;
    }

    // A stale holder's late write (say worker-a, paused through its loss) is refused.
    let st = sink.state.lock().unwrap_or_else(|e| e.into_inner());
    let (first_token, last_token) = (st.chunks.first().map_or(0, |c| c.1), st.highest_token);
    drop(st);
    if first_token < last_token {
        match sink.write(first_token, 0) {
            Err(stale) => println!(
                "late write with token {} refused: the sink has seen token {}",
                stale.token, stale.highest
            ),
            Ok(()) => return Err("a stale token was accepted".into()),
        }
    }
    let st = sink.state.lock().unwrap_or_else(|e| e.into_inner());
    let order: Vec<u32> = st.chunks.iter().map(|&(c, _)| c).collect();
    if order != (0..CHUNKS).collect::<Vec<_>>() {
        return Err(format!("chunks exported out of order or twice: {order:?}").into());
    }
    println!("all {CHUNKS} chunks exported once, in order");
    Ok(())
}

//! Two workers share a 1-permit semaphore; each prints when it holds it.
//!
//! Runs on the embedded store with no servers: `cargo run --example quickstart`.
//! Point it at etcd with `CLUSTERLIMIT_STORE=etcd://127.0.0.1:2379/demo cargo run --example quickstart`
//! and start it on several hosts: they still take turns.

use clusterlimit::Limiter;
use std::time::Duration;

#[tokio::main]
async fn main() -> clusterlimit::Result<()> {
    let store =
        std::env::var("CLUSTERLIMIT_STORE").unwrap_or_else(|_| "memory://quickstart".into());
    let mut workers = Vec::new();
    for worker in ["worker-a", "worker-b"] {
        // One Limiter per worker, as separate processes would have: separate sessions.
        let limiter = Limiter::builder(&store).owner(worker).connect().await?;
        workers.push(tokio::spawn(async move {
            let sem = limiter.semaphore("quickstart", 1).await?;
            for round in 1..=3 {
                let permit = sem.acquire().await?;
                println!(
                    "{worker} holds the permit (round {round}, fencing token {})",
                    permit.fencing_token()
                );
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    _ = permit.lost() => { eprintln!("{worker}: permit lost, stopping work"); }
                }
                println!("{worker} releases it");
                permit.release().await?;
            }
            limiter.close().await
        }));
    }
    for w in workers {
        w.await
            .map_err(|e| clusterlimit::Error::Store(Box::new(e)))??;
    }
    Ok(())
}

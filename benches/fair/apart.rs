//! A caller on a runtime of its own: flow B of row 1 and critical's first request of row 3 run
//! on their own thread and current-thread runtime, Limiter included, as another process's would,
//! so that their wake-ups do not queue behind the load's hundreds of tasks on the bench's shared
//! runtime (which would time the bench's scheduling, not the semaphore's rule).

use std::future::Future;

/// Runs `make()`'s future on a new thread with its own current-thread runtime: its result.
pub async fn apart<T, F, Fut>(make: F) -> anyhow::Result<T>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = anyhow::Result<T>>,
    T: Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("fair-bench-apart".to_string())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(anyhow::Error::from)
                .and_then(|rt| rt.block_on(make()));
            let _ = tx.send(result);
        })?;
    rx.await
        .map_err(|_| anyhow::anyhow!("the separate caller's thread ended without a result"))?
}

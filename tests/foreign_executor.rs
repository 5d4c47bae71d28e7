//! Calls made outside a Tokio context (another executor, a plain thread) must not panic:
//! background work goes to the runtime the Limiter was built on.

use clusterlimit::Limiter;

#[test]
fn acquire_from_a_plain_thread_with_another_executor() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let sem = rt.block_on(async {
        let limiter = Limiter::connect("memory://foreign-executor").await.unwrap();
        limiter.semaphore("s", 1).await.unwrap()
    });
    let outcome = std::thread::spawn(move || {
        futures::executor::block_on(async {
            let permit = sem.acquire().await?;
            let busy = sem.try_acquire().await;
            assert!(
                matches!(busy, Err(clusterlimit::Error::NoPermits)),
                "{busy:?}"
            );
            let token = permit.fencing_token();
            drop(permit); // released in the background on the Limiter's runtime
            Ok::<u64, clusterlimit::Error>(token)
        })
    })
    .join()
    .expect("no panic outside a Tokio context");
    assert_eq!(outcome.unwrap(), 1);
}

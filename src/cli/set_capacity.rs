//! `clusterlimit set-capacity`: change a semaphore's capacity (create it if absent).

use super::args::SetCapacityArgs;
use super::exit::Failure;
use clusterlimit::Error;
use std::process::ExitCode;

/// Runs `set-capacity`: prints what was done.
pub async fn set_capacity(args: SetCapacityArgs) -> Result<ExitCode, Failure> {
    let limiter = super::connect(
        &args.store.store,
        clusterlimit::DEFAULT_SESSION_TTL,
        None,
        "set-capacity",
    )
    .await?;
    let result = apply(&limiter, &args.name, args.capacity).await;
    let _ = limiter.close().await;
    let message = result.map_err(|e| Failure::from_lib(e, super::usage_of("set-capacity")))?;
    println!("{message}");
    Ok(ExitCode::SUCCESS)
}

/// Sets the capacity; creating the semaphore with it when absent. Returns what was done.
pub async fn apply(
    limiter: &clusterlimit::Limiter,
    name: &str,
    capacity: u32,
) -> Result<String, Error> {
    match limiter.open_semaphore(name).await {
        Ok(sem) => {
            sem.set_capacity(capacity).await?;
            Ok(format!("{name}: capacity set to {capacity}"))
        }
        Err(Error::NotFound(_)) => {
            // Created concurrently with another capacity: set ours, last writer wins.
            match limiter.semaphore(name, capacity).await {
                Ok(_) => Ok(format!("{name}: created with capacity {capacity}")),
                Err(Error::CapacityMismatch { .. }) => {
                    limiter
                        .open_semaphore(name)
                        .await?
                        .set_capacity(capacity)
                        .await?;
                    Ok(format!("{name}: capacity set to {capacity}"))
                }
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

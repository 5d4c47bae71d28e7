//! `clusterlimit set-capacity`: change a semaphore's capacity (create it if absent).

use super::args::SetCapacityArgs;
use crate::common::out::out_line;
use crate::common::Failure;
use clusterlimit::CapacityChange;
use std::process::ExitCode;

/// Runs `set-capacity`: prints what was done.
pub async fn set_capacity(args: SetCapacityArgs) -> Result<ExitCode, Failure> {
    let limiter = args.store.connect_once().await?;
    let result = limiter.set_capacity(&args.name, args.capacity).await;
    let store_failed = matches!(
        &result,
        Err(clusterlimit::Error::Store(_) | clusterlimit::Error::SessionLost)
    );
    super::deadline::close(&limiter, store_failed, args.store.request_timeout).await;
    let (name, capacity) = (&args.name, args.capacity);
    match result.map_err(Failure::from_lib)? {
        CapacityChange::Created => out_line!("{name}: created with capacity {capacity}"),
        CapacityChange::Set => out_line!("{name}: capacity set to {capacity}"),
        // `CapacityChange` may grow; whatever else it says, the capacity is the one given.
        _ => out_line!("{name}: capacity set to {capacity}"),
    }
    Ok(ExitCode::SUCCESS)
}

//! The live view's data: what is held, waited for and limited now, across the fleet. Taken
//! from the store (`gather.rs`) and from what this process decided (`recorder.rs`), as one
//! serializable [`Picture`](picture::Picture). Shown by the sidecar's web view
//! (`sidecar/ui/`) and by `clusterlimit top` (`cli/top/`).

pub mod clock;
pub mod clusters;
pub mod fleet;
pub mod gather;
pub mod kept;
pub mod leases;
pub mod picture;
pub mod recorder;
pub mod replay;
pub mod seats;
pub mod top_keys;

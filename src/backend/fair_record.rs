//! A fair semaphore's record, the same bytes in etcd (a key's value) and ZooKeeper (a node's
//! data): its classes, the tokens of the entries granted and the flows' virtual times, as JSON.
//! Each store keeps it beside the semaphore and changes it only by compare-and-swap.

use crate::fair::{Classes, VTimes};
use serde::{Deserialize, Serialize};

/// The stored bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FairRecord {
    /// The class table as text (`critical=25%,batch=0`).
    pub classes: String,
    /// Tokens of the entries granted.
    #[serde(default)]
    pub granted: Vec<u64>,
    /// The flows' virtual times at the last grant (see `crate::fair::FairEntry::vtime`).
    #[serde(default, skip_serializing_if = "VTimes::is_empty")]
    pub vtimes: VTimes,
}

impl FairRecord {
    /// A new fair semaphore's record: nothing granted yet.
    pub(crate) fn new(classes: &Classes) -> FairRecord {
        FairRecord {
            classes: classes.to_string(),
            granted: Vec::new(),
            vtimes: VTimes::new(),
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

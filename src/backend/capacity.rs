//! The stored capacity record, the same bytes in every network store (etcd key value, ZooKeeper
//! node data): `{"capacity":N,"floor":F}`. See [`crate::queue`] for what `floor` means.

use serde::{Deserialize, Serialize};

/// Capacity and floor of one semaphore, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CapValue {
    pub capacity: u32,
    #[serde(default)]
    pub floor: u64,
}

impl CapValue {
    /// A new semaphore's record.
    pub(crate) fn new(capacity: u32) -> CapValue {
        CapValue { capacity, floor: 0 }
    }

    /// `None` for bytes another program wrote that we cannot read.
    pub(crate) fn parse(raw: &[u8]) -> Option<CapValue> {
        serde_json::from_slice(raw).ok()
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_defaults() {
        let c = CapValue {
            capacity: 3,
            floor: 9,
        };
        assert_eq!(CapValue::parse(&c.encode()), Some(c));
        assert_eq!(
            CapValue::parse(br#"{"capacity":2}"#),
            Some(CapValue::new(2))
        );
        assert_eq!(CapValue::parse(b"garbage"), None);
    }
}

//! Reading the scripts' replies: stored values are `VERSION:BYTES`; a write's outcome is three
//! items (see `lua/write.lua`).

use crate::backend::{Current, KeyOutcome, Versioned, WriteOutcome};
use redis::Value;

/// What one write of a script call came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Found {
    /// Written; the key's new version.
    Written(u64),
    /// Not written; the bucket's quota copy and the key as they were.
    Conflict(Current),
}

impl Found {
    /// Whether the write failed on a quota copy older than `quota_version` (or none at all):
    /// the copy lags the reference, not the writer.
    pub(super) fn copy_older_than(&self, quota_version: u64) -> bool {
        match self {
            Found::Conflict(c) => c.quota.as_ref().is_none_or(|q| q.version < quota_version),
            Found::Written(_) => false,
        }
    }

    pub(super) fn into_outcome(self) -> Result<KeyOutcome, String> {
        Ok(match self {
            Found::Written(v) => KeyOutcome::Written(v),
            Found::Conflict(c) => KeyOutcome::Conflict(c),
        })
    }
}

/// `VERSION:BYTES` as a [`Versioned`].
pub(super) fn versioned(stored: Vec<u8>) -> Result<Versioned, String> {
    let sep = stored
        .iter()
        .position(|b| *b == b':')
        .ok_or("a stored value without its version")?;
    let version = std::str::from_utf8(&stored[..sep])
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or("a stored value whose version is not a number")?;
    Ok(Versioned {
        value: stored[sep + 1..].to_vec(),
        version,
    })
}

/// The outcomes of a write script call of `count` writes.
pub(super) fn writes(value: Value, count: usize) -> Result<Vec<Found>, String> {
    let Value::Array(items) = value else {
        return Err("not a list".into());
    };
    if items.len() != count * 3 {
        return Err(format!("{} items for {count} writes", items.len()));
    }
    items
        .chunks(3)
        .map(|item| match item {
            [Value::Int(1), Value::Int(v), _] => Ok(Found::Written(*v as u64)),
            [Value::Int(0), quota, key] => Ok(Found::Conflict(Current {
                quota: optional(quota)?,
                key: optional(key)?,
            })),
            _ => Err("a write's outcome is neither written nor refused".into()),
        })
        .collect()
}

/// An all-or-nothing call's outcome: every write written, or what each found.
pub(super) fn joint_outcome(found: Vec<Found>) -> Result<WriteOutcome, String> {
    if found.iter().all(|f| matches!(f, Found::Written(_))) {
        return Ok(WriteOutcome::Written(
            found
                .into_iter()
                .filter_map(|f| match f {
                    Found::Written(v) => Some(v),
                    Found::Conflict(_) => None,
                })
                .collect(),
        ));
    }
    found
        .into_iter()
        .map(|f| match f {
            Found::Conflict(c) => Ok(c),
            Found::Written(_) => Err("a joint write applied in part".to_string()),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(WriteOutcome::Conflict)
}

fn optional(value: &Value) -> Result<Option<Versioned>, String> {
    match value {
        Value::Nil => Ok(None),
        Value::BulkString(bytes) => versioned(bytes.clone()).map(Some),
        _ => Err("a stored value that is not a string".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_values_carry_their_version() {
        let v = versioned(b"1732:\x00a:b".to_vec()).unwrap();
        assert_eq!((v.version, v.value), (1732, b"\x00a:b".to_vec()));
        assert!(versioned(b"no version".to_vec()).is_err());
        assert!(versioned(b"x1:a".to_vec()).is_err());
    }

    #[test]
    fn write_replies_become_outcomes() {
        let reply = Value::Array(vec![
            Value::Int(1),
            Value::Int(42),
            Value::Nil,
            Value::Int(0),
            Value::BulkString(b"7:q".to_vec()),
            Value::Nil,
        ]);
        let found = writes(reply, 2).unwrap();
        assert_eq!(found[0], Found::Written(42));
        assert!(found[1].copy_older_than(8));
        assert!(!found[1].copy_older_than(7));
        assert!(writes(Value::Array(vec![]), 1).is_err());
    }
}

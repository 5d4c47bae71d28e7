//! Reading the scripts' replies: stored values are `VERSION:BYTES`; a write's outcome is one
//! item (written), three (refused) or two (an unusable key; see `lua/write.lua`).

use crate::backend::{Current, Versioned, WriteOutcome};
use redis::Value;

/// What one write of a script call came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Found {
    /// Written; the key's new version.
    Written(u64),
    /// Not written; the bucket's quota copy and the key as they were.
    Conflict(Current),
    /// Not written: the key holds a value clusterlimit did not write, or another type (the
    /// server's words, `FOREIGN …` or `WRONGTYPE …`).
    Unusable(String),
}

impl Found {
    /// Whether the write failed on a quota copy older than `quota_version` (or none at all):
    /// the copy lags the reference, not the writer.
    pub(super) fn copy_older_than(&self, quota_version: u64) -> bool {
        match self {
            Found::Conflict(c) => c.quota.as_ref().is_none_or(|q| q.version < quota_version),
            Found::Written(_) | Found::Unusable(_) => false,
        }
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
    let mut found = Vec::with_capacity(count);
    let mut items = items.into_iter();
    while let Some(item) = items.next() {
        found.push(match item {
            Value::Int(v) if v > 0 => Found::Written(v as u64),
            Value::Int(0) => match (items.next(), items.next()) {
                (Some(quota), Some(key)) => Found::Conflict(Current {
                    quota: optional(quota)?,
                    key: optional(key)?,
                }),
                _ => return Err("a refused write without what it found".into()),
            },
            Value::Int(-1) => match items.next() {
                Some(Value::BulkString(why)) => {
                    Found::Unusable(String::from_utf8_lossy(&why).into_owned())
                }
                _ => return Err("an unusable key without the reason".into()),
            },
            _ => return Err("a write's outcome is neither written nor refused".into()),
        });
    }
    if found.len() != count {
        return Err(format!("{} outcomes for {count} writes", found.len()));
    }
    Ok(found)
}

/// An all-or-nothing call's outcome: every write written, or what each found.
pub(super) fn joint_outcome(found: Vec<Found>) -> Result<WriteOutcome, String> {
    if found.iter().all(|f| matches!(f, Found::Written(_))) {
        return Ok(WriteOutcome::Written(
            found
                .into_iter()
                .filter_map(|f| match f {
                    Found::Written(v) => Some(v),
                    _ => None,
                })
                .collect(),
        ));
    }
    found
        .into_iter()
        .map(|f| match f {
            Found::Conflict(c) => Ok(c),
            Found::Written(_) => Err("a joint write applied in part".to_string()),
            Found::Unusable(why) => Err(format!("a joint write refused one key alone ({why})")),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(WriteOutcome::Conflict)
}

fn optional(value: Value) -> Result<Option<Versioned>, String> {
    match value {
        Value::Nil => Ok(None),
        Value::BulkString(bytes) => versioned(bytes).map(Some),
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
            Value::Int(42),
            Value::Int(0),
            Value::BulkString(b"7:q".to_vec()),
            Value::Nil,
            Value::Int(-1),
            Value::BulkString(b"FOREIGN k holds a value clusterlimit did not write".to_vec()),
        ]);
        let found = writes(reply, 3).unwrap();
        assert_eq!(found[0], Found::Written(42));
        assert!(found[1].copy_older_than(8));
        assert!(!found[1].copy_older_than(7));
        assert!(matches!(&found[2], Found::Unusable(why) if why.starts_with("FOREIGN k")));
        assert!(writes(Value::Array(vec![]), 1).is_err());
        assert!(writes(Value::Array(vec![Value::Int(0), Value::Nil]), 1).is_err());
    }
}

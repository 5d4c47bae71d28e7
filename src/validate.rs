//! Input checks shared by every entry point, so that no backend sees a bad name or weight.

use crate::error::{Error, Result};

/// Largest capacity a semaphore may have.
pub const MAX_CAPACITY: u32 = 1_000_000;
/// Longest semaphore name.
pub const MAX_NAME_LEN: usize = 128;
/// Longest owner label.
pub const MAX_OWNER_LEN: usize = 256;
/// Largest announced value (see `Limiter::announce`): a summary, not a blob store.
pub const MAX_ANNOUNCEMENT_BYTES: usize = 64 * 1024;

/// Names (of semaphores and rate limits) become key and path segments: only `[A-Za-z0-9._-]`,
/// 1–128 chars, so no injection.
///
/// ```
/// assert!(clusterlimit::validate::name("nightly-export.v2").is_ok());
/// let err = clusterlimit::validate::name("a/b").unwrap_err();
/// assert!(err.to_string().contains("allowed are A-Z a-z 0-9 . _ -"));
/// ```
pub fn name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(format!(
            "name must be 1-{MAX_NAME_LEN} characters, got {}",
            name.len()
        )));
    }
    if name == "." || name == ".." {
        return Err(Error::invalid(format!("name {name:?} is reserved")));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(Error::invalid(format!(
            "name {name:?} contains {c:?}; allowed are A-Z a-z 0-9 . _ -"
        )));
    }
    Ok(())
}

/// Capacity must be 1..=1,000,000.
pub fn capacity(capacity: u32) -> Result<()> {
    if capacity == 0 || capacity > MAX_CAPACITY {
        return Err(Error::invalid(format!(
            "capacity must be between 1 and {MAX_CAPACITY}, got {capacity}"
        )));
    }
    Ok(())
}

/// A request's weight must be at least 1 (and can never exceed the largest capacity).
pub fn permits(permits: u32) -> Result<()> {
    if permits == 0 || permits > MAX_CAPACITY {
        return Err(Error::invalid(format!(
            "permits must be between 1 and {MAX_CAPACITY}, got {permits}"
        )));
    }
    Ok(())
}

/// Owner labels are shown in status output: printable, at most 256 bytes.
pub fn owner(owner: &str) -> Result<()> {
    if owner.len() > MAX_OWNER_LEN {
        return Err(Error::invalid(format!(
            "owner label must be at most {MAX_OWNER_LEN} bytes, got {}",
            owner.len()
        )));
    }
    if owner.chars().any(char::is_control) {
        return Err(Error::invalid(
            "owner label must not contain control characters",
        ));
    }
    Ok(())
}

/// An announced value is at most [`MAX_ANNOUNCEMENT_BYTES`] (64 KiB), so every store keeps it in
/// one request and a whole board stays cheap to read.
pub fn announcement(value: &[u8]) -> Result<()> {
    if value.len() > MAX_ANNOUNCEMENT_BYTES {
        return Err(Error::invalid(format!(
            "an announced value must be at most {MAX_ANNOUNCEMENT_BYTES} bytes, got {}",
            value.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(name("nightly-export_1.v2").is_ok());
        assert!(name(&"a".repeat(128)).is_ok());
        for bad in [
            "",
            "a/b",
            "..",
            ".",
            "a b",
            "ä",
            "a\0",
            "x*",
            &"a".repeat(129),
        ] {
            assert!(
                matches!(name(bad), Err(Error::InvalidArgument(_))),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn numbers() {
        assert!(capacity(1).is_ok() && capacity(MAX_CAPACITY).is_ok());
        assert!(capacity(0).is_err() && capacity(MAX_CAPACITY + 1).is_err());
        assert!(permits(1).is_ok() && permits(0).is_err());
        assert!(owner("host-a/worker-3").is_ok() && owner("a\nb").is_err());
        assert!(owner(&"o".repeat(257)).is_err());
        assert!(announcement(&[0; MAX_ANNOUNCEMENT_BYTES]).is_ok());
        assert!(announcement(&[0; MAX_ANNOUNCEMENT_BYTES + 1]).is_err());
    }
}

//! Where a semaphore lives in Redis: five keys (the fifth, the fair record, only on a fair
//! semaphore) and a channel, all under the hash tag `{PREFIX:s:NAME}`, so one script call
//! reaches them on a Redis Cluster too (a script may only touch keys of one hash slot). The
//! names of all semaphores are a set beside them.

/// The keys of one semaphore, in the order the permit scripts take them (`lua/sem_common.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SemKeys {
    /// `[record, queue, entries, sessions, fair record]`.
    pub(super) keys: [String; 5],
    /// Told of every change that can decide a waiter.
    pub(super) channel: String,
}

impl SemKeys {
    pub(super) fn new(prefix: &str, name: &str) -> SemKeys {
        let tag = format!("{{{prefix}:s:{name}}}");
        SemKeys {
            keys: [
                format!("{tag}:cap"),
                format!("{tag}:q"),
                format!("{tag}:e"),
                format!("{tag}:sessions"),
                format!("{tag}:fair"),
            ],
            channel: format!("{tag}:changed"),
        }
    }
}

/// The set of every semaphore's name (for `list`).
pub(super) fn names(prefix: &str) -> String {
    format!("{{{prefix}}}:semaphores")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_semaphore_shares_one_slot() {
        let k = SemKeys::new("app", "db");
        for key in k.keys.iter().chain([&k.channel]) {
            assert!(key.starts_with("{app:s:db}:"), "{key}");
        }
        assert_eq!(names("app"), "{app}:semaphores");
    }
}

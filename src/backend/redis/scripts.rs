//! The Lua scripts of the Redis store (in `lua/`), loaded once and called by SHA; redis-rs
//! loads a script again when a server answers `NOSCRIPT` (a restart, a failover, `SCRIPT
//! FLUSH`).

use redis::Script;

/// Every script, ready to invoke.
pub(super) struct Scripts {
    pub(super) write: Script,
    pub(super) read: Script,
    pub(super) ensure_limit: Script,
    pub(super) put_limit: Script,
    pub(super) copy_quota: Script,
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        Scripts {
            write: Script::new(include_str!("lua/write.lua")),
            read: Script::new(include_str!("lua/read.lua")),
            ensure_limit: Script::new(include_str!("lua/ensure_limit.lua")),
            put_limit: Script::new(include_str!("lua/put_limit.lua")),
            copy_quota: Script::new(include_str!("lua/copy_quota.lua")),
        }
    }
}

impl std::fmt::Debug for Scripts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scripts")
    }
}

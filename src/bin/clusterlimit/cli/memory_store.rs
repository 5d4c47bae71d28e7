//! The warning a one-shot command gives on a `memory://` store. Such a store lives in the
//! process that opened it: three `rate check --limit 1` all pass and two capacity-1 `run`s
//! overlap, because each process has its own. Said once on stderr, so stdout and the exit code
//! stay what scripts read. `serve` is different: its memory store is shared by every client of
//! that sidecar, which it logs at info.

use clusterlimit::StoreUrl;

/// Whether `url` names an in-process store (or shards over in-process stores only).
pub fn is_memory(url: &str) -> bool {
    match StoreUrl::parse(url) {
        Ok(StoreUrl::Memory { .. }) => true,
        Ok(StoreUrl::Sharded { clusters }) => clusters
            .iter()
            .all(|c| matches!(c.url, StoreUrl::Memory { .. })),
        _ => false,
    }
}

/// The warning for a one-shot command on `url`, or `None` when the store is shared.
pub fn warning(url: &str) -> Option<String> {
    is_memory(url).then(|| {
        format!(
            "clusterlimit: warning: {} lives only in this process; nothing is shared with other \
             processes (every command starts from an empty store). To share, use etcd:// or \
             zk://, or a sidecar's memory store through its HTTP API",
            clusterlimit::redact(url)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_memory_stores_are_warned_about() {
        assert!(warning("memory://x")
            .unwrap()
            .contains("only in this process"));
        assert!(warning("mem://").is_some());
        assert!(warning("memory://a;memory://b").is_some());
        assert!(warning("etcd://h:1/a;etcd://h:2/a").is_none());
        assert!(warning("etcd://h:1").is_none());
        assert!(warning("zk://h:1/r").is_none());
        assert!(warning("nonsense").is_none());
    }
}

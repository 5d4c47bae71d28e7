//! Writes a bench's generated block into a markdown file (BENCHMARKS.md).

use std::path::Path;

/// Replaces the block between `begin` and `end` in `path` (or appends it, or creates the
/// file), leaving the hand-written text around it alone.
pub fn replace_block(path: &Path, begin: &str, end: &str, body: &str) -> anyhow::Result<()> {
    let block = format!("{begin}\n{}\n{end}", body.trim_end());
    let old = match std::fs::read_to_string(path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "# Benchmarks\n".to_string(),
        Err(e) => return Err(anyhow::anyhow!("read {}: {e}", path.display())),
    };
    let new = match (old.find(begin), old.find(end)) {
        (Some(b), Some(e)) if b < e => format!("{}{block}{}", &old[..b], &old[e + end.len()..]),
        _ => format!("{}\n\n{block}\n", old.trim_end()),
    };
    std::fs::write(path, new).map_err(|e| anyhow::anyhow!("write {}: {e}", path.display()))
}

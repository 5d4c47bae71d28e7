//! Reading queue entries' data (where a lowered weight lives, see `shrink.rs`) together with the
//! semaphore's capacity, in multi-reads that end with the capacity: the weights and the
//! capacity are then of one point of the store (one chunk: exactly; more: the capacity is the
//! newest). A weight read later than the capacity it is combined with could grant past a
//! capacity lowered in between (a lower weight only ever grants more), so nothing combines a
//! weight with a capacity read before it.

use crate::stats::{RequestCounters, RequestKind};
use zookeeper_client::{self as zk, MultiReadResult};

/// Entries read per multi-read: a reply holds each entry's data (~100 bytes) and stat (~70),
/// far below ZooKeeper's `jute.maxbuffer` (1 MiB by default) at this size.
const CHUNK: usize = 1_000;

/// One read of some entries and the capacity.
#[derive(Debug, Default)]
pub(super) struct EntriesAndCapacity {
    /// Each entry's data and stat, in the order asked (`None`: gone since, or unreadable).
    pub entries: Vec<Option<(Vec<u8>, zk::Stat)>>,
    /// The capacity node's data and data version (`None`: the semaphore does not exist).
    pub capacity: Option<(Vec<u8>, i32)>,
}

/// Reads the data of `entries` (full paths) and then of the semaphore node `semaphore`, one
/// multi-read per [`CHUNK`] entries (the capacity in the last); each request is counted.
pub(super) async fn read(
    client: &zk::Client,
    stats: &RequestCounters,
    semaphore: &str,
    entries: &[String],
) -> Result<EntriesAndCapacity, zk::Error> {
    let mut out = EntriesAndCapacity::default();
    let mut chunks: Vec<&[String]> = entries.chunks(CHUNK).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    let last = chunks.len() - 1;
    for (i, chunk) in chunks.into_iter().enumerate() {
        let mut reader = client.new_multi_reader();
        for path in chunk {
            reader.add_get_data(path)?;
        }
        if i == last {
            reader.add_get_data(semaphore)?;
        }
        stats.count(RequestKind::Range);
        let mut results = reader.commit().await?;
        if i == last {
            out.capacity = match results.pop() {
                Some(MultiReadResult::Data { data, stat }) => Some((data, stat.version)),
                Some(MultiReadResult::Error {
                    err: zk::Error::NoNode,
                }) => None,
                Some(MultiReadResult::Error { err }) => return Err(err),
                _ => {
                    return Err(zk::Error::UnexpectedError(
                        "ZooKeeper answered a multi-read without the semaphore's capacity".into(),
                    ))
                }
            };
        }
        out.entries.extend(results.into_iter().map(|r| match r {
            MultiReadResult::Data { data, stat } => Some((data, stat)),
            _ => None,
        }));
    }
    Ok(out)
}

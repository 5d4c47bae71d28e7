//! What every etcd request shares: the KV client that accepts large replies, and how a Txn's
//! replies are read.

use etcd_client::{Client, TxnOpResponse};

/// A status, a first enqueue (or one whose view lags) reads a semaphore's whole queue (~170
/// bytes an entry). tonic's default 4 MiB reply limit would make those fail past ~25k queued
/// entries.
pub(super) const MAX_REPLY_BYTES: usize = 256 << 20;

/// A KV client that accepts replies up to [`MAX_REPLY_BYTES`].
pub(super) fn kv(client: &Client) -> etcd_client::KvClient {
    client
        .kv_client()
        .max_decoding_message_size(MAX_REPLY_BYTES)
}

pub(super) fn get_kvs(resp: Option<&TxnOpResponse>) -> &[etcd_client::KeyValue] {
    match resp {
        Some(TxnOpResponse::Get(g)) => g.kvs(),
        _ => &[],
    }
}

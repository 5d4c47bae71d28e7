//! What every etcd request shares: the KV client that accepts large replies, how many
//! operations a Txn may carry, and how a Txn's replies are read.

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

/// etcd's default `--max-txn-ops`: the most compares, or success ops, or failure ops, one Txn
/// may hold.
pub(super) const MAX_TXN_OPS: usize = 128;

/// The most nested Txns one Txn may carry when each holds `inner_ops` compares or ops (the
/// larger of its compares, success ops and failure ops): etcd checks a nested Txn against what
/// the outer one leaves of [`MAX_TXN_OPS`] (`checkTxnRequest` in etcd's v3rpc/key.go).
pub(super) const fn most_nested(inner_ops: usize) -> usize {
    MAX_TXN_OPS - inner_ops
}

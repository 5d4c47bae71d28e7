//! A backend whose rate store is one of its parts: [`rate_store_by!`] writes the backend's
//! [`RateStore`](crate::backend::RateStore) impl as one that hands every call to that part.
//! The etcd and ZooKeeper backends keep their rate limits in a part of their own (`rate.rs`
//! in each), yet are rate stores themselves (their public API says so); without this, each
//! `mod.rs` would carry the same forwarding, method for method.

/// `impl RateStore for $backend`, each method (those with a default too, so the part's own
/// choice holds) that of the field `$part`.
macro_rules! rate_store_by {
    ($backend:ty, $part:ident) => {
        #[async_trait::async_trait]
        impl $crate::backend::RateStore for $backend {
            async fn ensure_limit(
                &self,
                name: &str,
                quota: Option<&[u8]>,
            ) -> $crate::error::Result<$crate::backend::Versioned> {
                self.$part.ensure_limit(name, quota).await
            }

            async fn put_limit(&self, name: &str, quota: &[u8]) -> $crate::error::Result<u64> {
                self.$part.put_limit(name, quota).await
            }

            async fn limits(&self) -> $crate::error::Result<Vec<String>> {
                self.$part.limits().await
            }

            async fn read_key(
                &self,
                limit: &str,
                key: &str,
            ) -> $crate::error::Result<$crate::backend::Current> {
                self.$part.read_key(limit, key).await
            }

            async fn write_keys(
                &self,
                writes: &[$crate::backend::KeyWrite],
            ) -> $crate::error::Result<$crate::backend::WriteOutcome> {
                self.$part.write_keys(writes).await
            }

            async fn write_each(
                &self,
                writes: &[$crate::backend::KeyWrite],
            ) -> Vec<$crate::error::Result<$crate::backend::KeyOutcome>> {
                self.$part.write_each(writes).await
            }

            fn part_of(&self, limit: &str, key: &str) -> usize {
                self.$part.part_of(limit, key)
            }

            fn parts(&self) -> usize {
                self.$part.parts()
            }

            async fn ping_part(&self, part: usize) -> $crate::error::Result<()> {
                self.$part.ping_part(part).await
            }

            fn part_name(&self, part: usize) -> Option<String> {
                self.$part.part_name(part)
            }

            fn joint_keys(&self, keys: &[(&str, &str)]) -> $crate::error::Result<()> {
                self.$part.joint_keys(keys)
            }

            fn version_life(&self) -> std::time::Duration {
                self.$part.version_life()
            }

            async fn delete_key(&self, limit: &str, key: &str) -> $crate::error::Result<()> {
                self.$part.delete_key(limit, key).await
            }
        }
    };
}

pub(crate) use rate_store_by;

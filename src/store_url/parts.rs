//! One cluster's URL as its scheme's parser gets it (`etcd.rs`, `zookeeper.rs`, `redis.rs`):
//! split by `scheme.rs`, the query already read into settings.

use super::settings::Settings;

/// `SCHEME://REST?QUERY`, taken apart.
pub(super) struct UrlParts<'a> {
    /// The whole URL, redacted: for messages.
    pub url: &'a str,
    pub scheme: &'a str,
    /// Hosts and path.
    pub rest: &'a str,
    pub settings: Settings<'a>,
}

//! `zk://HOST:PORT[,HOST:PORT]/CHROOT` (and `zks://` for TLS), with `digest_file=` for digest
//! authentication and `acl=` for the nodes it creates.

use super::address::hosts_and_path;
use super::parsed::StoreUrl;
use super::parts::UrlParts;
use super::security::ZkAcl;
use crate::error::{Error, Result};

/// The rest of a `zk…://` URL (see [`StoreUrl::ZooKeeper`]); its `url` is already redacted.
pub(super) fn parse(parts: UrlParts<'_>) -> Result<StoreUrl> {
    let (url, scheme, mut settings) = (parts.url, parts.scheme, parts.settings);
    let secure = matches!(scheme, "zks" | "zk+tls");
    let (hosts, path) = hosts_and_path(url, parts.rest)?;
    let digest_file = settings.take_path("digest_file")?;
    let acl = match settings.take("acl")? {
        None => None,
        Some("creator") => Some(ZkAcl::Creator),
        Some("open") => Some(ZkAcl::Open),
        Some(other) => {
            return Err(Error::invalid(format!(
                "store URL {url}: acl={other:?} is not creator or open"
            )))
        }
    };
    let tls = settings.tls(secure, "zks://")?;
    settings.finish("cacert, cert, key (zks://), digest_file, acl")?;
    Ok(StoreUrl::ZooKeeper {
        hosts,
        root: zk_root(url, path)?,
        digest_file,
        acl,
        tls,
    })
}

/// A ZooKeeper chroot: `/`-separated segments, none empty, `.` or `..`, no control characters
/// (ZooKeeper's own path rules), so every node path built under it is valid.
fn zk_root(url: &str, path: &str) -> Result<String> {
    let path = path.trim_matches('/');
    if path.is_empty() {
        return Ok("/clusterlimit".to_string());
    }
    for seg in path.split('/') {
        if seg.is_empty()
            || seg == "."
            || seg == ".."
            || seg == "zookeeper"
            || seg.chars().any(|c| c.is_control() || c == '?' || c == '#')
        {
            return Err(Error::invalid(format!(
                "store URL {url}: bad ZooKeeper chroot {path:?} (segment {seg:?})"
            )));
        }
    }
    Ok(format!("/{path}"))
}

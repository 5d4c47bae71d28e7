//! Parsing of store URLs: `memory://NAME`, `etcd://host:port,host:port/prefix`,
//! `zk://host:port,host:port/chroot`.

use crate::error::{Error, Result};

/// A parsed store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// `memory://NAME`: in-process store shared by every Limiter opened on the same NAME.
    Memory {
        /// Store name (`default` when empty).
        name: String,
    },
    /// `etcd://h1:p1,h2:p2/prefix`.
    Etcd {
        /// `http://host:port` endpoints.
        endpoints: Vec<String>,
        /// Key prefix without slashes at either end (`clusterlimit` when empty).
        prefix: String,
    },
    /// `zk://h1:p1,h2:p2/chroot`.
    ZooKeeper {
        /// `host:port` servers.
        hosts: Vec<String>,
        /// Absolute path under which every node lives (`/clusterlimit` when empty); created if
        /// absent.
        root: String,
    },
}

impl StoreUrl {
    /// Parses a store URL; every mistake is an `InvalidArgument` naming it.
    ///
    /// ```
    /// use clusterlimit::StoreUrl;
    /// let url = StoreUrl::parse("etcd://10.0.0.1:2379,10.0.0.2:2379/myapp")?;
    /// assert_eq!(
    ///     url,
    ///     StoreUrl::Etcd {
    ///         endpoints: vec!["http://10.0.0.1:2379".into(), "http://10.0.0.2:2379".into()],
    ///         prefix: "myapp".into(),
    ///     }
    /// );
    /// assert!(StoreUrl::parse("zk://zk-1").is_err()); // no port
    /// # Ok::<(), clusterlimit::Error>(())
    /// ```
    pub fn parse(url: &str) -> Result<StoreUrl> {
        let (scheme, rest) = url.split_once("://").ok_or_else(|| {
            Error::invalid(format!(
                "store URL {url:?} has no scheme; use memory://NAME, etcd://HOST:PORT[,HOST:PORT]/PREFIX or zk://HOST:PORT[,HOST:PORT]/CHROOT"
            ))
        })?;
        match scheme {
            "memory" | "mem" => {
                let name = rest.trim_matches('/');
                let name = if name.is_empty() { "default" } else { name };
                Ok(StoreUrl::Memory {
                    name: name.to_string(),
                })
            }
            "etcd" | "etcd+http" => {
                let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
                let endpoints = hosts
                    .split(',')
                    .map(|h| endpoint(url, h.trim()).map(|hp| format!("http://{hp}")))
                    .collect::<Result<Vec<_>>>()?;
                let prefix = path.trim_matches('/');
                if prefix
                    .chars()
                    .any(|c| c.is_control() || c == '?' || c == '#')
                {
                    return Err(Error::invalid(format!(
                        "store URL {url:?}: bad key prefix {prefix:?}"
                    )));
                }
                let prefix = if prefix.is_empty() {
                    "clusterlimit"
                } else {
                    prefix
                };
                Ok(StoreUrl::Etcd {
                    endpoints,
                    prefix: prefix.to_string(),
                })
            }
            "zk" | "zookeeper" => {
                let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
                let hosts = hosts
                    .split(',')
                    .map(|h| endpoint(url, h.trim()))
                    .collect::<Result<Vec<_>>>()?;
                Ok(StoreUrl::ZooKeeper {
                    hosts,
                    root: zk_root(url, path)?,
                })
            }
            other => Err(Error::invalid(format!(
                "store URL {url:?}: unknown scheme {other:?}; use memory://, etcd:// or zk://"
            ))),
        }
    }
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
                "store URL {url:?}: bad ZooKeeper chroot {path:?} (segment {seg:?})"
            )));
        }
    }
    Ok(format!("/{path}"))
}

/// Checks one `HOST:PORT` of a URL and returns it unchanged.
fn endpoint(url: &str, host: &str) -> Result<String> {
    let bad = || {
        Error::invalid(format!(
            "store URL {url:?}: endpoint {host:?} is not HOST:PORT"
        ))
    };
    let (h, port) = host.rsplit_once(':').ok_or_else(bad)?;
    if h.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(bad());
    }
    if h.chars()
        .any(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '[' | ']' | ':' | '_')))
    {
        return Err(bad());
    }
    Ok(host.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!(
            StoreUrl::parse("etcd://127.0.0.1:2379,localhost:22379/myapp").unwrap(),
            StoreUrl::Etcd {
                endpoints: vec![
                    "http://127.0.0.1:2379".into(),
                    "http://localhost:22379".into()
                ],
                prefix: "myapp".into()
            }
        );
        assert_eq!(
            StoreUrl::parse("etcd://h:1").unwrap(),
            StoreUrl::Etcd {
                endpoints: vec!["http://h:1".into()],
                prefix: "clusterlimit".into()
            }
        );
        assert_eq!(
            StoreUrl::parse("memory://").unwrap(),
            StoreUrl::Memory {
                name: "default".into()
            }
        );
        assert_eq!(
            StoreUrl::parse("memory://x").unwrap(),
            StoreUrl::Memory { name: "x".into() }
        );
        assert_eq!(
            StoreUrl::parse("zk://127.0.0.1:2181,h2:2182/apps/limits").unwrap(),
            StoreUrl::ZooKeeper {
                hosts: vec!["127.0.0.1:2181".into(), "h2:2182".into()],
                root: "/apps/limits".into()
            }
        );
        assert_eq!(
            StoreUrl::parse("zookeeper://h:2181/").unwrap(),
            StoreUrl::ZooKeeper {
                hosts: vec!["h:2181".into()],
                root: "/clusterlimit".into()
            }
        );
        for bad in [
            "zk://",
            "zk://h",
            "zk://h:2181/a//b",
            "zk://h:2181/a/../b",
            "zk://h:2181/zookeeper",
            "zk://h:2181/a\nb",
            "",
            "etcd://",
            "etcd://h",
            "etcd://h:0",
            "etcd://h:99999",
            "etcd://h:1,/p",
            "redis://h:1",
            "etcd://h:1/a\nb",
            "etcd://a b:1",
        ] {
            assert!(
                matches!(StoreUrl::parse(bad), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
    }
}

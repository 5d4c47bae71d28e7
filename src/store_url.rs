//! Parsing of store URLs: `memory://NAME`, `etcd://host:port,host:port/prefix`.

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
}

impl StoreUrl {
    /// Parses a store URL; every mistake is an `InvalidArgument` naming it.
    pub fn parse(url: &str) -> Result<StoreUrl> {
        let (scheme, rest) = url.split_once("://").ok_or_else(|| {
            Error::invalid(format!(
                "store URL {url:?} has no scheme; use memory://NAME or etcd://HOST:PORT[,HOST:PORT]/PREFIX"
            ))
        })?;
        match scheme {
            "memory" | "mem" => {
                let name = rest.trim_matches('/');
                let name = if name.is_empty() { "default" } else { name };
                Ok(StoreUrl::Memory { name: name.to_string() })
            }
            "etcd" | "etcd+http" => {
                let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
                let endpoints = hosts
                    .split(',')
                    .map(|h| endpoint(url, h.trim()))
                    .collect::<Result<Vec<_>>>()?;
                let prefix = path.trim_matches('/');
                if prefix.chars().any(|c| c.is_control() || c == '?' || c == '#') {
                    return Err(Error::invalid(format!("store URL {url:?}: bad key prefix {prefix:?}")));
                }
                let prefix = if prefix.is_empty() { "clusterlimit" } else { prefix };
                Ok(StoreUrl::Etcd { endpoints, prefix: prefix.to_string() })
            }
            "zk" | "zookeeper" => Err(Error::invalid(format!(
                "store URL {url:?}: the ZooKeeper backend is not built yet; use etcd:// or memory://"
            ))),
            other => Err(Error::invalid(format!(
                "store URL {url:?}: unknown scheme {other:?}; use memory:// or etcd://"
            ))),
        }
    }
}

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
    Ok(format!("http://{host}"))
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
        for bad in [
            "",
            "etcd://",
            "etcd://h",
            "etcd://h:0",
            "etcd://h:99999",
            "etcd://h:1,/p",
            "redis://h:1",
            "zk://h:2181",
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

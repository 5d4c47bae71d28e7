//! Before a first connect: is anything listening at the store's addresses? A refused
//! connection or an unknown host name is then reported at once, in words, instead of after the
//! client's retries run out (etcd-client and zookeeper-client both retry such failures for
//! seconds and then report them as a timeout or "no available hosts").
//!
//! Only a certain refusal fails: one address that accepts, or does not answer within the
//! bound (a hung or firewalled host, which the client's own timeouts then govern), lets the
//! connect go on. One TCP connection per address, closed at once; nothing is sent.

use crate::error::{Error, Result};
use std::time::Duration;
use tokio::net::TcpStream;

/// How long one address may take to accept or refuse before it counts as "may answer".
const PROBE_TIMEOUT: Duration = Duration::from_millis(300);

/// Why one address cannot be reached, in words.
enum Unreachable {
    /// The host name does not resolve.
    UnknownHost(String),
    /// The host answered that nothing listens on the port.
    Refused(String),
    /// Another immediate failure (no route to the host, …).
    Other(String),
}

/// Probes every `HOST:PORT` of `addrs` at once; fails only when each one is certainly
/// unreachable. `store` names the store in the message ("etcd", "ZooKeeper").
pub(crate) async fn any_reachable(store: &str, addrs: &[String]) -> Result<()> {
    let probes = addrs.iter().map(|a| probe(a));
    let mut failures = Vec::new();
    for outcome in futures::future::join_all(probes).await {
        match outcome {
            None => return Ok(()),
            Some(why) => failures.push(why),
        }
    }
    if failures.is_empty() {
        return Ok(());
    }
    Err(Error::store(describe(store, &failures)))
}

/// `None` if `addr` accepted or did not answer within [`PROBE_TIMEOUT`].
async fn probe(addr: &str) -> Option<Unreachable> {
    let attempt = async {
        let resolved: Vec<_> = match tokio::net::lookup_host(addr).await {
            Ok(found) => found.collect(),
            Err(_) => return Some(Unreachable::UnknownHost(addr.to_string())),
        };
        let mut last = None;
        for ip in resolved {
            match TcpStream::connect(ip).await {
                Ok(_) => return None,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    last = Some(Unreachable::Refused(addr.to_string()));
                }
                Err(e) => last = Some(Unreachable::Other(format!("{addr} ({e})"))),
            }
        }
        Some(last.unwrap_or_else(|| Unreachable::UnknownHost(addr.to_string())))
    };
    tokio::time::timeout(PROBE_TIMEOUT, attempt)
        .await
        .unwrap_or(None)
}

fn describe(store: &str, failures: &[Unreachable]) -> String {
    let mut refused = Vec::new();
    let mut unknown = Vec::new();
    let mut other = Vec::new();
    for f in failures {
        match f {
            Unreachable::Refused(a) => refused.push(a.as_str()),
            Unreachable::UnknownHost(a) => unknown.push(a.as_str()),
            Unreachable::Other(a) => other.push(a.as_str()),
        }
    }
    let mut parts = Vec::new();
    if !refused.is_empty() {
        parts.push(format!(
            "nothing listens at {} (connection refused)",
            refused.join(", ")
        ));
    }
    if !unknown.is_empty() {
        parts.push(format!("unknown host {}", unknown.join(", ")));
    }
    if !other.is_empty() {
        parts.push(format!("cannot reach {}", other.join(", ")));
    }
    format!(
        "{store} is not reachable: {}; check that {store} runs there and the store URL",
        parts.join("; ")
    )
}

/// `HOST:PORT` of an endpoint URL such as `http://10.0.0.1:2379` (scheme and path dropped).
pub(crate) fn host_port(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_port_and_an_unknown_host_fail_in_words() {
        // A port just freed: nothing listens there.
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = free.local_addr().unwrap().to_string();
        drop(free);
        let e = any_reachable("etcd", &[addr.clone(), "nonexistent.invalid:2379".into()])
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("nothing listens at {addr}")), "{e}");
        assert!(e.contains("unknown host nonexistent.invalid:2379"), "{e}");
    }

    #[tokio::test]
    async fn one_listening_address_is_enough() {
        let open = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed = free.local_addr().unwrap().to_string();
        drop(free);
        let addrs = [closed, open.local_addr().unwrap().to_string()];
        any_reachable("ZooKeeper", &addrs).await.unwrap();
    }

    #[test]
    fn host_port_drops_scheme_and_path() {
        assert_eq!(host_port("http://10.0.0.1:2379"), "10.0.0.1:2379");
        assert_eq!(host_port("https://[::1]:2379/x"), "[::1]:2379");
        assert_eq!(host_port("h:2181"), "h:2181");
    }
}

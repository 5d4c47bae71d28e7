//! Where a store URL points: its `HOST:PORT` endpoints, each checked where the URL is parsed
//! (a malformed endpoint is bad input with its reason, not a store error from the client
//! later), and the key prefix after them.

use crate::error::{Error, Result};

/// `HOST:PORT[,HOST:PORT]/PATH` → the endpoints, each checked, and the path after them.
pub(super) fn hosts_and_path<'a>(url: &str, rest: &'a str) -> Result<(Vec<String>, &'a str)> {
    let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
    let hosts = hosts
        .split(',')
        .map(|h| endpoint(url, h.trim()))
        .collect::<Result<Vec<_>>>()?;
    Ok((hosts, path))
}

/// The key prefix a `path` gives, without slashes at either end (`clusterlimit` when empty);
/// a character of it that is `refused` makes it bad, with `rules` in the message.
pub(super) fn key_prefix(
    url: &str,
    path: &str,
    refused: impl Fn(char) -> bool,
    rules: &str,
) -> Result<String> {
    let prefix = path.trim_matches('/');
    if prefix.chars().any(refused) {
        return Err(Error::invalid(format!(
            "store URL {url}: bad key prefix {prefix:?}{rules}"
        )));
    }
    let prefix = if prefix.is_empty() {
        "clusterlimit"
    } else {
        prefix
    };
    Ok(prefix.to_string())
}

/// Checks one `HOST:PORT` of a URL and returns it unchanged: a host name or IPv4 address, or
/// an IPv6 address in brackets (`[::1]:2379`), then a port from 1 to 65535. Refused here, a
/// malformed endpoint is bad input with its reason, not a store error from the client later.
fn endpoint(url: &str, host: &str) -> Result<String> {
    // A `user:password@` part is not shown (the URL itself is already redacted).
    let shown = match host.rsplit_once('@') {
        Some((_, after)) => format!("***@{after}"),
        None => host.to_string(),
    };
    let bad = |why: &str| {
        Error::invalid(format!(
            "store URL {url}: {shown:?} is not HOST:PORT ({why})"
        ))
    };
    if host.is_empty() {
        return Err(bad("empty; endpoints are separated by single commas"));
    }
    let (h, port) = split_host_port(host).map_err(|why| bad(&why))?;
    match port.parse::<u16>() {
        Ok(p) if p > 0 => {}
        _ if port.is_empty() => return Err(bad("no port after the colon")),
        _ => {
            return Err(bad(&format!(
                "port {port:?} is not a number from 1 to 65535"
            )))
        }
    }
    if h.is_empty() {
        return Err(bad("no host before the port"));
    }
    Ok(host.to_string())
}

/// `[v6]:port` or `name:port` split at the port's colon; the reason otherwise.
fn split_host_port(host: &str) -> std::result::Result<(&str, &str), String> {
    if let Some(rest) = host.strip_prefix('[') {
        let (addr, after) = rest
            .split_once(']')
            .ok_or("an IPv6 address is closed by ']'")?;
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("{addr:?} is not an IPv6 address"));
        }
        let port = after
            .strip_prefix(':')
            .ok_or("a port follows the ']' after a colon")?;
        return Ok((addr, port));
    }
    let (h, port) = host.rsplit_once(':').ok_or("no port")?;
    if h.contains(':') {
        return Err(
            "one colon, before the port; put an IPv6 address in brackets: [ADDRESS]:PORT".into(),
        );
    }
    if let Some(c) = h
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
    {
        return Err(format!("{c:?} cannot be in a host name"));
    }
    Ok((h, port))
}

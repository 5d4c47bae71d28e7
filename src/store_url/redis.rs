//! `redis://HOST:PORT/PREFIX`, `redis+sentinel://S1:P1,S2:P2/SERVICE/PREFIX` and
//! `redis+cluster://N1:P1,N2:P2/PREFIX` (`rediss…://` for TLS), with `user=`,
//! `password_file=` and `wait_replicas=`.

use super::address::{hosts_and_path, key_prefix};
use super::parsed::{RedisMode, StoreUrl};
use super::parts::UrlParts;
use super::security::RedisUser;
use super::settings::Settings;
use crate::error::{Error, Result};

/// The rest of a `redis…://` URL (see [`StoreUrl::Redis`]); its `url` is already redacted.
pub(super) fn parse(parts: UrlParts<'_>) -> Result<StoreUrl> {
    let (url, scheme, mut settings) = (parts.url, parts.scheme, parts.settings);
    let secure = scheme.starts_with("rediss");
    let (hosts, path) = hosts_and_path(url, parts.rest)?;
    let (mode, path) = mode(url, scheme, hosts, path)?;
    let tls = settings.tls(secure, "rediss://")?;
    let wait_replicas = wait_replicas(url, &mode, &mut settings)?;
    let name = settings.take("user")?.map(str::to_string);
    let password_file = settings.take_path("password_file")?;
    let user = (name.is_some() || password_file.is_some()).then_some(RedisUser {
        name,
        password_file,
    });
    settings.finish("cacert, cert, key (rediss://), user, password_file")?;
    Ok(StoreUrl::Redis {
        mode,
        prefix: key_prefix(url, path, refused_in_prefix, " (no spaces, braces, ? or #)")?,
        tls,
        user,
        wait_replicas,
    })
}

/// How the servers are reached, from the scheme (`+sentinel`, `+cluster`, or one server), and
/// the path left for the prefix (a sentinel URL's path starts with the service's name).
fn mode<'a>(
    url: &str,
    scheme: &str,
    hosts: Vec<String>,
    path: &'a str,
) -> Result<(RedisMode, &'a str)> {
    if scheme.ends_with("+sentinel") {
        let (service, prefix) = path.split_once('/').unwrap_or((path, ""));
        if service.is_empty() || service.chars().any(|c| c.is_control() || c == ' ') {
            return Err(Error::invalid(format!(
                "store URL {url}: name the primary the sentinels monitor after the hosts: {scheme}://HOST:PORT[,HOST:PORT]/SERVICE[/PREFIX]"
            )));
        }
        let mode = RedisMode::Sentinel {
            sentinels: hosts,
            service: service.to_string(),
        };
        Ok((mode, prefix))
    } else if scheme.ends_with("+cluster") {
        Ok((RedisMode::Cluster { seeds: hosts }, path))
    } else {
        let [host] = <[String; 1]>::try_from(hosts).map_err(|_| {
            Error::invalid(format!(
                "store URL {url}: {scheme}:// takes one server; for several use redis+cluster:// (a Redis Cluster's seed nodes) or redis+sentinel:// (sentinels)"
            ))
        })?;
        Ok((RedisMode::Single { host }, path))
    }
}

/// `wait_replicas=N` (0 to 16; 0 when not given), refused for a Redis Cluster.
fn wait_replicas(url: &str, mode: &RedisMode, settings: &mut Settings<'_>) -> Result<u32> {
    let wait_replicas = match settings.take("wait_replicas")? {
        None => 0,
        Some(n) => n.parse::<u32>().ok().filter(|n| *n <= 16).ok_or_else(|| {
            Error::invalid(format!(
                "store URL {url}: wait_replicas={n:?} is not a number of replicas from 0 to 16"
            ))
        })?,
    };
    if wait_replicas > 0 && matches!(mode, RedisMode::Cluster { .. }) {
        return Err(Error::invalid(format!(
            "store URL {url}: wait_replicas= is for redis:// and redis+sentinel:// (a Redis Cluster's replicas are not waited for yet)"
        )));
    }
    Ok(wait_replicas)
}

/// What a Redis key prefix may not hold: it goes inside every key, next to the hash tags'
/// braces.
fn refused_in_prefix(c: char) -> bool {
    c.is_control() || c.is_whitespace() || matches!(c, '?' | '#' | '{' | '}')
}

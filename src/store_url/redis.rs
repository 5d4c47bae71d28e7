//! `redis://`, `rediss://`, `redis+sentinel://` and `redis+cluster://` URLs.

use super::settings::Settings;
use super::{endpoint, RedisMode, RedisUser, StoreUrl};
use crate::error::{Error, Result};

/// The rest of a `redis…://` URL (see [`StoreUrl::Redis`]); `url` is already redacted.
pub(super) fn parse_redis(
    url: &str,
    scheme: &str,
    rest: &str,
    mut settings: Settings<'_>,
) -> Result<StoreUrl> {
    let secure = scheme.starts_with("rediss");
    let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
    let hosts = hosts
        .split(',')
        .map(|h| endpoint(url, h.trim()))
        .collect::<Result<Vec<_>>>()?;
    let (mode, path) = if scheme.ends_with("+sentinel") {
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
        (mode, prefix)
    } else if scheme.ends_with("+cluster") {
        (RedisMode::Cluster { seeds: hosts }, path)
    } else {
        let [host] = <[String; 1]>::try_from(hosts).map_err(|_| {
            Error::invalid(format!(
                "store URL {url}: {scheme}:// takes one server; for several use redis+cluster:// (a Redis Cluster's seed nodes) or redis+sentinel:// (sentinels)"
            ))
        })?;
        (RedisMode::Single { host }, path)
    };
    let tls = settings.tls(secure, "rediss://")?;
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
    let name = settings.take("user")?.map(str::to_string);
    let password_file = settings.take_path("password_file")?;
    let user = (name.is_some() || password_file.is_some()).then_some(RedisUser {
        name,
        password_file,
    });
    settings.finish("cacert, cert, key (rediss://), user, password_file")?;
    let prefix = path.trim_matches('/');
    if prefix
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || matches!(c, '?' | '#' | '{' | '}'))
    {
        return Err(Error::invalid(format!(
            "store URL {url}: bad key prefix {prefix:?} (no spaces, braces, ? or #)"
        )));
    }
    let prefix = if prefix.is_empty() {
        "clusterlimit"
    } else {
        prefix
    };
    Ok(StoreUrl::Redis {
        mode,
        prefix: prefix.to_string(),
        tls,
        user,
        wait_replicas,
    })
}

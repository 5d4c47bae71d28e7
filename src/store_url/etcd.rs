//! `etcd://HOST:PORT[,HOST:PORT]/PREFIX` (and `etcds://` for TLS), with `user=` and
//! `password_file=` for etcd's authentication.

use super::address::{hosts_and_path, key_prefix};
use super::parsed::StoreUrl;
use super::parts::UrlParts;
use super::security::EtcdUser;
use super::settings::Settings;
use crate::error::{Error, Result};

/// The rest of an `etcd…://` URL (see [`StoreUrl::Etcd`]); its `url` is already redacted.
pub(super) fn parse(parts: UrlParts<'_>) -> Result<StoreUrl> {
    let (url, scheme, mut settings) = (parts.url, parts.scheme, parts.settings);
    let secure = matches!(scheme, "etcds" | "etcd+https");
    let http = if secure { "https" } else { "http" };
    let (hosts, path) = hosts_and_path(url, parts.rest)?;
    let endpoints = hosts.iter().map(|hp| format!("{http}://{hp}")).collect();
    let tls = settings.tls(secure, "etcds://")?;
    let user = user(url, &mut settings)?;
    settings.finish("cacert, cert, key, user, password_file")?;
    Ok(StoreUrl::Etcd {
        endpoints,
        prefix: key_prefix(url, path, |c| c.is_control() || c == '?' || c == '#', "")?,
        tls,
        user,
    })
}

/// `user=NAME` with an optional `password_file=PATH` (which needs the user).
fn user(url: &str, settings: &mut Settings<'_>) -> Result<Option<EtcdUser>> {
    let user = settings.take("user")?.map(str::to_string);
    let password_file = settings.take_path("password_file")?;
    match (user, password_file) {
        (Some(name), password_file) => Ok(Some(EtcdUser {
            name,
            password_file,
        })),
        (None, Some(_)) => Err(Error::invalid(format!(
            "store URL {url}: password_file= needs user="
        ))),
        (None, None) => Ok(None),
    }
}

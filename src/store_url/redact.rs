//! Redaction: a store URL as messages show it, credential-like values and any
//! `user:password@` part replaced by `***`. Every message about a URL goes through [`redact`].

use super::parsed::SHARD_SEPARATOR;

/// `url` with the values of credential-like settings (`password`, `secret`, `token`, `digest`
/// that are not `…_file` paths) and any `user:password@` part replaced by `***`: for messages.
pub fn redact(url: &str) -> String {
    if url.contains(SHARD_SEPARATOR) {
        return url
            .split(SHARD_SEPARATOR)
            .map(|p| redact_one(p.trim()))
            .collect::<Vec<_>>()
            .join(";");
    }
    redact_one(url)
}

fn redact_one(url: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (url, None),
    };
    let head = match head.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((_, after)) => format!("{scheme}://***@{after}"),
            None => head.to_string(),
        },
        None => head.to_string(),
    };
    let Some(query) = query else { return head };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if is_secret_key(k) => format!("{k}=***"),
            _ => pair.to_string(),
        })
        .collect();
    format!("{head}?{}", pairs.join("&"))
}

/// Whether a setting's value is a secret: a name like `password` or `token`, not a `…_file`
/// path.
pub(super) fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    !k.ends_with("_file")
        && ["password", "passwd", "secret", "token", "digest", "auth"]
            .iter()
            .any(|s| k.contains(s))
}

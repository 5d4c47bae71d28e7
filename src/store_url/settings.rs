//! The `?key=value&…` settings of a store URL: parsed once, each taken by the scheme that
//! knows it, the rest refused by name ([`Settings::finish`]).

use super::redact::{is_secret_key, redact};
use super::security::TlsFiles;
use crate::error::{Error, Result};
use std::path::PathBuf;

/// The `?key=value&…` settings of a URL, each used at most once; what is left over when the
/// scheme has taken its own is an error naming it.
pub(super) struct Settings<'a> {
    url: &'a str,
    pairs: Vec<(&'a str, &'a str)>,
}

impl<'a> Settings<'a> {
    pub(super) fn parse(url: &'a str, query: Option<&'a str>) -> Result<Settings<'a>> {
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').ok_or_else(|| {
                Error::invalid(format!(
                    "store URL {}: setting {k:?} has no value (use KEY=VALUE)",
                    redact(url),
                    k = pair
                ))
            })?;
            if pairs.iter().any(|(seen, _)| *seen == k) {
                return Err(Error::invalid(format!(
                    "store URL {}: setting {k:?} given twice",
                    redact(url)
                )));
            }
            pairs.push((k, v));
        }
        Ok(Settings { url, pairs })
    }

    /// Takes the value of `key`, if given; an empty value is an error.
    pub(super) fn take(&mut self, key: &str) -> Result<Option<&'a str>> {
        let Some(i) = self.pairs.iter().position(|(k, _)| *k == key) else {
            return Ok(None);
        };
        let (_, v) = self.pairs.remove(i);
        if v.is_empty() {
            return Err(Error::invalid(format!(
                "store URL {}: setting {key:?} is empty",
                redact(self.url)
            )));
        }
        Ok(Some(v))
    }

    /// Takes the path that `key` gives, if given.
    pub(super) fn take_path(&mut self, key: &str) -> Result<Option<PathBuf>> {
        Ok(self.take(key)?.map(PathBuf::from))
    }

    /// The TLS settings `cacert`, `cert`, `key`: `Some` for a TLS scheme (each optional), an
    /// error if given to a plain-text one (named `tls_scheme` in the message).
    pub(super) fn tls(&mut self, secure: bool, tls_scheme: &str) -> Result<Option<TlsFiles>> {
        let tls = TlsFiles {
            ca_cert: self.take_path("cacert")?,
            cert: self.take_path("cert")?,
            key: self.take_path("key")?,
        };
        let url = redact(self.url);
        if !secure && tls != TlsFiles::default() {
            return Err(Error::invalid(format!(
                "store URL {url}: cacert, cert and key are TLS settings; use {tls_scheme}"
            )));
        }
        if tls.cert.is_some() != tls.key.is_some() {
            return Err(Error::invalid(format!(
                "store URL {url}: a client certificate needs both cert= and key="
            )));
        }
        Ok(secure.then_some(tls))
    }

    /// Fails on any setting not taken, naming it (and how secrets are passed, if it is one).
    pub(super) fn finish(self, known: &str) -> Result<()> {
        match self.pairs.first() {
            None => Ok(()),
            Some((k, _)) if is_secret_key(k) => Err(Error::invalid(format!(
                "store URL {}: secrets are never put in a URL; give {k}_file=PATH (a file holding it) or the environment variable instead",
                redact(self.url)
            ))),
            Some((k, _)) => Err(Error::invalid(format!(
                "store URL {}: unknown setting {k:?} (known: {known})",
                redact(self.url)
            ))),
        }
    }
}

//! Which key a request is counted under: a closure over the request, or one of the helpers
//! here ([`header`], [`peer_ip`]).
//!
//! A key function returns anything [`IntoKey`]: a `String`, an `Option<String>` (`None`: the
//! request has no key) or a `Result<String, E>` (`Err`: no key, and why). What a request
//! without a key gets is the layer's
//! [`on_missing_key`](super::ClusterRateLimitLayer::on_missing_key) choice.
//!
//! ```
//! use clusterlimit::tower::key;
//! use http::Request;
//! // Per API key, from a header:
//! let by_api_key = key::header("x-api-key");
//! // Per tenant, from the path (`/t/{tenant}/...`): a closure over the request.
//! let by_tenant = |req: &Request<String>| {
//!     req.uri().path().strip_prefix("/t/")?.split('/').next().map(str::to_string)
//! };
//! # let _ = (by_api_key, by_tenant);
//! ```

use http::header::HeaderName;
use std::net::SocketAddr;

/// Why a request has no key (shown to the client in a 400 answer, so it never holds the key's
/// secret parts: it says what was missing, not what was sent).
pub type MissingReason = String;

/// What a key function may return.
pub trait IntoKey {
    /// The key, or why there is none.
    fn into_key(self) -> Result<String, MissingReason>;
}

impl IntoKey for String {
    fn into_key(self) -> Result<String, MissingReason> {
        Ok(self)
    }
}

impl IntoKey for Option<String> {
    fn into_key(self) -> Result<String, MissingReason> {
        self.ok_or_else(|| "the request has no rate-limit key".to_string())
    }
}

impl<E: std::fmt::Display> IntoKey for Result<String, E> {
    fn into_key(self) -> Result<String, MissingReason> {
        self.map_err(|e| e.to_string())
    }
}

/// Finds the key of a request of type `Req`. Implemented for every `Fn(&Req) -> impl IntoKey`
/// and for the helpers of this module.
pub trait KeyFn<Req> {
    /// The key of `req`, or why it has none.
    fn key(&self, req: &Req) -> Result<String, MissingReason>;
}

impl<F, Req, O> KeyFn<Req> for F
where
    F: Fn(&Req) -> O,
    O: IntoKey,
{
    fn key(&self, req: &Req) -> Result<String, MissingReason> {
        self(req).into_key()
    }
}

/// The key is the value of one request header (its first value if sent more than once); a
/// request without it, or with a value that is not visible ASCII, has no key. Made by [`header`].
#[derive(Debug, Clone)]
pub struct Header {
    /// The parsed name, or why the given name is not one.
    name: Result<HeaderName, String>,
}

/// The key is the value of the header `name` (case-insensitive), e.g. `x-api-key`.
///
/// A name that is not a valid header name gives every request no key (with a reason saying
/// so), rather than a panic.
///
/// ```
/// use clusterlimit::tower::key::{self, KeyFn};
/// let k = key::header("X-Api-Key");
/// let req = http::Request::builder().header("x-api-key", "team-7").body(()).unwrap();
/// assert_eq!(k.key(&req).unwrap(), "team-7");
/// assert!(k.key(&http::Request::new(())).is_err());
/// ```
pub fn header(name: &str) -> Header {
    let name = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("{name:?} is not a valid header name"));
    Header { name }
}

impl<B> KeyFn<http::Request<B>> for Header {
    fn key(&self, req: &http::Request<B>) -> Result<String, MissingReason> {
        let name = self.name.as_ref().map_err(Clone::clone)?;
        let value = req
            .headers()
            .get(name)
            .ok_or_else(|| format!("header {name} is missing"))?;
        match value.to_str() {
            Ok(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
            Ok(_) => Err(format!("header {name} is empty")),
            Err(_) => Err(format!("header {name} is not visible ASCII")),
        }
    }
}

/// The key is the IP address of the client's connection. Made by [`peer_ip`].
#[derive(Debug, Clone, Copy, Default)]
pub struct PeerIp;

/// The key is the peer's IP address (IPv4-mapped IPv6 addresses as IPv4), read from the
/// request's extensions:
///
/// * axum's `ConnectInfo<SocketAddr>` (serve with `into_make_service_with_connect_info::<SocketAddr>()`;
///   needs this crate's `axum` feature, on by default), or
/// * a plain [`SocketAddr`], for hyper / tower servers: insert it per connection
///   (`req.extensions_mut().insert(peer)`).
///
/// Neither present: no key. Behind a proxy every request comes from the proxy's address; use
/// a header the proxy sets (e.g. [`header("x-real-ip")`](header)) there instead.
///
/// ```
/// use clusterlimit::tower::key::{self, KeyFn};
/// use std::net::SocketAddr;
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert("10.1.2.3:5555".parse::<SocketAddr>().unwrap());
/// assert_eq!(key::peer_ip().key(&req).unwrap(), "10.1.2.3");
/// ```
pub fn peer_ip() -> PeerIp {
    PeerIp
}

impl<B> KeyFn<http::Request<B>> for PeerIp {
    fn key(&self, req: &http::Request<B>) -> Result<String, MissingReason> {
        peer_addr(req.extensions())
            .map(|addr| addr.ip().to_canonical().to_string())
            .ok_or_else(|| "the peer address is not known".to_string())
    }
}

fn peer_addr(ext: &http::Extensions) -> Option<SocketAddr> {
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(addr)) =
        ext.get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(*addr);
    }
    ext.get::<SocketAddr>().copied()
}

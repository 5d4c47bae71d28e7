//! Which key a request is counted under: a closure over the request, or one of the helpers
//! here ([`header`], [`peer_ip`]).
//!
//! A key function returns anything [`IntoKey`]: a `String`, an `Option<String>` (`None`: the
//! request has no key) or a `Result<String, E>` (`Err`: no key, and why). What a request
//! without a key gets is the layer's
//! [`on_missing_key`](super::ClusterRateLimitLayer::on_missing_key) choice.
//!
//! **Keys are stored as they are**: in etcd key names and ZooKeeper znode paths, where anyone
//! who can read the store (or its logs and backups) sees them. A key that is a secret, such as
//! an API key, should be hashed first: [`Header::hashed`], or a hash in your own closure.
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
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

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

/// The key is the value of one request header (its first value if sent more than once), or
/// its hash ([`hashed`](Self::hashed)); a request without it, or with a value that is not
/// visible ASCII, has no key. Made by [`header`].
#[derive(Debug, Clone)]
pub struct Header {
    /// The parsed name, or why the given name is not one.
    name: Result<HeaderName, String>,
    hashed: bool,
}

/// The key is the value of the header `name` (case-insensitive), e.g. `x-api-key`, stored as
/// it is (see [`hashed`](Header::hashed) for a secret).
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
    Header {
        name,
        hashed: false,
    }
}

impl Header {
    /// The key is `sha256:` and the hex SHA-256 of the value, so the store (its key names,
    /// logs, backups) never holds the value itself: for a secret such as an API key. Equal
    /// values still share a quota. The hash is not salted: it hides a random secret, not a
    /// value that can be guessed and hashed in turn (an e-mail address, a user id).
    ///
    /// ```
    /// use clusterlimit::tower::key::{self, KeyFn};
    /// let k = key::header("x-api-key").hashed();
    /// let req = http::Request::builder().header("x-api-key", "secret-7").body(()).unwrap();
    /// let stored = k.key(&req).unwrap();
    /// assert!(stored.starts_with("sha256:") && !stored.contains("secret-7"));
    /// assert_eq!(stored.len(), "sha256:".len() + 64);
    /// ```
    pub fn hashed(mut self) -> Self {
        self.hashed = true;
        self
    }
}

impl<B> KeyFn<http::Request<B>> for Header {
    fn key(&self, req: &http::Request<B>) -> Result<String, MissingReason> {
        let name = self.name.as_ref().map_err(Clone::clone)?;
        let value = req
            .headers()
            .get(name)
            .ok_or_else(|| format!("header {name} is missing"))?;
        match value.to_str().map(str::trim) {
            Ok("") => Err(format!("header {name} is empty")),
            Ok(v) if self.hashed => Ok(sha256_key(v)),
            Ok(v) => Ok(v.to_string()),
            Err(_) => Err(format!("header {name} is not visible ASCII")),
        }
    }
}

/// `sha256:` and the lower-case hex digest of `value`.
fn sha256_key(value: &str) -> String {
    use std::fmt::Write;
    let digest = ring::digest::digest(&ring::digest::SHA256, value.as_bytes());
    let mut key = String::with_capacity(7 + 64);
    key.push_str("sha256:");
    for byte in digest.as_ref() {
        // Writing to a String cannot fail.
        let _ = write!(key, "{byte:02x}");
    }
    key
}

/// The key is the IP address of the client's connection (an IPv6 address cut to its
/// network prefix, /64 by default). Made by [`peer_ip`].
#[derive(Debug, Clone, Copy)]
pub struct PeerIp {
    ipv6_prefix: u8,
}

/// Default [`PeerIp::ipv6_prefix`]: a /64, the smallest network a site or a home is given,
/// whose addresses one client can pick freely.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;

impl Default for PeerIp {
    fn default() -> Self {
        PeerIp {
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
        }
    }
}

/// The key is the peer's IP address, read from the request's extensions:
///
/// * axum's `ConnectInfo<SocketAddr>` (serve with `into_make_service_with_connect_info::<SocketAddr>()`;
///   needs this crate's `axum` feature, on by default), or
/// * a plain [`SocketAddr`], for hyper / tower servers: insert it per connection
///   (`req.extensions_mut().insert(peer)`).
///
/// An IPv4 address (or an IPv4-mapped IPv6 one) is the key as it is (`10.1.2.3`). An IPv6
/// address counts as its /64 network (`2001:db8:1:2::/64`): a client given a /64 picks any of
/// its 2^64 addresses, so counting each /128 alone would let it rotate past the limit. Change
/// the prefix with [`PeerIp::ipv6_prefix`] (`128`: each address alone).
///
/// Neither present: no key. Behind a proxy every request comes from the proxy's address; use
/// a header the proxy sets (e.g. [`header("x-real-ip")`](header)) there instead.
///
/// ```
/// use clusterlimit::tower::key::{self, KeyFn};
/// use std::net::SocketAddr;
/// let from = |addr: &str| {
///     let mut req = http::Request::new(());
///     req.extensions_mut().insert(addr.parse::<SocketAddr>().unwrap());
///     req
/// };
/// assert_eq!(key::peer_ip().key(&from("10.1.2.3:5555")).unwrap(), "10.1.2.3");
/// let v6 = from("[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:443");
/// assert_eq!(key::peer_ip().key(&v6).unwrap(), "2001:db8:1:2::/64");
/// assert_eq!(key::peer_ip().ipv6_prefix(48).key(&v6).unwrap(), "2001:db8:1::/48");
/// assert_eq!(
///     key::peer_ip().ipv6_prefix(128).key(&v6).unwrap(),
///     "2001:db8:1:2:aaaa:bbbb:cccc:dddd"
/// );
/// ```
pub fn peer_ip() -> PeerIp {
    PeerIp::default()
}

impl PeerIp {
    /// IPv6 peers are counted per network of this many leading bits (default
    /// [`DEFAULT_IPV6_PREFIX`], 64); `128` counts each address alone. Above 128 is taken as
    /// 128. IPv4 addresses are not affected.
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.ipv6_prefix = bits.min(128);
        self
    }

    fn key_of(&self, ip: IpAddr) -> String {
        match ip.to_canonical() {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) if self.ipv6_prefix >= 128 => v6.to_string(),
            IpAddr::V6(v6) => {
                let bits = u32::from(self.ipv6_prefix);
                // `checked_shl` is None for a shift of 128 (a /0): no bits kept.
                let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
                let network = Ipv6Addr::from(u128::from(v6) & mask);
                format!("{network}/{bits}")
            }
        }
    }
}

impl<B> KeyFn<http::Request<B>> for PeerIp {
    fn key(&self, req: &http::Request<B>) -> Result<String, MissingReason> {
        peer_addr(req.extensions())
            .map(|addr| self.key_of(addr.ip()))
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

//! Which RateLimit header fields an answer carries: one setting of both surfaces, the HTTP
//! API's `rate_limit_headers` and the RLS's `rls_response_headers`. Each surface reads its own
//! words ([`HeaderMode::parse_http`], [`HeaderMode::parse_rls`]) and has its own default.

use std::fmt;

/// Which family of RateLimit header fields an answer carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderMode {
    /// None (a denial of the HTTP API still carries `Retry-After`; behind the RLS, Envoy's
    /// `enable_x_ratelimit_headers` can make its own from the statuses).
    Off,
    /// The IETF draft's `RateLimit-Policy` and `RateLimit` fields.
    Ietf,
    /// The fields each surface sent before the IETF draft: on the HTTP API `X-RateLimit-Limit`,
    /// `-Remaining`, `-Reset`; on the RLS envoyproxy's own (`LIMIT_RESPONSE_HEADERS_ENABLED`)
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`.
    Legacy,
    /// Both `Ietf` and `Legacy` (the HTTP API only).
    Both,
}

impl HeaderMode {
    /// The HTTP API's default (`rate_limit_headers`).
    pub const HTTP_DEFAULT: HeaderMode = HeaderMode::Ietf;
    /// The RLS's default (`rls_response_headers`).
    pub const RLS_DEFAULT: HeaderMode = HeaderMode::Off;

    /// `rate_limit_headers` (HTTP API): ietf, legacy, both or off.
    pub fn parse_http(s: &str) -> Result<HeaderMode, String> {
        match s {
            "ietf" => Ok(HeaderMode::Ietf),
            "legacy" => Ok(HeaderMode::Legacy),
            "both" => Ok(HeaderMode::Both),
            "off" => Ok(HeaderMode::Off),
            _ => Err(format!("expected ietf, legacy, both or off, got {s:?}")),
        }
    }

    /// `rls_response_headers` (RLS): off, ietf or legacy.
    pub fn parse_rls(s: &str) -> Result<HeaderMode, String> {
        match s {
            "off" => Ok(HeaderMode::Off),
            "ietf" => Ok(HeaderMode::Ietf),
            "legacy" => Ok(HeaderMode::Legacy),
            _ => Err(format!("must be off, ietf or legacy, got {s:?}")),
        }
    }
}

impl fmt::Display for HeaderMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HeaderMode::Off => "off",
            HeaderMode::Ietf => "ietf",
            HeaderMode::Legacy => "legacy",
            HeaderMode::Both => "both",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::HeaderMode;

    #[test]
    fn each_surface_reads_its_own_words() {
        for m in ["ietf", "legacy", "both", "off"] {
            assert_eq!(HeaderMode::parse_http(m).unwrap().to_string(), m);
        }
        assert!(HeaderMode::parse_http("IETF").is_err());
        for m in ["off", "ietf", "legacy"] {
            assert_eq!(HeaderMode::parse_rls(m).unwrap().to_string(), m);
        }
        assert_eq!(HeaderMode::parse_rls("ietf"), Ok(HeaderMode::Ietf));
        assert!(HeaderMode::parse_rls("x").is_err());
        assert!(HeaderMode::parse_rls("both").is_err());
    }
}

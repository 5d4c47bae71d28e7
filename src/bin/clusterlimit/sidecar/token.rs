//! The sidecar's bearer token (`token_file`), read once and compared in constant time; the
//! HTTP API (`auth.rs`), the web view and the RLS's gRPC calls all check it.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// The sidecar's bearer token. Its `Debug` never shows it.
#[derive(Clone)]
pub struct Token(Arc<[u8]>);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(***)")
    }
}

impl Token {
    /// A token of these bytes (a web view login's CSRF value, tests).
    pub fn from_bytes(bytes: &[u8]) -> Token {
        Token(bytes.into())
    }

    /// Reads the token from `path`: trailing whitespace (the file's newline) is dropped; an
    /// empty token, or one that cannot travel in a header, is an error. The message names
    /// the file, never its content.
    pub fn read(path: &Path) -> Result<Token, String> {
        let text = std::fs::read(path)
            .map_err(|e| format!("token_file {}: cannot read it: {e}", path.display()))?;
        let end = text
            .iter()
            .rposition(|b| !b.is_ascii_whitespace())
            .map_or(0, |i| i + 1);
        let token = &text[..end];
        if token.is_empty() {
            return Err(format!("token_file {} is empty", path.display()));
        }
        // RFC 6750 token68 characters are all visible ASCII: anything else could never match.
        if !token.iter().all(u8::is_ascii_graphic) {
            return Err(format!(
                "token_file {}: the token must be visible ASCII characters (no spaces)",
                path.display()
            ));
        }
        Ok(Token(token.into()))
    }

    /// Whether `presented` is the token, in time that does not depend on where they differ
    /// (only on the configured token's length).
    pub fn matches(&self, presented: &[u8]) -> bool {
        let mut diff = u8::from(presented.len() != self.0.len());
        for (i, want) in self.0.iter().enumerate() {
            diff |= want ^ presented.get(i).copied().unwrap_or(0);
        }
        std::hint::black_box(diff) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(s: &str) -> Token {
        Token::from_bytes(s.as_bytes())
    }

    #[test]
    fn matches_only_the_exact_token() {
        let t = token("s3cret");
        assert!(t.matches(b"s3cret"));
        for wrong in [&b""[..], b"s3cre", b"s3cret!", b"S3cret", b"s3cret\0"] {
            assert!(!t.matches(wrong), "{wrong:?}");
        }
    }

    #[test]
    fn read_trims_the_newline_and_refuses_empty_files() {
        let dir = std::env::temp_dir().join(format!("cl-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ok = dir.join("ok");
        std::fs::write(&ok, "abc123\n").unwrap();
        assert!(Token::read(&ok).unwrap().matches(b"abc123"));
        assert_eq!(format!("{:?}", Token::read(&ok).unwrap()), "Token(***)");
        let empty = dir.join("empty");
        std::fs::write(&empty, "\n").unwrap();
        assert!(Token::read(&empty).unwrap_err().contains("is empty"));
        let spaced = dir.join("spaced");
        std::fs::write(&spaced, "a b\n").unwrap();
        let err = Token::read(&spaced).unwrap_err();
        assert!(
            err.contains("visible ASCII") && !err.contains("a b"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

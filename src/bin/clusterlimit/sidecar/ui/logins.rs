//! Logins of the web view: the page trades the sidecar's token for a random session id in a
//! same-site, HTTP-only cookie (so scripts on other sites and in the page cannot read it), and
//! a CSRF value the page keeps in memory and sends in a header with every state-changing call.

use crate::common::lock;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The cookie's name.
pub const COOKIE: &str = "clusterlimit_ui";
/// The header that must carry the CSRF value with a cookie-authenticated change.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// How long a login lasts.
pub const LOGIN_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// Logins kept at most: the oldest goes first.
const MAX_LOGINS: usize = 256;

/// One login.
struct Login {
    csrf: String,
    expires: Instant,
}

/// The logins of one sidecar (in memory: a restart logs everyone out).
#[derive(Default)]
pub struct Logins {
    by_id: Mutex<HashMap<String, Login>>,
}

fn random() -> String {
    uuid::Uuid::new_v4().simple().to_string() + &uuid::Uuid::new_v4().simple().to_string()
}

impl Logins {
    /// A new login: (session id for the cookie, CSRF value for the page).
    pub fn start(&self) -> (String, String) {
        let now = Instant::now();
        let mut by_id = lock(&self.by_id);
        by_id.retain(|_, l| l.expires > now);
        if by_id.len() >= MAX_LOGINS {
            if let Some(oldest) = by_id
                .iter()
                .min_by_key(|(_, l)| l.expires)
                .map(|(k, _)| k.clone())
            {
                by_id.remove(&oldest);
            }
        }
        let (id, csrf) = (random(), random());
        by_id.insert(
            id.clone(),
            Login {
                csrf: csrf.clone(),
                expires: now + LOGIN_LIFETIME,
            },
        );
        (id, csrf)
    }

    /// The CSRF value of a live login `id`.
    pub fn csrf(&self, id: &str) -> Option<String> {
        let by_id = lock(&self.by_id);
        by_id
            .get(id)
            .filter(|l| l.expires > Instant::now())
            .map(|l| l.csrf.clone())
    }

    /// Ends a login.
    pub fn end(&self, id: &str) {
        lock(&self.by_id).remove(id);
    }
}

/// The value of cookie `name` in a `Cookie` header.
pub fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|part| {
        let (k, v) = part.trim().split_once('=')?;
        (k == name).then_some(v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_has_a_csrf_value_until_it_ends() {
        let l = Logins::default();
        let (id, csrf) = l.start();
        assert_ne!(id, csrf);
        assert_eq!(l.csrf(&id), Some(csrf));
        assert_eq!(l.csrf("other"), None);
        l.end(&id);
        assert_eq!(l.csrf(&id), None);
    }

    #[test]
    fn logins_are_bounded() {
        let l = Logins::default();
        let first = l.start().0;
        for _ in 0..MAX_LOGINS {
            l.start();
        }
        assert_eq!(lock(&l.by_id).len(), MAX_LOGINS);
        assert_eq!(l.csrf(&first), None);
    }

    #[test]
    fn cookies_are_found_by_name() {
        let h = "a=1; clusterlimit_ui=abc; b=2";
        assert_eq!(cookie(h, COOKIE), Some("abc"));
        assert_eq!(cookie("clusterlimit_uix=1", COOKIE), None);
    }
}

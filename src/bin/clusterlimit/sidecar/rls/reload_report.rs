//! What a reload of the RLS rules did, or why it kept the rules in force ([`Reloaded`],
//! [`ReloadError`]), and how reloads are reported: the reload metrics and the lines of the
//! health routes ([`ReloadReport`]).

use super::rules::Rules;
use crate::common::lock;
use clusterlimit::Error;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// What `Rls::reload` (`service.rs`) did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reloaded {
    pub domains: usize,
    pub rules: usize,
    /// Rules whose rate limit was opened (new, or counted again).
    pub opened: usize,
    /// Rules whose quota was set to the config's new one (their keys' states carry over).
    pub changed: usize,
    /// Rules that count as before, untouched.
    pub unchanged: usize,
}

/// Why `Rls::reload` (`service.rs`) kept the rules in force.
#[derive(Debug)]
pub enum ReloadError {
    /// The set cannot be served (the message names the file).
    Invalid(String),
    /// The store failed while opening a rule's rate limit: worth trying again.
    Store(Error),
}

/// How one reload came out (the `result` label of the reload counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Invalid,
    StoreError,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Invalid => "invalid",
            Outcome::StoreError => "store_error",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: String,
}

/// Where an invalid set went wrong.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PlaceLabel {
    file: String,
    line: String,
}

/// The last reload as the health routes show it.
#[derive(Debug, Default)]
struct Status {
    /// 0 while the RLS is off; 1 for the set loaded at start, +1 per set put in force.
    generation: u64,
    loaded_at: Option<SystemTime>,
    rules: usize,
    domains: usize,
    /// The last reload tried: when, how, and why not.
    last: Option<(SystemTime, Outcome, Option<String>)>,
}

/// The reload metrics and the last reload's status, shared by the reloader (which writes
/// them) and `/metrics`, `/healthz` and `/readyz` (which show them).
pub struct ReloadReport {
    reloads: Family<ResultLabel, Counter>,
    generation: Gauge,
    loaded_at: Gauge,
    error: Family<PlaceLabel, Gauge>,
    status: Mutex<Status>,
}

impl ReloadReport {
    /// Registers the reload metrics in `registry`.
    pub fn register(registry: &mut Registry) -> ReloadReport {
        let r = ReloadReport {
            reloads: Family::default(),
            generation: Gauge::default(),
            loaded_at: Gauge::default(),
            error: Family::default(),
            status: Mutex::new(Status::default()),
        };
        registry.register(
            "clusterlimit_rls_config_reloads",
            "Reloads of the RLS rules tried, by result: ok, invalid (the old rules stay), \
             store_error (the old rules stay; tried again)",
            r.reloads.clone(),
        );
        registry.register(
            "clusterlimit_rls_config_generation",
            "Generation of the RLS rules in force: 1 for the set loaded at start, +1 per reload \
             put in force (0: no RLS)",
            r.generation.clone(),
        );
        registry.register(
            "clusterlimit_rls_config_loaded_timestamp_seconds",
            "Unix time the RLS rules in force were loaded",
            r.loaded_at.clone(),
        );
        registry.register(
            "clusterlimit_rls_config_error",
            "1 while the last reload of the RLS rules was invalid, labelled with the file and \
             line at fault (line empty when the error has none)",
            r.error.clone(),
        );
        r
    }

    /// The set loaded at start is in force.
    pub(super) fn started(&self, rules: &Rules) {
        let mut st = lock(&self.status);
        st.generation = 1;
        st.loaded_at = Some(SystemTime::now());
        st.rules = rules.all().count();
        st.domains = rules.domains.len();
        self.publish(&st);
    }

    /// A new set is in force.
    pub(super) fn reloaded(&self, done: &Reloaded) {
        let mut st = lock(&self.status);
        st.generation += 1;
        let now = SystemTime::now();
        st.loaded_at = Some(now);
        st.rules = done.rules;
        st.domains = done.domains;
        st.last = Some((now, Outcome::Ok, None));
        self.reloads.get_or_create(&result(Outcome::Ok)).inc();
        self.error.clear();
        self.publish(&st);
    }

    /// A reload failed: the set in force stays.
    pub(super) fn failed(&self, outcome: Outcome, why: &str) {
        let mut st = lock(&self.status);
        st.last = Some((SystemTime::now(), outcome, Some(why.to_string())));
        self.reloads.get_or_create(&result(outcome)).inc();
        self.error.clear();
        if outcome == Outcome::Invalid {
            let (file, line) = place(why);
            self.error.get_or_create(&PlaceLabel { file, line }).set(1);
        }
    }

    fn publish(&self, st: &Status) {
        self.generation
            .set(i64::try_from(st.generation).unwrap_or(i64::MAX));
        let secs = st
            .loaded_at
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        self.loaded_at.set(i64::try_from(secs).unwrap_or(i64::MAX));
    }

    /// Lines for the health routes (none while the RLS is off), each ending in a newline.
    pub fn health_lines(&self) -> String {
        let st = lock(&self.status);
        if st.generation == 0 {
            return String::new();
        }
        let when = |t: SystemTime| humantime::format_rfc3339_seconds(t).to_string();
        let mut out = format!(
            "rls_config: generation {} in force, loaded {} (domains {}, rules {})\n",
            st.generation,
            st.loaded_at.map_or_else(String::new, when),
            st.domains,
            st.rules
        );
        match &st.last {
            None => {}
            Some((at, Outcome::Ok, _)) => {
                out.push_str(&format!("rls_config: last reload ok at {}\n", when(*at)));
            }
            Some((at, outcome, why)) => out.push_str(&format!(
                "rls_config: last reload {} at {}: {}; generation {} stays in force\n",
                outcome.label(),
                when(*at),
                why.as_deref().unwrap_or(""),
                st.generation
            )),
        }
        out
    }
}

fn result(o: Outcome) -> ResultLabel {
    ResultLabel {
        result: o.label().to_string(),
    }
}

/// The file and line an error message starts with: `FILE:LINE: why`, `FILE: why`, or
/// `rls_config FILE: why` (what `Rules::load` and `Rls::reload` (`service.rs`) write).
fn place(why: &str) -> (String, String) {
    let head = why.strip_prefix("rls_config ").unwrap_or(why);
    let head = head.split(": ").next().unwrap_or(head);
    match head.rsplit_once(':') {
        Some((file, line)) if !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit()) => {
            (file.to_string(), line.to_string())
        }
        _ => (head.to_string(), String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn place_of_an_error() {
        assert_eq!(
            place("/etc/rls/web.yaml:7: descriptors[0]: unknown unit"),
            ("/etc/rls/web.yaml".into(), "7".into())
        );
        assert_eq!(
            place("rls_config /etc/rls: No such file or directory (os error 2)"),
            ("/etc/rls".into(), String::new())
        );
        assert_eq!(
            place("/etc/rls/web.yaml: domain \"web\" sets store_down local:3"),
            ("/etc/rls/web.yaml".into(), String::new())
        );
    }
}

//! The RLS rules as a tree: envoyproxy/ratelimit's YAML (`domain`, nested `descriptors` with
//! `key`, `value`, `rate_limit`, `shadow_mode`, `quota_mode`, `share_threshold`,
//! `detailed_metric`, `value_to_metric`, `metadata`), plus our extensions (`algorithm`, `burst`,
//! `reserves`, `charge`, a domain's `store_down` and `class_key`), as domains of levels of rules; and the rate limit each rule counts
//! in. Read from the files by `load.rs` and `parse.rs` (every error names `file:line`), walked
//! by `matcher.rs`.

use clusterlimit::{Algorithm, Quota, StoreDownPolicy};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Longest rate-limit name the store accepts (src/validate.rs).
const MAX_NAME_LEN: usize = clusterlimit::validate::MAX_NAME_LEN;

/// envoyproxy's time units, with its lengths: a month is 30 days, a year 365 (as its
/// `UnitToDivider`), windows aligned to the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    /// Case-insensitive, as envoyproxy (`strings.ToUpper`).
    pub fn parse(text: &str) -> Option<Unit> {
        Some(match text.to_ascii_uppercase().as_str() {
            "SECOND" => Unit::Second,
            "MINUTE" => Unit::Minute,
            "HOUR" => Unit::Hour,
            "DAY" => Unit::Day,
            "WEEK" => Unit::Week,
            "MONTH" => Unit::Month,
            "YEAR" => Unit::Year,
            _ => return None,
        })
    }

    /// The unit's length.
    pub fn period(self) -> Duration {
        const DAY: u64 = 86_400;
        Duration::from_secs(match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3600,
            Unit::Day => DAY,
            Unit::Week => 7 * DAY,
            Unit::Month => 30 * DAY,
            Unit::Year => 365 * DAY,
        })
    }

    /// The name envoyproxy prints.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }
}

/// One `rate_limit` of the config (or of a request's `limit` override).
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// The domain it belongs to.
    pub domain: String,
    /// envoyproxy's key of the rule below the domain: `key_value.key2` (metrics label).
    pub path: String,
    /// The `rate_limit.name` (empty if none): what `replaces` refers to.
    pub name: String,
    pub unit: Unit,
    pub requests_per_unit: u32,
    pub unlimited: bool,
    pub shadow: bool,
    /// envoyproxy's `quota_mode`: over, it says OVER_LIMIT in its own status, but the overall
    /// answer is OVER_LIMIT only when every quota-mode descriptor of the request is over.
    pub quota_mode: bool,
    pub detailed_metric: bool,
    /// Our extension (`charge: true`): a descriptor's hits on this rule are usage already
    /// spent (Envoy's `apply_on_stream_done` call), charged whatever the key holds, into debt
    /// if need be, and answered OK; hits 0 is a peek, over while the key is spent or in debt
    /// (see `plan.rs`).
    pub charge: bool,
    pub replaces: Vec<String>,
    /// How it counts; `None` when nothing is counted (`unlimited`, or `requests_per_unit: 0`,
    /// which envoyproxy answers OVER_LIMIT to every time).
    pub quota: Option<Quota>,
    /// The Limiter's rate limit behind it: a valid, stable name from the domain and path.
    pub limit_name: String,
    /// Where it was declared (`file:line`), for `--check-config`.
    pub origin: String,
}

/// One level of the descriptor tree (envoyproxy's `rateLimitDescriptor`).
#[derive(Debug, Default)]
pub struct Level {
    /// By `key` or `key_value`.
    pub children: HashMap<String, Level>,
    /// The children's keys holding a `*`, in file order (merged files: in load order).
    pub wildcards: Vec<Wildcard>,
    pub rule: Option<Arc<Rule>>,
    /// envoyproxy's `share_threshold`: the values this level's wildcard matches share one
    /// counter (the wildcard stands for the value in the counter key).
    pub share_threshold: bool,
    /// Where it was declared (`file:line`), for errors on merged domains.
    pub origin: String,
    /// The line of the declaration, to report merge clashes in file order.
    pub line: usize,
}

/// A descriptor key with `*` in it (`path_/api/*`, `midWild_bar*b`), split on the `*`s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wildcard {
    /// The whole `key_value`, as the child is stored.
    pub key: String,
    parts: Vec<String>,
}

impl Wildcard {
    /// The pattern of `key` (which holds at least one `*`).
    pub fn new(key: &str) -> Wildcard {
        Wildcard {
            key: key.to_string(),
            parts: key.split('*').map(str::to_string).collect(),
        }
    }

    /// Whether `key_value` matches: each `*` stands for any run of characters, the empty one
    /// too (envoyproxy's `wildcardMatch`, the same steps).
    pub fn matches(&self, key_value: &str) -> bool {
        let parts = &self.parts;
        let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
            return false;
        };
        if parts.len() == 1 {
            return first == key_value;
        }
        if !key_value.starts_with(first.as_str()) || !key_value.ends_with(last.as_str()) {
            return false;
        }
        // The first and last parts must not overlap in the value.
        let fixed: usize = parts.iter().map(String::len).sum();
        if key_value.len() < fixed {
            return false;
        }
        let mut rest = &key_value[first.len()..key_value.len() - last.len()];
        for part in &parts[1..parts.len() - 1] {
            match rest.find(part.as_str()) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

/// A domain's rules.
#[derive(Debug)]
pub struct Domain {
    pub name: String,
    /// The files that declare it (several when merged), in load order.
    pub files: Vec<PathBuf>,
    /// The line of its `domain` key in the first file.
    pub line: usize,
    /// Our extension: this domain's answer while the store is down (else the global one).
    pub store_down: Option<StoreDownPolicy>,
    /// Our extension: the descriptor entry key whose value names a descriptor's priority
    /// class (the entry is taken out before matching); `None`: no classes.
    pub class_key: Option<String>,
    pub root: Level,
    /// Every rule, in file order (for the summary and start-up).
    pub rules: Vec<Arc<Rule>>,
}

/// How [`Rules::load`] treats several files naming one domain.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Loading {
    /// Merge them (envoyproxy's `MERGE_DOMAIN_CONFIG`, off by default as there).
    pub merge_domains: bool,
}

/// Every loaded domain.
#[derive(Debug, Default)]
pub struct Rules {
    pub domains: BTreeMap<String, Domain>,
}

impl Rules {
    /// Every rule of every domain.
    pub fn all(&self) -> impl Iterator<Item = &Arc<Rule>> {
        self.domains.values().flat_map(|d| d.rules.iter())
    }

    /// One line per domain and rule, as `serve --check-config` prints them.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for d in self.domains.values() {
            let mut policy = d
                .store_down
                .map_or(String::new(), |p| format!(", store_down {p}"));
            if let Some(k) = &d.class_key {
                policy.push_str(&format!(", class_key {k:?}"));
            }
            let files: Vec<String> = d.files.iter().map(|f| f.display().to_string()).collect();
            out.push_str(&format!(
                "rls domain   {} ({} rules, {}{policy})\n",
                d.name,
                d.rules.len(),
                files.join(" + ")
            ));
            for r in &d.rules {
                out.push_str(&format!(
                    "rls rule     {}.{}: {}\n",
                    d.name,
                    r.path,
                    r.summary()
                ));
            }
        }
        out
    }
}

impl Rule {
    /// `10 per minute (fixed_window), shadow` etc.
    pub fn summary(&self) -> String {
        let mut s = if self.unlimited {
            "unlimited".to_string()
        } else {
            let algorithm = self
                .quota
                .map_or("always over".to_string(), |q| match q.algorithm {
                    Algorithm::Gcra => format!("gcra, burst {}", q.burst),
                    a => a.to_string(),
                });
            format!(
                "{} per {} ({algorithm})",
                self.requests_per_unit,
                self.unit.name()
            )
        };
        if let Some(q) = self.quota.filter(|q| !q.reserves.is_empty()) {
            s.push_str(&format!(", reserves {}", q.reserves));
        }
        if !self.name.is_empty() {
            s.push_str(&format!(", name {:?}", self.name));
        }
        if !self.replaces.is_empty() {
            s.push_str(&format!(", replaces {:?}", self.replaces));
        }
        if self.shadow {
            s.push_str(", shadow_mode");
        }
        if self.quota_mode {
            s.push_str(", quota_mode");
        }
        if self.charge {
            s.push_str(", charge");
        }
        s.push_str(&format!(" [{}]", self.origin));
        s
    }
}

/// The rate limit behind a rule: `rls.DOMAIN.PATH`, when that is a valid name; else the
/// valid characters of it, shortened, and a hash of the whole (stable across processes, so
/// every sidecar of the cluster counts in the same limit).
pub fn limit_name(domain: &str, path: &str) -> String {
    let raw = format!("rls.{domain}.{path}");
    if clusterlimit::validate::name(&raw).is_ok() {
        return raw;
    }
    let cleaned: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    prefix_and_hash(&cleaned, &raw, MAX_NAME_LEN, '-')
}

/// At most `max` bytes: the longest prefix of `kept` that leaves room, `sep`, and the
/// 16-hex-digit hash of `whole` (so two long values that share the prefix stay apart).
pub fn prefix_and_hash(kept: &str, whole: &str, max: usize, sep: char) -> String {
    let mut cut = max.saturating_sub(17).min(kept.len());
    while !kept.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{sep}{:016x}", &kept[..cut], fnv1a(whole.as_bytes()))
}

/// FNV-1a, 64 bits: a stable hash (std's `DefaultHasher` may change between releases).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

//! The RLS rules: envoyproxy/ratelimit's YAML (`domain`, nested `descriptors` with `key`,
//! `value`, `rate_limit`, `shadow_mode`, `quota_mode`, `share_threshold`, `detailed_metric`,
//! `value_to_metric`, `metadata`) loaded as is, plus our extensions (`algorithm`, `burst`, a
//! domain's `store_down`). Every error names `file:line`.

use super::yaml::{self, Node, Value};
use clusterlimit::{Algorithm, Quota, StoreDownPolicy};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
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
    line: usize,
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
    /// Loads and validates a whole rule set: `paths` in order, a directory's `*.yaml` and
    /// `*.yml` files sorted by name. Two files naming one domain are an error naming both,
    /// unless `how.merge_domains` (envoyproxy's `MERGE_DOMAIN_CONFIG`): then the later file's
    /// descriptors join the domain, a descriptor declared twice an error.
    pub fn load(paths: &[PathBuf], how: Loading) -> Result<Rules, String> {
        let mut rules = Rules::default();
        for path in paths {
            for file in expand(path)? {
                let text = std::fs::read_to_string(&file)
                    .map_err(|e| format!("rls_config {}: cannot read it: {e}", file.display()))?;
                let domain = parse_file(&file, &text)?;
                match rules.domains.get_mut(&domain.name) {
                    None => {
                        rules.domains.insert(domain.name.clone(), domain);
                    }
                    Some(other) if !how.merge_domains => {
                        return Err(format!(
                            "{}:{}: duplicate domain {:?}: {} declares it too. Put its \
                             descriptors in one file, or merge the files with \
                             rls_merge_domain_config = true (--rls-merge-domain-config, as \
                             envoyproxy's MERGE_DOMAIN_CONFIG)",
                            file.display(),
                            domain.line,
                            domain.name,
                            other
                                .files
                                .first()
                                .map_or(String::new(), |f| f.display().to_string()),
                        ));
                    }
                    Some(other) => other.merge(domain)?,
                }
            }
        }
        Ok(rules)
    }

    /// Every rule of every domain.
    pub fn all(&self) -> impl Iterator<Item = &Arc<Rule>> {
        self.domains.values().flat_map(|d| d.rules.iter())
    }

    /// One line per domain and rule, as `serve --check-config` prints them.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for d in self.domains.values() {
            let policy = d
                .store_down
                .map_or(String::new(), |p| format!(", store_down {p}"));
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
        s.push_str(&format!(" [{}]", self.origin));
        s
    }
}

impl Domain {
    /// Adds `other`'s descriptors (the same domain from a later file), as envoyproxy patches a
    /// domain: its top-level keys must be new; its wildcards come after ours.
    fn merge(&mut self, other: Domain) -> Result<(), String> {
        let file = other.files.first().cloned().unwrap_or_default();
        match (self.store_down, other.store_down) {
            (Some(a), Some(b)) if a != b => {
                return Err(format!(
                    "{}:{}: store_down {b} for domain {:?}, but {} gives it {a}: give it once",
                    file.display(),
                    other.line,
                    self.name,
                    self.files
                        .first()
                        .map_or(String::new(), |f| f.display().to_string()),
                ))
            }
            (None, b) => self.store_down = b,
            _ => {}
        }
        let mut children: Vec<(String, Level)> = other.root.children.into_iter().collect();
        children.sort_by_key(|(_, l)| l.line);
        for (key, child) in children {
            if let Some(mine) = self.root.children.get(&key) {
                return Err(format!(
                    "{}: duplicate descriptor composite key {}.{key} (also at {}): merged \
                     files must not declare one descriptor twice",
                    child.origin, self.name, mine.origin
                ));
            }
            self.root.children.insert(key, child);
        }
        self.root.wildcards.extend(other.root.wildcards);
        self.rules.extend(other.rules);
        self.files.push(file);
        Ok(())
    }
}

/// The files a `--rls-config` path stands for.
fn expand(path: &Path) -> Result<Vec<PathBuf>, String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("rls_config {}: {e}", path.display()))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries =
        std::fs::read_dir(path).map_err(|e| format!("rls_config {}: {e}", path.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let p = entry
            .map_err(|e| format!("rls_config {}: {e}", path.display()))?
            .path();
        let yaml = matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"));
        if yaml && p.is_file() {
            files.push(p);
        }
    }
    if files.is_empty() {
        // Most likely a wrong directory: serving no rules would admit everything silently.
        return Err(format!(
            "rls_config {}: the directory has no *.yaml or *.yml file",
            path.display()
        ));
    }
    files.sort();
    Ok(files)
}

/// The context of errors: the file.
struct Ctx<'a> {
    file: &'a Path,
}

impl Ctx<'_> {
    fn err(&self, line: usize, why: impl std::fmt::Display) -> String {
        format!("{}:{line}: {why}", self.file.display())
    }

    fn map<'n>(&self, node: &'n Node, what: &str) -> Result<&'n [(Node, Node)], String> {
        match &node.value {
            Value::Map(pairs) => Ok(pairs),
            v => Err(self.err(
                node.line,
                format!("{what} must be a mapping, got {}", v.kind()),
            )),
        }
    }

    /// The mapping's keys as text, each checked against `allowed` and for duplicates.
    fn fields<'n>(
        &self,
        node: &'n Node,
        what: &str,
        allowed: &[&str],
    ) -> Result<Vec<(&'n str, &'n Node, usize)>, String> {
        let mut out: Vec<(&str, &Node, usize)> = Vec::new();
        for (k, v) in self.map(node, what)? {
            let Value::Scalar { text, .. } = &k.value else {
                return Err(self.err(k.line, format!("{what}: keys must be strings")));
            };
            if !allowed.contains(&text.as_str()) {
                return Err(self.err(
                    k.line,
                    format!(
                        "unknown key {text:?} in {what} (allowed: {})",
                        allowed.join(", ")
                    ),
                ));
            }
            if out.iter().any(|(seen, _, _)| *seen == text) {
                return Err(self.err(k.line, format!("key {text:?} given twice in {what}")));
            }
            out.push((text, v, k.line));
        }
        Ok(out)
    }

    fn string(&self, node: &Node, what: &str) -> Result<String, String> {
        match &node.value {
            Value::Scalar { text, .. } => Ok(text.clone()),
            Value::Null => Ok(String::new()),
            v => Err(self.err(
                node.line,
                format!("{what} must be a string, got {}", v.kind()),
            )),
        }
    }

    fn bool(&self, node: &Node, what: &str) -> Result<bool, String> {
        match &node.value {
            Value::Scalar {
                text,
                quoted: false,
            } => match text.as_str() {
                "true" | "True" | "TRUE" => Ok(true),
                "false" | "False" | "FALSE" => Ok(false),
                _ => Err(self.err(
                    node.line,
                    format!("{what} must be true or false, got {text:?}"),
                )),
            },
            Value::Null => Ok(false),
            v => Err(self.err(
                node.line,
                format!("{what} must be true or false, got {}", v.kind()),
            )),
        }
    }

    fn number<T: std::str::FromStr>(
        &self,
        node: &Node,
        what: &str,
        range: &str,
    ) -> Result<T, String> {
        match &node.value {
            Value::Scalar {
                text,
                quoted: false,
            } => text.parse().map_err(|_| {
                self.err(
                    node.line,
                    format!("{what} must be a whole number {range}, got {text:?}"),
                )
            }),
            Value::Scalar { text, .. } => Err(self.err(
                node.line,
                format!("{what} must be a number, got the string {text:?}"),
            )),
            v => Err(self.err(
                node.line,
                format!("{what} must be a number, got {}", v.kind()),
            )),
        }
    }

    fn list<'n>(&self, node: &'n Node, what: &str) -> Result<&'n [Node], String> {
        match &node.value {
            Value::Seq(items) => Ok(items),
            Value::Null => Ok(&[]),
            v => Err(self.err(
                node.line,
                format!("{what} must be a list, got {}", v.kind()),
            )),
        }
    }
}

/// Parses one file into its domain.
pub fn parse_file(file: &Path, text: &str) -> Result<Domain, String> {
    let cx = Ctx { file };
    let doc = yaml::parse(text).map_err(|(line, why)| cx.err(line, format!("bad YAML: {why}")))?;
    if doc.value == Value::Null {
        return Err(cx.err(1, "empty file: a config needs a domain"));
    }
    let fields = cx.fields(&doc, "the file", &["domain", "descriptors", "store_down"])?;
    let mut name = None;
    let mut store_down = None;
    let mut descriptors: &[Node] = &[];
    for (key, v, _) in fields {
        match key {
            "domain" => name = Some((cx.string(v, "domain")?, v.line)),
            "store_down" => {
                let text = cx.string(v, "store_down")?;
                store_down = Some(
                    text.parse::<StoreDownPolicy>()
                        .map_err(|e| cx.err(v.line, format!("store_down: {e}")))?,
                );
            }
            _ => descriptors = cx.list(v, "descriptors")?,
        }
    }
    let (name, line) = match name {
        Some((n, line)) if !n.is_empty() => (n, line),
        Some((_, line)) => return Err(cx.err(line, "domain must not be empty")),
        None => {
            return Err(cx.err(
                doc.line,
                "config file cannot have an empty domain (no domain key)",
            ))
        }
    };
    let mut domain = Domain {
        name,
        files: vec![file.to_path_buf()],
        line,
        store_down,
        root: Level::default(),
        rules: Vec::new(),
    };
    let mut rules = Vec::new();
    load_level(
        &cx,
        &domain.name,
        &mut domain.root,
        "",
        descriptors,
        &mut rules,
        0,
    )?;
    domain.rules = rules;
    Ok(domain)
}

/// Deepest nesting of descriptors (the walk is recursive; a request has as many entries).
const MAX_DEPTH: usize = 64;

const DESCRIPTOR_KEYS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "quota_mode",
    "share_threshold",
    "detailed_metric",
    "value_to_metric",
    "metadata",
    "algorithm",
    "burst",
];
const RATE_LIMIT_KEYS: &[&str] = &["unit", "requests_per_unit", "unlimited", "name", "replaces"];

/// envoyproxy's `loadDescriptors`: one level of descriptors into `level`.
fn load_level(
    cx: &Ctx<'_>,
    domain: &str,
    level: &mut Level,
    parent: &str,
    descriptors: &[Node],
    rules: &mut Vec<Arc<Rule>>,
    depth: usize,
) -> Result<(), String> {
    if depth >= MAX_DEPTH {
        let line = descriptors.first().map_or(1, |d| d.line);
        return Err(cx.err(
            line,
            format!("descriptors nest deeper than {MAX_DEPTH} levels"),
        ));
    }
    for d in descriptors {
        let fields = cx.fields(d, "a descriptor", DESCRIPTOR_KEYS)?;
        let get = |k: &str| {
            fields
                .iter()
                .find(|(n, _, _)| *n == k)
                .map(|(_, v, l)| (*v, *l))
        };
        let key = match get("key") {
            Some((v, _)) => cx.string(v, "key")?,
            None => String::new(),
        };
        if key.is_empty() {
            return Err(cx.err(d.line, "descriptor has an empty key"));
        }
        let value = match get("value") {
            Some((v, _)) => cx.string(v, "value")?,
            None => String::new(),
        };
        let final_key = if value.is_empty() {
            key.clone()
        } else {
            format!("{key}_{value}")
        };
        let path = format!("{parent}{final_key}");
        if level.children.contains_key(&final_key) {
            return Err(cx.err(
                d.line,
                format!("duplicate descriptor composite key {domain}.{path}"),
            ));
        }
        let shadow = match get("shadow_mode") {
            Some((v, _)) => cx.bool(v, "shadow_mode")?,
            None => false,
        };
        let quota_mode = match get("quota_mode") {
            Some((v, _)) => cx.bool(v, "quota_mode")?,
            None => false,
        };
        let detailed_metric = match get("detailed_metric") {
            Some((v, _)) => cx.bool(v, "detailed_metric")?,
            None => false,
        };
        // Loaded for compatibility; it only shapes envoyproxy's statsd names (see
        // docs/envoy-ratelimit-parity.md).
        if let Some((v, _)) = get("value_to_metric") {
            cx.bool(v, "value_to_metric")?;
        }
        // Only sent in envoyproxy's dynamic metadata, which we do not produce.
        if let Some((v, _)) = get("metadata") {
            if !matches!(v.value, Value::Map(_) | Value::Null) {
                return Err(cx.err(
                    v.line,
                    format!("metadata must be a mapping, got {}", v.value.kind()),
                ));
            }
        }
        let share_threshold = match get("share_threshold") {
            Some((v, line)) => {
                let on = cx.bool(v, "share_threshold")?;
                if on && !final_key.contains('*') {
                    return Err(cx.err(
                        line,
                        format!(
                            "share_threshold applies to wildcard values (with a '*') only, \
                             but the descriptor's key is {final_key:?}: add a '*' to the value \
                             or drop share_threshold"
                        ),
                    ));
                }
                on
            }
            None => false,
        };
        let algorithm = match get("algorithm") {
            Some((v, line)) => Some((parse_algorithm(cx, v)?, line)),
            None => None,
        };
        let burst = match get("burst") {
            Some((v, line)) => Some((cx.number::<u64>(v, "burst", "(1 or more)")?, line)),
            None => None,
        };
        let mut child = Level {
            share_threshold,
            origin: format!("{}:{}", cx.file.display(), d.line),
            line: d.line,
            ..Level::default()
        };
        match get("rate_limit") {
            Some((rl, line)) => {
                let at = Declared { node: rl, line };
                let rule = parse_rule(
                    cx,
                    domain,
                    &path,
                    at,
                    shadow,
                    quota_mode,
                    detailed_metric,
                    algorithm,
                    burst,
                )?;
                let rule = Arc::new(rule);
                rules.push(rule.clone());
                child.rule = Some(rule);
            }
            None => {
                if let Some((_, line)) = algorithm.or(burst.map(|(_, l)| (Algorithm::Gcra, l))) {
                    return Err(cx.err(
                        line,
                        "algorithm and burst apply to a descriptor with a rate_limit",
                    ));
                }
            }
        }
        if let Some((v, _)) = get("descriptors") {
            let inner = cx.list(v, "descriptors")?;
            load_level(
                cx,
                domain,
                &mut child,
                &format!("{path}."),
                inner,
                rules,
                depth + 1,
            )?;
        }
        // envoyproxy: a `*` anywhere in `key_value` makes it a wildcard.
        if final_key.contains('*') {
            level.wildcards.push(Wildcard::new(&final_key));
        }
        level.children.insert(final_key, child);
    }
    Ok(())
}

fn parse_algorithm(cx: &Ctx<'_>, v: &Node) -> Result<Algorithm, String> {
    match cx.string(v, "algorithm")?.as_str() {
        "fixed_window" => Ok(Algorithm::FixedWindow),
        "gcra" => Ok(Algorithm::Gcra),
        "sliding_window" => Ok(Algorithm::SlidingWindow),
        other => Err(cx.err(
            v.line,
            format!("algorithm must be fixed_window, gcra or sliding_window, got {other:?}"),
        )),
    }
}

/// A `rate_limit` mapping and the line of its key.
struct Declared<'n> {
    node: &'n Node,
    line: usize,
}

#[allow(clippy::too_many_arguments)]
fn parse_rule(
    cx: &Ctx<'_>,
    domain: &str,
    path: &str,
    at: Declared<'_>,
    shadow: bool,
    quota_mode: bool,
    detailed_metric: bool,
    algorithm: Option<(Algorithm, usize)>,
    burst: Option<(u64, usize)>,
) -> Result<Rule, String> {
    let node = at.node;
    let fields = cx.fields(node, "rate_limit", RATE_LIMIT_KEYS)?;
    let get = |k: &str| {
        fields
            .iter()
            .find(|(n, _, _)| *n == k)
            .map(|(_, v, l)| (*v, *l))
    };
    let unlimited = match get("unlimited") {
        Some((v, _)) => cx.bool(v, "unlimited")?,
        None => false,
    };
    let name = match get("name") {
        Some((v, _)) => cx.string(v, "name")?,
        None => String::new(),
    };
    let mut replaces = Vec::new();
    if let Some((v, _)) = get("replaces") {
        for r in cx.list(v, "replaces")? {
            let f = cx.fields(r, "a replaces entry", &["name"])?;
            let n = match f.first() {
                Some((_, v, _)) => cx.string(v, "replaces name")?,
                None => String::new(),
            };
            if n.is_empty() {
                return Err(cx.err(r.line, "should not have an empty replaces entry"));
            }
            if n == name {
                return Err(cx.err(
                    r.line,
                    "replaces should not contain the name of the same descriptor",
                ));
            }
            replaces.push(n);
        }
    }
    let unit = get("unit");
    let rpu = get("requests_per_unit");
    let origin = format!("{}:{}", cx.file.display(), at.line);
    let limit_name = limit_name(domain, path);
    if unlimited {
        if let Some((_, line)) = unit.or(rpu) {
            return Err(cx.err(line, "unlimited: true takes no unit or requests_per_unit"));
        }
        if let Some((_, line)) = algorithm
            .map(|(_, l)| ((), l))
            .or(burst.map(|(_, l)| ((), l)))
        {
            return Err(cx.err(line, "unlimited: true takes no algorithm or burst"));
        }
        return Ok(Rule {
            domain: domain.to_string(),
            path: path.to_string(),
            name,
            unit: Unit::Second,
            requests_per_unit: 0,
            unlimited,
            shadow,
            quota_mode,
            detailed_metric,
            replaces,
            quota: None,
            limit_name,
            origin,
        });
    }
    let unit = match unit {
        Some((v, _)) => {
            let text = cx.string(v, "unit")?;
            Unit::parse(&text).ok_or_else(|| {
                cx.err(
                    v.line,
                    format!(
                        "invalid rate limit unit {text:?} (second, minute, hour, day, week, month or year)"
                    ),
                )
            })?
        }
        None => return Err(cx.err(at.line, "rate_limit needs a unit (or unlimited: true)")),
    };
    let requests_per_unit = match rpu {
        Some((v, _)) => cx.number::<u32>(v, "requests_per_unit", "(0 to 4294967295)")?,
        None => 0,
    };
    let algorithm_used = algorithm.map_or(Algorithm::FixedWindow, |(a, _)| a);
    if let Some((_, line)) = burst {
        if algorithm_used != Algorithm::Gcra {
            return Err(cx.err(line, "burst applies to algorithm: gcra only"));
        }
    }
    let quota = if requests_per_unit == 0 {
        None
    } else {
        let mut q =
            Quota::new(u64::from(requests_per_unit), unit.period()).algorithm(algorithm_used);
        if let Some((b, _)) = burst {
            q = q.burst(b);
        }
        q.validate()
            .map_err(|e| cx.err(burst.map_or(at.line, |(_, l)| l), e.to_string()))?;
        Some(q)
    };
    Ok(Rule {
        domain: domain.to_string(),
        path: path.to_string(),
        name,
        unit,
        requests_per_unit,
        unlimited,
        shadow,
        quota_mode,
        detailed_metric,
        replaces,
        quota,
        limit_name,
        origin,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Domain, String> {
        parse_file(Path::new("t.yaml"), text)
    }

    #[test]
    fn loads_envoyproxy_config_as_is() {
        let d = load(
            "domain: mongo_cps\n\
             descriptors:\n\
             \x20 - key: database\n\
             \x20   value: users\n\
             \x20   rate_limit:\n\
             \x20     unit: second\n\
             \x20     requests_per_unit: 500\n\
             \x20 - key: database\n\
             \x20   value: default\n\
             \x20   shadow_mode: true\n\
             \x20   rate_limit:\n\
             \x20     unit: MINUTE\n\
             \x20     requests_per_unit: 5\n\
             \x20     name: db\n\
             \x20 - key: remote_address\n\
             \x20   rate_limit: {unlimited: true}\n\
             \x20 - key: user\n\
             \x20   algorithm: gcra\n\
             \x20   burst: 3\n\
             \x20   rate_limit: {unit: hour, requests_per_unit: 10, replaces: [{name: db}]}\n\
             \x20   descriptors:\n\
             \x20     - key: path\n\
             \x20       value: /api*\n\
             \x20       rate_limit: {unit: month, requests_per_unit: 0}\n",
        )
        .unwrap();
        assert_eq!(d.name, "mongo_cps");
        assert_eq!(d.rules.len(), 5);
        let users = d.root.children["database_users"].rule.clone().unwrap();
        assert_eq!(
            users.quota,
            Some(Quota::new(500, Duration::from_secs(1)).algorithm(Algorithm::FixedWindow))
        );
        assert_eq!(users.limit_name, "rls.mongo_cps.database_users");
        assert_eq!(users.origin, "t.yaml:5", "the rate_limit key's line");
        let db = d.root.children["database_default"].rule.clone().unwrap();
        assert!(db.shadow);
        assert_eq!((db.unit, db.name.as_str()), (Unit::Minute, "db"));
        assert!(
            d.root.children["remote_address"]
                .rule
                .as_ref()
                .unwrap()
                .unlimited
        );
        let user = &d.root.children["user"];
        let q = user.rule.as_ref().unwrap().quota.unwrap();
        assert_eq!(
            (q.algorithm, q.burst, q.period),
            (Algorithm::Gcra, 3, Duration::from_secs(3600))
        );
        assert_eq!(user.rule.as_ref().unwrap().replaces, vec!["db".to_string()]);
        assert_eq!(user.wildcards, vec![Wildcard::new("path_/api*")]);
        let path = user.children["path_/api*"].rule.clone().unwrap();
        assert_eq!(path.quota, None, "requests_per_unit 0: always over");
        assert_eq!(path.unit.period(), Duration::from_secs(30 * 86_400));
        assert!(
            clusterlimit::validate::name(&path.limit_name).is_ok(),
            "{}",
            path.limit_name
        );
        assert_eq!(
            path.limit_name,
            limit_name("mongo_cps", "user.path_/api*"),
            "stable"
        );
    }

    #[test]
    fn errors_name_the_line() {
        for (text, line, why) in [
            ("domain: a\nfoo: 1\n", 2, "unknown key \"foo\""),
            ("descriptors: []\n", 1, "empty domain"),
            ("domain: ''\n", 1, "must not be empty"),
            ("", 1, "empty file"),
            ("domain: a\ndescriptors:\n  - value: x\n", 3, "empty key"),
            ("domain: a\ndescriptors:\n  - key: k\n  - key: k\n", 4, "duplicate descriptor composite key a.k"),
            ("domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n", 5, "invalid rate limit unit"),
            ("domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: second\n", 6, "takes no unit"),
            ("domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      requests_per_unit: 3\n", 6, "takes no unit"),
            ("domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 3\n", 4, "needs a unit"),
            ("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n", 4, "whole number"),
            ("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, colour: red}\n", 4, "unknown key \"colour\""),
            ("domain: a\ndescriptors:\n  - key: k\n    burst: 2\n    rate_limit: {unit: second, requests_per_unit: 1}\n", 4, "gcra only"),
            ("domain: a\ndescriptors:\n  - key: k\n    algorithm: leaky\n", 4, "algorithm must be"),
            ("domain: a\ndescriptors:\n  - key: k\n    algorithm: gcra\n", 4, "apply to a descriptor with a rate_limit"),
            ("domain: a\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n", 4, "true or false"),
            ("domain: a\ndescriptors:\n  - key: k\n    quota_mode: maybe\n", 4, "quota_mode must be true or false"),
            ("domain: a\ndescriptors:\n  - key: k\n    value_to_metric: 1\n", 4, "value_to_metric must be true or false"),
            ("domain: a\ndescriptors:\n  - key: k\n    metadata: [x]\n", 4, "metadata must be a mapping, got a list"),
            ("domain: a\ndescriptors:\n  - key: k\n    share_threshold: true\n", 4, "share_threshold applies to wildcard values"),
            ("domain: a\ndescriptors:\n  - key: k*\n    share_threshold: yes\n", 4, "share_threshold must be true or false"),
            ("domain: a\nstore_down: sometimes\n", 2, "store_down"),
            ("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}]}\n", 4, "same descriptor"),
            ("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n", 4, "empty replaces"),
            ("domain: a\ndomain: b\n", 2, "given twice"),
            ("domain: [a\n", 2, "bad YAML"),
            ("- a\n", 1, "must be a mapping"),
        ] {
            let e = load(text).unwrap_err();
            assert!(e.starts_with(&format!("t.yaml:{line}: ")), "{text:?}: {e}");
            assert!(e.contains(why), "{text:?}: {e}");
        }
    }

    #[test]
    fn nesting_is_bounded() {
        let mut text = String::from("domain: a\ndescriptors:\n");
        for i in 0..70 {
            let pad = "  ".repeat(2 * i + 1);
            text.push_str(&format!("{pad}- key: k{i}\n{pad}  descriptors:\n"));
        }
        let e = load(&text).unwrap_err();
        assert!(e.contains("nest deeper than 64"), "{e}");
    }

    #[test]
    fn names_are_valid_and_distinct() {
        let a = limit_name("d", "k_a b");
        let b = limit_name("d", "k_a/b");
        assert_ne!(a, b);
        let long = limit_name("d", &"x".repeat(300));
        for n in [&a, &b, &long] {
            clusterlimit::validate::name(n).unwrap();
        }
    }
}

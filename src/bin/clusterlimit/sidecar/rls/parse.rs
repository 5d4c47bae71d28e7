//! One file of RLS rules: envoyproxy/ratelimit's YAML read into its [`Domain`] of the rule
//! tree (`rules.rs`), every error naming `file:line`.

use super::rules::{limit_name, Domain, Level, Rule, Unit, Wildcard};
use super::yaml::{self, Node, Value};
use clusterlimit::{Algorithm, Quota, StoreDownPolicy};
use std::path::Path;
use std::sync::Arc;

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

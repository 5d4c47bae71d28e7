//! One file of RLS rules: envoyproxy/ratelimit's YAML read into its [`Domain`] of the rule
//! tree (`rules.rs`), every error naming `file:line`.

use super::parse_classes::{read_class_key, read_reserves};
use super::parse_ctx::Ctx;
use super::rules::{limit_name, Domain, Level, Rule, Unit, Wildcard};
use super::yaml::{self, Node, Value};
use clusterlimit::{Algorithm, Quota, Reserves, StoreDownPolicy};
use std::path::Path;
use std::sync::Arc;

/// Parses one file into its domain.
pub fn parse_file(file: &Path, text: &str) -> Result<Domain, String> {
    let cx = Ctx { file };
    let doc = yaml::parse(text).map_err(|(line, why)| cx.err(line, format!("bad YAML: {why}")))?;
    if doc.value == Value::Null {
        return Err(cx.err(1, "empty file: a config needs a domain"));
    }
    let fields = cx.fields(
        &doc,
        "the file",
        &["domain", "descriptors", "store_down", "class_key"],
    )?;
    let mut name = None;
    let mut store_down = None;
    let mut class_key = None;
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
            "class_key" => class_key = Some(read_class_key(&cx, v)?),
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
        class_key,
        root: Level::default(),
        rules: Vec::new(),
    };
    let mut rules = Vec::new();
    let top = Place {
        domain: &domain.name,
        parent: "",
        depth: 0,
    };
    load_level(&cx, &top, &mut domain.root, descriptors, &mut rules)?;
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
    "reserves",
    "charge",
];
const RATE_LIMIT_KEYS: &[&str] = &["unit", "requests_per_unit", "unlimited", "name", "replaces"];

/// A mapping's fields as read by [`Ctx::fields`]: (key, value, line of the key).
struct Fields<'n>(Vec<(&'n str, &'n Node, usize)>);

impl<'n> Fields<'n> {
    /// Field `k`'s value and the line of its key.
    fn get(&self, k: &str) -> Option<(&'n Node, usize)> {
        self.0
            .iter()
            .find(|(n, _, _)| *n == k)
            .map(|(_, v, l)| (*v, *l))
    }

    /// Field `k` as a boolean, false when absent.
    fn flag(&self, cx: &Ctx<'_>, k: &str) -> Result<bool, String> {
        match self.get(k) {
            Some((v, _)) => cx.bool(v, k),
            None => Ok(false),
        }
    }

    /// Field `k` as a string, empty when absent.
    fn text(&self, cx: &Ctx<'_>, k: &str) -> Result<String, String> {
        match self.get(k) {
            Some((v, _)) => cx.string(v, k),
            None => Ok(String::new()),
        }
    }
}

/// Where a level of descriptors is loaded: its domain, the path above it and its depth.
struct Place<'a> {
    domain: &'a str,
    parent: &'a str,
    depth: usize,
}

/// envoyproxy's `loadDescriptors`: one level of descriptors into `level`.
fn load_level(
    cx: &Ctx<'_>,
    at: &Place<'_>,
    level: &mut Level,
    descriptors: &[Node],
    rules: &mut Vec<Arc<Rule>>,
) -> Result<(), String> {
    if at.depth >= MAX_DEPTH {
        let line = descriptors.first().map_or(1, |d| d.line);
        return Err(cx.err(
            line,
            format!("descriptors nest deeper than {MAX_DEPTH} levels"),
        ));
    }
    for d in descriptors {
        load_descriptor(cx, at, level, d, rules)?;
    }
    Ok(())
}

/// One descriptor (its rule, then its own level below) into `level`.
fn load_descriptor(
    cx: &Ctx<'_>,
    at: &Place<'_>,
    level: &mut Level,
    d: &Node,
    rules: &mut Vec<Arc<Rule>>,
) -> Result<(), String> {
    let fields = Fields(cx.fields(d, "a descriptor", DESCRIPTOR_KEYS)?);
    let final_key = composite_key(cx, d, &fields)?;
    let path = format!("{}{final_key}", at.parent);
    if level.children.contains_key(&final_key) {
        return Err(cx.err(
            d.line,
            format!("duplicate descriptor composite key {}.{path}", at.domain),
        ));
    }
    let settings = rule_settings(cx, &fields, &final_key)?;
    let mut child = Level {
        share_threshold: settings.share_threshold,
        origin: format!("{}:{}", cx.file.display(), d.line),
        line: d.line,
        ..Level::default()
    };
    match fields.get("rate_limit") {
        Some((node, line)) => {
            let declared = Declared { node, line };
            let rule = Arc::new(parse_rule(cx, at.domain, &path, declared, &settings)?);
            rules.push(rule.clone());
            child.rule = Some(rule);
        }
        None => {
            if let Some(line) = settings.tuning_line() {
                return Err(cx.err(
                    line,
                    "algorithm, burst, reserves and charge apply to a descriptor with a \
                     rate_limit",
                ));
            }
        }
    }
    if let Some((v, _)) = fields.get("descriptors") {
        let below = Place {
            domain: at.domain,
            parent: &format!("{path}."),
            depth: at.depth + 1,
        };
        load_level(cx, &below, &mut child, cx.list(v, "descriptors")?, rules)?;
    }
    // envoyproxy: a `*` anywhere in `key_value` makes it a wildcard.
    if final_key.contains('*') {
        level.wildcards.push(Wildcard::new(&final_key));
    }
    level.children.insert(final_key, child);
    Ok(())
}

/// envoyproxy's composite key of a descriptor: `key`, or `key_value` when it has a value.
fn composite_key(cx: &Ctx<'_>, d: &Node, fields: &Fields<'_>) -> Result<String, String> {
    let key = fields.text(cx, "key")?;
    if key.is_empty() {
        return Err(cx.err(d.line, "descriptor has an empty key"));
    }
    let value = fields.text(cx, "value")?;
    Ok(if value.is_empty() {
        key
    } else {
        format!("{key}_{value}")
    })
}

/// A descriptor's settings beside its `rate_limit` mapping (the algorithm and burst with the
/// line of their keys): all shape its rule but `share_threshold`, its level's.
struct RuleSettings {
    shadow: bool,
    quota_mode: bool,
    detailed_metric: bool,
    share_threshold: bool,
    algorithm: Option<(Algorithm, usize)>,
    burst: Option<(u64, usize)>,
    /// Our extension: priority classes and the units each must leave.
    reserves: Option<(Reserves, usize)>,
    /// Our extension: hits are charges of usage already spent (the line of the key when on).
    charge: Option<usize>,
}

impl RuleSettings {
    /// The line of the first of our tuning keys given (algorithm, burst, reserves).
    fn tuning_line(&self) -> Option<usize> {
        let algorithm = self.algorithm.map(|(_, l)| l);
        algorithm
            .or(self.burst.map(|(_, l)| l))
            .or(self.reserves.map(|(_, l)| l))
            .or(self.charge)
    }
}

/// The descriptor's settings (in envoyproxy's order of checks); the fields loaded only for
/// compatibility are checked.
fn rule_settings(
    cx: &Ctx<'_>,
    fields: &Fields<'_>,
    final_key: &str,
) -> Result<RuleSettings, String> {
    let shadow = fields.flag(cx, "shadow_mode")?;
    let quota_mode = fields.flag(cx, "quota_mode")?;
    let detailed_metric = fields.flag(cx, "detailed_metric")?;
    // Loaded for compatibility; it only shapes envoyproxy's statsd names (see
    // docs/envoy-ratelimit-parity.md).
    fields.flag(cx, "value_to_metric")?;
    // Only sent in envoyproxy's dynamic metadata, which we do not produce.
    if let Some((v, _)) = fields.get("metadata") {
        if !matches!(v.value, Value::Map(_) | Value::Null) {
            return Err(cx.err(
                v.line,
                format!("metadata must be a mapping, got {}", v.value.kind()),
            ));
        }
    }
    let share_threshold = share_threshold(cx, fields, final_key)?;
    let algorithm = match fields.get("algorithm") {
        Some((v, line)) => Some((parse_algorithm(cx, v)?, line)),
        None => None,
    };
    let burst = match fields.get("burst") {
        Some((v, line)) => Some((cx.number::<u64>(v, "burst", "(1 or more)")?, line)),
        None => None,
    };
    let reserves = match fields.get("reserves") {
        Some((v, line)) => Some((read_reserves(cx, v)?, line)),
        None => None,
    };
    let charge = match fields.get("charge") {
        Some((v, line)) => cx.bool(v, "charge")?.then_some(line),
        None => None,
    };
    Ok(RuleSettings {
        shadow,
        quota_mode,
        detailed_metric,
        share_threshold,
        algorithm,
        burst,
        reserves,
        charge,
    })
}

/// `share_threshold`, which applies to a wildcard descriptor only.
fn share_threshold(cx: &Ctx<'_>, fields: &Fields<'_>, final_key: &str) -> Result<bool, String> {
    let Some((v, line)) = fields.get("share_threshold") else {
        return Ok(false);
    };
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
    Ok(on)
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

/// A descriptor's rule: its `rate_limit` mapping read with the descriptor's `settings`.
fn parse_rule(
    cx: &Ctx<'_>,
    domain: &str,
    path: &str,
    at: Declared<'_>,
    settings: &RuleSettings,
) -> Result<Rule, String> {
    let fields = Fields(cx.fields(at.node, "rate_limit", RATE_LIMIT_KEYS)?);
    let unlimited = fields.flag(cx, "unlimited")?;
    let name = fields.text(cx, "name")?;
    let replaces = read_replaces(cx, &fields, &name)?;
    let unit = fields.get("unit");
    let rpu = fields.get("requests_per_unit");
    let rule = Rule {
        domain: domain.to_string(),
        path: path.to_string(),
        name,
        unit: Unit::Second,
        requests_per_unit: 0,
        unlimited,
        shadow: settings.shadow,
        quota_mode: settings.quota_mode,
        detailed_metric: settings.detailed_metric,
        charge: settings.charge.is_some(),
        replaces,
        quota: None,
        limit_name: limit_name(domain, path),
        origin: format!("{}:{}", cx.file.display(), at.line),
    };
    if unlimited {
        if let Some((_, line)) = unit.or(rpu) {
            return Err(cx.err(line, "unlimited: true takes no unit or requests_per_unit"));
        }
        if let Some(line) = settings.tuning_line() {
            return Err(cx.err(
                line,
                "unlimited: true takes no algorithm, burst, reserves or charge",
            ));
        }
        return Ok(rule);
    }
    let unit = match unit {
        Some((v, _)) => read_unit(cx, v)?,
        None => return Err(cx.err(at.line, "rate_limit needs a unit (or unlimited: true)")),
    };
    let requests_per_unit = match rpu {
        Some((v, _)) => cx.number::<u32>(v, "requests_per_unit", "(0 to 4294967295)")?,
        None => 0,
    };
    check_charge(cx, requests_per_unit, settings)?;
    Ok(Rule {
        unit,
        requests_per_unit,
        quota: quota_of(cx, at.line, unit, requests_per_unit, settings)?,
        ..rule
    })
}

/// `charge: true` with what contradicts it: a rule of 0 (nothing to charge: every peek is
/// over), `quota_mode` (whose over-limit answers count only together, while a charge is never
/// over) and `reserves` (a charge takes no class: it is usage already spent).
fn check_charge(cx: &Ctx<'_>, requests_per_unit: u32, s: &RuleSettings) -> Result<(), String> {
    let Some(line) = s.charge else {
        return Ok(());
    };
    let clash = if requests_per_unit == 0 {
        "requests_per_unit: 0 (a budget of nothing: every request would be over)"
    } else if s.quota_mode {
        "quota_mode (a charge is never over, so it cannot take part in quota mode's answer)"
    } else if s.reserves.is_some() {
        "reserves (a charge is usage already spent, taken whatever class asked: reserve for \
         classes on a rule without charge)"
    } else {
        return Ok(());
    };
    Err(cx.err(line, format!("charge: true cannot go with {clash}")))
}

/// The `replaces` entries of the rule `name`.
fn read_replaces(cx: &Ctx<'_>, fields: &Fields<'_>, name: &str) -> Result<Vec<String>, String> {
    let mut replaces = Vec::new();
    let Some((v, _)) = fields.get("replaces") else {
        return Ok(replaces);
    };
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
    Ok(replaces)
}

fn read_unit(cx: &Ctx<'_>, v: &Node) -> Result<Unit, String> {
    let text = cx.string(v, "unit")?;
    Unit::parse(&text).ok_or_else(|| {
        cx.err(
            v.line,
            format!(
                "invalid rate limit unit {text:?} (second, minute, hour, day, week, month or year)"
            ),
        )
    })
}

/// How a rule of `requests_per_unit` per `unit` counts (`None`: 0, nothing counted), its
/// algorithm and burst checked; errors at the burst's line, else the rule's (`line`).
fn quota_of(
    cx: &Ctx<'_>,
    line: usize,
    unit: Unit,
    requests_per_unit: u32,
    settings: &RuleSettings,
) -> Result<Option<Quota>, String> {
    let algorithm = settings
        .algorithm
        .map_or(Algorithm::FixedWindow, |(a, _)| a);
    if let Some((_, line)) = settings.burst {
        if algorithm != Algorithm::Gcra {
            return Err(cx.err(line, "burst applies to algorithm: gcra only"));
        }
    }
    if requests_per_unit == 0 {
        if let Some((_, line)) = settings.reserves {
            return Err(cx.err(
                line,
                "reserves apply to a rule that counts (requests_per_unit above 0)",
            ));
        }
        return Ok(None);
    }
    let mut q = Quota::new(u64::from(requests_per_unit), unit.period()).algorithm(algorithm);
    if let Some((b, _)) = settings.burst {
        q = q.burst(b);
    }
    q.validate()
        .map_err(|e| cx.err(settings.burst.map_or(line, |(_, l)| l), e.to_string()))?;
    if let Some((reserves, line)) = settings.reserves {
        q = q.reserves(reserves);
        q.validate()
            .map_err(|e| cx.err(line, format!("reserves: {e}")))?;
    }
    Ok(Some(q))
}

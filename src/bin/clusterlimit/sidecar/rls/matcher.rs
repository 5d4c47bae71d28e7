//! Descriptor → rule, exactly as envoyproxy/ratelimit's `GetLimit`: per entry try
//! `key_value`, then the level's wildcards (a `*` anywhere, each matching any run of
//! characters; the first in file order wins), then `key`; a rule applies only when the
//! request's LAST entry lands on a node with a rate_limit.

use super::rules::{Domain, Level, Rule};
use std::sync::Arc;

/// One entry of a request descriptor.
pub type Entry<'a> = (&'a str, &'a str);

/// The rule a descriptor selects, and its entries as they are counted: an entry matched by a
/// `share_threshold` wildcard has the wildcard (`files/*`) for its value, so every value it
/// matches shares one counter (envoyproxy's `ShareThresholdKeyPattern`).
#[derive(Debug)]
pub struct Found<'a> {
    pub rule: &'a Arc<Rule>,
    pub entries: Vec<Entry<'a>>,
}

/// The rule `entries` select in `domain`, if any.
pub fn find<'a>(domain: &'a Domain, entries: &[Entry<'a>]) -> Option<Found<'a>> {
    let mut level: &Level = &domain.root;
    let mut found = None;
    let mut counted: Vec<Entry<'a>> = entries.to_vec();
    for (i, (key, value)) in entries.iter().enumerate() {
        let key_value = format!("{key}_{value}");
        let mut wildcard = None;
        let next = level.children.get(&key_value).or_else(|| {
            let w = level.wildcards.iter().find(|w| w.matches(&key_value))?;
            wildcard = Some(w.key.as_str());
            level.children.get(&w.key)
        });
        let next = match next {
            Some(n) => Some(n),
            None => {
                wildcard = None;
                level.children.get(*key)
            }
        };
        let Some(next) = next else {
            break;
        };
        if let Some(pattern) = wildcard.filter(|_| next.share_threshold) {
            // envoyproxy strips the request's `key_` from the wildcard's key.
            let prefix_len = key.len() + 1;
            let shared = match pattern.get(..prefix_len) {
                Some(p) if p.strip_suffix('_') == Some(*key) => &pattern[prefix_len..],
                _ => pattern,
            };
            counted[i].1 = shared;
        }
        if i == entries.len() - 1 {
            found = next.rule.as_ref();
        }
        if next.children.is_empty() {
            break;
        }
        level = next;
    }
    found.map(|rule| Found {
        rule,
        entries: counted,
    })
}

/// The counter key of a descriptor on its rule: its entries as envoyproxy's cache key has
/// them (`key_value.key2_value2`), so a rule on `key: user` with no value counts each user
/// apart. Unlike envoyproxy, `\`, `.` and `_` inside keys and values are escaped with `\`,
/// so two different descriptors never share a counter (`a.op_b`+`c` vs `a`+`b.op_c`). Keys
/// longer than the store allows keep a prefix and a hash of the whole.
pub fn counter_key(entries: &[Entry<'_>]) -> String {
    let mut key = String::new();
    for (i, (k, v)) in entries.iter().enumerate() {
        if i > 0 {
            key.push('.');
        }
        escape_into(&mut key, k);
        key.push('_');
        escape_into(&mut key, v);
    }
    let max = clusterlimit::RateLimit::MAX_KEY_LEN;
    if key.len() <= max {
        return key;
    }
    super::rules::prefix_and_hash(&key, &key, max, '#')
}

/// Appends `s` with a `\` before each `\`, `.` and `_`: the separators stay unambiguous.
fn escape_into(out: &mut String, s: &str) {
    for c in s.chars() {
        if matches!(c, '\\' | '.' | '_') {
            out.push('\\');
        }
        out.push(c);
    }
}

/// envoyproxy's descriptor key (`key_value.key2`, no `_` for empty values), for the metrics
/// of `detailed_metric` rules and of limit overrides.
pub fn descriptor_key(entries: &[Entry<'_>]) -> String {
    entries
        .iter()
        .map(|(k, v)| {
            if v.is_empty() {
                k.to_string()
            } else {
                format!("{k}_{v}")
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::super::parse::parse_file;
    use super::*;
    use std::path::Path;

    fn domain() -> Domain {
        parse_file(
            Path::new("m.yaml"),
            "domain: d\n\
             descriptors:\n\
             \x20 - key: a\n\
             \x20   rate_limit: {unit: second, requests_per_unit: 1, name: a_any}\n\
             \x20   descriptors:\n\
             \x20     - key: b\n\
             \x20       rate_limit: {unit: second, requests_per_unit: 2, name: ab}\n\
             \x20 - key: a\n\
             \x20   value: x\n\
             \x20   rate_limit: {unit: second, requests_per_unit: 3, name: ax}\n\
             \x20 - key: p\n\
             \x20   value: /api/*\n\
             \x20   rate_limit: {unit: second, requests_per_unit: 4, name: api}\n\
             \x20 - key: p\n\
             \x20   value: /*\n\
             \x20   rate_limit: {unit: second, requests_per_unit: 5, name: root}\n\
             \x20 - key: n\n\
             \x20   descriptors:\n\
             \x20     - key: m\n\
             \x20       value: 1\n\
             \x20       rate_limit: {unit: second, requests_per_unit: 6, name: nm}\n",
        )
        .unwrap()
    }

    fn name(d: &Domain, entries: &[Entry<'_>]) -> Option<String> {
        find(d, entries).map(|f| f.rule.name.clone())
    }

    #[test]
    fn matches_as_get_limit() {
        let d = domain();
        assert_eq!(
            name(&d, &[("a", "x")]).as_deref(),
            Some("ax"),
            "key_value first"
        );
        assert_eq!(
            name(&d, &[("a", "y")]).as_deref(),
            Some("a_any"),
            "then key"
        );
        assert_eq!(
            name(&d, &[("a", "y"), ("b", "z")]).as_deref(),
            Some("ab"),
            "nested"
        );
        // `a_x` has no children: the walk stops there and the last entry found no rule.
        assert_eq!(name(&d, &[("a", "x"), ("b", "z")]), None);
        assert_eq!(name(&d, &[("a", "y"), ("c", "z")]), None);
        assert_eq!(
            name(&d, &[("p", "/api/v1")]).as_deref(),
            Some("api"),
            "wildcard, file order"
        );
        assert_eq!(name(&d, &[("p", "/other")]).as_deref(), Some("root"));
        assert_eq!(name(&d, &[("p", "nope")]), None);
        assert_eq!(name(&d, &[("n", "q")]), None, "a node without a rate_limit");
        assert_eq!(name(&d, &[("n", "q"), ("m", "1")]).as_deref(), Some("nm"));
        assert_eq!(name(&d, &[("n", "q"), ("m", "2")]), None);
        assert_eq!(name(&d, &[]), None);
        assert_eq!(name(&d, &[("zzz", "1")]), None);
    }

    /// upstream's `wildcardMatch`, edge by edge.
    #[test]
    fn wildcards_match_as_upstream() {
        use super::super::rules::Wildcard;
        for (pattern, value, want) in [
            ("k_ab*", "k_ab", true),
            ("k_ab*", "k_abc", true),
            ("k_ab*", "k_a", false),
            ("k_*", "k_", true),
            ("k_ab*ba", "k_abba", true),
            ("k_ab*ba", "k_aba", false), // prefix and suffix may not overlap
            ("k_ab*ba", "k_abXba", true),
            ("k_a*b*c", "k_abc", true),
            ("k_a*b*c", "k_axbyc", true),
            ("k_a*b*c", "k_acb", false), // the middle parts in order
            ("k_a*b*c", "k_ac", false),
            ("k_*b*", "k_xbx", true),
            ("k_**", "k_", true),
            ("k*", "kx_y", true), // a `*` in the key part matches across the `_`
            ("k_é*ü", "k_éaü", true),
            ("k_é*ü", "k_ü", false),
        ] {
            assert_eq!(
                Wildcard::new(pattern).matches(value),
                want,
                "{pattern} ~ {value}"
            );
        }
    }

    #[test]
    fn keys() {
        assert_eq!(counter_key(&[("a", "x"), ("b", "")]), "a_x.b_");
        // Separators inside values are escaped: these two descriptors count apart.
        assert_eq!(
            counter_key(&[("tenant", "a.op_b"), ("op", "c")]),
            r"tenant_a\.op\_b.op_c"
        );
        assert_ne!(
            counter_key(&[("tenant", "a.op_b"), ("op", "c")]),
            counter_key(&[("tenant", "a"), ("op", "b.op_c")])
        );
        assert_ne!(
            counter_key(&[("a", "x\\")]),
            counter_key(&[("a", "x"), ("", "")])
        );
        assert_eq!(descriptor_key(&[("a", "x"), ("b", "")]), "a_x.b");
        let long = "é".repeat(400);
        let k = counter_key(&[("a", &long)]);
        assert!(k.len() <= clusterlimit::RateLimit::MAX_KEY_LEN);
        assert_ne!(k, counter_key(&[("a", &format!("{long}x"))]));
    }
}

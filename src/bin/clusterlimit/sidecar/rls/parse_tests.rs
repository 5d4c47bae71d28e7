//! The YAML rule files' parser (`parse.rs`) on envoyproxy's example config and on every kind of
//! error: each names `file:line`.

use super::parse::parse_file;
use super::rules::{limit_name, Domain, Unit, Wildcard};
use clusterlimit::{Algorithm, Quota};
use std::path::Path;
use std::time::Duration;

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

/// Our extensions for priority classes: a domain's `class_key`, a rule's `reserves` in its
/// quota (and summary).
#[test]
fn reserves_and_class_key() {
    let d = load(
        "domain: api\n\
         class_key: priority\n\
         descriptors:\n\
         \x20 - key: user\n\
         \x20   reserves: {batch: 20, critical: 0}\n\
         \x20   rate_limit: {unit: minute, requests_per_unit: 100}\n\
         \x20 - key: plain\n\
         \x20   rate_limit: {unit: minute, requests_per_unit: 5}\n",
    )
    .unwrap();
    assert_eq!(d.class_key.as_deref(), Some("priority"));
    let user = d.root.children["user"].rule.clone().unwrap();
    let q = user.quota.unwrap();
    assert_eq!(
        q.reserves.iter().collect::<Vec<_>>(),
        [("batch", 20), ("critical", 0)]
    );
    assert!(
        user.summary().contains("reserves batch 20, critical 0"),
        "{}",
        user.summary()
    );
    let plain = d.root.children["plain"].rule.clone().unwrap();
    assert!(plain.quota.unwrap().reserves.is_empty());
    assert!(load("domain: a\n").unwrap().class_key.is_none());
}

/// Every mistake in `class_key` and `reserves` named at its line, with the reason.
#[test]
fn bad_reserves_and_class_keys() {
    let rule = |extra: &str, rate_limit: &str| {
        format!("domain: a\ndescriptors:\n  - key: k\n{extra}    rate_limit: {rate_limit}\n")
    };
    let minute = "{unit: minute, requests_per_unit: 10}";
    for (text, want) in [
        (
            "domain: a\nclass_key: \"\"\n".to_string(),
            "t.yaml:2: class_key must name",
        ),
        (
            "domain: a\nclass_key: [x]\n".to_string(),
            "t.yaml:2: class_key must be a string",
        ),
        (
            rule("    reserves: {batch: 10}\n", minute),
            "t.yaml:4: reserves: ",
        ),
        (
            rule("    reserves: {batch: -1}\n", minute),
            "t.yaml:4: reserves.batch must be a whole number (0 or more)",
        ),
        (
            rule("    reserves: {\"a b\": 1}\n", minute),
            "t.yaml:4: reserves: ",
        ),
        (
            rule("    reserves: [batch]\n", minute),
            "t.yaml:4: reserves must be a mapping",
        ),
        (
            rule("    reserves: {a: 1, b: 1, c: 1, d: 1, e: 1}\n", minute),
            "t.yaml:4: reserves: ",
        ),
        (
            rule("    reserves: {batch: 1}\n", "{unlimited: true}"),
            "t.yaml:4: unlimited: true takes no algorithm, burst, reserves or charge",
        ),
        (
            rule(
                "    reserves: {batch: 1}\n",
                "{unit: minute, requests_per_unit: 0}",
            ),
            "t.yaml:4: reserves apply to a rule that counts",
        ),
        (
            "domain: a\ndescriptors:\n  - key: k\n    reserves: {batch: 1}\n".to_string(),
            "t.yaml:4: algorithm, burst, reserves and charge apply to a descriptor with a rate_limit",
        ),
    ] {
        let e = load(&text).unwrap_err();
        assert!(e.contains(want), "{text}: {e}");
    }
    // The reason names the class and the bound.
    let e = load(&rule("    reserves: {batch: 10}\n", minute)).unwrap_err();
    assert!(e.contains("batch"), "{e}");
}

#[test]
fn charge_rules() {
    let d = load(
        "domain: llm\n\
         descriptors:\n\
         \x20 - key: tenant\n\
         \x20   charge: true\n\
         \x20   algorithm: gcra\n\
         \x20   rate_limit: {unit: hour, requests_per_unit: 1000}\n\
         \x20 - key: user\n\
         \x20   charge: false\n\
         \x20   rate_limit: {unit: hour, requests_per_unit: 5}\n",
    )
    .unwrap();
    let tenant = d.root.children["tenant"].rule.clone().unwrap();
    assert!(tenant.charge);
    assert!(
        tenant.summary().contains(", charge"),
        "{}",
        tenant.summary()
    );
    assert_eq!(tenant.quota.map(|q| q.algorithm), Some(Algorithm::Gcra));
    let user = d.root.children["user"].rule.clone().unwrap();
    assert!(!user.charge && !user.summary().contains("charge"));
}

#[test]
fn charge_refuses_what_contradicts_it() {
    let rule = |extra: &str, rate_limit: &str| {
        format!("domain: a\ndescriptors:\n  - key: k\n{extra}    rate_limit: {rate_limit}\n")
    };
    let hour = "{unit: hour, requests_per_unit: 1000}";
    for (text, want) in [
        (
            rule("    charge: true\n", "{unlimited: true}"),
            "t.yaml:4: unlimited: true takes no algorithm, burst, reserves or charge",
        ),
        (
            rule("    charge: true\n", "{unit: hour, requests_per_unit: 0}"),
            "t.yaml:4: charge: true cannot go with requests_per_unit: 0",
        ),
        (
            rule("    charge: true\n    quota_mode: true\n", hour),
            "t.yaml:4: charge: true cannot go with quota_mode",
        ),
        (
            rule("    charge: true\n    reserves: {batch: 10}\n", hour),
            "t.yaml:4: charge: true cannot go with reserves",
        ),
        (
            "domain: a\ndescriptors:\n  - key: k\n    charge: true\n".to_string(),
            "t.yaml:4: algorithm, burst, reserves and charge apply to a descriptor with a rate_limit",
        ),
        (
            rule("    charge: 300\n", hour),
            "t.yaml:4: charge must be true or false",
        ),
    ] {
        let e = load(&text).unwrap_err();
        assert!(e.contains(want), "{text}: {e}");
    }
    // Off, it contradicts nothing.
    assert!(load(&rule("    charge: false\n    quota_mode: true\n", hour)).is_ok());
}

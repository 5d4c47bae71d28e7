//! envoyproxy/ratelimit's own config tests (`test/config/config_test.go`), ported case by
//! case on its own YAML files (copied unchanged into `tests/envoyproxy_ratelimit/`, see the
//! README there for the commit). Where upstream checks a statsd key (`test-domain.PATH`), we
//! check the rule's path, which is our metrics label and names the same rule.

use super::matcher::{self, Entry};
use super::rules::{Loading, Rule, Rules, Unit};
use std::path::PathBuf;
use std::sync::Arc;

fn fixture(dir: &str, name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/envoyproxy_ratelimit")
        .join(dir)
        .join(name)
}

fn load(names: &[&str], merge_domains: bool) -> Result<Rules, String> {
    let paths: Vec<PathBuf> = names.iter().map(|n| fixture("config", n)).collect();
    Rules::load(&paths, Loading { merge_domains })
}

fn rules(name: &str) -> Rules {
    load(&[name], false).unwrap()
}

/// upstream's `GetLimit`: the rule and the descriptor's counter key.
fn get(rules: &Rules, domain: &str, entries: &[Entry<'_>]) -> Option<(Arc<Rule>, String)> {
    let d = rules.domains.get(domain)?;
    let found = matcher::find(d, entries)?;
    Some((found.rule.clone(), matcher::counter_key(&found.entries)))
}

fn limit(rules: &Rules, entries: &[Entry<'_>]) -> Option<(u32, Unit, String)> {
    get(rules, "test-domain", entries).map(|(r, _)| (r.requests_per_unit, r.unit, r.path.clone()))
}

#[test]
fn basic_config() {
    let r = rules("basic_config.yaml");
    assert!(!r.domains.is_empty());
    assert!(get(&r, "foo_domain", &[]).is_none());
    assert!(get(&r, "test-domain", &[]).is_none());
    for none in [
        &[("key1", "something")][..],
        &[("key1", "value1")],
        &[("key2", "value2"), ("subkey", "subvalue")],
        &[("key5", "value5"), ("subkey5", "subvalue")],
        &[("key2", "value3")],
    ] {
        assert_eq!(limit(&r, none), None, "{none:?}");
    }
    let s = |p: &str| p.to_string();
    assert_eq!(
        limit(&r, &[("key1", "value1"), ("subkey1", "something")]),
        Some((5, Unit::Second, s("key1_value1.subkey1")))
    );
    assert_eq!(
        limit(&r, &[("key1", "value1"), ("subkey1", "subvalue1")]),
        Some((10, Unit::Second, s("key1_value1.subkey1_subvalue1")))
    );
    assert_eq!(
        limit(&r, &[("key2", "something")]),
        Some((20, Unit::Minute, s("key2")))
    );
    assert_eq!(
        limit(&r, &[("key2", "value2")]),
        Some((30, Unit::Minute, s("key2_value2")))
    );
    let (key3, _) = get(&r, "test-domain", &[("key3", "foo")]).unwrap();
    assert_eq!((key3.requests_per_unit, key3.unit), (1, Unit::Hour));
    assert!(key3.name.is_empty(), "no name in the config");
    let (key4, _) = get(&r, "test-domain", &[("key4", "foo")]).unwrap();
    assert_eq!((key4.requests_per_unit, key4.unit), (1, Unit::Day));
    assert_eq!(key4.name, "key4_rate_limit");
    assert!(
        get(&r, "test-domain", &[("key6", "foo")])
            .unwrap()
            .0
            .unlimited
    );
    // detailed_metric: each value is its own metric (and, as everywhere, its own counter).
    let (a, ka) = get(&r, "test-domain", &[("key7", "unspecified_value")]).unwrap();
    let (_, kb) = get(&r, "test-domain", &[("key7", "another_value")]).unwrap();
    assert_eq!((a.requests_per_unit, a.unit), (70, Unit::Minute));
    assert!(a.detailed_metric);
    assert_eq!(
        matcher::descriptor_key(&[("key7", "unspecified_value")]),
        "key7_unspecified_value"
    );
    assert_ne!(ka, kb);
}

#[test]
fn domain_merge() {
    let r = load(&["merge_domain_key1.yaml", "merge_domain_key2.yaml"], true).unwrap();
    assert!(get(&r, "foo_domain", &[]).is_none());
    assert!(get(&r, "test-domain", &[]).is_none());
    assert_eq!(limit(&r, &[("key1", "value1")]).unwrap().0, 10);
    assert_eq!(limit(&r, &[("key2", "value2")]).unwrap().0, 20);
    let d = &r.domains["test-domain"];
    assert_eq!(d.files.len(), 2);
    assert_eq!(d.rules.len(), 2);

    // Without merging (the default): an error naming both files and what to do.
    let e = load(&["merge_domain_key1.yaml", "merge_domain_key2.yaml"], false).unwrap_err();
    let one = fixture("config", "merge_domain_key1.yaml");
    let two = fixture("config", "merge_domain_key2.yaml");
    assert!(
        e.starts_with(&format!(
            "{}:2: duplicate domain \"test-domain\"",
            two.display()
        )),
        "{e}"
    );
    assert!(e.contains(&one.display().to_string()), "{e}");
    assert!(e.contains("rls_merge_domain_config"), "{e}");
    // upstream's TestDuplicateDomain.
    let e = load(&["basic_config.yaml", "duplicate_domain.yaml"], false).unwrap_err();
    assert!(
        e.contains("duplicate_domain.yaml:1: duplicate domain \"test-domain\""),
        "{e}"
    );

    // upstream's TestDuplicateKeyDomainMerge: one key from two merged files.
    let e = load(&["merge_domain_key1.yaml", "merge_domain_key1.yaml"], true).unwrap_err();
    let at = format!("{}:5", one.display());
    assert!(e.starts_with(&at), "{e}");
    assert!(
        e.contains("duplicate descriptor composite key test-domain.key1_value1 (also at"),
        "{e}"
    );
}

#[test]
fn error_cases_name_the_file_and_line() {
    for (file, at, why) in [
        ("empty_domain.yaml", 1, "empty domain"),
        ("empty_key.yaml", 3, "empty key"),
        (
            "duplicate_key.yaml",
            6,
            "duplicate descriptor composite key test-domain.key1_value1",
        ),
        ("bad_limit_unit.yaml", 6, "invalid rate limit unit \"foo\""),
        (
            "replaces_self.yaml",
            10,
            "replaces should not contain the name of the same descriptor",
        ),
        ("replaces_empty.yaml", 10, "empty replaces"),
        ("bad_yaml.yaml", 1, "bad YAML"),
        ("misspelled_key.yaml", 5, "unknown key \"ratelimit\""),
        ("misspelled_key2.yaml", 7, "unknown key \"requestsperunit\""),
        ("non_string_key.yaml", 1, "unknown key \"0.25\""),
        (
            "non_map_list.yaml",
            3,
            "a descriptor must be a mapping, got a scalar",
        ),
        (
            "unlimited_with_unit.yaml",
            6,
            "unlimited: true takes no unit",
        ),
    ] {
        let e = load(&[file], false).unwrap_err();
        let want = format!("{}:{at}: ", fixture("config", file).display());
        assert!(e.starts_with(&want), "{file}: {e}");
        assert!(e.contains(why), "{file}: {e}");
    }
}

#[test]
fn shadow_mode_config() {
    let r = rules("shadowmode_config.yaml");
    for (entries, rpu, unit, shadow) in [
        (
            &[("key1", "value1"), ("subkey1", "something")][..],
            5,
            Unit::Second,
            false,
        ),
        (
            &[("key1", "value1"), ("subkey1", "subvalue1")],
            10,
            Unit::Second,
            true,
        ),
        (&[("key2", "something")], 20, Unit::Minute, true),
        (&[("key2", "value2")], 30, Unit::Minute, false),
    ] {
        let (rule, _) = get(&r, "test-domain", entries).unwrap();
        assert_eq!(
            (rule.requests_per_unit, rule.unit, rule.shadow),
            (rpu, unit, shadow),
            "{entries:?}"
        );
    }
}

#[test]
fn wildcard_config() {
    let r = rules("wildcard.yaml");
    let rule = |entries: &[Entry<'_>]| get(&r, "test-domain", entries).map(|(r, _)| r);
    // A key without a value: every value on one rule, counted apart.
    let (a, ka) = get(&r, "test-domain", &[("noVal", "foo1")]).unwrap();
    let (b, kb) = get(&r, "test-domain", &[("noVal", "foo2")]).unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    assert_eq!(a.path, "noVal");
    assert_ne!(ka, kb);
    // Wildcards: one rule, its path holding the pattern with its `*`.
    for (entries, path) in [
        (&[("wild", "foo1")][..], "wild_foo*"),
        (&[("wild", "foo2")], "wild_foo*"),
        (
            &[("nestedWild", "val1"), ("wild", "goo2")],
            "nestedWild_val1.wild_goo*",
        ),
        (&[("midWild", "barab")], "midWild_bar*b"),
        (&[("midWild", "bar123b")], "midWild_bar*b"),
        (&[("midWild", "barb")], "midWild_bar*b"),
        (&[("multiWild", "foo123bar456baz")], "multiWild_foo*bar*baz"),
        (&[("multiWild", "foobarbaz")], "multiWild_foo*bar*baz"),
    ] {
        assert_eq!(
            rule(entries).map(|r| r.path.clone()).as_deref(),
            Some(path),
            "{entries:?}"
        );
    }
    for none in [
        &[("wild", "bar")][..],
        &[("noWild", "foo1")],
        &[("midWild", "bara")],
        &[("midWild", "xbarb")],
        &[("multiWild", "foo123baz")],
        &[("multiWild", "bar456baz")],
    ] {
        assert!(rule(none).is_none(), "{none:?}");
    }
    assert_eq!(
        rule(&[("multiWild", "foobarbaz")])
            .unwrap()
            .requests_per_unit,
        10
    );
}

/// `share_threshold.yaml`'s rule and counter key for `entries` on `test-domain`.
fn shared_get(r: &Rules, entries: &[Entry<'_>]) -> (Arc<Rule>, String) {
    get(r, "test-domain", entries).unwrap()
}

/// Every entry list of `values` (each a value a share_threshold wildcard matches) counts on
/// one counter, `key`, of a rule of `rpu` requests per unit.
fn shared(r: &Rules, values: &[&[Entry<'_>]], rpu: u32, key: &str) {
    for entries in values {
        let (rule, k) = shared_get(r, entries);
        assert_eq!(
            (rule.requests_per_unit, k.as_str()),
            (rpu, key),
            "{entries:?}"
        );
    }
}

#[test]
fn share_threshold() {
    let r = rules("share_threshold.yaml");
    // Every value a share_threshold wildcard matches: one counter.
    shared(
        &r,
        &[
            &[("files", "files/a.pdf")],
            &[("files", "files/b.csv")],
            &[("files", "files/c.txt")],
        ],
        100,
        "files_files/*",
    );
    // The shared key replaces the matched value only; other entries count as they are.
    let (rule, key) = shared_get(&r, &[("route", "api/v1"), ("method", "GET")]);
    assert_eq!(
        (rule.requests_per_unit, key.as_str()),
        (60, r"route_api/*.method_GET")
    );
    let (rule, key) = shared_get(&r, &[("service", "svc/user"), ("endpoint", "get")]);
    assert!(rule.detailed_metric);
    assert_eq!(key, "service_svc/*.endpoint_get");
}

#[test]
fn share_threshold_nested() {
    let r = rules("share_threshold.yaml");
    // Nested: each level with share_threshold stands as its wildcard.
    shared(
        &r,
        &[&[("nested", "parent"), ("files", "nested/file1.txt")]],
        200,
        "nested_parent.files_nested/*",
    );
    shared(
        &r,
        &[&[("files", "top/file1.txt"), ("files", "nested/file1.txt")]],
        300,
        "files_top/*.files_nested/*",
    );
    // A wildcard without share_threshold below one with it: that value counts apart.
    let (rule, key) = shared_get(
        &r,
        &[("path", "path/foo"), ("file", "file/doc1"), ("type", "pdf")],
    );
    assert_eq!(rule.requests_per_unit, 120);
    assert_eq!(key, "path_path/*.file_file/doc1.type_pdf");
    shared(
        &r,
        &[&[
            ("user", "user/alice"),
            ("resource", "res/file1"),
            ("action", "read"),
        ]],
        150,
        "user_user/*.resource_res/*.action_read",
    );
}

#[test]
fn share_threshold_exact_value_wins() {
    let r = rules("share_threshold.yaml");
    // An exact value wins over the wildcard and counts alone.
    let (rule, key) = shared_get(&r, &[("file", "test1")]);
    assert_eq!((rule.requests_per_unit, key.as_str()), (50, "file_test1"));
    shared(
        &r,
        &[
            &[("file", "test2")],
            &[("file", "test23")],
            &[("file", "test123")],
        ],
        100,
        "file_test*",
    );
}

#[test]
fn share_threshold_middle_and_multiple_wildcards() {
    let r = rules("share_threshold.yaml");
    shared(
        &r,
        &[
            &[("midpath", "/api/v1")],
            &[("midpath", "/api-beta-v1")],
            &[("midpath", "/apiXYZv1")],
        ],
        100,
        "midpath_/api*v1",
    );
    assert!(matcher::find(&r.domains["test-domain"], &[("midpath", "/api/v2")]).is_none());
    shared(
        &r,
        &[
            &[("multiroute", "svcAepBrpc")],
            &[("multiroute", "svcXXXepYYYrpc")],
            &[("multiroute", "svceprpc")],
        ],
        50,
        "multiroute_svc*ep*rpc",
    );
    assert!(matcher::find(&r.domains["test-domain"], &[("multiroute", "svcABCrpc")]).is_none());
    shared(
        &r,
        &[&[("midroute", "/api/v2")], &[("midroute", "/api-beta-v2")]],
        80,
        "midroute_/api*v2",
    );
    shared(
        &r,
        &[
            &[("tenant", "t1prod"), ("resource", "res1v2")],
            &[("tenant", "tXprod"), ("resource", "resABCv2")],
        ],
        60,
        "tenant_t*prod.resource_res*v2",
    );
}

#[test]
fn share_threshold_needs_a_wildcard() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.yaml");
    std::fs::write(
        &p,
        "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    )
    .unwrap();
    let e = Rules::load(std::slice::from_ref(&p), Loading::default()).unwrap_err();
    assert!(
        e.starts_with(&format!(
            "{}:5: share_threshold applies to wildcard values",
            p.display()
        )),
        "{e}"
    );
}

#[test]
fn metadata_and_upstreams_examples_load() {
    let r = rules("metadata.yaml");
    assert_eq!(limit(&r, &[("key2", "x")]).unwrap().0, 20);
    let ex = Rules::load(&[fixture("examples", "example.yaml")], Loading::default()).unwrap();
    let rl = &ex.domains["rl"];
    let service_1 = matcher::find(rl, &[("service", "service_1")]).unwrap().rule;
    assert!(service_1.quota_mode);
    assert_eq!(service_1.requests_per_unit, 1);
    let banned = matcher::find(rl, &[("foo", "x"), ("bar", "banned")])
        .unwrap()
        .rule;
    assert_eq!((banned.name.as_str(), banned.quota), ("banned_limit", None));
    let shady = matcher::find(rl, &[("foo", "x"), ("baz", "shady")])
        .unwrap()
        .rule;
    assert!(shady.shadow);
    let cfg = Rules::load(&[fixture("examples", "config.yaml")], Loading::default()).unwrap();
    assert_eq!(cfg.domains["mongo_cps"].rules.len(), 2);
    // The integration test's files: every one loads.
    for f in ["basic.yaml", "another.yaml", "share_threshold.yaml"] {
        Rules::load(&[fixture("integration", f)], Loading::default()).unwrap();
    }
}

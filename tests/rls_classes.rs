//! Priority classes in the Envoy rate limit service (`serve --grpc-listen`, called with
//! envoy-types' tonic client) on etcd: a domain's `class_key` entry names a descriptor's class,
//! a rule's `reserves` keep units from it; an unknown class (or two) is that descriptor's
//! OVER_LIMIT with nothing counted, never an error of the call.

use crate::binary;
use crate::sidecar_rls::{call, code, desc, one, overall, req, start_with, Client};
use crate::support;

use binary::{cmd, output};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use std::time::Duration;
use support::EtcdCluster;

const API: &str = "\
domain: api
class_key: priority
descriptors:
  - key: user
    reserves: {batch: 2, critical: 0}
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: plain
    rate_limit: {unit: day, requests_per_unit: 5}
";

/// The one descriptor's (code, limit_remaining).
fn only(r: &RateLimitResponse) -> (Code, u32) {
    assert_eq!(r.statuses.len(), 1, "{r:?}");
    (code(&r.statuses[0]), r.statuses[0].limit_remaining)
}

/// One hit of `user` without a class: its (code, what is left after it).
async fn spend_one(c: &mut Client, user: &str) -> (Code, u32) {
    only(&one(c, "api", &[("user", user)]).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classes_keep_their_reserve_and_an_unknown_class_is_over() {
    let cluster = EtcdCluster::single();
    let (_dir, sc) = start_with(&cluster.url("rls-classes"), "api.yaml", API, &[]).await;
    let mut c = sc.client().await;

    // Batch leaves 2 of 3: it takes one, then is over; the class entry neither matches nor
    // counts (anywhere in the descriptor), and the unclassed take the reserve.
    let batch = |user: &'static str| [("user", user), ("priority", "batch")];
    assert_eq!(only(&one(&mut c, "api", &batch("u1")).await), (Code::Ok, 0));
    let r = one(&mut c, "api", &batch("u1")).await;
    assert_eq!(
        (overall(&r), only(&r)),
        (Code::OverLimit, (Code::OverLimit, 0))
    );
    assert_eq!(spend_one(&mut c, "u1").await, (Code::Ok, 1));
    let first = one(&mut c, "api", &[("priority", "batch"), ("user", "u2")]).await;
    assert_eq!(only(&first), (Code::Ok, 0));
    let critical = one(&mut c, "api", &[("user", "u2"), ("priority", "critical")]).await;
    assert_eq!(
        only(&critical),
        (Code::Ok, 1),
        "a class with reserve 0 takes all"
    );

    // Unknown classes, a class the rule does not declare, two classes: over, nothing counted.
    for entries in [
        vec![("user", "u3"), ("priority", "bulk")],
        vec![("user", "u3"), ("priority", "a b")],
        vec![
            ("user", "u3"),
            ("priority", "batch"),
            ("priority", "critical"),
        ],
    ] {
        let r = one(&mut c, "api", &entries).await;
        assert_eq!(overall(&r), Code::OverLimit, "{entries:?}: {r:?}");
        assert_eq!(only(&r).0, Code::OverLimit, "{entries:?}");
        assert!(r.statuses[0].current_limit.is_some(), "{r:?}");
    }
    let r = one(&mut c, "api", &[("plain", "p"), ("priority", "batch")]).await;
    assert_eq!(
        only(&r).0,
        Code::OverLimit,
        "plain declares no classes: {r:?}"
    );
    // The same class given twice is one class.
    let twice = [("user", "u5"), ("priority", "batch"), ("priority", "batch")];
    assert_eq!(only(&one(&mut c, "api", &twice).await), (Code::Ok, 0));
    assert_eq!(
        spend_one(&mut c, "u3").await,
        (Code::Ok, 2),
        "u3 was never counted"
    );
    assert_eq!(
        only(&one(&mut c, "api", &[("plain", "p")]).await),
        (Code::Ok, 4)
    );

    // A cost above what batch can ever take (2 + its reserve 2 > 3): over, nothing counted.
    let r = call(&mut c, req("api", vec![desc(&batch("u6"))], 2)).await;
    assert_eq!(only(&r).0, Code::OverLimit, "{r:?}");
    // All or nothing: a request with one bad class counts none of its descriptors.
    let both = vec![
        desc(&batch("u6")),
        desc(&[("user", "u7"), ("priority", "bulk")]),
    ];
    let r = call(&mut c, req("api", both, 0)).await;
    assert_eq!(overall(&r), Code::OverLimit, "{r:?}");
    assert_eq!(
        spend_one(&mut c, "u6").await,
        (Code::Ok, 2),
        "u6 was never counted"
    );
    assert_eq!(
        spend_one(&mut c, "u7").await,
        (Code::Ok, 2),
        "u7 was never counted"
    );
}

/// `--check-config` shows the domain's class key and each rule's reserves, and names the line
/// of a bad reserve or class key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_config_shows_and_checks_classes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api.yaml");
    let check = |text: &str| {
        std::fs::write(&path, text).unwrap();
        let p = path.to_str().unwrap().to_string();
        async move {
            let args = [
                "serve",
                "--check-config",
                "--grpc-listen",
                "127.0.0.1:0",
                "--rls-config",
                &p,
            ];
            output(cmd(&args), Duration::from_secs(20)).await
        }
    };
    let out = check(API).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for want in ["class_key \"priority\"", "reserves batch 2, critical 0"] {
        assert!(out.stdout.contains(want), "{want} in {}", out.stdout);
    }
    for (text, want) in [
        (
            API.replace("{batch: 2, critical: 0}", "{batch: 3}"),
            "api.yaml:5: reserves: ",
        ),
        (
            API.replace("class_key: priority", "class_key: \"\""),
            "api.yaml:2: class_key must name",
        ),
        (
            API.replace("{batch: 2, critical: 0}", "{batch: x}"),
            "api.yaml:5: reserves.batch must be a whole number",
        ),
    ] {
        let out = check(&text).await;
        assert_eq!(out.code, Some(64), "{text}: {}", out.stderr);
        assert!(out.stderr.contains(want), "{want} in {}", out.stderr);
    }
}

//! Usage charged after the response in the Envoy rate limit service (`serve --grpc-listen`,
//! called with envoy-types' tonic client) on etcd: on a rule with `charge: true` a
//! descriptor's hits are usage already spent (Envoy's `apply_on_stream_done` call), charged
//! into debt if need be and never answered OVER_LIMIT; hits 0 (Envoy's request-time call) is
//! a peek, over while the key is spent or in debt; `is_negative_hits` gives usage back; what
//! cannot be a charge is refused with the reason.

use crate::sidecar_rls::{call, code, desc, overall, req, start_with, Client};
use crate::support;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::UInt64Value;
use support::EtcdCluster;

/// 1,000 tokens an hour per tenant (GCRA: nothing worth counting refills during the test),
/// and a plain 5 a day per user.
const LLM: &str = "\
domain: llm
descriptors:
  - key: tenant
    charge: true
    algorithm: gcra
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: user
    rate_limit: {unit: day, requests_per_unit: 5}
";

/// `tenant`'s descriptor with its own hits_addend (`None`: the request's).
fn tenant(name: &str, hits: Option<u64>) -> RateLimitDescriptor {
    let mut d = desc(&[("tenant", name)]);
    d.hits_addend = hits.map(|value| UInt64Value { value });
    d
}

/// The one descriptor's (code, limit_remaining), and the overall code agreeing with it.
fn only(r: &RateLimitResponse) -> (Code, u32) {
    assert_eq!(r.statuses.len(), 1, "{r:?}");
    assert_eq!(overall(r), code(&r.statuses[0]), "{r:?}");
    (code(&r.statuses[0]), r.statuses[0].limit_remaining)
}

/// Envoy's request-time call for `name` (no hits set: a peek on a charge rule).
async fn peek(c: &mut Client, name: &str) -> (Code, u32) {
    only(&call(c, req("llm", vec![tenant(name, None)], 0)).await)
}

/// Envoy's stream-done call for `name`: the usage in the descriptor's hits_addend.
async fn charge(c: &mut Client, name: &str, usage: u64) -> (Code, u32) {
    only(&call(c, req("llm", vec![tenant(name, Some(usage))], 0)).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charges_run_into_debt_and_peeks_are_over_until_it_is_paid() {
    let cluster = EtcdCluster::single();
    let (_dir, sc) = start_with(&cluster.url("/rls-charge"), "llm.yaml", LLM, &[]).await;
    let mut c = sc.client().await;

    // A peek takes nothing.
    assert_eq!(peek(&mut c, "acme").await, (Code::Ok, 1000));
    assert_eq!(peek(&mut c, "acme").await, (Code::Ok, 1000));
    // Usage afterwards: 600, then 600 more than the 400 left. Never OVER_LIMIT: the work is
    // done, a denial would undo nothing.
    assert_eq!(charge(&mut c, "acme", 600).await, (Code::Ok, 400));
    assert_eq!(charge(&mut c, "acme", 600).await, (Code::Ok, 0));
    // 200 in debt: the next request-time call is over, and so is a check of 1.
    assert_eq!(peek(&mut c, "acme").await, (Code::OverLimit, 0));
    let one = only(&call(&mut c, req("llm", vec![tenant("acme", Some(0))], 0)).await);
    assert_eq!(
        one,
        (Code::OverLimit, 0),
        "an explicit hits_addend 0 is a peek too"
    );
    // Usage of requests admitted before still counts, into more debt: never over.
    assert_eq!(charge(&mut c, "acme", 50).await, (Code::Ok, 0));
    // Another tenant is untouched.
    assert_eq!(peek(&mut c, "globex").await, (Code::Ok, 1000));

    // A peek over in debt stops the request's other descriptors: nothing counted for them.
    let both = call(
        &mut c,
        req(
            "llm",
            vec![tenant("acme", None), desc(&[("user", "ann")])],
            0,
        ),
    )
    .await;
    assert_eq!(overall(&both), Code::OverLimit, "{both:?}");
    assert_eq!(code(&both.statuses[0]), Code::OverLimit, "{both:?}");
    assert_eq!(code(&both.statuses[1]), Code::Ok, "{both:?}");
    let ann = call(&mut c, req("llm", vec![desc(&[("user", "ann")])], 0)).await;
    assert_eq!(
        ann.statuses[0].limit_remaining, 4,
        "ann's 5 untouched: {ann:?}"
    );

    // A charge with a check in one call: the charge is taken whatever the check says.
    let mixed = call(
        &mut c,
        req(
            "llm",
            vec![tenant("initech", Some(300)), desc(&[("user", "ann")])],
            0,
        ),
    )
    .await;
    assert_eq!(overall(&mixed), Code::Ok, "{mixed:?}");
    assert_eq!(mixed.statuses[0].limit_remaining, 700, "{mixed:?}");

    // Envoy's request-level hits_addend (its filter state) is a charge too on such a rule.
    let request_level = call(&mut c, req("llm", vec![tenant("initech", None)], 250)).await;
    assert_eq!(only(&request_level), (Code::Ok, 450));

    // is_negative_hits gives usage back (a refund, never past full): acme's 250 of debt and
    // 500 more.
    let mut back = tenant("acme", Some(750));
    back.is_negative_hits = true;
    assert_eq!(
        only(&call(&mut c, req("llm", vec![back], 0)).await),
        (Code::Ok, 500)
    );
    assert_eq!(peek(&mut c, "acme").await, (Code::Ok, 500));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cannot_be_a_charge_is_refused_with_the_reason() {
    let cluster = EtcdCluster::single();
    let (_dir, sc) = start_with(&cluster.url("/rls-charge-refused"), "llm.yaml", LLM, &[]).await;
    let mut c = sc.client().await;
    let refused = |e: tonic::Status, want: &str| {
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
        assert!(e.message().contains(want), "{e}");
    };

    // A charge above what one may move a key by (Envoy's own bound on hits_addend).
    let r = req("llm", vec![tenant("acme", Some(1_000_000_001))], 0);
    let e = c.should_rate_limit(r).await.unwrap_err();
    refused(
        e,
        "descriptors[0].hits_addend: 1000000001 is above 1000000000",
    );
    // Negative hits on a rule without charge: nothing to give back.
    let mut neg = desc(&[("user", "ann")]);
    neg.is_negative_hits = true;
    let e = c
        .should_rate_limit(req("llm", vec![neg], 0))
        .await
        .unwrap_err();
    refused(e, "only a rule with `charge: true` takes");
    // Neither charged anything.
    assert_eq!(peek(&mut c, "acme").await, (Code::Ok, 1000));
    let ann = call(&mut c, req("llm", vec![desc(&[("user", "ann")])], 0)).await;
    assert_eq!(ann.statuses[0].limit_remaining, 4, "{ann:?}");

    // A rule that contradicts charge never loads: `serve` refuses to start, naming it.
    let bad = "domain: llm\ndescriptors:\n  - key: tenant\n    charge: true\n    quota_mode: true\n    rate_limit: {unit: hour, requests_per_unit: 10}\n";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, bad).unwrap();
    let out = crate::binary::output(
        crate::binary::cmd(&[
            "serve",
            "--check-config",
            "--store",
            "memory://charge-check",
            "--grpc-listen",
            "127.0.0.1:0",
            "--rls-config",
            path.to_str().unwrap(),
        ]),
        std::time::Duration::from_secs(30),
    )
    .await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("bad.yaml:4: charge: true cannot go with quota_mode"),
        "{}",
        out.stderr
    );
}

/// With the store down, a charge cannot be recorded: UNAVAILABLE naming the descriptor, the
/// key and the rule (it may or may not have applied; Envoy does not retry a stream-done
/// call), never an OK that would claim it was; a peek follows the store-down policy (fail
/// open, the default: OK). Back up, charges apply again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_the_store_does_not_take_is_unavailable_naming_it() {
    let mut cluster = EtcdCluster::single();
    let (_dir, sc) = start_with(&cluster.url("/rls-charge-down"), "llm.yaml", LLM, &[]).await;
    let mut c = sc.client().await;
    assert_eq!(charge(&mut c, "acme", 100).await, (Code::Ok, 900));

    cluster.kill(0);
    let r = req("llm", vec![tenant("acme", Some(300))], 0);
    let e = c.should_rate_limit(r).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e}");
    assert!(
        e.message()
            .contains("descriptors[0]: the charge of 300 to key")
            && e.message().contains("on rule llm.tenant was not recorded")
            && e.message().contains("not retried"),
        "{e}"
    );
    let (code, _) = peek(&mut c, "globex").await;
    assert_eq!(code, Code::Ok, "a peek while the store is down: fail open");

    cluster.restart(0);
    let back = crate::binary::eventually(
        "a charge once etcd is back",
        std::time::Duration::from_secs(30),
        || {
            let mut c = c.clone();
            async move {
                let r = req("llm", vec![tenant("initech", Some(10))], 0);
                c.should_rate_limit(r).await.ok()
            }
        },
    )
    .await;
    assert_eq!(only(&back.into_inner()), (Code::Ok, 990));
}

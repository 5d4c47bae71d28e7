//! The live view names the holders of a hot key's leases (issue 43): two sidecars with
//! `--hot-key-leases` on one real etcd, a hot key hammered over HTTP on both. Sidecar A's
//! `/v1/live` lists the key with each sidecar as a holder with units left (A's own holding
//! read now, B's from its fleet summary), A's page shows "leased by" with the holders on
//! hover; once the load stops and the leases (300 ms) end, no holder is left.
//!
//! Needs `chromium` and `chromedriver`, as the web view's other tests.

use crate::binary;
use crate::sidecar_hot_keys::{exact_flags, hammer_http};
use crate::support;
use crate::web_view::{shows, Driver};

use binary::{http_client, within, Sidecar};
use serde_json::Value;
use std::time::{Duration, Instant};
use support::EtcdCluster;

/// The hot limit's name.
const LIMIT: &str = "hot";
/// Its quota: far above what the clients check, so that each sidecar holds leases all along
/// (a quota used up leaves none to lease for a while) and every fleet summary has them.
const RATE: u64 = 20_000;
const BURST: u64 = 10_000;
/// How long the key is hammered: past two fleet summaries of each sidecar (every 2 s): one
/// may find a sidecar between two leases, its units spent.
const HAMMER: Duration = Duration::from_millis(5000);
/// Bound on seeing the holders (B's summary may come up to 2 s after its first lease).
const SEEN_WITHIN: Duration = Duration::from_secs(8);
/// Bound on the holders' going after the load (B's next summary, 2 s, and the store's read).
const GONE_WITHIN: Duration = Duration::from_secs(8);

/// The holders of the key `hot` of the limit `hot` in A's picture now: (holder, units left);
/// `None` if the picture could not be read or does not list the limit.
async fn holders(http: &reqwest::Client, base: &str) -> Option<Vec<(String, u64)>> {
    let r = http.get(format!("{base}/v1/live")).send().await.ok()?;
    let picture: Value = r.json().await.ok()?;
    let limits = picture["rate_limits"].as_array()?;
    let limit = limits.iter().find(|l| l["name"] == LIMIT)?;
    let keys = limit["fleet_limited_now"].as_array()?;
    let Some(key) = keys.iter().find(|k| k["key"] == "hot") else {
        return Some(Vec::new());
    };
    let by = key["leased_by"].as_array().cloned().unwrap_or_default();
    let by = by
        .iter()
        .map(|h| {
            let holder = h["holder"].as_str().unwrap_or_default().to_string();
            (holder, h["units_left"].as_u64().unwrap_or(0))
        })
        .collect();
    Some(by)
}

/// Polls A's picture (bounded in count and time) until each of `want` was seen at some
/// point holding units of the key with units left; the holdings seen.
async fn seen_holding(http: &reqwest::Client, base: &str, want: &[&str]) -> Vec<(String, u64)> {
    let started = Instant::now();
    let mut seen: Vec<(String, u64)> = Vec::new();
    for _ in 0..500 {
        for (holder, units) in holders(http, base).await.unwrap_or_default() {
            if units > 0 && !seen.iter().any(|(h, _)| *h == holder) {
                eprintln!(
                    "leases: {holder} seen holding {units} units of the hot key after {} ms",
                    started.elapsed().as_millis()
                );
                seen.push((holder, units));
            }
        }
        if want.iter().all(|w| seen.iter().any(|(h, _)| h == w)) || started.elapsed() > SEEN_WITHIN
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    seen
}

/// The hover titles of the page's "leased by" badges, once one names `holder` (bounded).
async fn badge_title(b: &fantoccini::Client, holder: &str) -> String {
    let script = "return [...document.querySelectorAll('[data-rate-limit=\"hot\"] .leased')]\
                  .map((e) => e.textContent + ' | ' + e.title).join(' || ');";
    let started = Instant::now();
    let mut last = String::new();
    for _ in 0..200 {
        let v = b.execute(script, Vec::new()).await.unwrap_or_default();
        last = v.as_str().unwrap_or_default().to_string();
        if last.contains(&format!("{holder}: ")) || started.elapsed() > SEEN_WITHIN {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_keys_lease_holders_are_shown_while_they_hold_and_gone_after() {
    let etcd = EtcdCluster::single();
    let url = etcd.url("/leased-view");
    let start = |owner: &'static str| {
        let mut flags = exact_flags(&url, true);
        flags.extend(["--owner", owner]);
        let flags: Vec<String> = flags.into_iter().map(str::to_string).collect();
        async move {
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            Sidecar::start(&flags).await
        }
    };
    let (a, b) = tokio::join!(start("lease-a"), start("lease-b"));
    let http = http_client();
    let put = http
        .put(format!("{}/v1/ratelimits/{LIMIT}", a.url))
        .json(&serde_json::json!({"limit": RATE, "period": "1s", "burst": BURST}))
        .send()
        .await
        .expect("PUT the quota");
    assert!(put.status().is_success(), "PUT the quota: {}", put.status());
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    browser
        .goto(&format!("{}/ui", a.url))
        .await
        .expect("open /ui");
    shows(&browser, "#rate-limits", LIMIT, Duration::from_secs(10)).await;

    let bases = [a.url.clone(), b.url.clone()];
    let load = tokio::spawn(async move { hammer_http(&bases, LIMIT, HAMMER).await });
    let (seen, title) = tokio::join!(
        seen_holding(&http, &a.url, &["lease-a", "lease-b"]),
        badge_title(&browser, "lease-a")
    );
    let clients = within("the load", HAMMER + Duration::from_secs(90), load)
        .await
        .expect("the load's task");
    let stopped = Instant::now();
    let admitted: usize = clients.iter().flatten().map(|s| s.admitted.len()).sum();
    eprintln!("leases: {admitted} checks admitted; seen {seen:?}; badge {title:?}");
    for s in clients.iter().flatten() {
        assert_eq!(s.failed, None, "a check of the hot key failed");
    }
    for holder in ["lease-a", "lease-b"] {
        assert!(
            seen.iter().any(|(h, units)| h == holder && *units > 0),
            "{holder} was never shown holding units of the hot key in A's live picture within \
             {SEEN_WITHIN:?} ({admitted} checks admitted); seen: {seen:?}"
        );
    }
    assert!(
        title.contains("leased by") && title.contains("lease-a: "),
        "A's page showed no \"leased by\" badge naming lease-a on the hot key: {title:?}"
    );

    // The load stopped: the leases end (300 ms), B's next summary says so; no holder left.
    binary::eventually("no holder of the hot key", GONE_WITHIN, || {
        let (http, base) = (http.clone(), a.url.clone());
        async move { holders(&http, &base).await?.is_empty().then_some(()) }
    })
    .await;
    eprintln!(
        "leases: no holder shown {} ms after the load stopped",
        stopped.elapsed().as_millis()
    );
    browser.close().await.expect("close the browser");
}

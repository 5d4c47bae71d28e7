//! The fleet: each sidecar publishes a compact summary of what it decided (rates per limit,
//! its keys limited now) on a store board bound to its session (`Limiter::announce`), so the
//! summary vanishes with the sidecar; any viewer reads every summary and merges them
//! (`gather.rs`), so one page shows the whole fleet.

use super::leases;
use super::picture::{FleetLimit, FleetMember, LeasedUnitsView};
use super::recorder::Recorder;
use clusterlimit::{validate::MAX_ANNOUNCEMENT_BYTES, Limiter};
use std::time::Duration;

/// The board the summaries are published on.
pub const BOARD: &str = "clusterlimit-live";
/// How often a sidecar publishes its summary.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(2);
/// Keys listed per limit in a summary.
const KEYS_PER_LIMIT: usize = 10;
/// What a summary may take of a board value (the rest is headroom for the JSON framing).
const SUMMARY_BUDGET: usize = MAX_ANNOUNCEMENT_BYTES - 4096;

/// This process's summary now: its busiest limits first, as many as fit the budget, each
/// with the keys `leased` of it (each held key with its limit's name).
pub fn summary(
    owner: &str,
    recorder: &Recorder,
    leased: &[(String, LeasedUnitsView)],
    now_ms: u64,
) -> FleetMember {
    let mut limits: Vec<FleetLimit> = recorder
        .limits()
        .into_iter()
        .map(|name| {
            let v = recorder.view(&name, now_ms);
            let mut keys = v.limited_now;
            keys.truncate(KEYS_PER_LIMIT);
            FleetLimit {
                admitted_per_s: v.admitted_per_s,
                denied_per_s: v.denied_per_s,
                leased: leases::of_limit(leased, &name),
                name,
                limited_now: keys,
            }
        })
        .collect();
    limits.sort_by(|a, b| {
        (b.admitted_per_s + b.denied_per_s).total_cmp(&(a.admitted_per_s + a.denied_per_s))
    });
    let mut member = FleetMember {
        id: String::new(),
        owner: owner.to_string(),
        at_unix_ms: now_ms,
        limits: Vec::new(),
    };
    let mut size = serde_json::to_vec(&member).map_or(0, |v| v.len());
    for l in limits {
        let more = serde_json::to_vec(&l).map_or(usize::MAX, |v| v.len() + 1);
        if size.saturating_add(more) > SUMMARY_BUDGET {
            break;
        }
        size += more;
        member.limits.push(l);
    }
    member
}

/// Publishes `member` for this Limiter (replacing its last summary).
pub async fn publish(limiter: &Limiter, member: &FleetMember) -> clusterlimit::Result<()> {
    let bytes = serde_json::to_vec(member).map_err(|e| {
        clusterlimit::Error::invalid(format!("the summary could not be encoded: {e}"))
    })?;
    limiter.announce(BOARD, &bytes).await
}

/// Every live sidecar's summary, by id (summaries that do not parse are skipped: a newer or
/// older sidecar may publish fields this one does not know, which serde ignores, but never
/// garbage). Empty if the store does not answer within `timeout`.
pub async fn read(limiter: &Limiter, timeout: Duration) -> Vec<FleetMember> {
    let Ok(Ok(all)) = tokio::time::timeout(timeout, limiter.announcements(BOARD)).await else {
        return Vec::new();
    };
    all.into_iter()
        .filter_map(|a| {
            let mut m: FleetMember = serde_json::from_slice(&a.value).ok()?;
            m.id = a.id;
            Some(m)
        })
        .collect()
}

/// Publishes this sidecar's summary every [`PUBLISH_EVERY`] until `stop`; a failed publish
/// (store down, session lost) is tried again at the next period.
pub async fn publish_forever(
    limiter: Limiter,
    recorder: std::sync::Arc<Recorder>,
    stop: tokio_util::sync::CancellationToken,
) {
    let owner = limiter.owner().to_string();
    let mut failing = false;
    loop {
        let leased = leases::held(&limiter.leased_keys());
        let member = summary(&owner, &recorder, &leased, super::clock::unix_ms());
        match tokio::time::timeout(PUBLISH_EVERY, publish(&limiter, &member)).await {
            Ok(Ok(())) => {
                if failing {
                    tracing::info!("live view: this sidecar's fleet summary is published again");
                }
                failing = false;
            }
            Ok(Err(e)) => {
                if !failing {
                    tracing::warn!("live view: publishing this sidecar's fleet summary to the store failed: {e}; retrying every {}", humantime::format_duration(PUBLISH_EVERY));
                }
                failing = true;
            }
            Err(_) => {
                if !failing {
                    tracing::warn!("live view: publishing this sidecar's fleet summary to the store timed out; retrying every {}", humantime::format_duration(PUBLISH_EVERY));
                }
                failing = true;
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(PUBLISH_EVERY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::top_keys::Hit;

    #[test]
    fn a_summary_fits_a_board_value_whatever_the_limits() {
        let r = Recorder::default();
        let now = 1_700_000_000_000;
        for l in 0..300 {
            for k in 0..40 {
                let key = format!("{}-{k}", "k".repeat(400));
                r.record(
                    &format!("limit-{l}"),
                    &key,
                    Hit {
                        cost: 1,
                        class: crate::live::top_keys::ClassTag::NONE,
                        allowed: false,
                        remaining: 0,
                        limit: 5,
                        reset_ms: 100,
                        now_ms: now,
                    },
                );
            }
        }
        let leased: Vec<(String, LeasedUnitsView)> = (0..300)
            .flat_map(|l| {
                (0..40).map(move |k| {
                    let key = format!("{}-{k}", "k".repeat(400));
                    let units = LeasedUnitsView { key, units_left: 7 };
                    (format!("limit-{l}"), units)
                })
            })
            .collect();
        let s = summary("a", &r, &leased, now + 500);
        let bytes = serde_json::to_vec(&s).unwrap_or_default();
        assert!(bytes.len() <= MAX_ANNOUNCEMENT_BYTES, "{}", bytes.len());
        assert!(!s.limits.is_empty());
        assert!(s
            .limits
            .iter()
            .all(|l| l.limited_now.len() <= KEYS_PER_LIMIT
                && l.leased.len() <= leases::KEYS_PER_LIMIT
                && !l.leased.is_empty()));
    }
}

//! Who holds leased units of a rate limit's keys (hot keys served from leases, issue 43). Each
//! sidecar lists the keys it holds in its fleet summary; a viewer marks them in the limit's
//! fleet key list, adding the held keys not listed. This process's own holding is read now
//! (`Limiter::leased_keys`, no store request), not from its last summary: a lease lasts
//! 300 ms, a summary is published every 2 s.

use super::picture::{FleetMember, KeyView, LeaseHolderView, LeasedUnitsView, RateLimitView};
use clusterlimit::{LeasedKey, Limiter};
use std::collections::BTreeMap;

/// Held keys listed per limit: in a summary, and added to a fleet key list.
pub const KEYS_PER_LIMIT: usize = 10;

/// What this process holds now, by the name and id its fleet summary has.
pub struct Own {
    /// Its summary's id: that summary's holding is replaced by `keys`.
    pub id: String,
    /// How the fleet list names it.
    pub owner: String,
    /// Each held key with its limit's name.
    pub keys: Vec<(String, LeasedUnitsView)>,
}

impl Own {
    /// What `limiter` holds now (nothing for a Limiter without hot-key leases, as `top`'s).
    pub fn of(limiter: &Limiter) -> Own {
        Own {
            id: limiter.announcer_id().to_string(),
            owner: limiter.owner().to_string(),
            keys: held(&limiter.leased_keys()),
        }
    }
}

/// Each key of `keys` with its limit's name.
pub fn held(keys: &[LeasedKey]) -> Vec<(String, LeasedUnitsView)> {
    keys.iter()
        .map(|k| {
            let units = LeasedUnitsView {
                key: k.key.clone(),
                units_left: k.units_left,
            };
            (k.limit.clone(), units)
        })
        .collect()
}

/// The keys of the limit `name` in `keys`, most units left first, at most
/// [`KEYS_PER_LIMIT`].
pub fn of_limit(keys: &[(String, LeasedUnitsView)], name: &str) -> Vec<LeasedUnitsView> {
    let mut held: Vec<LeasedUnitsView> = keys
        .iter()
        .filter(|(limit, _)| limit == name)
        .map(|(_, k)| k.clone())
        .collect();
    held.sort_by(|a, b| {
        b.units_left
            .cmp(&a.units_left)
            .then_with(|| a.key.cmp(&b.key))
    });
    held.truncate(KEYS_PER_LIMIT);
    held
}

/// Marks each key of `v`'s fleet list with the sidecars holding leased units of it: `own`
/// (now) and every other sidecar of `fleet` (as its summary says). Held keys not listed are
/// added, most units left first, at most [`KEYS_PER_LIMIT`].
pub fn merge(v: &mut RateLimitView, fleet: &[FleetMember], own: &Own) {
    let mut holders: BTreeMap<String, Vec<LeaseHolderView>> = BTreeMap::new();
    let mut note = |holder: &str, held: &[LeasedUnitsView]| {
        for k in held {
            holders
                .entry(k.key.clone())
                .or_default()
                .push(LeaseHolderView {
                    holder: holder.to_string(),
                    units_left: k.units_left,
                });
        }
    };
    note(&own.owner, &of_limit(&own.keys, &v.name));
    for m in fleet.iter().filter(|m| m.id != own.id) {
        for l in m.limits.iter().filter(|l| l.name == v.name) {
            note(&m.owner, &l.leased);
        }
    }
    let mut added = Vec::new();
    for (key, mut by) in holders {
        by.sort_by(|a, b| a.holder.cmp(&b.holder));
        match v.fleet_limited_now.iter_mut().find(|k| k.key == key) {
            Some(row) => row.leased_by = by,
            None => added.push(KeyView {
                key,
                sidecars: by.iter().map(|h| h.holder.clone()).collect(),
                leased_by: by,
                ..KeyView::default()
            }),
        }
    }
    added.sort_by_key(|k| std::cmp::Reverse(units_left(k)));
    added.truncate(KEYS_PER_LIMIT);
    v.fleet_limited_now.extend(added);
}

/// Units left in every lease of the key `k`, whoever holds them.
pub fn units_left(k: &KeyView) -> u64 {
    k.leased_by.iter().map(|h| h.units_left).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::picture::FleetLimit;

    fn leased(key: &str, units_left: u64) -> LeasedUnitsView {
        LeasedUnitsView {
            key: key.to_string(),
            units_left,
        }
    }

    fn member(id: &str, held: Vec<LeasedUnitsView>) -> FleetMember {
        FleetMember {
            id: id.to_string(),
            owner: format!("sidecar-{id}"),
            at_unix_ms: 0,
            limits: vec![FleetLimit {
                name: "api".to_string(),
                leased: held,
                ..FleetLimit::default()
            }],
        }
    }

    #[test]
    fn holders_are_merged_own_holding_read_now_and_held_keys_added() {
        let mut v = RateLimitView {
            name: "api".to_string(),
            fleet_limited_now: vec![KeyView {
                key: "denied".to_string(),
                denied_per_s: 3.0,
                ..KeyView::default()
            }],
            ..RateLimitView::default()
        };
        // This process's last summary (stale) is replaced by what it holds now.
        let fleet = [
            member("a", vec![leased("old", 500)]),
            member("b", vec![leased("hot", 140), leased("denied", 7)]),
        ];
        let own = Own {
            id: "a".to_string(),
            owner: "sidecar-a".to_string(),
            keys: vec![
                ("api".to_string(), leased("hot", 200)),
                ("other".to_string(), leased("hot", 900)),
            ],
        };
        merge(&mut v, &fleet, &own);
        let keys: Vec<&str> = v.fleet_limited_now.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(keys, ["denied", "hot"]);
        let hot = &v.fleet_limited_now[1];
        let by: Vec<(&str, u64)> = hot
            .leased_by
            .iter()
            .map(|h| (h.holder.as_str(), h.units_left))
            .collect();
        assert_eq!(by, [("sidecar-a", 200), ("sidecar-b", 140)]);
        assert_eq!(units_left(hot), 340);
        assert_eq!(hot.sidecars, ["sidecar-a", "sidecar-b"]);
        assert_eq!(v.fleet_limited_now[0].leased_by[0].units_left, 7);
    }
}

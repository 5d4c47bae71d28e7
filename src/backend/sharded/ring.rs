//! Which cluster keeps a key: a consistent-hash ring with virtual nodes, so adding a cluster
//! moves only the keys the new cluster takes (about 1/N of them) and none between the old
//! ones. Pure code with a hash fixed in `backend/key_hash.rs`, so every client, whatever its
//! build, places every key on the same cluster.

use crate::backend::key_hash::{hash, key_hash};

/// Points each cluster has on the ring: enough that shares stay within a few percent of 1/N.
const POINTS_PER_CLUSTER: u32 = 160;

/// The ring of a list of clusters, each known by its identity (see `store_url.rs`): a
/// cluster's points depend on its identity alone, not on its place in the list.
#[derive(Debug, Clone)]
pub(crate) struct Ring {
    /// (point, cluster index), sorted by point.
    points: Vec<(u64, usize)>,
}

impl Ring {
    /// The ring of clusters with these identities (distinct, at least one).
    pub(crate) fn new(ids: &[String]) -> Ring {
        let mut points: Vec<(u64, usize)> = ids
            .iter()
            .enumerate()
            .flat_map(|(i, id)| {
                (0..POINTS_PER_CLUSTER).map(move |p| (hash(format!("{id}#{p}").as_bytes()), i))
            })
            .collect();
        // Ties (vanishingly rare) are broken by identity, not by list order.
        points.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| ids[a.1].cmp(&ids[b.1])));
        Ring { points }
    }

    /// The index of the cluster that keeps `key` of `limit`.
    pub(crate) fn cluster(&self, limit: &str, key: &str) -> usize {
        let h = key_hash(limit, key);
        let at = self.points.partition_point(|(p, _)| *p < h);
        self.points
            .get(at)
            .or_else(|| self.points.first())
            .map_or(0, |(_, i)| *i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::key_hash::hash_tag;

    fn ids(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn adding_a_cluster_moves_about_a_third_and_nothing_between_the_old_ones() {
        let two = Ring::new(&ids(&["etcd://a:2379/p", "etcd://b:2379/p"]));
        let three = Ring::new(&ids(&[
            "etcd://a:2379/p",
            "etcd://b:2379/p",
            "etcd://c:2379/p",
        ]));
        let n = 100_000;
        let mut moved = 0;
        let mut on_first = 0;
        for i in 0..n {
            let key = format!("user-{i}");
            let (before, after) = (two.cluster("api", &key), three.cluster("api", &key));
            on_first += usize::from(before == 0);
            if before != after {
                assert_eq!(after, 2, "{key} moved between the old clusters");
                moved += 1;
            }
        }
        let share = f64::from(moved) / f64::from(n);
        assert!((0.28..0.39).contains(&share), "moved {share}");
        let first = on_first as f64 / f64::from(n);
        assert!(
            (0.42..0.58).contains(&first),
            "first cluster's share {first}"
        );
    }

    #[test]
    fn list_order_does_not_move_keys() {
        let ab = Ring::new(&ids(&["a", "b", "c"]));
        let ba = Ring::new(&ids(&["c", "a", "b"]));
        let name = |r: &Ring, order: &[&str], k: &str| order[r.cluster("l", k)].to_string();
        for i in 0..1000 {
            let k = format!("k{i}");
            assert_eq!(
                name(&ab, &["a", "b", "c"], &k),
                name(&ba, &["c", "a", "b"], &k)
            );
        }
    }

    #[test]
    fn hash_tags_keep_keys_together() {
        assert_eq!(hash_tag("{user42}:ip"), Some("user42"));
        assert_eq!(hash_tag("x{a}{b}"), Some("a"));
        assert_eq!(hash_tag("{}x{a}"), None, "an empty first tag means no tag");
        assert_eq!(hash_tag("no-tag}{"), None);
        assert_eq!(hash_tag("{open"), None);
        let ring = Ring::new(&ids(&["a", "b"]));
        for i in 0..200 {
            let tag = format!("{{user{i}}}");
            let at = ring.cluster("per-ip", &format!("{tag}:ip"));
            assert_eq!(ring.cluster("per-path", &format!("{tag}:path")), at);
            assert_eq!(ring.cluster("global", &format!("all{tag}")), at);
        }
        // Without tags, the same key of two limits is placed independently.
        let apart = (0..200)
            .filter(|i| ring.cluster("x", &format!("k{i}")) != ring.cluster("y", &format!("k{i}")))
            .count();
        assert!(apart > 50, "{apart}");
    }

    #[test]
    fn the_hash_is_fixed() {
        // Clients of every build must agree: these values may never change.
        assert_eq!(hash(b""), 0xefd0_1f60_ba99_2926);
        assert_eq!(hash(b"user42"), 0xda60_44ba_e879_d2da);
    }
}

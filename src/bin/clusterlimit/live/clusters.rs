//! Each cluster's reachability over time: one probe per picture (`Limiter::cluster_health`),
//! remembered between pictures so a view can say since when a cluster has been unreachable (or
//! answering), and note a health event when one changes.

use super::picture::ClusterView;
use clusterlimit::ClusterHealth;
use std::collections::HashMap;

/// What the last picture saw of each cluster, by position: reachable or not, and since when.
#[derive(Default)]
pub struct ClusterMemory {
    states: HashMap<usize, (bool, u64)>,
}

impl ClusterMemory {
    /// The views of `health` seen at `now_ms`, and an event for each cluster that changed
    /// state since the last call (its first unreachable probe counts as a change).
    pub fn note(
        &mut self,
        health: &[ClusterHealth],
        now_ms: u64,
    ) -> (Vec<ClusterView>, Vec<String>) {
        let mut events = Vec::new();
        let views = health
            .iter()
            .map(|h| {
                let reachable = h.error.is_none();
                let position = h.cluster.position;
                let name = h.cluster.describe().to_string();
                let since = match self.states.get(&position) {
                    Some((was, since)) if *was == reachable => *since,
                    before => {
                        if before.is_some() || !reachable {
                            let error = h.error.as_deref().map(without_kind);
                            events.push(event(&name, error.as_deref()));
                        }
                        now_ms
                    }
                };
                self.states.insert(position, (reachable, since));
                ClusterView {
                    position,
                    name,
                    reachable,
                    latency_ms: h.answered_in.map(|d| d.as_secs_f64() * 1000.0),
                    error: h.error.as_deref().map(without_kind),
                    since_unix_ms: since,
                }
            })
            .collect();
        (views, events)
    }
}

/// The library's error text without its `store error: ` kind: after "because", the reason.
fn without_kind(e: &str) -> String {
    e.strip_prefix("store error: ").unwrap_or(e).to_string()
}

/// `cluster 2 of 2 (etcd://…) is unreachable: …`, or `… is answering again`.
fn event(name: &str, error: Option<&str>) -> String {
    match error {
        Some(e) => format!("{name} is unreachable: {e}"),
        None => format!("{name} is answering again"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clusterlimit::Limiter;

    async fn health(error: Option<&str>) -> Vec<ClusterHealth> {
        let limiter = Limiter::connect("memory://cluster-memory").await.unwrap();
        let mut h = limiter
            .cluster_health(std::time::Duration::from_secs(1))
            .await
            .unwrap();
        h[0].error = error.map(str::to_string);
        h[0].answered_in = None;
        h
    }

    #[tokio::test]
    async fn the_state_keeps_its_start_and_each_change_is_an_event() {
        let mut m = ClusterMemory::default();
        let (v, e) = m.note(&health(None).await, 1_000);
        assert!(v[0].reachable && e.is_empty());
        let (v, e) = m.note(&health(Some("no answer within 1000 ms")).await, 2_000);
        assert_eq!(v[0].since_unix_ms, 2_000);
        assert_eq!(e, ["the store is unreachable: no answer within 1000 ms"]);
        let (v, e) = m.note(&health(Some("no answer within 1000 ms")).await, 3_000);
        assert_eq!((v[0].since_unix_ms, e.len()), (2_000, 0));
        let (v, e) = m.note(&health(None).await, 4_000);
        assert_eq!(
            (v[0].since_unix_ms, e),
            (4_000, vec!["the store is answering again".into()])
        );
    }
}

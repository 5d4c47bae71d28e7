//! The header's words about the store: reachable or not (since when, and why), for the store
//! and for each cluster of a sharded store, and whether the panes are the last ones read.

use crate::live::clock::time_of_day;
use crate::live::picture::{ClusterView, Picture, StoreView};
use ratatui::style::Color;
use ratatui::text::{Line, Span};

/// The store's state on the header's first line: `reachable, 0.7 ms`, `unreachable since
/// 14:02:11 UTC, because …`, or, for a sharded store, how many clusters do not answer.
pub fn store_state(s: &StoreView) -> Span<'static> {
    if s.clusters.len() > 1 {
        let down = s.clusters.iter().filter(|c| !c.reachable).count();
        if down > 0 {
            let text = format!("{down} of {} clusters unreachable", s.clusters.len());
            return Span::styled(text, Color::Red);
        }
    }
    match (s.clusters.as_slice(), s.latency_ms) {
        ([one], _) if s.clusters.len() == 1 => cluster_state(one),
        (_, Some(ms)) if s.reachable => {
            Span::styled(format!("reachable, {ms:.1} ms"), Color::Green)
        }
        _ if s.reachable => Span::styled("reachable", Color::Green),
        _ => match &s.error {
            Some(why) => Span::styled(format!("unreachable, because {why}"), Color::Red),
            None => Span::styled("unreachable", Color::Red),
        },
    }
}

/// One line per cluster of a sharded store (none for a store of one cluster).
pub fn cluster_lines(s: &StoreView) -> Vec<Line<'static>> {
    if s.clusters.len() < 2 {
        return Vec::new();
    }
    s.clusters
        .iter()
        .map(|c| Line::from(vec![Span::raw(format!("  {}: ", c.name)), cluster_state(c)]))
        .collect()
}

/// `reachable, 0.7 ms`, or `unreachable since 14:02:11 UTC, because …`.
fn cluster_state(c: &ClusterView) -> Span<'static> {
    if c.reachable {
        let text = match c.latency_ms {
            Some(ms) => format!("reachable, {ms:.1} ms"),
            None => "reachable".to_string(),
        };
        return Span::styled(text, Color::Green);
    }
    let since = time_of_day(c.since_unix_ms);
    let text = match &c.error {
        Some(why) => format!("unreachable since {since}, because {why}"),
        None => format!("unreachable since {since}"),
    };
    Span::styled(text, Color::Red)
}

/// `as of 14:02:09 UTC, store unreachable`: the mark of panes kept from an earlier picture.
pub fn stale_mark(p: &Picture) -> Option<String> {
    let stale = p.stale.as_ref()?;
    let what = if p.store.reachable {
        "not read now"
    } else {
        "store unreachable"
    };
    Some(format!(
        "as of {}, {what}",
        time_of_day(stale.as_of_unix_ms)
    ))
}

/// The header's last line when the panes are kept ones: as of when, and why (unless the
/// store's own lines say why).
pub fn stale_line(p: &Picture) -> Option<Line<'static>> {
    let mark = stale_mark(p)?;
    let why = p.stale.as_ref().map(|s| s.why.as_str()).unwrap_or_default();
    // An unreachable store's reason is on the lines above already.
    let text = if why.is_empty() || !p.store.reachable {
        format!("the panes below are the last read, {mark}")
    } else {
        format!("the panes below are the last read, {mark}: {why}")
    };
    Some(Line::styled(text, Color::Yellow))
}

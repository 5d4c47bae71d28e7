//! The layout: a header (the store), a Semaphores pane over a Rate limits pane, each a list
//! on the left and the selected row's details on the right (as the web view lays them out).

use super::feed::Feed;
use super::keys::{Pane, Selection};
use super::store_lines;
use crate::live::picture::{HolderView, KeyView, Picture, RateLimitView, SemaphoreView};
use ratatui::layout::Constraint::{Fill, Length, Min};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Row, Table, TableState, Wrap};
use ratatui::Frame;
use std::time::Duration;

/// Draws the whole screen.
pub fn draw(frame: &mut Frame, feed: &Feed, sel: &mut Selection, interval: Duration) {
    let (picture, age) = match feed {
        Feed::Shown { picture, at } => (Some(picture.as_ref()), Some(at.elapsed())),
        _ => (None, None),
    };
    let header_text = header_lines(feed, picture, age);
    let header_height = u16::try_from(header_text.len().max(3)).unwrap_or(3);
    let [header, sems, rates, footer] = Layout::vertical([
        Constraint::Length(header_height),
        Constraint::Fill(1),
        Constraint::Fill(1),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    let header_text = Paragraph::new(header_text);
    frame.render_widget(header_text.wrap(Wrap { trim: false }), header);
    let empty = Picture::default();
    let p = picture.unwrap_or(&empty);
    sel.clamp(p.semaphores.len(), p.rate_limits.len());
    let why_empty = match picture {
        None => "connecting…",
        Some(p) if !p.store.reachable => "store unreachable",
        Some(_) => "",
    };
    let stale = store_lines::stale_mark(p);
    let panes = Panes {
        p,
        sel,
        why_empty,
        stale: stale.as_deref(),
    };
    semaphores(frame, sems, panes);
    rate_limits(frame, rates, panes);
    let keys = format!(
        " ↑/↓ or j/k select   Tab switch pane   q quit   (reads the store every {})",
        crate::common::format_duration(interval)
    );
    frame.render_widget(Paragraph::new(keys).dark_gray(), footer);
}

/// What both list panes are drawn from.
#[derive(Clone, Copy)]
struct Panes<'a> {
    p: &'a Picture,
    sel: &'a Selection,
    /// Why the lists are empty: "" once the store was read.
    why_empty: &'a str,
    /// The mark of a picture kept from an earlier read.
    stale: Option<&'a str>,
}

impl Panes<'_> {
    /// The list pane `of`, laid out in `area`, if it has rows; with none, its list says why
    /// and its details are a bare border.
    fn open(self, frame: &mut Frame, area: Rect, of: &ListPane, rows: usize) -> Option<Opened> {
        let [list, detail] =
            Layout::horizontal([Constraint::Percentage(45), Constraint::Percentage(55)])
                .areas(area);
        let focused = self.sel.focus == of.pane;
        let block = pane_block(of.title, focused, self.stale);
        if rows > 0 {
            return Some(Opened {
                list,
                detail,
                block,
                focused,
                columns: of.columns,
            });
        }
        let why = if self.why_empty.is_empty() {
            of.none
        } else {
            self.why_empty
        };
        frame.render_widget(Paragraph::new(why).dark_gray().block(block), list);
        frame.render_widget(Block::bordered().title(of.detail_title), detail);
        None
    }
}

/// What sets one list pane apart from the other.
struct ListPane {
    pane: Pane,
    title: &'static str,
    /// The list's text when it is empty with nothing wrong.
    none: &'static str,
    /// The details' title with nothing selected.
    detail_title: &'static str,
    /// The list's columns: header and width.
    columns: &'static [(&'static str, Constraint)],
}

const SEMAPHORES: ListPane = ListPane {
    pane: Pane::Semaphores,
    title: "Semaphores",
    none: "no semaphores",
    detail_title: " Holders ",
    columns: &[
        ("NAME", Min(10)),
        ("USED/CAPACITY", Length(18)),
        ("WAITING", Length(7)),
        ("GRANTS/S", Length(8)),
    ],
};

const RATE_LIMITS: ListPane = ListPane {
    pane: Pane::RateLimits,
    // Only sidecars publish rates: checks by the CLI or the library are not in them.
    title: "Rate limits (sidecar rates)",
    none: "no rate limits",
    detail_title: " Keys denied in the last 10 s ",
    columns: &[
        ("NAME", Fill(1)),
        ("QUOTA", Fill(2)),
        ("ADMITTED/S", Length(10)),
        ("DENIED/S", Length(8)),
    ],
};

/// A list pane with rows: where its list and details go, its border, whether it has the focus.
struct Opened {
    list: Rect,
    detail: Rect,
    block: Block<'static>,
    focused: bool,
    columns: &'static [(&'static str, Constraint)],
}

impl Opened {
    /// Draws `rows` as the list, the `selected` one marked (reversed in the focused pane) and
    /// scrolled into view; returns where the details go.
    fn list<'a>(
        self,
        frame: &mut Frame,
        rows: impl IntoIterator<Item = Row<'a>>,
        selected: usize,
    ) -> Rect {
        let style = if self.focused {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            Style::new().add_modifier(Modifier::BOLD)
        };
        let table = headed(rows, self.columns, self.block)
            .row_highlight_style(style)
            .highlight_symbol("> ");
        let mut state = TableState::default().with_selected(Some(selected));
        frame.render_stateful_widget(table, self.list, &mut state);
        self.detail
    }
}

fn header_lines(feed: &Feed, p: Option<&Picture>, age: Option<Duration>) -> Vec<Line<'static>> {
    let (Some(p), Some(age)) = (p, age) else {
        let url = match feed {
            Feed::Connecting { url } => url.clone(),
            _ => String::new(),
        };
        return vec![Line::from(vec![
            "clusterlimit top  ".bold(),
            Span::raw(format!("connecting to {url}…")),
        ])];
    };
    let s = &p.store;
    let state = store_lines::store_state(s);
    let mut first = vec![
        "clusterlimit top  ".bold(),
        Span::raw(format!("{}  ", s.url)),
        state,
    ];
    // The store's members, the leader marked (etcd says who leads; ZooKeeper does not).
    if !s.members.is_empty() {
        let members: Vec<String> = s
            .members
            .iter()
            .map(|m| match m.role.as_str() {
                "leader" => format!("{}*", m.name),
                _ => m.name.clone(),
            })
            .collect();
        first.push(Span::raw(format!("   members {}", members.join(" "))).dark_gray());
    }
    let first = Line::from(first);
    let mut stats = format!(
        "updated {} ago   session TTL {}   {} semaphores",
        ago(age),
        ms_text(s.session_ttl_ms),
        p.semaphores_total
    );
    if p.semaphores.len() < p.semaphores_total {
        stats.push_str(&format!(" ({} shown)", p.semaphores.len()));
    }
    stats.push_str(&format!("   {} rate limits", p.rate_limits.len()));
    // The panes' staleness, else the latest health event.
    let last = match (store_lines::stale_line(p), s.events.last()) {
        (Some(stale), _) => stale,
        (None, Some(e)) => Line::raw(format!("last event: {}", e.what)).dark_gray(),
        (None, None) => Line::raw(""),
    };
    let mut lines = vec![first];
    lines.extend(store_lines::cluster_lines(s));
    lines.extend([Line::raw(stats), last]);
    lines
}

/// The Semaphores pane: the list, and the selected one's holders and waiters.
fn semaphores(frame: &mut Frame, area: Rect, panes: Panes) {
    let (p, sel) = (panes.p, panes.sel);
    let Some(at) = panes.open(frame, area, &SEMAPHORES, p.semaphores.len()) else {
        return;
    };
    // The name column: what the fixed ones, the borders and the marker leave.
    let name_w = usize::from(at.list.width).saturating_sub(2 + 2 + 18 + 7 + 8 + 3);
    let rows = p.semaphores.iter().map(|s| {
        Row::new(vec![
            fit(&s.name, name_w),
            gauge(s),
            s.waiters.len().to_string(),
            rate(s.grants_per_s),
        ])
    });
    let detail = at.list(frame, rows, sel.semaphore);
    if let Some(s) = p.semaphores.get(sel.semaphore) {
        semaphore_detail(frame, detail, s);
    }
}

/// `████░░░░░░ 2/5`: used of capacity.
fn gauge(s: &SemaphoreView) -> String {
    if s.error.is_some() {
        return "unreadable".into();
    }
    const WIDTH: u64 = 8;
    let filled = if s.capacity == 0 {
        0
    } else {
        (u64::from(s.used.min(s.capacity)) * WIDTH).div_ceil(u64::from(s.capacity))
    };
    let bar: String = (0..WIDTH)
        .map(|i| if i < filled { '█' } else { '░' })
        .collect();
    format!("{bar} {}/{}", s.used, s.capacity)
}

fn semaphore_detail(frame: &mut Frame, area: Rect, s: &SemaphoreView) {
    if let Some(e) = &s.error {
        let block = Block::bordered().title(format!(" {} ", s.name));
        let text = format!("could not read its status: {e}");
        frame.render_widget(Paragraph::new(text).red().block(block), area);
        return;
    }
    // A fair semaphore's classes above its queues.
    let area = if s.classes.is_empty() {
        area
    } else {
        let lines = class_lines(s);
        let height = u16::try_from(lines.len() + 2).unwrap_or(u16::MAX);
        let [classes, rest] =
            Layout::vertical([Constraint::Length(height), Constraint::Fill(1)]).areas(area);
        let block = Block::bordered().title(format!(" Classes of {} ", s.name));
        let text: Vec<Line> = lines.into_iter().map(Line::raw).collect();
        frame.render_widget(Paragraph::new(text).block(block), classes);
        rest
    };
    let [holders, waiters] =
        Layout::vertical([Constraint::Fill(1), Constraint::Fill(1)]).areas(area);
    let title = format!(" Holders of {}{} ", s.name, controller_text(s));
    queue(frame, holders, &title, "HELD FOR", &s.holders, "no holders");
    let title = format!(" Waiters of {}, in queue order ", s.name);
    queue(
        frame,
        waiters,
        &title,
        "WAITING FOR",
        &s.waiters,
        "no waiters",
    );
}

/// A fair semaphore's classes, one line each: `batch  held 3 of 0 guaranteed (borrowing 3),
/// 2 waiting: tenant-a, tenant-b`.
fn class_lines(s: &SemaphoreView) -> Vec<String> {
    let name_w = s.classes.iter().map(|c| c.name.len()).max().unwrap_or(0);
    s.classes
        .iter()
        .map(|c| {
            let borrowing = match c.borrowing() {
                0 => String::new(),
                n => format!(" (borrowing {n})"),
            };
            let flows = if c.waiting_flows.is_empty() {
                String::new()
            } else {
                format!(": {}", c.waiting_flows.join(", "))
            };
            format!(
                "{:<name_w$}  held {} of {} guaranteed{borrowing}, {} waiting{flows}",
                c.name, c.held, c.guaranteed, c.waiting
            )
        })
        .collect()
}

/// `, controller: held by host-a/1`: an adaptive semaphore's controller seat, if it has one.
fn controller_text(s: &SemaphoreView) -> String {
    let Some(c) = &s.controller else {
        return String::new();
    };
    let holder = match &c.holder {
        Some(h) => format!("held by {}", h.owner),
        None => "nobody holds it".to_string(),
    };
    match c.waiting {
        0 => format!(", controller: {holder}"),
        n => format!(", controller: {holder} ({n} waiting to take over)"),
    }
}

/// Holders or waiters: owner, permits, token, for how long.
fn queue(frame: &mut Frame, area: Rect, title: &str, since: &str, rows: &[HolderView], none: &str) {
    let block = Block::bordered().title(title.to_string());
    if rows.is_empty() {
        frame.render_widget(Paragraph::new(none).dark_gray().block(block), area);
        return;
    }
    // On a fair semaphore, each request's flow and class.
    let fair = rows.iter().any(|h| h.flow.is_some() || h.class.is_some());
    let rows = rows.iter().map(|h| {
        let mut cells = vec![h.owner.clone()];
        if fair {
            cells.push(flow_text(h));
        }
        cells.extend([
            h.permits.to_string(),
            h.fencing_token.to_string(),
            ms_text(h.for_ms),
        ]);
        Row::new(cells)
    });
    let mut columns = vec![("OWNER", Fill(1))];
    if fair {
        columns.push(("FLOW / CLASS", Fill(1)));
    }
    columns.extend([
        ("PERMITS", Length(7)),
        ("TOKEN", Length(12)),
        (since, Length(12)),
    ]);
    let table = headed(rows, &columns, block);
    frame.render_widget(table, area);
}

/// `tenant-a / batch`: a fair semaphore's request's flow and class.
fn flow_text(h: &HolderView) -> String {
    format!(
        "{} / {}",
        h.flow.as_deref().unwrap_or("-"),
        h.class.as_deref().unwrap_or("-")
    )
}

/// The Rate limits pane: the list, and the selected limit's keys denied recently.
fn rate_limits(frame: &mut Frame, area: Rect, panes: Panes) {
    let (p, sel) = (panes.p, panes.sel);
    let Some(at) = panes.open(frame, area, &RATE_LIMITS, p.rate_limits.len()) else {
        return;
    };
    // NAME gets one third of what the fixed columns, the borders and the marker leave, QUOTA
    // two thirds.
    let rest = usize::from(at.list.width).saturating_sub(2 + 2 + 10 + 8 + 3);
    let (name_w, quota_w) = (rest / 3, rest * 2 / 3);
    let rows = p.rate_limits.iter().map(|r| {
        let quota = match &r.error {
            Some(e) => format!("unreadable: {e}"),
            None => r.quota.clone(),
        };
        Row::new(vec![
            fit(&r.name, name_w),
            fit(&quota, quota_w),
            seen_rate(r.fleet_admitted_per_s, r.fleet_reporters),
            seen_rate(r.fleet_denied_per_s, r.fleet_reporters),
        ])
    });
    let detail = at.list(frame, rows, sel.rate_limit);
    if let Some(r) = p.rate_limits.get(sel.rate_limit) {
        limited_keys(frame, detail, r);
    }
}

fn limited_keys(frame: &mut Frame, area: Rect, r: &RateLimitView) {
    let block = Block::bordered().title(format!(
        " Keys denied in the last 10 s in {} or leased now, fleet-wide ",
        r.name
    ));
    if r.fleet_limited_now.is_empty() {
        let text = if r.fleet_reporters == 0 {
            "not published: no sidecar checks this limit (the CLI and the library publish no \
             rates or denials)"
        } else {
            "no key denied in the last 10 s, none leased (from the sidecars' published \
             summaries)"
        };
        frame.render_widget(Paragraph::new(text).dark_gray().block(block), area);
        return;
    }
    let rows = r.fleet_limited_now.iter().map(|k| {
        Row::new(vec![
            k.key.clone(),
            rate(k.denied_per_s),
            rate(k.checks_per_s),
            remaining_text(k),
            k.sidecars.join(", "),
            leased_text(k),
        ])
    });
    let columns = [
        ("KEY", Fill(2)),
        ("DENIED/S", Length(8)),
        ("CHECKS/S", Length(8)),
        ("REMAINING/LIMIT", Length(15)),
        ("SIDECARS", Fill(1)),
        ("LEASED BY", Fill(1)),
    ];
    let table = headed(rows, &columns, block);
    frame.render_widget(table, area);
}

/// `remaining/limit` at the key's last reported check; "—" for a key listed only as leased
/// (no sidecar reported a check of it).
fn remaining_text(k: &KeyView) -> String {
    if k.limit == 0 {
        "—".to_string()
    } else {
        format!("{}/{}", k.remaining, k.limit)
    }
}

/// The sidecars holding leased units of the key and the units left in each: `a 200, b 140`;
/// empty if none.
fn leased_text(k: &KeyView) -> String {
    let by: Vec<String> = k
        .leased_by
        .iter()
        .map(|h| format!("{} {}", h.holder, h.units_left))
        .collect();
    by.join(", ")
}

/// A pane's border: bright when it has the focus (the one Up/Down move in), its title marked
/// when the pane is kept from an earlier picture (`stale`).
fn pane_block(title: &str, focused: bool, stale: Option<&str>) -> Block<'static> {
    let style = if focused {
        Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)
    } else {
        Style::new()
    };
    let mark = if focused { " [focus]" } else { "" };
    let stale = stale.map(|s| format!(" — {s}")).unwrap_or_default();
    Block::bordered()
        .border_style(style)
        .title(format!(" {title}{mark}{stale} "))
}

/// Rows in `block` under a bold header, a column per (header, width).
fn headed<'a>(
    rows: impl IntoIterator<Item = Row<'a>>,
    columns: &[(&'a str, Constraint)],
    block: Block<'a>,
) -> Table<'a> {
    let header = Row::new(columns.iter().map(|(name, _)| *name)).bold();
    Table::new(rows, columns.iter().map(|(_, width)| *width))
        .header(header)
        .block(block)
}

/// `text` cut to `width` characters, its end an ellipsis when cut.
fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let kept: String = text.chars().take(width.saturating_sub(1)).collect();
    format!("{kept}…")
}

/// A fleet rate, or "—" when no sidecar reports the limit (unknown, not 0).
fn seen_rate(x: f64, reporters: usize) -> String {
    if reporters == 0 {
        "—".to_string()
    } else {
        rate(x)
    }
}

/// Per-second figures, as the web view prints them.
fn rate(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn ago(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// `850 ms`, `12.5 s`, `3 min 20 s`, `1.5 h`.
fn ms_text(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else if ms < 3_600_000 {
        format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000)
    } else {
        format!("{:.1} h", ms as f64 / 3_600_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_names_end_in_an_ellipsis_and_unseen_rates_are_a_dash() {
        assert_eq!(fit("payments", 8), "payments");
        assert_eq!(fit("payments.controller", 8), "payment…");
        assert_eq!(fit("x", 0), "…");
        assert_eq!(seen_rate(0.0, 0), "—");
        assert_eq!(seen_rate(0.0, 1), "0.00");
    }

    #[test]
    fn a_leased_key_names_its_holders_and_units() {
        let holder = |h: &str, units_left| crate::live::picture::LeaseHolderView {
            holder: h.to_string(),
            units_left,
        };
        let k = KeyView {
            key: "hot".to_string(),
            leased_by: vec![holder("a", 200), holder("b", 140)],
            ..KeyView::default()
        };
        assert_eq!(leased_text(&k), "a 200, b 140");
        assert_eq!(remaining_text(&k), "—");
        let checked = KeyView {
            remaining: 3,
            limit: 5,
            ..KeyView::default()
        };
        assert_eq!(
            (leased_text(&checked), remaining_text(&checked)),
            (String::new(), "3/5".to_string())
        );
    }

    #[test]
    fn gauge_and_durations_read_well() {
        let s = SemaphoreView {
            capacity: 5,
            used: 2,
            ..SemaphoreView::default()
        };
        assert_eq!(gauge(&s), "████░░░░ 2/5");
        assert_eq!(ms_text(850), "850 ms");
        assert_eq!(ms_text(12_500), "12.5 s");
        assert_eq!(ms_text(200_000), "3 min 20 s");
        assert_eq!(rate(0.5), "0.50");
    }

    /// A fair semaphore's detail, drawn: its classes (borrowing, waiting flows) above its
    /// queues, and each holder's flow and class.
    #[test]
    fn a_fair_semaphore_shows_classes_and_flows() {
        use crate::live::picture::ClassView;
        let holder = |owner: &str, flow: &str, class: &str| HolderView {
            owner: owner.into(),
            permits: 1,
            fencing_token: 7,
            for_ms: 1500,
            flow: Some(flow.into()),
            class: Some(class.into()),
        };
        let s = SemaphoreView {
            name: "db".into(),
            capacity: 2,
            used: 2,
            holders: vec![
                holder("web-1", "tenant-a", "batch"),
                holder("web-2", "tenant-a", "batch"),
            ],
            waiters: vec![holder("web-3", "tenant-b", "critical")],
            classes: vec![
                ClassView {
                    name: "critical".into(),
                    guaranteed: 1,
                    held: 0,
                    waiting: 1,
                    waiting_flows: vec!["tenant-b".into()],
                },
                ClassView {
                    name: "batch".into(),
                    guaranteed: 0,
                    held: 2,
                    waiting: 0,
                    waiting_flows: vec![],
                },
            ],
            ..SemaphoreView::default()
        };
        assert_eq!(
            class_lines(&s),
            [
                "critical  held 0 of 1 guaranteed, 1 waiting: tenant-b",
                "batch     held 2 of 0 guaranteed (borrowing 2), 0 waiting",
            ]
        );
        let backend = ratatui::backend::TestBackend::new(90, 16);
        let mut terminal = ratatui::Terminal::new(backend).unwrap();
        terminal
            .draw(|f| semaphore_detail(f, f.area(), &s))
            .unwrap();
        let screen: String = terminal
            .backend()
            .buffer()
            .content()
            .chunks(90)
            .map(|row| row.iter().map(|c| c.symbol()).collect::<String>() + "\n")
            .collect();
        for shown in [
            "Classes of db",
            "batch     held 2 of 0 guaranteed (borrowing 2), 0 waiting",
            "FLOW / CLASS",
            "tenant-a / batch",
            "tenant-b / critical",
        ] {
            assert!(screen.contains(shown), "{shown:?} not on screen:\n{screen}");
        }
    }
}

//! `clusterlimit status`: capacity, usage, waiters and holders, as a table or JSON.

use super::args::StatusArgs;
use crate::common::out::out_line;
use crate::common::{exit, Failure};
use crate::sidecar::adaptive_view::{AdaptiveView, StatusView};
use crate::sidecar::per_member_view::PerMemberView;
use clusterlimit::{ClassUsage, Holder, Limiter, Status};
use std::fmt::Write as _;
use std::process::ExitCode;

/// Runs `status`: prints a table or JSON.
pub async fn status(args: StatusArgs) -> Result<ExitCode, Failure> {
    let limiter = args.store.connect_once().await?;
    let result = read(&limiter, args.name.as_deref()).await;
    let store_failed = matches!(&result, Err(f) if f.code == exit::UNAVAILABLE);
    super::deadline::close(&limiter, store_failed, args.store.request_timeout).await;
    let (statuses, adaptive, per_member) = result?;
    let out = if args.json {
        let json = match (&args.name, statuses.as_slice()) {
            (Some(_), [one]) => serde_json::to_string_pretty(&StatusView {
                status: one.clone(),
                adaptive: adaptive.clone(),
                per_member: per_member.clone(),
            }),
            _ => serde_json::to_string_pretty(&super::status_rows::rows(statuses.clone())),
        };
        json.map_err(|e| Failure::new(exit::SOFTWARE, format!("encoding JSON: {e}")))?
    } else {
        let mut text = table(&statuses);
        if let Some(a) = &adaptive {
            text = format!("{text}\n{}", super::adaptive_lines::lines(a));
        }
        if let Some(p) = &per_member {
            text = format!("{text}\n{}", super::per_member_lines::line(p));
        }
        text
    };
    out_line!("{out}");
    Ok(ExitCode::SUCCESS)
}

/// What `status` read: the statuses, and for one name how it adapts or follows its members.
type Read = (Vec<Status>, Option<AdaptiveView>, Option<PerMemberView>);

/// Status of `name` with how it adapts or follows its members (if it does), or of every
/// semaphore in the store.
async fn read(limiter: &Limiter, name: Option<&str>) -> Result<Read, Failure> {
    let lib = Failure::from_lib;
    if let Some(n) = name {
        let sem = limiter.open_semaphore(n).await.map_err(lib)?;
        let (status, adaptive, per_member) =
            tokio::join!(sem.status(), sem.adaptive_status(), sem.per_member_status());
        let adaptive = adaptive.map_err(lib)?;
        let per_member = per_member.map_err(lib)?;
        return Ok((
            vec![status.map_err(lib)?],
            adaptive.as_ref().map(AdaptiveView::from),
            per_member.as_ref().map(PerMemberView::from),
        ));
    }
    let names = limiter.semaphores().await.map_err(lib)?;
    let mut out = Vec::with_capacity(names.len());
    for n in names {
        let sem = limiter.open_semaphore(&n).await.map_err(lib)?;
        out.push(sem.status().await.map_err(lib)?);
    }
    Ok((out, None, None))
}

/// One block per semaphore: a summary line, then one indented row per holder (and, for an
/// adaptive semaphore, one for its controller).
pub fn table(statuses: &[Status]) -> String {
    let grouped = super::status_rows::rows(statuses.to_vec());
    let mut s = String::new();
    if statuses.is_empty() {
        s.push_str("no semaphores");
        return s;
    }
    let width = grouped
        .iter()
        .map(|r| r.status.name.len())
        .max()
        .unwrap_or(0)
        .max(9);
    let _ = writeln!(s, "{:<width$}  CAPACITY  USED  WAITING", "SEMAPHORE");
    for row in &grouped {
        let st = &row.status;
        let _ = writeln!(
            s,
            "{:<width$}  {:>8}  {:>4}  {:>7}",
            st.name, st.capacity, st.used, st.waiting
        );
        rows(
            &mut s,
            ["OWNER", "FENCING TOKEN", "HELD SINCE"],
            &st.holders,
        );
        rows(
            &mut s,
            ["WAITER", "QUEUE TOKEN", "WAITING SINCE"],
            &st.waiters,
        );
        class_lines(&mut s, &st.classes);
        if let Some(c) = &row.controller {
            super::status_rows::controller_line(&mut s, c);
        }
    }
    s.truncate(s.trim_end().len());
    s
}

/// An indented block of holders or waiters under `titles` (owner, token, since columns; on a
/// fair semaphore, flow and class columns too).
fn rows(s: &mut String, titles: [&str; 3], rows: &[Holder]) {
    if rows.is_empty() {
        return;
    }
    let [owner, token, since] = titles;
    let owner_w = rows
        .iter()
        .map(|h| h.owner.len())
        .max()
        .unwrap_or(0)
        .max(owner.len());
    let token_w = token.len();
    let fair = rows.iter().any(|h| h.flow.is_some() || h.class.is_some());
    let flow_w = width(rows, "FLOW", |h| h.flow.as_deref());
    let class_w = width(rows, "CLASS", |h| h.class.as_deref());
    let _ = write!(s, "  {owner:<owner_w$}  PERMITS  {token}  ");
    if fair {
        let _ = write!(s, "{:<flow_w$}  {:<class_w$}  ", "FLOW", "CLASS");
    }
    let _ = writeln!(s, "{since}");
    for h in rows {
        let _ = write!(
            s,
            "  {:<owner_w$}  {:>7}  {:>token_w$}  ",
            h.owner, h.permits, h.fencing_token,
        );
        if fair {
            let flow = h.flow.as_deref().unwrap_or("-");
            let class = h.class.as_deref().unwrap_or("-");
            let _ = write!(s, "{flow:<flow_w$}  {class:<class_w$}  ");
        }
        let _ = writeln!(s, "{}", humantime::format_rfc3339_seconds(h.since()));
    }
}

/// The widest of `title` and the rows' `field` (`-` when absent).
fn width(rows: &[Holder], title: &str, field: impl Fn(&Holder) -> Option<&str>) -> usize {
    rows.iter()
        .map(|h| field(h).map_or(1, str::len))
        .max()
        .unwrap_or(0)
        .max(title.len())
}

/// A fair semaphore's classes, one line each: `  class batch: guaranteed 0, held 3
/// (borrowing 3), 2 waiting (flows: tenant-a, tenant-b)`.
fn class_lines(s: &mut String, classes: &[ClassUsage]) {
    for c in classes {
        let borrowing = match c.held.checked_sub(c.guaranteed) {
            Some(over) if over > 0 => format!(" (borrowing {over})"),
            _ => String::new(),
        };
        let flows = if c.waiting_flows.is_empty() {
            String::new()
        } else {
            format!(" (flows: {})", c.waiting_flows.join(", "))
        };
        let _ = writeln!(
            s,
            "  class {}: guaranteed {}, held {}{borrowing}, {} waiting{flows}",
            c.name, c.guaranteed, c.held, c.waiting
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clusterlimit::AcquireOptions;
    use std::time::Duration;

    /// `status NAME`'s table of a fair semaphore, read through `read` from a memory:// store
    /// (one process: a separate `status` would start from an empty store).
    #[tokio::test]
    async fn a_fair_semaphore_shows_its_classes_and_flows() {
        let limiter = Limiter::connect("memory://status-fair").await.unwrap();
        let classes = "critical=1,batch".parse().unwrap();
        let db = limiter.fair_semaphore("db", 2, classes).await.unwrap();
        let batch = |flow: &str| {
            AcquireOptions::new()
                .owner(format!("{flow}/1"))
                .flow(flow)
                .class("batch")
        };
        let _a = db.acquire_with(batch("tenant-a")).await.unwrap();
        let _b = db.acquire_with(batch("tenant-b")).await.unwrap();
        let waiters: Vec<_> = [("tenant-c", "batch"), ("tenant-d", "critical")]
            .into_iter()
            .map(|(flow, class)| {
                let opts = AcquireOptions::new()
                    .owner(format!("{flow}/1"))
                    .flow(flow)
                    .class(class)
                    .timeout(Duration::from_secs(20));
                let db = db.clone();
                tokio::spawn(async move { db.acquire_with(opts).await })
            })
            .collect();
        for _ in 0..400 {
            if db.status().await.unwrap().waiting == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let (statuses, _, _) = read(&limiter, Some("db")).await.unwrap();
        let text = table(&statuses);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[2]
                .starts_with("  OWNER       PERMITS  FENCING TOKEN  FLOW      CLASS  HELD SINCE"),
            "{text}"
        );
        assert!(
            lines[3].starts_with("  tenant-a/1        1              1  tenant-a  batch  "),
            "{text}"
        );
        assert!(
            text.contains(
                "\n  class critical: guaranteed 1, held 0, 1 waiting (flows: tenant-d)\n"
            ),
            "{text}"
        );
        assert!(
            text.ends_with(
                "\n  class batch: guaranteed 0, held 2 (borrowing 2), 1 waiting (flows: tenant-c)"
            ),
            "{text}"
        );
        for w in waiters {
            w.abort();
        }
    }
}

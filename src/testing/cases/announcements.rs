//! Announcement boards: each Limiter's one value per board, read by every other, gone with
//! the Limiter's session.

use super::setup::{limiter, short_ttl_limiter, ONE_SEC};
use crate::testing::harness::{Harness, SHORT_TTL};
use crate::testing::util::{assert_err, within, POLL, PROMPT};
use crate::{Announcement, Error, Limiter};
use std::time::Instant;

/// Reads `board` through `limiter` promptly.
async fn board(limiter: &Limiter, board: &str) -> Vec<Announcement> {
    within("announcements()", PROMPT, limiter.announcements(board))
        .await
        .unwrap_or_else(|e| panic!("announcements({board:?}): {e}"))
}

/// `(announcer, value)` pairs, sorted by the announcer's id as `announcements()` returns them.
fn values(pairs: &[(&Limiter, &[u8])]) -> Vec<Announcement> {
    let mut all: Vec<Announcement> = pairs
        .iter()
        .map(|(l, v)| Announcement {
            id: l.announcer_id().to_string(),
            value: v.to_vec(),
        })
        .collect();
    all.sort_by(|a, b| a.id.cmp(&b.id));
    all
}

/// Announces `value` on `board` through `limiter` promptly.
async fn announce(limiter: &Limiter, board: &str, value: &[u8]) {
    within("announce()", PROMPT, limiter.announce(board, value))
        .await
        .unwrap_or_else(|e| panic!("announce({board:?}): {e}"))
}

/// Announcement boards: each Limiter's value is read by any other, a second announce replaces
/// it, withdraw removes it, bad input is refused and changes nothing, and `close()` of the
/// announcer makes its values vanish for the others within the session TTL (+ 1 s), as does
/// the loss of its session.
pub async fn announcements<H: Harness>(h: &H) {
    let a = short_ttl_limiter(h).await;
    let b = short_ttl_limiter(h).await;
    let reader = limiter(h).await;
    let now = read_and_replace(&a, &b, &reader).await;
    bad_input_changes_nothing(&a, &b, &reader, &now).await;
    withdraw_removes_ours(&a, &b, &reader).await;
    close_takes_the_values(&a, &b, &reader).await;
    lost_session_takes_the_values(h, &b, &reader).await;
}

/// Each Limiter's value is read by any other; a second announce replaces the first. The board
/// `sidecars` as it is then.
async fn read_and_replace(a: &Limiter, b: &Limiter, reader: &Limiter) -> Vec<Announcement> {
    assert_eq!(board(reader, "sidecars").await, vec![], "a fresh board");
    announce(a, "sidecars", b"a1").await;
    announce(b, "sidecars", b"b1").await;
    assert_ne!(a.announcer_id(), b.announcer_id());
    assert_eq!(
        board(reader, "sidecars").await,
        values(&[(a, b"a1"), (b, b"b1")])
    );

    // A second announce replaces the first: still one value per Limiter.
    announce(a, "sidecars", b"a2").await;
    let now = values(&[(a, b"a2"), (b, b"b1")]);
    assert_eq!(board(reader, "sidecars").await, now);
    announce(a, "other", b"x").await;
    assert_eq!(board(reader, "other").await, values(&[(a, b"x")]));
    now
}

/// Bad input: InvalidArgument, and the board is as it was (`now`). 64 KiB itself is accepted.
async fn bad_input_changes_nothing(
    a: &Limiter,
    b: &Limiter,
    reader: &Limiter,
    now: &[Announcement],
) {
    let too_big = vec![0u8; crate::Announcement::MAX_BYTES + 1];
    assert_err!(
        a.announce("sidecars", &too_big).await,
        Error::InvalidArgument(_)
    );
    for bad in ["", "a/b", ".."] {
        assert_err!(
            a.announce(bad, b"v").await,
            Error::InvalidArgument(_),
            "({bad:?})"
        );
        assert_err!(reader.announcements(bad).await, Error::InvalidArgument(_));
        assert_err!(a.withdraw(bad).await, Error::InvalidArgument(_));
    }
    assert_eq!(board(reader, "sidecars").await, now);
    let biggest = vec![7u8; crate::Announcement::MAX_BYTES];
    within("announce(64 KiB)", PROMPT, b.announce("sidecars", &biggest))
        .await
        .expect("a 64 KiB value is accepted");
    assert_eq!(board(reader, "sidecars").await[..].len(), 2);
}

/// Withdraw removes ours only; withdrawing again is fine.
async fn withdraw_removes_ours(a: &Limiter, b: &Limiter, reader: &Limiter) {
    within("withdraw()", PROMPT, b.withdraw("sidecars"))
        .await
        .expect("withdraw()");
    assert_eq!(board(reader, "sidecars").await, values(&[(a, b"a2")]));
    within("withdraw() again", PROMPT, b.withdraw("sidecars"))
        .await
        .expect("withdraw() of an absent value");
}

/// close(): the closed Limiter's values vanish for everyone else.
async fn close_takes_the_values(a: &Limiter, b: &Limiter, reader: &Limiter) {
    announce(b, "sidecars", b"b3").await;
    within("close()", PROMPT, a.close()).await.expect("close()");
    let limit = SHORT_TTL + ONE_SEC;
    let start = Instant::now();
    let want = values(&[(b, b"b3")]);
    let mut last = Vec::new();
    while start.elapsed() < limit {
        last = board(reader, "sidecars").await;
        if last == want && board(reader, "other").await.is_empty() {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    assert_eq!(
        last, want,
        "closed Limiter's value still there after {limit:?}"
    );
    assert_eq!(board(reader, "other").await, vec![]);
    assert_err!(a.announce("sidecars", b"late").await, Error::Closed);
    assert_err!(a.announcements("sidecars").await, Error::Closed);
    assert_err!(a.withdraw("sidecars").await, Error::Closed);
}

/// A lost session takes its values too; announcing again publishes under a new one.
async fn lost_session_takes_the_values<H: Harness>(h: &H, b: &Limiter, reader: &Limiter) {
    let limit = SHORT_TTL + ONE_SEC;
    h.revoke_sessions().await;
    let start = Instant::now();
    while start.elapsed() < limit && !board(reader, "sidecars").await.is_empty() {
        tokio::time::sleep(POLL).await;
    }
    assert_eq!(
        board(reader, "sidecars").await,
        vec![],
        "after the sessions ended"
    );
    announce(b, "sidecars", b"b4").await;
    assert_eq!(board(reader, "sidecars").await, values(&[(b, b"b4")]));
}

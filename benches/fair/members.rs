//! Row 4, capacity per live member: 3 → 5 → 2 members of a per-member semaphore (4 permits per
//! member, session TTL 2 s). Each member is a real `clusterlimit run --per-member` process (on
//! memory://, which lives in one process, a Limiter of this process). Twice per store: the 3
//! that go away close their session (SIGTERM: `run` stops its command, releases and closes; in
//! process, `close()`), or die without closing (SIGKILL: the session has to expire; in process,
//! the Limiter is dropped). Each step is timed from the change (the last joiner's command
//! running, the signals sent) until the stored capacity, read every 20 ms by a Limiter that is
//! no member, is the new one. The controller (the member that counts) stays: the 3 that go are
//! the newest others.

use crate::binary;
use clusterlimit::{Limiter, PerMember, Semaphore};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

pub const PER_MEMBER: u32 = 4;
pub const TTL: Duration = Duration::from_secs(2);
/// A step not followed by then is reported as such.
pub const GIVE_UP: Duration = Duration::from_secs(8);
/// The membership: 3, then 5, then 2.
pub const SIZES: [usize; 3] = [3, 5, 2];

/// How the members that go away end.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Leave {
    Close,
    Kill,
}

impl Leave {
    pub fn word(self) -> &'static str {
        match self {
            Leave::Close => "close",
            Leave::Kill => "kill",
        }
    }
}

/// One sequence 3 → 5 → 2: each step's time for the capacity to follow (`None`: not within
/// [`GIVE_UP`]).
#[derive(Debug)]
pub struct Sequence {
    pub leave: Leave,
    pub steps: [Option<Duration>; 3],
    /// The last step: time until the members' announcements were gone (their sessions ended),
    /// the part of the step before the controller's count.
    pub gone: Option<Duration>,
}

/// Row 4 on one store.
#[derive(Debug, Default)]
pub struct Members {
    /// Members are Limiters of this process (memory://), not processes.
    pub in_process: bool,
    pub sequences: Vec<Sequence>,
}

pub async fn measure(url: &str, leaves: &[Leave]) -> anyhow::Result<Members> {
    let in_process = url.starts_with("memory://");
    let mut sequences = Vec::new();
    for &leave in leaves {
        let name = format!("members-{}", leave.word());
        sequences.push(sequence(url, &name, leave, in_process).await?);
    }
    Ok(Members {
        in_process,
        sequences,
    })
}

async fn sequence(url: &str, name: &str, leave: Leave, local: bool) -> anyhow::Result<Sequence> {
    let mut members = Vec::new();
    let mut steps = [None; 3];
    let started = join(url, name, local, &mut members, SIZES[0]).await?;
    let observer = Limiter::builder(url).owner("observer").connect().await?;
    let sem = observer.open_semaphore(name).await?;
    steps[0] = follows(&sem, SIZES[0], started).await?.0;
    let started = join(url, name, local, &mut members, SIZES[1] - SIZES[0]).await?;
    steps[1] = follows(&sem, SIZES[1], started).await?.0;
    let controller = sem.per_member_status().await?.and_then(|s| s.controller);
    let mut going = Vec::new();
    while going.len() < SIZES[1] - SIZES[2] {
        let Some(i) = members
            .iter()
            .rposition(|m| Some(&m.owner) != controller.as_ref())
        else {
            anyhow::bail!("fewer members than expected on {name}");
        };
        going.push(members.remove(i));
    }
    let started = Instant::now();
    for m in &mut going {
        m.leave(leave).await?;
    }
    let gone;
    (steps[2], gone) = follows(&sem, SIZES[2], started).await?;
    for m in going.into_iter().chain(members) {
        m.end().await;
    }
    observer.close().await?;
    Ok(Sequence { leave, steps, gone })
}

/// Starts `n` more members at once; returns when the last one has its semaphore open.
async fn join(
    url: &str,
    name: &str,
    local: bool,
    members: &mut Vec<Member>,
    n: usize,
) -> anyhow::Result<Instant> {
    let first = members.len();
    let joining =
        (first..first + n).map(|i| Member::start(url, name, format!("member-{i}"), local));
    members.extend(futures::future::try_join_all(joining).await?);
    Ok(Instant::now())
}

/// Time from `since` until `sem`'s stored capacity is `members`' worth, and until its board
/// shows `members` (`None`: not within [`GIVE_UP`]).
async fn follows(
    sem: &Semaphore,
    members: usize,
    since: Instant,
) -> anyhow::Result<(Option<Duration>, Option<Duration>)> {
    let want = PER_MEMBER * members as u32;
    let mut counted = None;
    while since.elapsed() < GIVE_UP {
        let board = sem.per_member_status().await?.map(|s| s.members);
        if counted.is_none() && board == Some(members) {
            counted = Some(since.elapsed());
        }
        if sem.status().await?.capacity == want {
            return Ok((Some(since.elapsed()), counted.or(Some(since.elapsed()))));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok((None, counted))
}

fn config() -> PerMember {
    PerMember::new(f64::from(PER_MEMBER)).max(100)
}

/// One live member.
struct Member {
    owner: String,
    kind: Kind,
}

enum Kind {
    Process(Child),
    Local(Limiter, Semaphore),
    Gone,
}

impl Member {
    async fn start(url: &str, name: &str, owner: String, local: bool) -> anyhow::Result<Member> {
        let kind = if local {
            let limiter = Limiter::builder(url)
                .owner(owner.clone())
                .session_ttl(TTL)
                .connect()
                .await?;
            let sem = limiter.per_member_semaphore(name, config()).await?;
            Kind::Local(limiter, sem)
        } else {
            Kind::Process(spawn(url, name, &owner).await?)
        };
        Ok(Member { owner, kind })
    }

    /// Goes away as `how` says (a process is only signalled: [`end`](Self::end) reaps it).
    async fn leave(&mut self, how: Leave) -> anyhow::Result<()> {
        match (std::mem::replace(&mut self.kind, Kind::Gone), how) {
            (Kind::Process(child), Leave::Close) => {
                if let Some(pid) = child.id() {
                    binary::signal(pid, "TERM");
                }
                self.kind = Kind::Process(child);
            }
            (Kind::Process(mut child), Leave::Kill) => {
                child.start_kill()?;
                self.kind = Kind::Process(child);
            }
            (Kind::Local(limiter, sem), Leave::Close) => {
                drop(sem);
                limiter.close().await?;
            }
            (Kind::Local(limiter, sem), Leave::Kill) => drop((sem, limiter)),
            (Kind::Gone, _) => {}
        }
        Ok(())
    }

    /// Ends what is left of it: a process closes (SIGTERM) and is waited for, at most 10 s.
    async fn end(mut self) {
        match std::mem::replace(&mut self.kind, Kind::Gone) {
            Kind::Process(mut child) => {
                if let (Ok(None), Some(pid)) = (child.try_wait(), child.id()) {
                    binary::signal(pid, "TERM");
                }
                if tokio::time::timeout(Duration::from_secs(10), child.wait())
                    .await
                    .is_err()
                {
                    let _ = child.kill().await;
                }
            }
            Kind::Local(limiter, sem) => {
                drop(sem);
                let _ = limiter.close().await;
            }
            Kind::Gone => {}
        }
    }
}

/// `clusterlimit run --per-member` whose command says `joined` and sleeps; returns once it
/// said so (the permit is held, the semaphore open: it is a member).
async fn spawn(url: &str, name: &str, owner: &str) -> anyhow::Result<Child> {
    let ttl = format!("{}s", TTL.as_secs());
    let per_member = PER_MEMBER.to_string();
    let mut c = binary::cmd(&[
        "run",
        "-q",
        "--store",
        url,
        "--semaphore",
        name,
        "--per-member",
        &per_member,
        "--max",
        "100",
        "--session-ttl",
        &ttl,
        "--owner",
        owner,
        "--",
        "sh",
        "-c",
        "echo joined; exec sleep 300",
    ]);
    c.stdout(Stdio::piped()).stderr(Stdio::inherit());
    let mut child = c.spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout pipe"))?;
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await;
    match line {
        Ok(Ok(Some(l))) if l == "joined" => Ok(child),
        other => anyhow::bail!("member {owner} of {name} did not start its command: {other:?}"),
    }
}

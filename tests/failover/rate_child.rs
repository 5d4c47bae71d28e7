//! A Limiter in a process of its own, hammering the hot key with leases on, to be SIGKILLed
//! mid-lease (scenario 17): this binary started again (`support::holder_process::spawn_self`)
//! with the variables below set.
//!
//! The child prints one line per admission, `A <start> <end>` (Unix ns), flushed as soon as
//! no other line is waiting: an admission not printed before the kill never reached anyone,
//! so what the parent read is the child's whole history as the world saw it. Each time its
//! `rate_leases` grows it prints `L <leases> <leased units> <admitted from leases>
//! <returned units> <lost units>`.

use crate::cluster::{REQUEST_TIMEOUT, TTL};
use crate::rate_load::{call_bound, RateLog, KEY, LIMIT};
use crate::report::LeaseFigures;
use crate::support::holder_process::spawn_self;
use clusterlimit::testing::rate_history::{unix_ns, Admitted};
use clusterlimit::{Limiter, Quota, RateLimit, RequestStats};
use std::io::{BufWriter, Read, Write};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{BufReader, Lines};
use tokio::process::{Child, ChildStdout};
use tokio::task::JoinHandle;

const URL_ENV: &str = "CLUSTERLIMIT_TEST_RATE_CHILD_URL";
const RATE_ENV: &str = "CLUSTERLIMIT_TEST_RATE_CHILD_RATE";
const BURST_ENV: &str = "CLUSTERLIMIT_TEST_RATE_CHILD_BURST";
const CALLERS_ENV: &str = "CLUSTERLIMIT_TEST_RATE_CHILD_CALLERS";
/// The child exits by itself after this long, in case nobody kills it.
const MAX_LIFETIME: Duration = Duration::from_secs(60);
/// Upper bound on checks per caller and on lines printed, so loops stay bounded.
const MAX_CHECKS: usize = 1_000_000;
const MARKER: &str = "HAMMERING";
/// An admitted caller's work before its next check. Unpaced, the child's callers (waiting for
/// the lease being asked) would spend each lease within a millisecond of its grant, and a
/// kill would never find units held; paced, 16 callers ask ~1,600 checks a second and a
/// lease lasts tens of milliseconds.
const WORK: Duration = Duration::from_millis(10);

/// A line the child prints.
enum Line {
    Ready,
    Admitted(u64, u64),
    Leases(RequestStats),
}

/// In a process started by [`RateChild::spawn`]: hammers the hot key until killed, until stdin
/// closes, or for at most a minute, then exits. Returns at once in any other process.
pub fn hammer_if_child() {
    let Ok(url) = std::env::var(URL_ENV) else {
        return;
    };
    let number = |var: &str| -> u64 {
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("rate child: {var} is not a number"))
    };
    let quota = Quota::per_second(number(RATE_ENV)).burst(number(BURST_ENV));
    let callers = number(CALLERS_ENV) as usize;
    // The parent closes our stdin when it goes, or dies: then we go too.
    std::thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        std::process::exit(0);
    });
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || print_lines(rx));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("rate child: runtime");
    rt.block_on(hammer(&url, quota, callers, tx));
    std::process::exit(0);
}

async fn hammer(url: &str, quota: Quota, callers: usize, tx: Sender<Line>) {
    let limiter = Limiter::builder(url)
        .owner("rate-child")
        .session_ttl(TTL)
        .request_timeout(REQUEST_TIMEOUT)
        .hot_key_leases(true)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("rate child: cannot connect to {url}: {e}"));
    let rl = limiter
        .rate_limit(LIMIT, quota)
        .await
        .unwrap_or_else(|e| panic!("rate child: cannot open the rate limit {LIMIT}: {e}"));
    let _ = tx.send(Line::Ready);
    for _ in 0..callers {
        tokio::spawn(caller(rl.clone(), tx.clone()));
    }
    // Each new lease, as soon as the Limiter counts it.
    let until = Instant::now() + MAX_LIFETIME;
    let mut leases = 0;
    while Instant::now() < until {
        let s = limiter.stats();
        if s.rate_leases > leases {
            leases = s.rate_leases;
            let _ = tx.send(Line::Leases(s));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Checks the key again and again: an admitted check is followed by [`WORK`], a denied one by
/// its `retry_after` (1–50 ms), a failed one by 20 ms.
async fn caller(rl: RateLimit, tx: Sender<Line>) {
    for _ in 0..MAX_CHECKS {
        let start = unix_ns();
        let pause = match tokio::time::timeout(call_bound(), rl.check(KEY)).await {
            Ok(Ok(d)) if d.allowed => {
                if tx.send(Line::Admitted(start, unix_ns())).is_err() {
                    return;
                }
                WORK
            }
            Ok(Ok(d)) => d
                .retry_after
                .unwrap_or_default()
                .clamp(Duration::from_millis(1), Duration::from_millis(50)),
            _ => Duration::from_millis(20),
        };
        tokio::time::sleep(pause).await;
    }
}

/// Writes the lines, flushing whenever none is waiting.
fn print_lines(rx: Receiver<Line>) {
    let mut out = BufWriter::new(std::io::stdout().lock());
    let until = Instant::now() + MAX_LIFETIME;
    for _ in 0..MAX_CHECKS * 16 {
        let first = match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) if Instant::now() < until => continue,
            Err(_) => return,
        };
        // Whatever else is waiting goes out in the same write.
        let waiting = std::iter::from_fn(|| rx.try_recv().ok()).take(1000);
        for line in std::iter::once(first).chain(waiting) {
            if write_line(&mut out, line).is_err() {
                return;
            }
        }
        if out.flush().is_err() {
            return;
        }
    }
}

fn write_line(out: &mut impl Write, line: Line) -> std::io::Result<()> {
    match line {
        Line::Ready => writeln!(out, "\n{MARKER}"),
        Line::Admitted(start, end) => writeln!(out, "A {start} {end}"),
        Line::Leases(s) => writeln!(
            out,
            "L {} {} {} {} {}",
            s.rate_leases,
            s.rate_leased_units,
            s.rate_lease_admitted,
            s.rate_lease_returned_units,
            s.rate_lease_lost_units
        ),
    }
}

/// Leased units neither spent, given back nor lost yet.
pub fn held(l: &LeaseFigures) -> u64 {
    l.leased_units
        .saturating_sub(l.from_leases + l.returned_units + l.lost_units)
}

/// What the parent read from the child.
#[derive(Default)]
struct Seen {
    /// The last `L` line, and when it was read (Unix ns).
    leases: Option<(LeaseFigures, u64)>,
    admitted: usize,
    /// A line that did not parse.
    garbled: Option<String>,
}

/// A child Limiter process hammering the hot key; SIGKILLed on drop (`kill_on_drop`).
pub struct RateChild {
    child: Child,
    seen: Arc<Mutex<Seen>>,
    reader: JoinHandle<()>,
}

/// What a killed child did.
pub struct Killed {
    /// Unix ns just before the SIGKILL.
    pub at: u64,
    /// Its last lease counts, and how long before the kill they were read.
    pub leases: LeaseFigures,
    pub leases_age: Duration,
    /// Admissions it printed.
    pub admitted: usize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl RateChild {
    /// Starts a child with `callers` callers on the hot key of `quota` at `url`; its
    /// admissions go into `log` as they are read.
    pub async fn spawn(url: &str, quota: Quota, callers: usize, log: Arc<RateLog>) -> RateChild {
        let rate = (quota.limit as f64 / quota.period.as_secs_f64()).round() as u64;
        let (rate, burst, callers) = (
            rate.to_string(),
            quota.burst.to_string(),
            callers.to_string(),
        );
        let envs = [
            (URL_ENV, url),
            (RATE_ENV, rate.as_str()),
            (BURST_ENV, burst.as_str()),
            (CALLERS_ENV, callers.as_str()),
        ];
        let (child, _, lines) = spawn_self(&[], &envs, MARKER).await;
        let seen = Arc::new(Mutex::new(Seen::default()));
        let reader = tokio::spawn(read_lines(lines, seen.clone(), log));
        RateChild {
            child,
            seen,
            reader,
        }
    }

    /// Leases the child reported taking so far.
    pub fn leases(&self) -> u64 {
        lock(&self.seen).leases.map_or(0, |(l, _)| l.leases)
    }

    /// Leased units the child held at its last report.
    pub fn holding(&self) -> u64 {
        lock(&self.seen).leases.map_or(0, |(l, _)| held(&l))
    }

    /// Waits (at most `limit`) for the child to report more than `after` leases taken; returns
    /// how many it reported.
    pub async fn lease_beyond(&self, after: u64, limit: Duration) -> Option<u64> {
        let t = Instant::now();
        while t.elapsed() < limit {
            if let Some((l, _)) = lock(&self.seen).leases {
                if l.leases > after {
                    return Some(l.leases);
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        None
    }

    /// SIGKILLs the child and reads what it printed before (bounded).
    pub async fn kill(mut self) -> Killed {
        let at = unix_ns();
        // tokio's Child::kill sends SIGKILL and reaps the child.
        tokio::time::timeout(Duration::from_secs(5), self.child.kill())
            .await
            .expect("SIGKILL of the rate child is bounded")
            .expect("SIGKILL the rate child");
        // The pipe still holds what it wrote: read up to its end.
        if tokio::time::timeout(Duration::from_secs(5), &mut self.reader)
            .await
            .is_err()
        {
            panic!("the rate child's output did not end within 5 s of its SIGKILL");
        }
        let seen = lock(&self.seen);
        if let Some(line) = &seen.garbled {
            panic!("the rate child printed a line that does not parse: {line:?}");
        }
        let (leases, read_at) = seen.leases.unwrap_or_default();
        Killed {
            at,
            leases,
            leases_age: Duration::from_nanos(at.saturating_sub(read_at)),
            admitted: seen.admitted,
        }
    }
}

/// Reads the child's lines until its stdout ends: admissions into `log`, lease counts into
/// `seen`.
async fn read_lines(
    mut lines: Lines<BufReader<ChildStdout>>,
    seen: Arc<Mutex<Seen>>,
    log: Arc<RateLog>,
) {
    for _ in 0..MAX_CHECKS * 16 {
        let Ok(Some(line)) = lines.next_line().await else {
            return;
        };
        let words: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|w| w.parse().ok())
            .collect();
        let mut seen = lock(&seen);
        match (line.split_whitespace().next(), words.as_slice()) {
            (Some("A"), &[start, end]) => {
                log.record(Admitted {
                    start,
                    end,
                    cost: 1,
                });
                seen.admitted += 1;
            }
            (Some("L"), &[leases, leased_units, from_leases, returned_units, lost_units]) => {
                let figures = LeaseFigures {
                    from_leases,
                    leases,
                    leased_units,
                    returned_units,
                    lost_units,
                };
                seen.leases = Some((figures, unix_ns()));
            }
            _ => seen.garbled = Some(line),
        }
    }
}

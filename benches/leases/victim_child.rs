//! Row 3's victim, inside it: the bench binary started again by victim.rs with the variables
//! below set ([`run_if_child`] is the first thing `main` does). It connects one Limiter to
//! the bench's etcd (every member's endpoint in the URL, so it rides out the leader's kill),
//! opens the rate limit, prints `READY`, and waits for the bench's `GO <base> <len>` on its
//! stdin (Unix ns of bin 0, the run's length in ns). Then its callers check the hot key as
//! the bench's own do (`failover::call`) until the run's end, and it prints what they did
//! (victim_lines.rs) every `FLUSH`, until the bench SIGKILLs it. It exits by itself when
//! its stdin closes (the bench is gone), when its run is over, or after `MAX_LIFETIME`.

use crate::bins::Bins;
use crate::failover::{call, lock, Tally};
use crate::victim_lines::{Line, FLUSH, STATS_EVERY};
use anyhow::{bail, Context as _};
use clusterlimit::testing::rate_history::unix_ns;
use clusterlimit::{Limiter, Quota, RateLimit, RequestStats};
use std::collections::BTreeMap;
use std::io::{BufRead, BufWriter, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// The store's URL (set: this process is the victim), the rate limit's name, its quota a
/// second, leases on (1) or off (0), and the number of callers.
const URL_ENV: &str = "CLUSTERLIMIT_LEASES_BENCH_VICTIM_URL";
const NAME_ENV: &str = "CLUSTERLIMIT_LEASES_BENCH_VICTIM_NAME";
const QUOTA_ENV: &str = "CLUSTERLIMIT_LEASES_BENCH_VICTIM_QUOTA";
const LEASES_ENV: &str = "CLUSTERLIMIT_LEASES_BENCH_VICTIM_LEASES";
const CALLERS_ENV: &str = "CLUSTERLIMIT_LEASES_BENCH_VICTIM_CALLERS";
/// The owner name of its Limiter (the bench's own are `leases-failover-1` …).
const OWNER: &str = "leases-failover-0";
/// The child exits by itself after this long, whatever happens.
const MAX_LIFETIME: Duration = Duration::from_secs(120);
/// How long it waits for the bench's `GO`.
const GO_WAIT: Duration = Duration::from_secs(60);

/// One caller's checks since the last flush.
#[derive(Default)]
struct Pending {
    admitted: Vec<(u64, u64)>,
    failed: u64,
}

impl Tally for Pending {
    fn admitted(&mut self, start: u64, end: u64) {
        self.admitted.push((start, end));
    }

    fn failed(&mut self) {
        self.failed += 1;
    }
}

type Shared = Arc<Mutex<Pending>>;

/// In the process victim.rs starts: runs the victim and exits (1, with a message on stderr,
/// on an error). Returns at once in any other process.
pub fn run_if_child() {
    let Ok(url) = std::env::var(URL_ENV) else {
        return;
    };
    std::thread::spawn(|| {
        std::thread::sleep(MAX_LIFETIME);
        eprintln!(
            "leases bench, the Limiter process: still running after {MAX_LIFETIME:?}; exiting"
        );
        std::process::exit(3);
    });
    let code = match victim(&url) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("leases bench, the Limiter process: {e:#}");
            1
        }
    };
    std::process::exit(code);
}

fn env(var: &str) -> anyhow::Result<String> {
    std::env::var(var).with_context(|| format!("{var} is not set (victim.rs sets it)"))
}

fn number(var: &str) -> anyhow::Result<u64> {
    let v = env(var)?;
    v.parse()
        .with_context(|| format!("{var} is {v:?}, not a whole number"))
}

fn victim(url: &str) -> anyhow::Result<()> {
    let name = env(NAME_ENV)?;
    let quota = Quota::per_second(number(QUOTA_ENV)?);
    let leases = number(LEASES_ENV)? == 1;
    let callers = usize::try_from(number(CALLERS_ENV)?)?;
    let runtime = crate::common::runtime()?;
    let (limiter, rl) = runtime.block_on(connect(url, &name, quota, leases))?;
    let mut out = std::io::stdout();
    writeln!(out, "{}", Line::Ready).and_then(|()| out.flush())?;
    let (base, len_ns) = wait_go()?;
    let left = (base + len_ns).saturating_sub(unix_ns());
    let stop = Instant::now() + Duration::from_nanos(left);
    let before = limiter.stats();
    let tallies: Vec<Shared> = (0..callers).map(|_| Shared::default()).collect();
    let done = Arc::new(AtomicBool::new(false));
    let printer = {
        let (tallies, limiter, done) = (tallies.clone(), limiter.clone(), done.clone());
        let bins = Bins::new(base, len_ns);
        std::thread::spawn(move || print(&tallies, &bins, &limiter, &before, &done))
    };
    let ran = runtime.block_on(async {
        let tasks: Vec<_> = (tallies.iter())
            .map(|t| tokio::spawn(call(rl.clone(), stop, t.clone())))
            .collect();
        for t in tasks {
            t.await.context("a caller task ended abnormally")??;
        }
        anyhow::Ok(())
    });
    done.store(true, Ordering::Release);
    let printed = printer.join();
    ran?;
    printed.map_err(|_| anyhow::anyhow!("its printing thread panicked"))??;
    runtime
        .block_on(limiter.close())
        .context("close its Limiter")?;
    Ok(())
}

async fn connect(
    url: &str,
    name: &str,
    quota: Quota,
    leases: bool,
) -> anyhow::Result<(Limiter, RateLimit)> {
    let l = Limiter::builder(url)
        .owner(OWNER)
        .hot_key_leases(leases)
        .connect()
        .await
        .with_context(|| format!("connect its Limiter to {url}"))?;
    let rl = (l.rate_limit(name, quota).await)
        .with_context(|| format!("open the rate limit {name:?}"))?;
    Ok((l, rl))
}

/// Reads `GO <base> <len>` from stdin (within `GO_WAIT`); then a thread reads stdin to its
/// end and exits the process.
fn wait_go() -> anyhow::Result<(u64, u64)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut line = String::new();
        if stdin.read_line(&mut line).is_ok() {
            let _ = tx.send(line);
            let _ = stdin.read_to_end(&mut Vec::new());
        }
        std::process::exit(0);
    });
    let line = rx
        .recv_timeout(GO_WAIT)
        .with_context(|| format!("no GO line from the bench on stdin within {GO_WAIT:?}"))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let parsed = match words.as_slice() {
        ["GO", base, len] => base.parse().ok().zip(len.parse().ok()),
        _ => None,
    };
    let line = line.trim_end();
    parsed.with_context(|| format!("the bench sent {line:?} on stdin, not GO <base> <len>"))
}

/// Every `FLUSH` until `done`: the callers' new checks as `B` and `N` lines, and every
/// `STATS_EVERY` an `S` line; a last flush once `done`.
fn print(
    tallies: &[Shared],
    bins: &Bins,
    limiter: &Limiter,
    before: &RequestStats,
    done: &AtomicBool,
) -> anyhow::Result<()> {
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut buf = Vec::new();
    let mut next_stats = Instant::now();
    let flushes = MAX_LIFETIME.as_nanos() / FLUSH.as_nanos();
    for _ in 0..flushes {
        let last = done.load(Ordering::Acquire);
        let at = unix_ns();
        let (mut added, mut straddled, mut failed) = (BTreeMap::new(), 0, 0);
        for t in tallies {
            {
                let mut p = lock(t);
                std::mem::swap(&mut p.admitted, &mut buf);
                failed += std::mem::take(&mut p.failed);
            }
            for &(start, end) in &buf {
                let (inside, by_end) = bins.place(start, end);
                match inside {
                    Some(i) => added.entry(i).or_insert((0, 0)).0 += 1,
                    None => straddled += 1,
                }
                if let Some(i) = by_end {
                    added.entry(i).or_insert((0, 0)).1 += 1;
                }
            }
            buf.clear();
        }
        for (bin, (inside, by_end)) in added {
            writeln!(
                out,
                "{}",
                Line::Bin {
                    bin,
                    inside,
                    by_end
                }
            )?;
        }
        let counts = Line::Counts {
            at,
            straddled,
            failed,
        };
        writeln!(out, "{counts}")?;
        if last || Instant::now() >= next_stats {
            next_stats = Instant::now() + STATS_EVERY;
            let held = limiter.leased_keys().iter().map(|k| k.units_left).sum();
            let used = limiter.stats().since(before);
            writeln!(out, "{}", Line::Stats { held, used })?;
        }
        out.flush()
            .context("write to the bench (its end of the pipe closed?)")?;
        if last {
            return Ok(());
        }
        std::thread::sleep(FLUSH);
    }
    bail!("still printing after {MAX_LIFETIME:?}")
}

/// The variables that make the bench binary this child.
pub fn envs(
    url: &str,
    name: &str,
    quota: u64,
    leases: bool,
    callers: usize,
) -> Vec<(&'static str, String)> {
    vec![
        (URL_ENV, url.to_string()),
        (NAME_ENV, name.to_string()),
        (QUOTA_ENV, quota.to_string()),
        (LEASES_ENV, u8::from(leases).to_string()),
        (CALLERS_ENV, callers.to_string()),
    ]
}

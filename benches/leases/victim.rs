//! Row 3's victim, the bench's side: one of the row's Limiters runs in a process of its own
//! (this bench binary started again, victim_child.rs) so that the bench can SIGKILL it. The
//! bench starts it before the run (until it prints `READY`, at most `READY_WAIT`), tells it
//! when the run starts, reads its lines (victim_lines.rs) into bins like its own callers',
//! SIGKILLs it at two thirds of the run and reads what it printed up to the pipe's end. The
//! child is SIGKILLed on drop too (`kill_on_drop`), so no error path leaves it running.

use crate::bins::Bins;
use crate::victim_child::envs;
use crate::victim_lines::{parse, Line, READY};
use anyhow::{anyhow, bail, Context as _};
use clusterlimit::testing::rate_history::unix_ns;
use clusterlimit::RequestStats;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::task::JoinHandle;

/// Bound on the child's start: an etcd connection and a rate limit opened.
const READY_WAIT: Duration = Duration::from_secs(30);
/// Bound on reading what it printed after its SIGKILL.
const DRAIN_WAIT: Duration = Duration::from_secs(10);
/// Bound on the lines read from it (a 6 s run prints a few per millisecond).
const MAX_LINES: usize = 10_000_000;

/// The Limiter process, started and ready.
pub struct Victim {
    child: Child,
    /// Held open until the kill: the child exits on its own when its stdin closes.
    stdin: ChildStdin,
    stdout: Option<BufReader<ChildStdout>>,
    reader: Option<JoinHandle<anyhow::Result<Seen>>>,
}

/// What the bench read from it.
struct Seen {
    bins: Bins,
    failed: u64,
    /// When the process took the counts of its last `N` line (Unix ns).
    printed_at: u64,
    /// The last `S` line's figures, and when it was read (Unix ns).
    stats: Option<(u64, RequestStats, u64)>,
}

/// What the killed process did, as far as it printed it.
pub struct Killed {
    /// Unix ns just before the SIGKILL.
    pub at: u64,
    pub bins: Bins,
    pub failed: u64,
    /// Its store requests and lease counts, as of its last `S` line.
    pub used: RequestStats,
    /// Units left in its leases, as of its last `S` line, read `held_age` before the kill.
    pub held: u64,
    pub held_age: Duration,
    /// From its last `N` line's counts to the kill: what its callers were admitted then is
    /// in no count.
    pub unprinted: Duration,
}

impl Victim {
    /// Starts the process: one Limiter (`leases` on or off) at `url` with `callers` callers
    /// on the rate limit `name` of `quota`/s; returns once it is ready.
    pub async fn spawn(
        url: &str,
        name: &str,
        quota: u64,
        leases: bool,
        callers: usize,
    ) -> anyhow::Result<Victim> {
        let exe = std::env::current_exe().context("find the bench binary to start again")?;
        let mut child = tokio::process::Command::new(&exe)
            .envs(envs(url, name, quota, leases, callers))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start the Limiter process ({})", exe.display()))?;
        let stdin = child.stdin.take().context("the Limiter process's stdin")?;
        let stdout = child
            .stdout
            .take()
            .context("the Limiter process's stdout")?;
        let mut stdout = BufReader::new(stdout);
        tokio::time::timeout(READY_WAIT, ready(&mut stdout))
            .await
            .map_err(|_| {
                anyhow!("the Limiter process did not print {READY} within {READY_WAIT:?}")
            })??;
        Ok(Victim {
            child,
            stdin,
            stdout: Some(stdout),
            reader: None,
        })
    }

    /// Tells the process the run starts now: bins from `base` (Unix ns), `len_ns` long.
    pub async fn go(&mut self, base: u64, len_ns: u64) -> anyhow::Result<()> {
        let line = format!("GO {base} {len_ns}\n");
        self.stdin
            .write_all(line.as_bytes())
            .await
            .context("tell the Limiter process to start (it exited? see its message above)")?;
        let stdout = self.stdout.take().context("the run was started twice")?;
        self.reader = Some(tokio::spawn(read(stdout, Bins::new(base, len_ns))));
        Ok(())
    }

    /// SIGKILLs the process and reads what it printed before.
    pub async fn kill(mut self) -> anyhow::Result<Killed> {
        let at = unix_ns();
        // tokio's Child::kill sends SIGKILL and reaps the child.
        tokio::time::timeout(Duration::from_secs(5), self.child.kill())
            .await
            .context("the SIGKILL of the Limiter process took over 5 s")?
            .context("SIGKILL the Limiter process")?;
        drop(self.stdin);
        let reader = self
            .reader
            .context("the Limiter process was killed before its run")?;
        let seen = tokio::time::timeout(DRAIN_WAIT, reader)
            .await
            .with_context(|| {
                format!(
                    "the Limiter process's output did not end within {DRAIN_WAIT:?} of its SIGKILL"
                )
            })?
            .context("reading the Limiter process's output ended abnormally")??;
        let (held, used, read_at) = seen.stats.context(
            "the Limiter process printed no stats line before its SIGKILL (it prints one every 50 ms)",
        )?;
        Ok(Killed {
            at,
            bins: seen.bins,
            failed: seen.failed,
            used,
            held,
            held_age: Duration::from_nanos(at.saturating_sub(read_at)),
            unprinted: Duration::from_nanos(at.saturating_sub(seen.printed_at)),
        })
    }
}

/// Reads lines up to `READY`; anything else first is an error.
async fn ready(stdout: &mut BufReader<ChildStdout>) -> anyhow::Result<()> {
    let mut line = String::new();
    if stdout.read_line(&mut line).await? == 0 {
        bail!("the Limiter process exited before it was ready (its message is above)");
    }
    let line = line.trim_end();
    if line != READY {
        bail!("the Limiter process printed {line:?} where {READY} was expected: is the bench binary the one that started it?");
    }
    Ok(())
}

/// Reads the process's lines until its stdout ends. A last line without its newline was cut
/// by the SIGKILL and is left out; any other line that is none of the child's is an error.
async fn read(mut stdout: BufReader<ChildStdout>, bins: Bins) -> anyhow::Result<Seen> {
    let mut seen = Seen {
        bins,
        failed: 0,
        printed_at: 0,
        stats: None,
    };
    let mut line = String::new();
    for _ in 0..MAX_LINES {
        line.clear();
        let n = (stdout.read_line(&mut line).await)
            .context("read the Limiter process's output (not text?)")?;
        if n == 0 || !line.ends_with('\n') {
            return Ok(seen);
        }
        match parse(line.trim_end()) {
            Some(Line::Bin {
                bin,
                inside,
                by_end,
            }) if seen.bins.add_at(bin, inside, by_end) => {}
            Some(Line::Counts {
                at,
                straddled,
                failed,
            }) => {
                seen.printed_at = at;
                seen.bins.straddled += straddled;
                seen.failed += failed;
            }
            Some(Line::Stats { held, used }) => seen.stats = Some((held, used, unix_ns())),
            _ => bail!(
                "the Limiter process printed {:?}, which is none of its lines (victim_lines.rs)",
                line.trim_end()
            ),
        }
    }
    bail!("the Limiter process printed over {MAX_LINES} lines")
}

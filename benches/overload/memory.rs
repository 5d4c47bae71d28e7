//! This process's memory during a row: VmRSS sampled every 20 ms on a thread of its own (the
//! runtime's 2 workers may be starved exactly when memory grows), its peak over the value at
//! the start, and a guard: past `guard` bytes above the start, `over_guard()` turns true and
//! the load generators stop sending, so a library that leaks under overload cannot take the
//! machine (shared with other work) down with the bench.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const EVERY: Duration = Duration::from_millis(20);

/// Set while a watch's process is over its guard.
static OVER: AtomicBool = AtomicBool::new(false);

/// Whether the running watch saw this process grow past its guard (then nothing new is sent).
pub fn over_guard() -> bool {
    OVER.load(Ordering::Relaxed)
}

/// This process's resident set (VmRSS) in bytes; `None` without /proc.
pub fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kb * 1024)
}

/// A running sampler.
pub struct Watch {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    before: u64,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What a watch saw: the resident set at its start and its peak, in bytes; whether the guard
/// tripped.
#[derive(Debug, Clone, Copy, Default)]
pub struct Seen {
    pub before: u64,
    pub peak: u64,
    pub guard_tripped: bool,
}

impl Seen {
    /// The peak over the start, in MB (10^6 bytes).
    pub fn growth_mb(&self) -> f64 {
        self.peak.saturating_sub(self.before) as f64 / 1e6
    }
}

impl Watch {
    /// Starts sampling; the guard trips at `guard` bytes above the resident set now.
    pub fn start(guard: u64) -> Watch {
        OVER.store(false, Ordering::Relaxed);
        let before = rss_bytes().unwrap_or(0);
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(before));
        let (s, p) = (stop.clone(), peak.clone());
        let thread = std::thread::Builder::new()
            .name("memory-watch".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    let now = rss_bytes().unwrap_or(0);
                    p.fetch_max(now, Ordering::Relaxed);
                    if now > before + guard {
                        OVER.store(true, Ordering::Relaxed);
                    }
                    std::thread::sleep(EVERY);
                }
            })
            .ok();
        Watch {
            stop,
            peak,
            before,
            thread,
        }
    }

    /// Stops sampling and clears the guard.
    pub fn finish(mut self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        Seen {
            before: self.before,
            peak: self.peak.load(Ordering::Relaxed),
            guard_tripped: OVER.swap(false, Ordering::Relaxed),
        }
    }
}

impl Drop for Watch {
    /// A row that failed half-way stops its sampler too.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

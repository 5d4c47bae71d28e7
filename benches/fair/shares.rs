//! Rows 2 and 3: weighted shares and a class's reserve, with saturating flows. Each task loops
//! acquire → hold → release and counts what it holds in-process; a sampler reads the counts
//! every millisecond, so the shares are time averages of what was really held.

use clusterlimit::fair::Classes;
use clusterlimit::{AcquireOptions, Limiter, Semaphore};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const CAPACITY: u32 = 8;
/// Long beside a store's grant round trip, so saturating flows hold what they are given.
pub const HOLD: Duration = Duration::from_millis(20);
const TASKS_PER_FLOW: usize = 16;

/// Time-averaged permits held per flow.
#[derive(Debug, Default)]
pub struct Shares {
    pub flows: Vec<(String, f64)>,
}

/// Row 2: flows of weight 1, 2 and 5 (each its own Limiter), all saturating, for `run_for`.
pub async fn weights(url: &str, run_for: Duration) -> anyhow::Result<Shares> {
    let classes = Classes::single();
    let flows = [("w1", "", 1), ("w2", "", 2), ("w5", "", 5)];
    let load = Load::start(url, "shares-weights", &classes, &flows).await?;
    load.warm().await;
    let (flows, _) = load.sample(run_for).await;
    load.stop().await;
    Ok(Shares { flows })
}

/// What row 3 measured.
#[derive(Debug, Default)]
pub struct Reserve {
    /// Batch's permits held (time average) while critical is idle: critical's share lent.
    pub lent: f64,
    /// The most batch held at once meanwhile (the whole capacity: critical's share lent too).
    pub lent_peak: u32,
    /// Critical's first request, with batch saturating: its wait, and batch's grants meanwhile.
    pub first_wait: Duration,
    pub batch_grants_meanwhile: usize,
    /// Both saturating: the shares, and the fraction of samples with critical below its 2.
    pub both: Shares,
    pub critical_below_min: f64,
    /// The store's own view meanwhile: status reads, and those showing critical with requests
    /// waiting and fewer permits than it is guaranteed.
    pub store_reads: usize,
    pub store_below: usize,
}

/// Row 3: class `critical` guaranteed 25% of 8, `batch` saturating: batch's share while
/// critical is idle, critical's first request, then both saturating.
pub async fn reserve(url: &str, run_for: Duration) -> anyhow::Result<Reserve> {
    let classes: Classes = "critical=25%,batch".parse()?;
    let batch = Load::start(url, "shares-reserve", &classes, &[("nightly", "batch", 1)]).await?;
    batch.warm().await;
    let (idle, peaks) = batch.sample(run_for / 3).await;
    let lent = idle.first().map_or(0.0, |f| f.1);
    let lent_peak = peaks.first().copied().unwrap_or(0);
    let first = (url.to_string(), classes.clone(), batch.grants.clone());
    let (first_wait, meanwhile) = crate::apart::apart(move || first_request(first)).await?;
    let critical =
        Load::start(url, "shares-reserve", &classes, &[("pager", "critical", 1)]).await?;
    critical.warm().await;
    let observer = Limiter::builder(url).owner("observer").connect().await?;
    let seen = observer.open_semaphore("shares-reserve").await?;
    let ((both, below), store) = tokio::join!(
        both_sampled(&batch, &critical, run_for / 3),
        store_below(&seen, run_for / 3)
    );
    observer.close().await?;
    batch.stop().await;
    critical.stop().await;
    let (store_reads, store_below) = store?;
    Ok(Reserve {
        lent,
        lent_peak,
        first_wait,
        batch_grants_meanwhile: meanwhile,
        both: Shares { flows: both },
        critical_below_min: below,
        store_reads,
        store_below,
    })
}

/// Critical's first request, from a Limiter on a runtime of its own (`apart.rs`), as another
/// process's: its wait, and the grants `batch` counted meanwhile.
async fn first_request(
    (url, classes, batch): (String, Classes, Arc<AtomicUsize>),
) -> anyhow::Result<(Duration, usize)> {
    let limiter = Limiter::builder(&url).owner("pager").connect().await?;
    let sem = limiter
        .fair_semaphore("shares-reserve", CAPACITY, classes)
        .await?;
    let (before, t) = (batch.load(SeqCst), Instant::now());
    let p = sem
        .acquire_with(AcquireOptions::new().flow("pager").class("critical"))
        .await?;
    let (wait, meanwhile) = (t.elapsed(), batch.load(SeqCst) - before);
    p.release().await?;
    limiter.close().await?;
    Ok((wait, meanwhile))
}

/// Both loads sampled together: the shares, and how often critical held fewer than its 2.
async fn both_sampled(
    batch: &Load,
    critical: &Load,
    run_for: Duration,
) -> (Vec<(String, f64)>, f64) {
    let (b, c) = (&batch.held[0].1, &critical.held[0].1);
    let (mut sb, mut sc, mut below, mut n) = (0u64, 0u64, 0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < run_for || n == 0 {
        let held = c.load(SeqCst);
        sb += u64::from(b.load(SeqCst));
        sc += u64::from(held);
        below += u64::from(held < 2);
        n += 1;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let n_f = n as f64;
    let shares = vec![
        ("nightly".to_string(), sb as f64 / n_f),
        ("pager".to_string(), sc as f64 / n_f),
    ];
    (shares, below as f64 / n_f)
}

/// Status reads every 25 ms for `run_for`: how many, and how many showed class `critical` with
/// requests waiting below its guaranteed permits (what "never below its share while it has
/// demand" forbids; the in-process counts also dip while a permit passes between two holders).
async fn store_below(sem: &Semaphore, run_for: Duration) -> anyhow::Result<(usize, usize)> {
    let (start, mut reads, mut below) = (Instant::now(), 0, 0);
    while start.elapsed() < run_for {
        let status = sem.status().await?;
        if let Some(c) = status.classes.iter().find(|c| c.name == "critical") {
            reads += 1;
            below += usize::from(c.waiting > 0 && c.held < c.guaranteed);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Ok((reads, below))
}

/// Saturating flows on one fair semaphore.
struct Load {
    stop: Arc<AtomicBool>,
    held: Vec<(String, Arc<AtomicU32>)>,
    grants: Arc<AtomicUsize>,
    limiters: Vec<Limiter>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    async fn start(
        url: &str,
        name: &str,
        classes: &Classes,
        flows: &[(&str, &str, u32)],
    ) -> anyhow::Result<Load> {
        let mut load = Load {
            stop: Arc::new(AtomicBool::new(false)),
            held: Vec::new(),
            grants: Arc::new(AtomicUsize::new(0)),
            limiters: Vec::new(),
            tasks: Vec::new(),
        };
        for &(flow, class, weight) in flows {
            let limiter = Limiter::builder(url).owner(flow).connect().await?;
            let sem = limiter
                .fair_semaphore(name, CAPACITY, classes.clone())
                .await?;
            let mut opts = AcquireOptions::new().flow(flow).weight(weight);
            if !class.is_empty() {
                opts = opts.class(class);
            }
            let held = Arc::new(AtomicU32::new(0));
            for _ in 0..TASKS_PER_FLOW {
                load.tasks.push(tokio::spawn(cycle(
                    sem.clone(),
                    opts.clone(),
                    held.clone(),
                    load.stop.clone(),
                    load.grants.clone(),
                )));
            }
            load.held.push((flow.to_string(), held));
            load.limiters.push(limiter);
        }
        Ok(load)
    }

    /// Gives the flows time to fill the queue and reach their shares.
    async fn warm(&self) {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    /// Each flow's permits held, averaged over samples every millisecond for `run_for` (one
    /// sample when zero), and the most it held in a sample.
    async fn sample(&self, run_for: Duration) -> (Vec<(String, f64)>, Vec<u32>) {
        let mut sums = vec![0u64; self.held.len()];
        let mut peaks = vec![0u32; self.held.len()];
        let (start, mut n) = (Instant::now(), 0u64);
        loop {
            for ((sum, peak), (_, held)) in sums.iter_mut().zip(&mut peaks).zip(&self.held) {
                let now = held.load(SeqCst);
                *sum += u64::from(now);
                *peak = (*peak).max(now);
            }
            n += 1;
            if start.elapsed() >= run_for {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let means = self
            .held
            .iter()
            .zip(sums)
            .map(|((flow, _), sum)| (flow.clone(), sum as f64 / n as f64))
            .collect();
        (means, peaks)
    }

    async fn stop(self) {
        self.stop.store(true, SeqCst);
        for l in &self.limiters {
            let _ = l.close().await;
        }
        for t in self.tasks {
            t.abort();
        }
    }
}

async fn cycle(
    sem: Semaphore,
    opts: AcquireOptions,
    held: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
    grants: Arc<AtomicUsize>,
) {
    while !stop.load(SeqCst) {
        let Ok(p) = sem
            .acquire_with(opts.clone().timeout(Duration::from_secs(30)))
            .await
        else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        grants.fetch_add(1, SeqCst);
        held.fetch_add(1, SeqCst);
        tokio::time::sleep(HOLD).await;
        held.fetch_sub(1, SeqCst);
        let _ = p.release().await;
    }
}

//! An in-process TCP proxy with a fault switch, for partitions, blips, resets and latency on
//! loopback without root (no iptables, no tc).
//!
//! ```ignore
//! let proxy = FaultProxy::start(zk.client_addr(0));   // 127.0.0.1:<free port> → server
//! let client = zk_connect(&proxy.connect_string()).await;
//! proxy.blackhole();                // partition: nothing gets through, connections stay open
//! proxy.pass();                     // heal
//! proxy.reset();                    // RST every connection, and every new one until pass()
//! proxy.delay(Duration::from_millis(200));  // +200 ms per chunk in each direction
//!
//! let group = ProxyGroup::start(&[a, b, c]);          // one proxy port per upstream
//! let client = zk_connect(&group.connect_string()).await;
//! group.blackhole();                                   // all at once; group[1].pass() one
//! ```
//!
//! Each proxy runs on its own thread with its own tokio runtime, so it works from sync tests,
//! from any `#[tokio::test]` flavour, and keeps real time when a test pauses tokio's clock.
//! Dropping the proxy stops the runtime, which closes every connection (FIN) and the listener.
//!
//! Modes ([`ProxyMode`]) apply to existing connections at once, not only to new ones:
//! - `Pass`: bytes are copied both ways; EOF is forwarded as a half-close, an error on one side
//!   (e.g. RST from the server) resets the other side too.
//! - `Blackhole`: connections stay open but every byte read in either direction is discarded,
//!   like packets lost in a partition; new connections are accepted and stall (their bytes are
//!   discarded, the upstream is not contacted). A TCP stream cannot lose bytes and go on, so
//!   when the mode changes again, every connection that lost bytes is reset (RST both ways),
//!   as if TCP had given up during the partition; connections that stayed idle go on as if
//!   nothing happened. (Without this, a request dropped mid-stream would hang forever on a
//!   connection whose pings still work: a state no real network produces.)
//! - `Hold`: connections stay open and nothing is read, so bytes wait in the kernel buffers and
//!   are delivered when the mode changes: a partition that heals before TCP gives up.
//! - `Reset`: every connection is closed with RST (`SO_LINGER` 0) on both sides; new ones are
//!   accepted and reset at once, until the mode changes.
//! - `DropReplies`: requests (client → server) pass, replies (server → client) are discarded as
//!   in `Blackhole`: a request is applied but its reply is lost. The connection is reset when
//!   the mode changes, like a blackholed one.
//! - `Delay(d)`: like `Pass`, but each chunk is forwarded `d` after it was read, in each
//!   direction (a request/response round trip gains at least `2 d`). Chunks of one direction
//!   are forwarded in order, one after the other: a slow *and* narrow link (a chunk read
//!   while the previous one waits is only read after that one was written).
//! - `Lag(d)`: pure latency. Every chunk is read as soon as it arrives and forwarded `d` after
//!   it was read, in order (per-chunk deadlines in a queue), so a pipelined stream keeps its
//!   throughput: a member whose disk or network is slow, not narrow. When the mode changes,
//!   chunks still queued are forwarded at once.
//!
//! I/O errors never panic inside the proxy: they end the affected connection.

use std::fmt;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// How long a proxy waits for its upstream to accept a connection before resetting the client.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Read buffer per direction per connection.
const CHUNK: usize = 16 * 1024;

/// What a [`FaultProxy`] does with traffic; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyMode {
    Pass,
    Blackhole,
    Hold,
    Reset,
    DropReplies,
    Delay(Duration),
    Lag(Duration),
}

/// Counters shared by the proxy thread and its handle.
#[derive(Default)]
struct Stats {
    /// Connections currently open (accepted and not yet closed).
    live: AtomicUsize,
    /// Connections accepted since start.
    accepted: AtomicU64,
    /// Connections the proxy ended with RST (`Reset` mode, or bytes lost in `Blackhole`).
    resets: AtomicU64,
    /// Bytes read from clients on forwarding connections (requests, whatever their fate).
    client_bytes: AtomicU64,
}

/// One TCP proxy `127.0.0.1:<free port>` → one upstream address, with a fault switch.
pub struct FaultProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    mode: watch::Sender<ProxyMode>,
    stats: Arc<Stats>,
    /// Dropping it (or sending) tells the proxy thread to stop.
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy in `Pass` mode in front of `upstream` (e.g. `"127.0.0.1:2181"` or a
    /// `SocketAddr`), listening on a free 127.0.0.1 port. Panics if it cannot bind.
    pub fn start(upstream: impl ToSocketAddrs + fmt::Debug) -> FaultProxy {
        let upstream_addr = upstream
            .to_socket_addrs()
            .unwrap_or_else(|e| panic!("FaultProxy: cannot resolve upstream {upstream:?}: {e}"))
            .next()
            .unwrap_or_else(|| panic!("FaultProxy: upstream {upstream:?} resolves to nothing"));
        // Bind with std so the port is known (and the error reported) before returning.
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
            .expect("FaultProxy: cannot bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("FaultProxy: set_nonblocking");
        let addr = listener.local_addr().expect("FaultProxy: local_addr");
        let (mode_tx, mode_rx) = watch::channel(ProxyMode::Pass);
        let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel();
        let stats = Arc::new(Stats::default());
        let thread_stats = Arc::clone(&stats);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("FaultProxy: cannot build a tokio runtime");
        let thread = std::thread::Builder::new()
            .name(format!("fault-proxy-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(_) => return,
                    };
                    tokio::select! {
                        _ = shutdown_rx => {}
                        () = accept_loop(listener, upstream_addr, mode_rx, thread_stats) => {}
                    }
                });
                // Dropping the runtime here cancels every connection task; their sockets close.
                runtime.shutdown_timeout(Duration::from_secs(1));
            })
            .expect("FaultProxy: cannot spawn its thread");
        FaultProxy {
            addr,
            upstream: upstream_addr,
            mode: mode_tx,
            stats,
            shutdown: Some(shutdown_tx),
            thread: Some(thread),
        }
    }

    /// The proxy's listening address (`127.0.0.1:<port>`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The proxy's listening port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `127.0.0.1:<port>`, for connect strings.
    pub fn connect_string(&self) -> String {
        self.addr.to_string()
    }

    /// The address this proxy forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Switches the mode; takes effect on existing connections immediately.
    pub fn set_mode(&self, mode: ProxyMode) {
        self.mode.send_replace(mode);
    }

    /// The current mode.
    pub fn mode(&self) -> ProxyMode {
        *self.mode.borrow()
    }

    /// Forward everything (the initial mode).
    pub fn pass(&self) {
        self.set_mode(ProxyMode::Pass);
    }

    /// Partition: keep connections, discard every byte either way; new connections stall.
    /// Connections that lost bytes are reset when traffic flows again.
    pub fn blackhole(&self) {
        self.set_mode(ProxyMode::Blackhole);
    }

    /// Partition that heals like TCP: stop reading, deliver the held bytes on the next mode.
    pub fn hold(&self) {
        self.set_mode(ProxyMode::Hold);
    }

    /// RST every connection now and every new one until the mode changes.
    pub fn reset(&self) {
        self.set_mode(ProxyMode::Reset);
    }

    /// Requests pass, replies are lost (see [`ProxyMode::DropReplies`]).
    pub fn drop_replies(&self) {
        self.set_mode(ProxyMode::DropReplies);
    }

    /// Forward everything, each chunk `d` after it was read, in each direction.
    pub fn delay(&self, d: Duration) {
        self.set_mode(ProxyMode::Delay(d));
    }

    /// `Lag(d)`: +`d` per chunk in each direction, pipelined (see the module docs).
    pub fn lag(&self, d: Duration) {
        self.set_mode(ProxyMode::Lag(d));
    }

    /// Connections currently open through the proxy.
    pub fn live_connections(&self) -> usize {
        self.stats.live.load(Ordering::SeqCst)
    }

    /// Connections accepted since the proxy started.
    pub fn accepted_connections(&self) -> u64 {
        self.stats.accepted.load(Ordering::SeqCst)
    }

    /// Connections the proxy closed with RST since it started (`Reset` mode, or bytes lost in
    /// `Blackhole`; not counting resets passed on from an endpoint).
    pub fn reset_connections(&self) -> u64 {
        self.stats.resets.load(Ordering::SeqCst)
    }

    /// Bytes read from clients since the proxy started (on connections that reached the
    /// upstream): a client whose count grows is sending to this upstream, e.g. the member an
    /// etcd Limiter currently uses.
    pub fn client_bytes(&self) -> u64 {
        self.stats.client_bytes.load(Ordering::SeqCst)
    }
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.upstream)
            .field("mode", &self.mode())
            .field("live", &self.live_connections())
            .finish()
    }
}

impl Drop for FaultProxy {
    /// Stops the proxy thread (closing the listener and every connection) and joins it; the
    /// join is bounded by the runtime's 1 s shutdown timeout.
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One proxy per upstream (e.g. per ZooKeeper server), switched together or one by one.
pub struct ProxyGroup {
    proxies: Vec<FaultProxy>,
}

impl ProxyGroup {
    /// Starts one [`FaultProxy`] in `Pass` mode per upstream, in order.
    pub fn start<A: ToSocketAddrs + fmt::Debug + Clone>(upstreams: &[A]) -> ProxyGroup {
        ProxyGroup {
            proxies: upstreams.iter().cloned().map(FaultProxy::start).collect(),
        }
    }

    /// Connect string through the proxies: `127.0.0.1:P1,127.0.0.1:P2,…`.
    pub fn connect_string(&self) -> String {
        self.proxies
            .iter()
            .map(FaultProxy::connect_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The library's URL through the proxies, `zk://127.0.0.1:P1,…/chroot`.
    pub fn zk_url(&self, chroot: &str) -> String {
        super::zookeeper::zk_url(&self.connect_string(), chroot)
    }

    pub fn proxies(&self) -> &[FaultProxy] {
        &self.proxies
    }

    pub fn len(&self) -> usize {
        self.proxies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.proxies.is_empty()
    }

    /// Sets every proxy's mode.
    pub fn set_mode(&self, mode: ProxyMode) {
        for p in &self.proxies {
            p.set_mode(mode);
        }
    }

    pub fn pass(&self) {
        self.set_mode(ProxyMode::Pass);
    }

    pub fn blackhole(&self) {
        self.set_mode(ProxyMode::Blackhole);
    }

    pub fn hold(&self) {
        self.set_mode(ProxyMode::Hold);
    }

    pub fn reset(&self) {
        self.set_mode(ProxyMode::Reset);
    }

    pub fn delay(&self, d: Duration) {
        self.set_mode(ProxyMode::Delay(d));
    }

    /// All proxies to `Lag(d)` (pipelined latency).
    pub fn lag(&self, d: Duration) {
        self.set_mode(ProxyMode::Lag(d));
    }

    /// Connections currently open through all proxies.
    pub fn live_connections(&self) -> usize {
        self.proxies.iter().map(FaultProxy::live_connections).sum()
    }
}

impl std::ops::Index<usize> for ProxyGroup {
    type Output = FaultProxy;

    fn index(&self, i: usize) -> &FaultProxy {
        &self.proxies[i]
    }
}

/// Accepts connections until the runtime stops; each gets its own task.
async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    mode: watch::Receiver<ProxyMode>,
    stats: Arc<Stats>,
) {
    loop {
        let client = match listener.accept().await {
            Ok((s, _)) => s,
            // EMFILE and friends: back off instead of spinning.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        stats.accepted.fetch_add(1, Ordering::SeqCst);
        stats.live.fetch_add(1, Ordering::SeqCst);
        let guard = LiveGuard(Arc::clone(&stats));
        let mode = mode.clone();
        let stats = Arc::clone(&stats);
        tokio::spawn(async move {
            let _guard = guard;
            handle_connection(client, upstream, mode, &stats).await;
        });
    }
}

/// Decrements the live-connection count when a connection task ends (also when cancelled).
struct LiveGuard(Arc<Stats>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How a connection's pumping ended.
enum End {
    /// Both directions saw EOF and forwarded it: close normally.
    Done,
    /// An I/O error on one side: reset both sides so the other end sees it too.
    Error,
    /// The proxy was switched to `Reset`.
    Reset,
}

/// Closes a socket with RST instead of FIN.
fn rst(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

async fn handle_connection(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut mode: watch::Receiver<ProxyMode>,
    stats: &Stats,
) {
    let _ = client.set_nodelay(true);
    // Before contacting the upstream: reset, stall, or go ahead.
    let mut scratch = vec![0u8; CHUNK];
    let mut lost_bytes = false;
    loop {
        let m = *mode.borrow_and_update();
        match m {
            ProxyMode::Reset => {
                stats.resets.fetch_add(1, Ordering::SeqCst);
                rst(client);
                return;
            }
            ProxyMode::Pass | ProxyMode::Delay(_) | ProxyMode::Lag(_) | ProxyMode::DropReplies
                if lost_bytes =>
            {
                // The client's first bytes are gone: the stream cannot go on.
                stats.resets.fetch_add(1, Ordering::SeqCst);
                rst(client);
                return;
            }
            ProxyMode::Pass | ProxyMode::Delay(_) | ProxyMode::Lag(_) | ProxyMode::DropReplies => {
                break
            }
            ProxyMode::Hold => {
                if mode.changed().await.is_err() {
                    return;
                }
            }
            ProxyMode::Blackhole => {
                // Discard what the client sends; give up on EOF or error.
                tokio::select! {
                    r = client.read(&mut scratch) => match r {
                        Ok(0) | Err(_) => return,
                        Ok(_) => lost_bytes = true,
                    },
                    r = mode.changed() => if r.is_err() { return },
                }
            }
        }
    }
    drop(scratch);
    let mut server =
        match tokio::time::timeout(UPSTREAM_CONNECT_TIMEOUT, TcpStream::connect(upstream)).await {
            Ok(Ok(s)) => s,
            // Upstream down (refused) or unreachable: the client sees a reset, like a refusal.
            _ => {
                rst(client);
                return;
            }
        };
    let _ = server.set_nodelay(true);
    let lost = AtomicBool::new(false);
    let end = {
        let (mut cr, mut cw) = client.split();
        let (mut sr, mut sw) = server.split();
        let up = pump(
            &mut cr,
            &mut sw,
            mode.clone(),
            &lost,
            Some(&stats.client_bytes),
        );
        let down = pump(&mut sr, &mut cw, mode.clone(), &lost, None);
        let both = async {
            match tokio::try_join!(up, down) {
                Ok(_) => End::Done,
                Err(_) => End::Error,
            }
        };
        tokio::select! {
            end = both => end,
            () = wait_for_reset(mode.clone(), &lost) => End::Reset,
        }
    };
    match end {
        End::Done => {}
        End::Error => {
            rst(client);
            rst(server);
        }
        End::Reset => {
            stats.resets.fetch_add(1, Ordering::SeqCst);
            rst(client);
            rst(server);
        }
    }
}

/// Returns once the mode is `Reset`, or traffic flows again (`Pass`, `Delay`) after this
/// connection `lost` bytes in `Blackhole`; never if the proxy shuts down first.
async fn wait_for_reset(mut mode: watch::Receiver<ProxyMode>, lost: &AtomicBool) {
    loop {
        let m = *mode.borrow_and_update();
        let flows = matches!(m, ProxyMode::Pass | ProxyMode::Delay(_) | ProxyMode::Lag(_));
        if m == ProxyMode::Reset || (flows && lost.load(Ordering::SeqCst)) {
            return;
        }
        if mode.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Copies one direction under the current mode until EOF (forwarded as a half-close). The
/// client → server direction passes its byte counter as `requests`; replies pass `None`.
///
/// Sets `lost` when it discards a chunk in `Blackhole`; from then on it forwards nothing more
/// (the connection task resets the connection when traffic flows again).
async fn pump<R, W>(
    rd: &mut R,
    wr: &mut W,
    mut mode: watch::Receiver<ProxyMode>,
    lost: &AtomicBool,
    requests: Option<&AtomicU64>,
) -> io::Result<()>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; CHUNK];
    loop {
        // Hold and Reset: do not read at all (Reset is handled by the connection task).
        let m = *mode.borrow_and_update();
        if matches!(m, ProxyMode::Hold | ProxyMode::Reset) {
            if mode.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
            continue;
        }
        // A stream that lost bytes is only drained until its reset, whatever the mode.
        if let (ProxyMode::Lag(d), false) = (m, lost.load(Ordering::SeqCst)) {
            if lag(rd, wr, &mut mode, d, &mut buf, requests).await? {
                return Ok(());
            }
            continue;
        }
        let n = tokio::select! {
            r = rd.read(&mut buf) => r?,
            r = mode.changed() => {
                if r.is_err() {
                    std::future::pending::<()>().await;
                }
                continue;
            }
        };
        let read_at = tokio::time::Instant::now();
        count(requests, n);
        if n == 0 {
            let _ = wr.shutdown().await;
            return Ok(());
        }
        // Decide the chunk's fate under the mode in force now (it may change while we wait).
        loop {
            let m = match *mode.borrow_and_update() {
                ProxyMode::DropReplies if requests.is_none() => ProxyMode::Blackhole,
                ProxyMode::DropReplies => ProxyMode::Pass,
                m => m,
            };
            if lost.load(Ordering::SeqCst) && !matches!(m, ProxyMode::Hold | ProxyMode::Reset) {
                // The stream is broken already: discard, and wait for the reset.
                break;
            }
            match m {
                // A chunk read just as the mode became `Lag`: forward it now.
                ProxyMode::Pass | ProxyMode::Lag(_) => {
                    wr.write_all(&buf[..n]).await?;
                    break;
                }
                ProxyMode::Blackhole => {
                    lost.store(true, Ordering::SeqCst);
                    break;
                }
                ProxyMode::Delay(d) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(read_at + d) => {
                            wr.write_all(&buf[..n]).await?;
                            break;
                        }
                        // Re-decide if the mode changes during the delay.
                        r = mode.changed() => if r.is_err() {
                            std::future::pending::<()>().await;
                        },
                    }
                }
                ProxyMode::Hold | ProxyMode::Reset => {
                    if mode.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                ProxyMode::DropReplies => unreachable!("mapped to Pass or Blackhole above"),
            }
        }
    }
}

/// Copies one direction in `Lag(d)` while the mode stays `Lag(d)`: each chunk is read at once
/// and queued with its deadline (read time + `d`), and written when the deadline passes, so
/// chunks overlap in flight. When the mode changes, the queue is flushed in order and the
/// caller takes over. Returns `true` when EOF was read and forwarded (as a half-close).
async fn lag<R, W>(
    rd: &mut R,
    wr: &mut W,
    mode: &mut watch::Receiver<ProxyMode>,
    d: Duration,
    buf: &mut [u8],
    requests: Option<&AtomicU64>,
) -> io::Result<bool>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    use std::collections::VecDeque;
    // (deadline, bytes); empty bytes stand for EOF.
    let mut queue: VecDeque<(tokio::time::Instant, Vec<u8>)> = VecDeque::new();
    let mut eof = false;
    loop {
        let next = queue.front().map(|(at, _)| *at);
        tokio::select! {
            r = rd.read(buf), if !eof => {
                let n = r?;
                count(requests, n);
                eof = n == 0;
                queue.push_back((tokio::time::Instant::now() + d, buf[..n].to_vec()));
            }
            () = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {
                if let Some((_, bytes)) = queue.pop_front() {
                    if bytes.is_empty() {
                        let _ = wr.shutdown().await;
                        return Ok(true);
                    }
                    wr.write_all(&bytes).await?;
                }
            }
            r = mode.changed() => {
                if r.is_err() {
                    std::future::pending::<()>().await;
                }
                if *mode.borrow() != ProxyMode::Lag(d) {
                    // Flush what is in flight, in order, and let the caller go on.
                    for (_, bytes) in queue.drain(..) {
                        if bytes.is_empty() {
                            let _ = wr.shutdown().await;
                            return Ok(true);
                        }
                        wr.write_all(&bytes).await?;
                    }
                    return Ok(false);
                }
            }
        }
    }
}

/// Adds `n` bytes read to a direction's counter, if it keeps one.
fn count(counter: Option<&AtomicU64>, n: usize) {
    if let Some(c) = counter {
        c.fetch_add(n as u64, Ordering::SeqCst);
    }
}

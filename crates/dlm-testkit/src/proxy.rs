//! A fault-injecting TCP proxy for one upstream server: see [`FaultProxy`].

use std::collections::HashMap;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::{Instant, sleep, sleep_until, timeout};

use crate::{Error, RedisServer};

/// How long the proxy waits for the upstream to accept a connection.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest chunk read at once.
const CHUNK: usize = 16 * 1024;
/// Chunks in flight per direction and connection (held by latency).
const IN_FLIGHT: usize = 64;
/// A bandwidth limit is applied in pieces of this fraction of a second.
const PIECES_PER_SECOND: u64 = 20;

/// Which way bytes flow through a [`FaultProxy`].
///
/// ```
/// use dlm_testkit::Direction;
/// assert_ne!(Direction::ToServer, Direction::ToClient);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From the client to the upstream server: commands.
    ToServer,
    /// From the upstream server to the client: replies.
    ToClient,
}

impl Direction {
    fn index(self) -> usize {
        match self {
            Direction::ToServer => 0,
            Direction::ToClient => 1,
        }
    }
}

/// The faults on one [`Direction`] of a [`FaultProxy`]; the default is none.
///
/// ```
/// use std::time::Duration;
/// let link = dlm_testkit::LinkFaults {
///     latency: Duration::from_millis(20),
///     jitter: Duration::from_millis(5),
///     bandwidth: Some(100_000),
/// };
/// assert_ne!(link, dlm_testkit::LinkFaults::default());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkFaults {
    /// Fixed delay added to every chunk.
    pub latency: Duration,
    /// Up to this much more delay, drawn uniformly from the seeded generator.
    pub jitter: Duration,
    /// At most this many bytes per second (over all connections); `None` is
    /// unlimited, `Some(0)` is taken as 1 byte per second.
    pub bandwidth: Option<u64>,
}

/// Every fault of a [`FaultProxy`] at once; the default is none.
///
/// Read them with [`FaultProxy::faults`] and set them all with
/// [`FaultProxy::set_faults`], or use the setters on [`FaultProxy`].
///
/// ```no_run
/// # let server = dlm_testkit::RedisServer::start()?;
/// # let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
/// let mut faults = dlm_testkit::Faults::default();
/// faults.drop_replies = true;
/// faults.to_client.bandwidth = Some(10_000);
/// proxy.set_faults(faults);
/// assert!(proxy.faults().drop_replies);
/// # Ok::<(), dlm_testkit::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults {
    /// Faults on commands, client to server.
    pub to_server: LinkFaults,
    /// Faults on replies, server to client.
    pub to_client: LinkFaults,
    /// Forward nothing either way on any connection, current or new; discard
    /// what is read. [`FaultProxy::partition`] sets it, [`FaultProxy::heal`]
    /// clears it.
    pub blackhole: bool,
    /// Forward commands, discard replies.
    pub drop_replies: bool,
    /// Reset each connection once this many more bytes have been forwarded to
    /// the server on it (counted from when this is set, or from the start of
    /// a connection opened later).
    pub reset_after: Option<u64>,
    /// Reset new connections as soon as they are accepted.
    pub refuse: bool,
}

impl Faults {
    /// The faults on one direction.
    ///
    /// ```
    /// use dlm_testkit::{Direction, Faults};
    /// assert_eq!(Faults::default().link(Direction::ToServer).bandwidth, None);
    /// ```
    pub fn link(&self, dir: Direction) -> &LinkFaults {
        match dir {
            Direction::ToServer => &self.to_server,
            Direction::ToClient => &self.to_client,
        }
    }

    /// The faults on one direction, to change them.
    ///
    /// ```
    /// use dlm_testkit::{Direction, Faults};
    /// let mut faults = Faults::default();
    /// faults.link_mut(Direction::ToClient).bandwidth = Some(1_000);
    /// assert_eq!(faults.to_client.bandwidth, Some(1_000));
    /// ```
    pub fn link_mut(&mut self, dir: Direction) -> &mut LinkFaults {
        match dir {
            Direction::ToServer => &mut self.to_server,
            Direction::ToClient => &mut self.to_client,
        }
    }

    /// Does a connection (cut or not) lose bytes going `dir`?
    fn discards(&self, dir: Direction, cut: bool) -> bool {
        self.blackhole || cut || (dir == Direction::ToClient && self.drop_replies)
    }
}

/// Counters of a [`FaultProxy`], to check that a fault really happened.
///
/// ```no_run
/// # let server = dlm_testkit::RedisServer::start()?;
/// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
/// let stats = proxy.stats();
/// assert_eq!(stats.accepted, 0);
/// assert_eq!(stats.forwarded_to_server, 0);
/// # Ok::<(), dlm_testkit::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Connections accepted and forwarded (refused ones not included).
    pub accepted: u64,
    /// Connections reset at once because of [`FaultProxy::set_refuse`].
    pub refused: u64,
    /// Connections reset by the proxy: by a reset fault, after losing bytes
    /// to a fault that was cleared, after an I/O error on either side, or
    /// because the upstream could not be reached.
    pub resets: u64,
    /// Connections open now.
    pub open: u64,
    /// Bytes forwarded from clients to the server.
    pub forwarded_to_server: u64,
    /// Bytes forwarded from the server to clients.
    pub forwarded_to_client: u64,
    /// Bytes read from clients and discarded.
    pub discarded_to_server: u64,
    /// Bytes read from the server and discarded.
    pub discarded_to_client: u64,
}

impl Stats {
    /// Bytes forwarded going `dir`.
    ///
    /// ```
    /// use dlm_testkit::{Direction, Stats};
    /// assert_eq!(Stats::default().forwarded(Direction::ToClient), 0);
    /// ```
    pub fn forwarded(&self, dir: Direction) -> u64 {
        match dir {
            Direction::ToServer => self.forwarded_to_server,
            Direction::ToClient => self.forwarded_to_client,
        }
    }

    /// Bytes read going `dir` and discarded.
    ///
    /// ```
    /// use dlm_testkit::{Direction, Stats};
    /// assert_eq!(Stats::default().discarded(Direction::ToServer), 0);
    /// ```
    pub fn discarded(&self, dir: Direction) -> u64 {
        match dir {
            Direction::ToServer => self.discarded_to_server,
            Direction::ToClient => self.discarded_to_client,
        }
    }

    fn count(&mut self, dir: Direction, forwarded: bool, n: u64) {
        let counter = match (dir, forwarded) {
            (Direction::ToServer, true) => &mut self.forwarded_to_server,
            (Direction::ToClient, true) => &mut self.forwarded_to_client,
            (Direction::ToServer, false) => &mut self.discarded_to_server,
            (Direction::ToClient, false) => &mut self.discarded_to_client,
        };
        *counter += n;
    }
}

/// The label of one connection a [`FaultProxy`] accepted, in order from 1.
///
/// ```no_run
/// # let server = dlm_testkit::RedisServer::start()?;
/// # let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
/// for id in proxy.connections() {
///     println!("{id} from {:?}", proxy.client_addr(id));
/// }
/// # Ok::<(), dlm_testkit::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(u64);

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conn#{}", self.0)
    }
}

/// A fault-injecting TCP proxy on a free `127.0.0.1` port, forwarding every
/// connection it accepts to one upstream address (a `redis-server` the test
/// started). While traffic flows the test can add and clear faults: latency
/// with seeded jitter, a bandwidth limit, a blackhole, lost replies, TCP
/// resets, refused connections and partitions.
///
/// It runs on its own tokio runtime on a background thread, so plain
/// `#[test]`s and async tests alike can use it; it needs no runtime of the
/// caller. Dropping it closes the listener and every connection (with a FIN)
/// and joins its thread. It only moves bytes, so it works in front of a
/// server with a password or TLS too.
///
/// # The model
///
/// The proxy stands for the network between *one client* and *one node*. A
/// Redlock test gives each client its own proxy in front of each node; "cut
/// client C off from node N" is then [`FaultProxy::partition`] on the proxy C
/// uses for N, and [`FaultProxy::heal`] undoes it. Each connection the proxy
/// accepts gets a [`ConnId`] ([`FaultProxy::connections`]), so a single
/// connection can be cut or reset too.
///
/// Faults apply per chunk of bytes as it is read (and again just before it is
/// written), so a change takes effect at once for data not yet forwarded:
///
/// * **latency** ([`FaultProxy::set_latency`]): each chunk is held for
///   `fixed + uniform(0..=jitter)`, the jitter drawn from a generator seeded
///   with the proxy's seed (one stream per [`Direction`]). Chunks stay in
///   order, as TCP would keep them; latency does not cost throughput.
/// * **bandwidth** ([`FaultProxy::set_bandwidth`]): at most that many bytes
///   per second in that direction, over all connections of the proxy.
/// * **blackhole / partition** ([`FaultProxy::set_blackhole`],
///   [`FaultProxy::partition`], [`FaultProxy::cut`]): the proxy keeps accepting
///   and reading, but forwards nothing either way; what it reads is discarded.
/// * **drop replies** ([`FaultProxy::set_drop_replies`]): commands reach the
///   server, its replies are discarded.
/// * **reset** ([`FaultProxy::set_reset_after`], [`FaultProxy::reset_all`],
///   [`FaultProxy::reset`]): both sides of a connection are aborted with a TCP
///   RST (`SO_LINGER` 0, then close).
/// * **refuse** ([`FaultProxy::set_refuse`]): new connections are accepted
///   and at once reset; open ones are left alone.
///
/// # What happens when a fault is cleared
///
/// Clearing a fault restores forwarding for data read from then on. A byte
/// stream with a hole in it is something TCP never delivers, and a client
/// reading the reply to a later command as the reply to a lost one would see
/// things no real network can show it. So a connection that **lost** bytes
/// (or an end-of-stream) to a blackhole, a partition, a cut or dropped replies
/// is **reset** as soon as no discarding fault applies to it any more. A
/// connection that lost nothing (it was idle during the partition) simply
/// carries on. Chunks already delayed by latency keep their delivery time.
///
/// # Fine print
///
/// * The seed fixes the sequence of jitter draws in each direction; which
///   chunk gets which draw follows the order in which bytes arrive.
/// * An end-of-stream read while a connection loses bytes is lost too: the
///   other side is not told until the connection is reset.
/// * A reset after N bytes ([`FaultProxy::set_reset_after`]) writes exactly N
///   bytes to the server, then resets; whether the server still reads the
///   last of them before the RST is up to its kernel and timing.
/// * A connection accepted during a blackhole or partition is still opened
///   to the upstream, which sees an idle client.
/// * If the upstream cannot be reached when a client connects, the client's
///   connection is reset.
///
/// ```no_run
/// use std::time::Duration;
/// use dlm_testkit::{Direction, FaultProxy, RedisServer};
///
/// let server = RedisServer::start()?;
/// let proxy = FaultProxy::in_front_of(&server, 42)?;
/// // Give `proxy.url()` to the client under test, then:
/// proxy.set_latency(Direction::ToClient, Duration::from_millis(50), Duration::from_millis(10));
/// proxy.partition();
/// proxy.heal();
/// assert!(proxy.stats().accepted <= 1);
/// # Ok::<(), dlm_testkit::Error>(())
/// ```
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Start a proxy to `upstream` on a free `127.0.0.1` port, with no faults.
    /// `seed` determines the latency jitter drawn.
    ///
    /// ```no_run
    /// let server = dlm_testkit::RedisServer::start()?;
    /// let upstream = std::net::SocketAddr::from(([127, 0, 0, 1], server.port()));
    /// let proxy = dlm_testkit::FaultProxy::start(upstream, 42)?;
    /// assert_ne!(proxy.port(), server.port());
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn start(upstream: SocketAddr, seed: u64) -> Result<FaultProxy, Error> {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::new(upstream, seed));
        let (shutdown, shutdown_rx) = oneshot::channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<std::io::Result<()>>();
        let thread_shared = Arc::clone(&shared);
        // The runtime is built, run and dropped on its own thread: a caller
        // inside a runtime of its own could neither block on nor drop it.
        let thread = std::thread::Builder::new()
            .name(format!("fault-proxy-{}", addr.port()))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let listener = match TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    accept_loop(listener, thread_shared, shutdown_rx).await;
                });
                // Dropping the runtime cancels every connection task, which
                // closes the sockets they hold.
            })?;
        let ready = ready_rx
            .recv()
            .unwrap_or_else(|_| Err(std::io::Error::other("fault proxy thread died")));
        if let Err(e) = ready {
            let _ = thread.join();
            return Err(e.into());
        }
        Ok(FaultProxy {
            addr,
            shared,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// Start a proxy to `server` (on `127.0.0.1`), with no faults.
    ///
    /// ```no_run
    /// let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 42)?;
    /// assert_eq!(proxy.upstream().port(), server.port());
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn in_front_of(server: &RedisServer, seed: u64) -> Result<FaultProxy, Error> {
        Self::start(SocketAddr::from((Ipv4Addr::LOCALHOST, server.port())), seed)
    }

    /// The port the proxy listens on.
    ///
    /// ```no_run
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// let stream = std::net::TcpStream::connect(("127.0.0.1", proxy.port()))?;
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The address the proxy listens on (`127.0.0.1:PORT`).
    ///
    /// ```no_run
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// assert!(proxy.addr().ip().is_loopback());
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://127.0.0.1:PORT/`. The proxy only moves bytes: for a server
    /// with a password or TLS, build the URL from [`FaultProxy::port`].
    ///
    /// ```no_run
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// assert_eq!(proxy.url(), format!("redis://127.0.0.1:{}/", proxy.port()));
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port())
    }

    /// The address connections are forwarded to.
    ///
    /// ```no_run
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// assert_eq!(proxy.upstream().port(), server.port());
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// The faults in force now.
    ///
    /// ```no_run
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// assert_eq!(proxy.faults(), dlm_testkit::Faults::default());
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn faults(&self) -> Faults {
        self.shared.lock().faults.clone()
    }

    /// Replace all faults at once. A changed [`Faults::reset_after`] starts
    /// counting again on every open connection.
    ///
    /// ```no_run
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// proxy.set_faults(dlm_testkit::Faults { blackhole: true, ..Default::default() });
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn set_faults(&self, faults: Faults) {
        self.update(|f| *f = faults);
    }

    /// Change the faults in place; like [`FaultProxy::set_faults`]. Meant for
    /// one controlling thread: two threads updating at once may lose a change.
    ///
    /// ```no_run
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// proxy.update(|f| f.to_server.bandwidth = Some(50_000));
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn update(&self, change: impl FnOnce(&mut Faults)) {
        // `change` runs without the lock, so it may call back into the proxy.
        let mut faults = self.faults();
        change(&mut faults);
        let mut state = self.shared.lock();
        let rearm = faults.reset_after != state.faults.reset_after;
        state.apply(faults, rearm);
    }

    /// Remove every fault, also per-connection cuts (like [`FaultProxy::heal`]).
    ///
    /// ```no_run
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// proxy.set_drop_replies(true);
    /// proxy.clear();
    /// assert_eq!(proxy.faults(), dlm_testkit::Faults::default());
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn clear(&self) {
        let mut state = self.shared.lock();
        for conn in state.conns.values_mut() {
            conn.cut = false;
        }
        state.apply(Faults::default(), true);
    }

    /// Hold every chunk going `dir` for `fixed` plus a seeded uniform draw
    /// from `0..=jitter`; zero and zero removes the latency.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// proxy.set_latency(dlm_testkit::Direction::ToServer, Duration::from_millis(100), Duration::ZERO);
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn set_latency(&self, dir: Direction, fixed: Duration, jitter: Duration) {
        self.update(|f| {
            let link = f.link_mut(dir);
            link.latency = fixed;
            link.jitter = jitter;
        });
    }

    /// Limit `dir` to `bytes_per_second` over all connections; `None` lifts it.
    ///
    /// ```no_run
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// proxy.set_bandwidth(dlm_testkit::Direction::ToClient, Some(100_000));
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn set_bandwidth(&self, dir: Direction, bytes_per_second: Option<u64>) {
        self.update(|f| f.link_mut(dir).bandwidth = bytes_per_second);
    }

    /// Turn the blackhole on or off: read everything, forward nothing either
    /// way, on current and new connections. Connections that lost bytes are
    /// reset when it is turned off (see [`FaultProxy`]).
    ///
    /// ```no_run
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// proxy.set_blackhole(true);
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn set_blackhole(&self, on: bool) {
        self.update(|f| f.blackhole = on);
    }

    /// Cut the client off from the node: [`FaultProxy::set_blackhole`]`(true)`.
    ///
    /// ```no_run
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// proxy.partition();
    /// proxy.heal();
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn partition(&self) {
        self.set_blackhole(true);
    }

    /// Undo [`FaultProxy::partition`] and every [`FaultProxy::cut`]; other
    /// faults stay. Connections that lost bytes are reset.
    ///
    /// ```no_run
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// proxy.partition();
    /// proxy.heal();
    /// assert!(!proxy.faults().blackhole);
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn heal(&self) {
        let mut state = self.shared.lock();
        for conn in state.conns.values_mut() {
            conn.cut = false;
        }
        let mut faults = state.faults.clone();
        faults.blackhole = false;
        state.apply(faults, false);
    }

    /// Blackhole one open connection only (no effect if it is gone); undone
    /// by [`FaultProxy::heal`] or [`FaultProxy::clear`].
    ///
    /// ```no_run
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// if let Some(first) = proxy.connections().first() {
    ///     proxy.cut(*first);
    /// }
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn cut(&self, id: ConnId) {
        let mut state = self.shared.lock();
        if let Some(conn) = state.conns.get_mut(&id) {
            conn.cut = true;
        }
    }

    /// Forward commands but discard replies (on), or forward both again
    /// (off; connections that lost replies are then reset).
    ///
    /// ```no_run
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// proxy.set_drop_replies(true);
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn set_drop_replies(&self, on: bool) {
        self.update(|f| f.drop_replies = on);
    }

    /// Reset each connection once `bytes` more have been forwarded to the
    /// server on it (counted from now, or from the start of a connection
    /// opened later): the first `bytes` bytes pass, then both sides get a
    /// RST. `Some(0)` resets a connection when it next sends anything; `None`
    /// turns this off.
    ///
    /// ```no_run
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// proxy.set_reset_after(Some(1_000));
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn set_reset_after(&self, bytes: Option<u64>) {
        let mut state = self.shared.lock();
        let mut faults = state.faults.clone();
        faults.reset_after = bytes;
        state.apply(faults, true);
    }

    /// Reset every open connection now (both sides get a RST).
    ///
    /// ```no_run
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// proxy.reset_all();
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn reset_all(&self) {
        let mut state = self.shared.lock();
        for conn in state.conns.values_mut() {
            conn.kill();
        }
    }

    /// Reset one open connection now (no effect if it is gone).
    ///
    /// ```no_run
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// for id in proxy.connections() {
    ///     proxy.reset(id);
    /// }
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn reset(&self, id: ConnId) {
        if let Some(conn) = self.shared.lock().conns.get_mut(&id) {
            conn.kill();
        }
    }

    /// Reset new connections as soon as they are accepted (on), or forward
    /// them again (off). Open connections are not touched.
    ///
    /// ```no_run
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// proxy.set_refuse(true);
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn set_refuse(&self, on: bool) {
        self.update(|f| f.refuse = on);
    }

    /// The open connections, oldest first.
    ///
    /// ```no_run
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// assert!(proxy.connections().is_empty());
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn connections(&self) -> Vec<ConnId> {
        let mut ids: Vec<ConnId> = self.shared.lock().conns.keys().copied().collect();
        ids.sort();
        ids
    }

    /// The client's address of an open connection.
    ///
    /// ```no_run
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// let client = std::net::TcpStream::connect(proxy.addr())?;
    /// // Once the proxy has accepted it:
    /// let mine = proxy
    ///     .connections()
    ///     .into_iter()
    ///     .find(|id| proxy.client_addr(*id) == client.local_addr().ok());
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn client_addr(&self, id: ConnId) -> Option<SocketAddr> {
        self.shared.lock().conns.get(&id).map(|c| c.client)
    }

    /// The counters so far.
    ///
    /// ```no_run
    /// # let server = dlm_testkit::RedisServer::start()?;
    /// let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 1)?;
    /// println!("{:?}", proxy.stats());
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn stats(&self) -> Stats {
        let state = self.shared.lock();
        Stats {
            open: state.conns.len() as u64,
            ..state.stats
        }
    }

    /// The next delay the proxy would add going `dir` (this draws from the
    /// seeded generator, as forwarding a chunk would).
    #[cfg(test)]
    fn draw_delay(&self, dir: Direction) -> Duration {
        self.shared.lock().delay(dir)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the proxy thread and the controlling [`FaultProxy`] share.
#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    state: Mutex<State>,
}

impl Shared {
    fn new(upstream: SocketAddr, seed: u64) -> Shared {
        let now = Instant::now();
        Shared {
            upstream,
            state: Mutex::new(State {
                faults: Faults::default(),
                conns: HashMap::new(),
                next_id: 1,
                // One stream per direction, so replies do not shift the
                // jitter drawn for commands.
                rng: [
                    fastrand::Rng::with_seed(seed),
                    fastrand::Rng::with_seed(seed ^ 0x9e37_79b9_7f4a_7c15),
                ],
                link_free: [now, now],
                stats: Stats::default(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock, but a poisoned state is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Debug)]
struct State {
    faults: Faults,
    conns: HashMap<ConnId, ConnState>,
    next_id: u64,
    rng: [fastrand::Rng; 2],
    /// When each direction's bandwidth limit lets the next piece go.
    link_free: [Instant; 2],
    stats: Stats,
}

#[derive(Debug)]
struct ConnState {
    client: SocketAddr,
    kill: Arc<Notify>,
    killed: bool,
    cut: bool,
    /// Bytes or an end-of-stream were discarded on it.
    lost: bool,
    /// Bytes still to forward to the server before a reset.
    reset_budget: Option<u64>,
}

impl ConnState {
    fn kill(&mut self) {
        if !self.killed {
            self.killed = true;
            self.kill.notify_one();
        }
    }
}

impl State {
    /// Put `faults` in force; with `rearm`, restart every connection's
    /// reset budget. Reset connections that lost bytes and lose none now.
    fn apply(&mut self, faults: Faults, rearm: bool) {
        self.faults = faults;
        let faults = &self.faults;
        for conn in self.conns.values_mut() {
            if rearm {
                conn.reset_budget = faults.reset_after;
            }
            let discarding = faults.discards(Direction::ToServer, conn.cut)
                || faults.discards(Direction::ToClient, conn.cut);
            if conn.lost && !discarding {
                conn.kill();
            }
        }
    }

    fn delay(&mut self, dir: Direction) -> Duration {
        let link = *self.faults.link(dir);
        let jitter = u64::try_from(link.jitter.as_nanos()).unwrap_or(u64::MAX);
        let extra = if jitter == 0 {
            0
        } else {
            self.rng[dir.index()].u64(0..=jitter)
        };
        link.latency + Duration::from_nanos(extra)
    }

    /// Is `id` losing bytes going `dir`? A connection that is gone or being
    /// reset counts as losing them: nothing more passes once a reset is due.
    fn discards(&self, id: ConnId, dir: Direction) -> bool {
        self.conns
            .get(&id)
            .is_none_or(|c| c.killed || self.faults.discards(dir, c.cut))
    }

    /// Count `n` bytes read on `id` going `dir` as discarded.
    fn discard(&mut self, id: ConnId, dir: Direction, n: usize) {
        if let Some(conn) = self.conns.get_mut(&id) {
            conn.lost = true;
        }
        self.stats.count(dir, false, n as u64);
    }
}

/// How a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Both sides closed normally.
    Closed,
    /// Abort both sides with a RST.
    Reset,
}

/// Bytes read and on their way, to be written at `due`.
struct Chunk {
    due: Instant,
    data: Vec<u8>,
}

/// What to do with the next piece of a chunk.
enum Plan {
    Discard,
    Reset,
    /// Write `len` bytes at `at`.
    Send {
        len: usize,
        at: Instant,
    },
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: oneshot::Receiver<()>,
) {
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => accepted,
        };
        let (client, peer) = match accepted {
            Ok(pair) => pair,
            Err(_) => {
                // Out of file descriptors or similar: back off, keep serving.
                sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let refuse = {
            let mut state = shared.lock();
            if state.faults.refuse {
                state.stats.refused += 1;
            }
            state.faults.refuse
        };
        if refuse {
            abort(client);
            continue;
        }
        tokio::spawn(serve(client, peer, Arc::clone(&shared)));
    }
}

/// Close `stream` with a RST instead of a FIN.
fn abort(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

async fn serve(mut client: TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    let _ = client.set_nodelay(true);
    let mut upstream = match timeout(
        UPSTREAM_CONNECT_TIMEOUT,
        TcpStream::connect(shared.upstream),
    )
    .await
    {
        Ok(Ok(stream)) => stream,
        _ => {
            shared.lock().stats.resets += 1;
            abort(client);
            return;
        }
    };
    let _ = upstream.set_nodelay(true);
    let kill = Arc::new(Notify::new());
    let id = {
        let mut state = shared.lock();
        let id = ConnId(state.next_id);
        state.next_id += 1;
        state.stats.accepted += 1;
        let conn = ConnState {
            client: peer,
            kill: Arc::clone(&kill),
            killed: false,
            cut: false,
            lost: false,
            reset_budget: state.faults.reset_after,
        };
        state.conns.insert(id, conn);
        id
    };
    let end = {
        let (client_r, client_w) = client.split();
        let (upstream_r, upstream_w) = upstream.split();
        let (to_server_tx, to_server_rx) = mpsc::channel(IN_FLIGHT);
        let (to_client_tx, to_client_rx) = mpsc::channel(IN_FLIGHT);
        let pump = async {
            tokio::try_join!(
                read_side(&shared, id, Direction::ToServer, client_r, to_server_tx),
                write_side(&shared, id, Direction::ToServer, to_server_rx, upstream_w),
                read_side(&shared, id, Direction::ToClient, upstream_r, to_client_tx),
                write_side(&shared, id, Direction::ToClient, to_client_rx, client_w),
            )
        };
        tokio::select! {
            done = pump => match done {
                Ok(_) => End::Closed,
                Err(end) => end,
            },
            () = kill.notified() => End::Reset,
        }
    };
    {
        let mut state = shared.lock();
        state.conns.remove(&id);
        if end == End::Reset {
            state.stats.resets += 1;
        }
    }
    if end == End::Reset {
        abort(client);
        abort(upstream);
    }
}

/// Read from one side and queue what is to be forwarded, with its delay.
async fn read_side(
    shared: &Shared,
    id: ConnId,
    dir: Direction,
    mut from: ReadHalf<'_>,
    to: mpsc::Sender<Chunk>,
) -> Result<(), End> {
    let mut buf = vec![0u8; CHUNK];
    let mut last_due = Instant::now();
    loop {
        let n = from.read(&mut buf).await.map_err(|_| End::Reset)?;
        if n == 0 {
            let lost = {
                let mut state = shared.lock();
                let lost = state.discards(id, dir);
                if lost {
                    state.discard(id, dir, 0);
                }
                lost
            };
            if lost {
                // The end-of-stream is lost like data: hold the connection
                // open until it is reset (when the fault is cleared) or the
                // proxy stops.
                std::future::pending::<()>().await;
            }
            // Dropping the sender makes the writer pass the end on.
            return Ok(());
        }
        let delay = {
            let mut state = shared.lock();
            if state.discards(id, dir) {
                state.discard(id, dir, n);
                continue;
            }
            state.delay(dir)
        };
        // Later chunks never overtake earlier ones, whatever the jitter.
        let due = (Instant::now() + delay).max(last_due);
        last_due = due;
        let chunk = Chunk {
            due,
            data: buf[..n].to_vec(),
        };
        if to.send(chunk).await.is_err() {
            return Ok(());
        }
    }
}

/// Write queued chunks to the other side when due, within the bandwidth
/// limit, unless a fault discards them or calls for a reset.
async fn write_side(
    shared: &Shared,
    id: ConnId,
    dir: Direction,
    mut from: mpsc::Receiver<Chunk>,
    mut to: WriteHalf<'_>,
) -> Result<(), End> {
    while let Some(chunk) = from.recv().await {
        // A timer costs about a millisecond even when already due: skip it
        // unless there is time to wait (no latency, no bandwidth limit).
        if chunk.due > Instant::now() {
            sleep_until(chunk.due).await;
        }
        let mut data = &chunk.data[..];
        while !data.is_empty() {
            let (len, at) = match plan(shared, id, dir, data.len()) {
                Plan::Discard => break,
                Plan::Reset => return Err(End::Reset),
                Plan::Send { len, at } => (len, at),
            };
            if at > Instant::now() {
                sleep_until(at).await;
            }
            if !commit(shared, id, dir, len) {
                // A fault came on while waiting for the bandwidth limit.
                shared.lock().discard(id, dir, data.len() - len);
                break;
            }
            to.write_all(&data[..len]).await.map_err(|_| End::Reset)?;
            data = &data[len..];
            if dir == Direction::ToServer && budget_spent(shared, id) {
                return Err(End::Reset);
            }
        }
    }
    let _ = to.shutdown().await;
    Ok(())
}

/// Decide about the next piece of `len` bytes going `dir` on `id`.
fn plan(shared: &Shared, id: ConnId, dir: Direction, len: usize) -> Plan {
    let mut state = shared.lock();
    if state.discards(id, dir) {
        state.discard(id, dir, len);
        return Plan::Discard;
    }
    let mut len = len;
    if dir == Direction::ToServer
        && let Some(budget) = state.conns.get(&id).and_then(|c| c.reset_budget)
    {
        if budget == 0 {
            return Plan::Reset;
        }
        len = len.min(usize::try_from(budget).unwrap_or(usize::MAX));
    }
    let now = Instant::now();
    let at = match state.faults.link(dir).bandwidth {
        None => now,
        Some(rate) => {
            let rate = rate.max(1);
            let piece = (rate / PIECES_PER_SECOND).max(1);
            len = len.min(usize::try_from(piece).unwrap_or(usize::MAX));
            let free = &mut state.link_free[dir.index()];
            let at = (*free).max(now);
            let nanos = (len as u128 * 1_000_000_000) / u128::from(rate);
            *free = at + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
            at
        }
    };
    Plan::Send { len, at }
}

/// Just before writing `len` bytes: count them as forwarded, or as
/// discarded (returns false) if a fault came on since [`plan`].
fn commit(shared: &Shared, id: ConnId, dir: Direction, len: usize) -> bool {
    let mut state = shared.lock();
    if state.discards(id, dir) {
        state.discard(id, dir, len);
        return false;
    }
    state.stats.count(dir, true, len as u64);
    if dir == Direction::ToServer
        && let Some(budget) = state
            .conns
            .get_mut(&id)
            .and_then(|c| c.reset_budget.as_mut())
    {
        *budget = budget.saturating_sub(len as u64);
    }
    true
}

/// Has `id` forwarded all it may before a reset?
fn budget_spent(shared: &Shared, id: ConnId) -> bool {
    shared
        .lock()
        .conns
        .get(&id)
        .and_then(|c| c.reset_budget)
        .is_some_and(|b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::{Conn, Reply, write_command};
    use std::io::{self, Read};
    use std::time::Instant as StdInstant;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// A RESP connection through `proxy` whose reads give up after `ms`.
    fn conn(proxy: &FaultProxy, ms: u64) -> io::Result<Conn> {
        Conn::connect(proxy.port(), None, Duration::from_millis(ms))
    }

    fn pong() -> Reply {
        Reply::Status("PONG".into())
    }

    /// Did a call fail because the read timed out (no reply), rather than
    /// because the connection was closed or reset?
    fn timed_out(e: &io::Error) -> bool {
        matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        )
    }

    /// Poll `check` for up to 5 s.
    fn eventually(what: &str, mut check: impl FnMut() -> bool) -> TestResult {
        let deadline = StdInstant::now() + Duration::from_secs(5);
        while !check() {
            if StdInstant::now() > deadline {
                return Err(format!("timed out waiting for {what}").into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    #[test]
    fn can_be_shared_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<FaultProxy>();
    }

    #[test]
    fn forwards_and_stops_when_dropped() -> TestResult {
        let server = RedisServer::start()?;
        let proxy = FaultProxy::in_front_of(&server, 1)?;
        assert_eq!(proxy.url(), format!("redis://127.0.0.1:{}/", proxy.port()));
        assert_eq!(proxy.upstream().port(), server.port());
        let mut c = conn(&proxy, 2000)?;
        assert_eq!(c.call(&["PING"])?, pong());
        assert_eq!(c.call(&["SET", "k", "v"])?, Reply::Status("OK".into()));
        assert_eq!(server.command(&["GET", "k"])?, "v");
        assert_eq!(c.call(&["GET", "k"])?, Reply::Bulk(Some(b"v".to_vec())));

        let ids = proxy.connections();
        assert_eq!(ids.len(), 1);
        assert!(
            proxy
                .client_addr(ids[0])
                .is_some_and(|a| a.ip().is_loopback())
        );
        let stats = proxy.stats();
        assert_eq!((stats.accepted, stats.open, stats.resets), (1, 1, 0));
        assert!(stats.forwarded_to_server > 0 && stats.forwarded_to_client > 0);
        assert_eq!(stats.discarded_to_server + stats.discarded_to_client, 0);

        let port = proxy.port();
        drop(proxy);
        let err = c.call(&["PING"]).err().ok_or("still answered")?;
        assert!(!timed_out(&err), "{err}");
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
        Ok(())
    }

    #[test]
    fn latency_delays_round_trips() -> TestResult {
        let server = RedisServer::start()?;
        let proxy = FaultProxy::in_front_of(&server, 2)?;
        let mut c = conn(&proxy, 3000)?;
        assert_eq!(c.call(&["PING"])?, pong());
        proxy.set_latency(
            Direction::ToServer,
            Duration::from_millis(100),
            Duration::ZERO,
        );
        let start = StdInstant::now();
        assert_eq!(c.call(&["PING"])?, pong());
        let one_way = start.elapsed();
        assert!(one_way >= Duration::from_millis(100), "{one_way:?}");
        assert!(one_way < Duration::from_secs(2), "{one_way:?}");

        proxy.set_latency(
            Direction::ToClient,
            Duration::from_millis(50),
            Duration::from_millis(20),
        );
        let start = StdInstant::now();
        assert_eq!(c.call(&["PING"])?, pong());
        let both = start.elapsed();
        assert!(both >= Duration::from_millis(150), "{both:?}");
        assert!(both < Duration::from_secs(2), "{both:?}");
        Ok(())
    }

    #[test]
    fn jitter_follows_the_seed() -> TestResult {
        // Nothing connects, so the upstream need not exist.
        let nowhere = SocketAddr::from((Ipv4Addr::LOCALHOST, 9));
        let draws = |seed: u64| -> Result<Vec<Duration>, Error> {
            let proxy = FaultProxy::start(nowhere, seed)?;
            for dir in [Direction::ToServer, Direction::ToClient] {
                proxy.set_latency(dir, Duration::from_millis(10), Duration::from_millis(50));
            }
            Ok((0..40)
                .map(|i| {
                    let dir = if i % 3 == 0 {
                        Direction::ToClient
                    } else {
                        Direction::ToServer
                    };
                    proxy.draw_delay(dir)
                })
                .collect())
        };
        let a = draws(7)?;
        assert_eq!(a, draws(7)?);
        assert_ne!(a, draws(8)?);
        assert!(
            a.iter()
                .all(|d| (Duration::from_millis(10)..=Duration::from_millis(60)).contains(d))
        );
        assert!(a.iter().any(|d| *d != a[0]));
        Ok(())
    }

    #[tokio::test]
    async fn works_inside_an_async_test() -> TestResult {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let server = RedisServer::start()?;
        let proxy = FaultProxy::in_front_of(&server, 3)?;
        proxy.set_latency(
            Direction::ToClient,
            Duration::from_millis(50),
            Duration::from_millis(10),
        );
        let mut stream = TcpStream::connect(proxy.addr()).await?;
        let start = Instant::now();
        stream.write_all(b"*1\r\n$4\r\nPING\r\n").await?;
        let mut buf = [0u8; 7];
        timeout(Duration::from_secs(3), stream.read_exact(&mut buf)).await??;
        assert_eq!(&buf, b"+PONG\r\n");
        assert!(start.elapsed() >= Duration::from_millis(50));
        drop(proxy);
        Ok(())
    }

    #[test]
    fn blackhole_swallows_everything_until_cleared() -> TestResult {
        let server = RedisServer::start()?;
        let proxy = FaultProxy::in_front_of(&server, 4)?;
        let mut before = conn(&proxy, 500)?;
        assert_eq!(before.call(&["PING"])?, pong());

        proxy.set_blackhole(true);
        let err = before
            .call(&["PING"])
            .err()
            .ok_or("answered through a blackhole")?;
        assert!(timed_out(&err), "{err}");
        let mut during = conn(&proxy, 500)?;
        let err = during
            .call(&["PING"])
            .err()
            .ok_or("answered through a blackhole")?;
        assert!(timed_out(&err), "{err}");
        let stats = proxy.stats();
        assert_eq!(stats.discarded_to_server, 2 * 14);
        assert_eq!(stats.accepted, 2);

        // Both lost bytes, so clearing the fault resets them.
        proxy.set_blackhole(false);
        eventually("both reset", || proxy.stats().resets == 2)?;
        assert!(before.call(&["PING"]).is_err());
        let mut after = conn(&proxy, 2000)?;
        assert_eq!(after.call(&["PING"])?, pong());
        Ok(())
    }

    #[test]
    fn dropped_replies_leave_the_command_done() -> TestResult {
        let server = RedisServer::start()?;
        let proxy = FaultProxy::in_front_of(&server, 5)?;
        let mut c = conn(&proxy, 500)?;
        proxy.set_drop_replies(true);
        let err = c
            .call(&["SET", "k", "v"])
            .err()
            .ok_or("reply came through")?;
        assert!(timed_out(&err), "{err}");
        assert_eq!(server.command(&["GET", "k"])?, "v");
        let stats = proxy.stats();
        assert_eq!(stats.discarded_to_client, b"+OK\r\n".len() as u64);
        assert_eq!(stats.forwarded_to_client, 0);
        assert!(stats.forwarded_to_server > 0);

        proxy.set_drop_replies(false);
        eventually("the lossy connection reset", || proxy.stats().resets == 1)?;
        let mut fresh = conn(&proxy, 2000)?;
        assert_eq!(fresh.call(&["GET", "k"])?, Reply::Bulk(Some(b"v".to_vec())));
        Ok(())
    }

    #[test]
    fn resets_after_n_bytes() -> TestResult {
        let server = RedisServer::start()?;
        let proxy = FaultProxy::in_front_of(&server, 6)?;
        let mut stream = std::net::TcpStream::connect(proxy.addr())?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        write_command(&mut stream, &["PING"])?;
        let mut buf = [0u8; 7];
        stream.read_exact(&mut buf)?;
        assert_eq!(&buf, b"+PONG\r\n");

        // Counted from now: the PING before does not count.
        proxy.set_reset_after(Some(1000));
        let value = "x".repeat(10_000);
        // The write may fail part way once the RST is in.
        let _ = write_command(&mut stream, &["SET", "big", &value]);
        let mut rest = Vec::new();
        match stream.read_to_end(&mut rest) {
            Ok(_) => assert!(rest.is_empty(), "got {rest:?}"),
            Err(e) => assert!(!timed_out(&e), "{e}"),
        }
        eventually("the reset counted", || proxy.stats().resets == 1)?;
        let stats = proxy.stats();
        assert_eq!(stats.forwarded_to_server, 14 + 1000);
        assert_eq!(server.command(&["EXISTS", "big"])?, ":0");
        Ok(())
    }

    #[test]
    fn reset_all_aborts_open_connections() -> TestResult {
        let server = RedisServer::start()?;
        let proxy = FaultProxy::in_front_of(&server, 7)?;
        let mut a = conn(&proxy, 2000)?;
        let mut b = conn(&proxy, 2000)?;
        assert_eq!(a.call(&["PING"])?, pong());
        assert_eq!(b.call(&["PING"])?, pong());
        proxy.reset_all();
        for c in [&mut a, &mut b] {
            let err = c.call(&["PING"]).err().ok_or("answered after a reset")?;
            assert!(!timed_out(&err), "{err}");
        }
        assert_eq!(proxy.stats().resets, 2);
        let mut c = conn(&proxy, 2000)?;
        assert_eq!(c.call(&["PING"])?, pong());
        Ok(())
    }

    #[test]
    fn refuses_new_connections_only() -> TestResult {
        let server = RedisServer::start()?;
        let proxy = FaultProxy::in_front_of(&server, 8)?;
        let mut open = conn(&proxy, 2000)?;
        assert_eq!(open.call(&["PING"])?, pong());

        proxy.set_refuse(true);
        let start = StdInstant::now();
        match conn(&proxy, 3000) {
            Err(e) => assert!(!timed_out(&e), "{e}"),
            Ok(mut refused) => {
                let err = refused
                    .call(&["PING"])
                    .err()
                    .ok_or("refused one answered")?;
                assert!(!timed_out(&err), "{err}");
            }
        }
        assert!(start.elapsed() < Duration::from_secs(2));
        assert_eq!(open.call(&["PING"])?, pong());
        let stats = proxy.stats();
        assert_eq!((stats.accepted, stats.refused), (1, 1));

        proxy.set_refuse(false);
        let mut fresh = conn(&proxy, 2000)?;
        assert_eq!(fresh.call(&["PING"])?, pong());
        Ok(())
    }

    #[test]
    fn partition_then_heal() -> TestResult {
        let server = RedisServer::start()?;
        let proxy = FaultProxy::in_front_of(&server, 9)?;
        let mut idle = conn(&proxy, 2000)?;
        let mut busy = conn(&proxy, 300)?;
        assert_eq!(idle.call(&["PING"])?, pong());
        assert_eq!(busy.call(&["PING"])?, pong());

        proxy.partition();
        assert!(proxy.faults().blackhole);
        let err = busy
            .call(&["SET", "k", "v"])
            .err()
            .ok_or("crossed the partition")?;
        assert!(timed_out(&err), "{err}");
        let mut new = conn(&proxy, 300)?;
        let err = new.call(&["PING"]).err().ok_or("crossed the partition")?;
        assert!(timed_out(&err), "{err}");
        assert_eq!(server.command(&["EXISTS", "k"])?, ":0");

        proxy.heal();
        assert_eq!(proxy.faults(), Faults::default());
        // The connections that lost bytes are reset; the idle one carries on.
        eventually("lossy connections reset", || proxy.stats().resets == 2)?;
        assert_eq!(idle.call(&["PING"])?, pong());
        assert!(busy.call(&["PING"]).is_err());
        let mut fresh = conn(&proxy, 2000)?;
        assert_eq!(fresh.call(&["PING"])?, pong());
        assert_eq!(proxy.connections().len(), 2);
        Ok(())
    }

    #[test]
    fn cut_isolates_one_connection() -> TestResult {
        let server = RedisServer::start()?;
        let proxy = FaultProxy::in_front_of(&server, 10)?;
        let mut first = conn(&proxy, 300)?;
        assert_eq!(first.call(&["PING"])?, pong());
        let mut second = conn(&proxy, 2000)?;
        assert_eq!(second.call(&["PING"])?, pong());
        let ids = proxy.connections();
        assert_eq!(ids.len(), 2);

        proxy.cut(ids[0]);
        let err = first.call(&["PING"]).err().ok_or("crossed the cut")?;
        assert!(timed_out(&err), "{err}");
        assert_eq!(second.call(&["PING"])?, pong());

        proxy.heal();
        eventually("the cut connection reset", || {
            proxy.connections() == [ids[1]]
        })?;
        assert_eq!(second.call(&["PING"])?, pong());
        Ok(())
    }

    #[test]
    fn bandwidth_limits_throughput() -> TestResult {
        let server = RedisServer::start()?;
        let value = "b".repeat(200_000);
        assert_eq!(server.command(&["SET", "big", &value])?, "+OK");
        let proxy = FaultProxy::in_front_of(&server, 11)?;
        proxy.set_bandwidth(Direction::ToClient, Some(100_000));
        let mut c = conn(&proxy, 8000)?;
        let start = StdInstant::now();
        let reply = c.call(&["GET", "big"])?;
        let took = start.elapsed();
        assert_eq!(reply, Reply::Bulk(Some(value.into_bytes())));
        assert!(took >= Duration::from_millis(1500), "{took:?}");
        assert!(took < Duration::from_secs(6), "{took:?}");

        proxy.set_bandwidth(Direction::ToClient, None);
        let start = StdInstant::now();
        c.call(&["GET", "big"])?;
        assert!(start.elapsed() < Duration::from_secs(1));
        Ok(())
    }
}

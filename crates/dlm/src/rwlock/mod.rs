//! The read-write lock: many readers or one writer, with writer preference.
//!
//! Redis holds the writer (a key with the writer's token and lease), the
//! readers (a sorted set: each reader's token with its own lease deadline,
//! so a dead reader frees its share at its TTL) and the waiting writers (a
//! sorted set of markers, each with its own short lease). A reader gets in
//! only when nobody writes **and nobody waits to write**: a writer waiting
//! behind readers gets in before readers that arrived after it, so a stream
//! of readers never starves a writer. The price, documented: a stream of
//! writers can starve readers. A waiting writer's marker lapses
//! [`WRITER_MARKER_LEASE`] after its writer stopped refreshing it (it died),
//! so a dead waiting writer keeps readers out for at most that long.
//!
//! Releases wake only who may enter: the last reader out wakes the waiting
//! writers (channel `:writable`); a writer leaving wakes the next writer if
//! one waits, else the readers (`:readable`).
//!
//! See [`RwLock`] for the entry point and its *Safety* section.

mod batch;
mod held;
mod ops;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::keys::rw_keys;
use crate::services::held::{Guard, Lease, Pending, Shared, Turns, guard_api};
use crate::services::options::{LockOptions, Outcome};
use crate::services::replication::replicated;
use crate::token::{Fence, Token};

pub(crate) use batch::Node as RwNode;
pub(crate) use held::RwHeld;

/// What an observer can see of a read-write lock ([`RwLock::status`]).
///
/// ```no_run
/// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
/// let s = client.rwlock("catalog").status().await?;
/// if !s.writer && s.waiting_writers == 0 { println!("{} readers, open to more", s.readers) }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwStatus {
    /// A writer holds the lock.
    pub writer: bool,
    /// The writer's remaining TTL (`None`: no writer, or no expiry).
    pub writer_ttl: Option<Duration>,
    /// Read shares whose lease has not run out.
    pub readers: u64,
    /// Writers waiting for the readers to leave (new readers wait behind them).
    pub waiting_writers: u64,
    /// The last fencing token the lock's slot counter handed out (`None`: none yet).
    pub fence: Option<Fence>,
}
use ops::Mode;

/// How long a waiting writer's marker (which keeps new readers out) lasts
/// without being refreshed; waiting writers refresh it every third of it.
pub const WRITER_MARKER_LEASE: Duration = Duration::from_secs(3);

/// The client's read-write-lock state.
pub(crate) type RwShared = Shared<RwHeld>;

/// What an acquisition that gave up undoes (`cancel.lua`), and the batcher
/// whose attempts of its token the undo goes behind.
struct Undo {
    keys: Arc<crate::keys::RwKeys>,
    node: RwNode,
}

/// The read-write lock's scripts, loaded when a connection is made.
pub(crate) fn preloaded_scripts() -> Vec<&'static redis::Script> {
    let mut scripts = ops::scripts();
    scripts.extend(batch::scripts());
    scripts
}

/// A read-write lock on one Redis; cheap to clone. Get one from
/// [`crate::Client::rwlock`].
///
/// [`RwLock::read`] and [`RwLock::write`] take the same [`LockOptions`] as
/// [`crate::Lock`] (TTL, wait, watchdog, `replicas`; `node_timeout` does
/// not apply). Their guards have the mutex guard's methods (fencing token,
/// `lost()`, watchdog, extend, release on drop). A [`WriteGuard`] can be
/// turned into a [`ReadGuard`] atomically ([`WriteGuard::downgrade`]); the
/// other way is refused ([`Error::UpgradeRefused`]): two readers upgrading
/// at once would wait for each other forever.
///
/// ```no_run
/// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
/// use std::time::Duration;
/// let rw = client.rwlock("catalog");
/// let opts = dlm::LockOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(5));
/// let r1 = rw.read(&opts).await?;
/// let r2 = rw.read(&opts).await?;              // readers share
/// r1.release().await?;
/// r2.release().await?;
/// let w = rw.write(&opts).await?;              // alone: no reader, no other writer
/// let r = w.downgrade().await?;                // keep reading what we wrote
/// r.release().await?;
/// # Ok(()) }
/// ```
///
/// # Safety
///
/// While Redis keeps its data and no holder pauses beyond its lease: no
/// reader overlaps a writer, and no two writers overlap. Each read share
/// has its own lease, so a dead reader frees its share at its TTL (it is
/// dropped by the next operation on the lock). Fencing tokens come from one
/// counter for reads and writes: a writer's is greater than that of every
/// read share granted before it, so storage that refuses lower tokens
/// refuses a stale reader's or writer's late write. Writer preference means
/// readers can starve under a constant stream of writers. A task that
/// holds a read share and asks for the write lock of the same name waits
/// for itself until its wait runs out: [`ReadGuard::upgrade`] refuses that
/// with [`Error::UpgradeRefused`] instead. Redis Cluster works (every key carries the `{name}` hash
/// tag); Redlock is refused ([`Error::InvalidArgument`]).
#[derive(Debug, Clone)]
pub struct RwLock {
    shared: Arc<RwShared>,
    node: RwNode,
    name: Arc<str>,
}

/// A read share of an [`RwLock`]: others may read, nobody writes.
///
/// ```no_run
/// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
/// let opts = dlm::LockOptions::new(std::time::Duration::from_secs(10)).watchdog(true);
/// let share = client.rwlock("catalog").read(&opts).await?;
/// println!("reading with fence {}", share.fence());
/// share.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "dropping a guard releases the share in the background at once"]
pub struct ReadGuard(Guard<RwHeld>);

/// The write lock of an [`RwLock`]: nobody else reads or writes.
///
/// ```no_run
/// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
/// let opts = dlm::LockOptions::new(std::time::Duration::from_secs(10));
/// let w = client.rwlock("catalog").write(&opts).await?;
/// client.fenced_write("catalog", w.fence(), b"v2").await?;
/// w.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "dropping a guard releases the lock in the background at once"]
pub struct WriteGuard(Guard<RwHeld>);

guard_api!(ReadGuard, "rwlock(\"catalog\").read(&opts)");
guard_api!(WriteGuard, "rwlock(\"catalog\").write(&opts)");

impl ReadGuard {
    /// Always refused with [`Error::UpgradeRefused`]: if two readers both
    /// waited for the other to leave before writing, neither would. Release
    /// the share and call [`RwLock::write`] (re-reading what you read).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let opts = dlm::LockOptions::new(std::time::Duration::from_secs(10));
    /// let share = client.rwlock("catalog").read(&opts).await?;
    /// assert!(matches!(share.upgrade(), Err(dlm::Error::UpgradeRefused { .. })));
    /// # Ok(()) }
    /// ```
    pub fn upgrade(&self) -> Result<WriteGuard> {
        Err(Error::UpgradeRefused {
            name: self.name().to_string(),
        })
    }
}

impl WriteGuard {
    /// Turn the write lock into a read share in one step: nobody can write
    /// in between, and waiting readers get in with us (unless a writer
    /// waits). The share keeps the token, fence, TTL and watchdog.
    ///
    /// Errors: [`Error::Expired`] / [`Error::NotHeld`] when the write lock
    /// was not ours any more (nothing changed in Redis); [`Error::Timeout`]
    /// when an earlier attempt of this acquisition whose call gave up was
    /// still on its way to Redis at the deadline (the downgrade waits behind
    /// it; the write lock is then released behind it, as on a dropped guard).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let opts = dlm::LockOptions::new(std::time::Duration::from_secs(10));
    /// let w = client.rwlock("catalog").write(&opts).await?;
    /// let r = w.downgrade().await?;
    /// r.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn downgrade(self) -> Result<ReadGuard> {
        let held = self.0.held().clone();
        let core = held.core();
        let backend = held.shared().backend("rwlock")?;
        // Behind every attempt of the acquisition that may still reach
        // Redis (one whose call gave up, in a later phase of its batch):
        // after the downgrade it would find our own read share.
        let left = held.node().behind_attempts(backend, &core.token).await?;
        let started = Instant::now();
        let outcome = ops::downgrade(backend, held.keys(), &core.token, core.ttl, left).await?;
        if outcome != Outcome::Done {
            core.lease.mark_lost();
            return outcome.into_result(&core.name).map(|()| ReadGuard(self.0));
        }
        held.downgraded();
        let valid_until = started
            + core
                .ttl
                .saturating_sub(crate::services::lease::drift(core.ttl));
        if !core.lease.renewed(valid_until) {
            // The write lease ran out before the downgrade's reply: the read
            // share is in Redis, but not provably held without a gap.
            return Outcome::Expired
                .into_result(&core.name)
                .map(|()| ReadGuard(self.0));
        }
        Ok(ReadGuard(self.0))
    }
}

impl RwLock {
    pub(crate) fn new(shared: Arc<RwShared>, node: RwNode, name: String) -> Self {
        RwLock {
            shared,
            node,
            name: name.into(),
        }
    }

    /// The lock's name.
    ///
    /// ```no_run
    /// # fn demo(client: dlm::Client) {
    /// assert_eq!(client.rwlock("catalog").name(), "catalog");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What an observer can see, in one read-only script: whether a writer
    /// holds the lock (and its TTL), how many read shares and waiting
    /// writers are live.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let s = client.rwlock("catalog").status().await?;
    /// println!("writer: {}, readers: {}, writers waiting: {}", s.writer, s.readers, s.waiting_writers);
    /// # Ok(()) }
    /// ```
    pub async fn status(&self) -> Result<RwStatus> {
        let backend = self.shared.backend("read-write lock")?;
        let keys = rw_keys(&self.shared.root, &self.name)?;
        let (writer, readers, waiting_writers, fence) = ops::status(backend, &keys).await?;
        Ok(RwStatus {
            writer: writer.is_some(),
            writer_ttl: writer.flatten(),
            readers,
            waiting_writers,
            fence: (fence > 0).then_some(Fence::new(fence)),
        })
    }

    /// Take a read share, waiting up to `opts.wait` while a writer holds the
    /// lock or waits for it.
    ///
    /// Errors: [`Error::Busy`] when not in time, [`Error::InvalidArgument`]
    /// for bad input or under Redlock, [`Error::Unavailable`] /
    /// [`Error::Timeout`] when Redis stayed unreachable until the deadline.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let opts = dlm::LockOptions::new(std::time::Duration::from_secs(10))
    ///     .wait(std::time::Duration::from_secs(2));
    /// let share = client.rwlock("catalog").read(&opts).await?;
    /// share.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn read(&self, opts: &LockOptions) -> Result<ReadGuard> {
        self.acquire(Mode::Read, opts).await.map(ReadGuard)
    }

    /// Take the write lock, waiting up to `opts.wait` for the readers and
    /// the writer to leave; while it waits, new readers wait behind it.
    ///
    /// Errors: as [`RwLock::read`]. A task that holds a read share of this
    /// lock and calls `write` waits for itself until `opts.wait` runs out
    /// (other tasks of the client may hold shares legitimately, so the client
    /// cannot tell): release the share first ([`ReadGuard::upgrade`] says so).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let opts = dlm::LockOptions::new(std::time::Duration::from_secs(10))
    ///     .wait(std::time::Duration::from_secs(2));
    /// let w = client.rwlock("catalog").write(&opts).await?;
    /// w.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn write(&self, opts: &LockOptions) -> Result<WriteGuard> {
        self.acquire(Mode::Write, opts).await.map(WriteGuard)
    }

    async fn acquire(&self, mode: Mode, opts: &LockOptions) -> Result<Guard<RwHeld>> {
        opts.validate()?;
        replicated("rwlock", opts, |o| async move {
            self.acquire_once(mode, &o).await
        })
        .await
    }

    async fn acquire_once(&self, mode: Mode, opts: &LockOptions) -> Result<Guard<RwHeld>> {
        let backend = self.shared.backend("rwlock")?;
        let keys = Arc::new(rw_keys(&self.shared.root, &self.name)?);
        let span = tracing::debug_span!("dlm.rwlock.acquire", name = %self.name, ?mode);
        let token = Token::random()?;
        let deadline = Instant::now() + opts.wait;
        let marker = if opts.wait.is_zero() {
            Duration::ZERO
        } else {
            WRITER_MARKER_LEASE
        };
        // A waiting writer's marker, or a grant whose reply was lost, to
        // forget in the background when the acquisition gives up.
        // (`cancel.lua` goes behind every attempt of the token that may
        // still reach Redis: see `batch::Node`.)
        let undo = Arc::new(Undo {
            keys: keys.clone(),
            node: self.node.clone(),
        });
        let mut pending = Pending::new(self.shared.clone(), undo, token.clone(), |b, u, t| {
            Box::pin(async move { u.node.cancel(&b, &u.keys, &t).await })
        });
        let channel = match mode {
            Mode::Read => keys.readable.clone(),
            Mode::Write => keys.writable.clone(),
        };
        let wakeups = self.shared.wakeups.as_ref();
        let mut turns = Turns::new(wakeups, &channel, deadline, WRITER_MARKER_LEASE / 3);
        let attempts = async {
            loop {
                let started = Instant::now();
                pending.armed = true;
                let (err, hint) = match self
                    .node
                    .acquire(backend, &keys, mode, &token, opts.ttl, marker)
                    .await
                {
                    Ok(Ok(fence)) => {
                        pending.armed = false;
                        let core =
                            self.shared
                                .core(self.name.clone(), token, fence, opts.ttl, started);
                        let held = RwHeld::new(
                            core,
                            keys.clone(),
                            self.shared.clone(),
                            self.node.clone(),
                            mode,
                        );
                        tracing::debug!(fence = fence.get(), "acquired");
                        if mode == Mode::Read
                            && let Some(w) = wakeups
                        {
                            // Readers enter together: pass the wake-up on to
                            // the next local reader (a message wakes one per client).
                            w.wake_local(&keys.readable);
                        }
                        return Ok(Guard::new(Arc::new(held), opts.watchdog));
                    }
                    Ok(Err(wait)) => {
                        // A waiting writer left a marker; a reader left nothing.
                        pending.armed = mode == Mode::Write && !marker.is_zero();
                        let busy = Error::Busy {
                            name: self.name.to_string(),
                            ttl: wait,
                        };
                        (busy, wait)
                    }
                    // The attempt may have been granted although its reply was lost:
                    // look again within the retry interval, not at the fallback, before
                    // such a grant runs out unused.
                    Err(e) if e.is_retryable() => (e, Some(opts.retry_interval)),
                    Err(e) => return Err(e),
                };
                turns.wait(err, hint).await?;
            }
        };
        attempts.instrument(span).await
    }
}

//! Leader election: one leader among many candidates, with a term that
//! fences what the leader writes.
//!
//! A candidate [`campaign`](Election::campaign)s and gets a [`Leadership`]
//! once nobody else leads. The leadership is a lease in Redis (like a lock's,
//! renewed by the watchdog while the process is healthy) and carries a
//! **term**: a number that grows with every new leader, from a counter that
//! never expires. The leader passes its term to everything it writes
//! ([`crate::Client::fenced_write`], or a column compared in an `UPDATE`), so
//! storage refuses a write from an old leader that still believes it leads
//! (a GC pause, a SIGSTOP, a partition). [`Leadership::lost`] fires when the
//! lease could not be renewed; [`Leadership::resign`] steps down and wakes
//! the other candidates at once (no polling: they wait on a channel, and
//! look again when the leader's lease would run out). Anyone can ask
//! [`Election::leader`] who leads, with which term and for how long yet.
//!
//! Anchors: `etcdctl elect`, Kubernetes' leader election (lease duration =
//! the TTL, renew deadline = the lease itself, retry period = TTL/3 for the
//! watchdog), Consul's `lock`. One Redis decides (standalone, Sentinel, TLS
//! or a Cluster: every key carries the `{name}` hash tag); Redlock is refused
//! ([`Error::InvalidArgument`]), as the term counter must live in one place.

mod held;
mod ops;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::keys::{ElectionKeys, election_keys};
use crate::services::held::{Guard, Pending, Shared, Turns, guard_api};
use crate::services::options::LockOptions;
use crate::services::replication::replicated;
use crate::token::{Fence, Token};

pub(crate) use held::ElectionHeld;
use ops::{Attempt, Reading};

/// The election's scripts, loaded when a connection is made.
pub(crate) fn preloaded_scripts() -> Vec<&'static redis::Script> {
    ops::scripts()
}

/// The client's election state (its leaderships' registry and watchdog).
pub(crate) type ElectionShared = Shared<ElectionHeld>;

/// The longest candidate id accepted, in bytes.
pub const MAX_ID_LEN: usize = 256;

/// One leader election; cheap to clone. Get one from
/// [`crate::Client::election`].
///
/// ```no_run
/// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
/// use std::time::Duration;
/// let opts = dlm::LockOptions::new(Duration::from_secs(10))   // the lease
///     .wait(Duration::from_secs(3600))                          // campaign for up to an hour
///     .watchdog(true);                                          // renew while we lead
/// let leadership = client.election("scheduler").campaign("host-a", &opts).await?;
/// println!("leading in term {}", leadership.term());
/// tokio::select! {
///     _ = leadership.lost() => eprintln!("lost the lead: stop at once"),
///     _ = tokio::time::sleep(Duration::from_secs(60)) => leadership.resign().await?,
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    shared: Arc<ElectionShared>,
    name: Arc<str>,
}

/// Leading an [`Election`]: the term, `lost()`, the watchdog, `resign()`;
/// resigns in the background when dropped. It also has the methods of
/// [`crate::LockGuard`]: [`Leadership::fence`] is the term, the lease can be
/// extended by hand when the watchdog is off.
///
/// ```no_run
/// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
/// let opts = dlm::LockOptions::new(std::time::Duration::from_secs(10)).watchdog(true);
/// let leadership = client.election("scheduler").campaign("host-a", &opts).await?;
/// client.fenced_write("schedule", leadership.term(), b"v2").await?;
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "dropping a leadership resigns in the background at once"]
pub struct Leadership(Guard<ElectionHeld>);

guard_api!(
    Leadership,
    "election(\"scheduler\").campaign(\"host-a\", &opts)"
);

/// Who leads an election now, as [`Election::leader`] read it.
///
/// ```no_run
/// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
/// if let Some(leader) = client.election("scheduler").leader().await? {
///     println!("{} leads in term {} for {:?} yet", leader.id, leader.term, leader.ttl);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's candidate id (empty when the lease was not written by
    /// a campaign, e.g. a key set by hand).
    pub id: String,
    /// Its term (0 likewise).
    pub term: u64,
    /// The time left on its lease (`None`: no expiry).
    pub ttl: Option<Duration>,
}

impl Leadership {
    /// The term: strictly greater than every earlier leader's of this
    /// election. Pass it to storage as a fencing token (the same number as
    /// [`Leadership::fence`]).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let opts = dlm::LockOptions::new(std::time::Duration::from_secs(10));
    /// let leadership = client.election("scheduler").campaign("host-a", &opts).await?;
    /// println!("term {}", leadership.term());
    /// # Ok(()) }
    /// ```
    pub fn term(&self) -> Fence {
        self.0.core().fence
    }

    /// The candidate id this leadership was won with.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let opts = dlm::LockOptions::new(std::time::Duration::from_secs(10));
    /// let leadership = client.election("scheduler").campaign("host-a", &opts).await?;
    /// assert_eq!(leadership.id(), "host-a");
    /// # Ok(()) }
    /// ```
    pub fn id(&self) -> &str {
        &self.0.held().id
    }

    /// Step down, telling whether we still led
    /// ([`Error::Expired`] or [`Error::NotHeld`] if not); the other
    /// candidates are woken at once. The same as [`Leadership::release`].
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let opts = dlm::LockOptions::new(std::time::Duration::from_secs(10));
    /// let leadership = client.election("scheduler").campaign("host-a", &opts).await?;
    /// leadership.resign().await?;
    /// # Ok(()) }
    /// ```
    pub async fn resign(self) -> Result<()> {
        self.0.release().await
    }
}

impl Election {
    pub(crate) fn new(shared: Arc<ElectionShared>, name: String) -> Self {
        Election {
            shared,
            name: name.into(),
        }
    }

    /// The election's name.
    ///
    /// ```no_run
    /// # fn demo(client: dlm::Client) {
    /// assert_eq!(client.election("scheduler").name(), "scheduler");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Redis key of the leader's lease (an error for an invalid name).
    ///
    /// ```no_run
    /// # fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// assert_eq!(client.election("scheduler").key()?, "dlm:elect:{scheduler}");
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> Result<String> {
        Ok(election_keys(&self.shared.root, &self.name)?.lease)
    }

    /// Campaign as candidate `id` until elected or `opts.wait` has passed
    /// (zero: one attempt). The lease is `opts.ttl`; with `opts.watchdog`
    /// it is renewed every TTL/3 while the process is healthy (what every
    /// leader wants; without it, extend by hand). A candidate waits on a
    /// channel the leader's resignation publishes to, and looks again when
    /// the leader's lease would run out (a crashed leader never resigns).
    ///
    /// Errors: [`Error::Busy`] when another candidate still led at the
    /// deadline (with its lease's time left), [`Error::InvalidArgument`]
    /// for bad input (an empty id or one over [`MAX_ID_LEN`] bytes, a TTL
    /// or wait out of range) or under Redlock, [`Error::Unavailable`] /
    /// [`Error::Timeout`] when Redis stayed unreachable until the deadline.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let opts = dlm::LockOptions::new(std::time::Duration::from_secs(10))
    ///     .wait(std::time::Duration::from_secs(30))
    ///     .watchdog(true);
    /// match client.election("scheduler").campaign("host-a", &opts).await {
    ///     Ok(leadership) => leadership.resign().await?,
    ///     Err(dlm::Error::Busy { .. }) => eprintln!("someone else still leads"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn campaign(&self, id: &str, opts: &LockOptions) -> Result<Leadership> {
        opts.validate()?;
        if id.is_empty() || id.len() > MAX_ID_LEN {
            return Err(Error::invalid(
                "candidate id",
                format!("must be 1 to {MAX_ID_LEN} bytes"),
            ));
        }
        let backend = self.shared.backend("leader election")?;
        let keys = Arc::new(election_keys(&self.shared.root, &self.name)?);
        let span = tracing::debug_span!("dlm.election.campaign", name = %self.name, id);
        replicated("leader election", opts, |o| {
            let keys = keys.clone();
            async move { self.campaign_on(backend, keys, id, &o).await.map(|l| l.0) }
        })
        .instrument(span)
        .await
        .map(Leadership)
    }

    async fn campaign_on(
        &self,
        backend: &crate::backend::Backend,
        keys: Arc<ElectionKeys>,
        id: &str,
        opts: &LockOptions,
    ) -> Result<Leadership> {
        let token = Token::random()?;
        let deadline = Instant::now() + opts.wait;
        // Resigns a leadership whose reply was lost, unless disarmed.
        let mut pending = Pending::new(
            self.shared.clone(),
            keys.clone(),
            token.clone(),
            |b, k, t| Box::pin(async move { drop(ops::resign(&b, &k, &t).await) }),
        );
        let channel = keys.resigned.clone();
        let mut turns = Turns::new(
            self.shared.wakeups.as_ref(),
            &channel,
            deadline,
            opts.ttl / 3,
        );
        loop {
            let started = Instant::now();
            pending.armed = true;
            let (err, hint) = match ops::campaign(backend, &keys, &token, id, opts.ttl).await {
                Ok(Attempt::Elected(term)) => {
                    pending.armed = false;
                    let core = self
                        .shared
                        .core(self.name.clone(), token, term, opts.ttl, started);
                    let held = ElectionHeld::new(core, keys, self.shared.clone(), id.into());
                    tracing::debug!(term = term.get(), "elected");
                    return Ok(Leadership(Guard::new(Arc::new(held), opts.watchdog)));
                }
                Ok(Attempt::Led(left)) => {
                    pending.armed = false;
                    let busy = Error::Busy {
                        name: self.name.to_string(),
                        ttl: left,
                    };
                    (busy, left)
                }
                // The attempt may have been granted although its reply was lost:
                // look again within the retry interval, not at the fallback, before
                // such a grant runs out unused.
                Err(e) if e.is_retryable() => (e, Some(opts.retry_interval)),
                Err(e) => return Err(e),
            };
            turns.wait(err, hint).await?;
        }
    }

    /// Who leads now (`None`: nobody), without campaigning: the leader's
    /// id, term and the time left on its lease. One round trip.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// match client.election("scheduler").leader().await? {
    ///     Some(l) => println!("{} leads (term {})", l.id, l.term),
    ///     None => println!("nobody leads"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn leader(&self) -> Result<Option<Leader>> {
        Ok(self.status().await?.0)
    }

    /// The leader (as [`Election::leader`]) and the last term granted (0:
    /// never), which stays readable after the leader's lease is gone.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let (leader, last_term) = client.election("scheduler").status().await?;
    /// println!("{leader:?}, last term {last_term}");
    /// # Ok(()) }
    /// ```
    pub async fn status(&self) -> Result<(Option<Leader>, u64)> {
        let backend = self.shared.backend("leader election")?;
        let keys = election_keys(&self.shared.root, &self.name)?;
        Ok(match ops::leader(backend, &keys).await? {
            Reading::Led { id, term, ttl } => (Some(Leader { id, term, ttl }), term),
            Reading::Vacant { last_term } => (None, last_term),
        })
    }
}

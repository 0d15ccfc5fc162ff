//! A rate limiter shared by every client of one Redis: at most `n` grants
//! in **any** window of length `period`, exactly.
//!
//! It is a sliding-window log: the key `dlm:rate:{NAME}` is a sorted set of
//! the grant times (µs, the Redis server's clock, so hosts with skewed
//! clocks agree). One script per attempt ([`acquire.lua`](#)) drops the
//! grants older than `period`, grants if fewer than `n` remain, and else
//! answers how long until the oldest grant that keeps the window full
//! leaves it. A grant at `t` is given only when `(t - period, t]` held fewer
//! than `n` grants, so every half-open window of length `period` holds at
//! most `n`: exact, not approximately (a fixed window admits up to `2n` in a
//! window straddling its boundary; GCRA with a burst of `n` up to `2n - 1`).
//! The log holds at most `n` entries and expires with the last of them.
//!
//! A caller at the limit **sleeps** until a slot frees (the time comes in the
//! refusal), then tries again: no polling. Callers refused together wake
//! together, one of them wins the slot, the others sleep again until the
//! next one frees.
//!
//! By default the `n` grants of a window may come in a burst (10/s: ten at
//! once, then ten more a second later). [`RateLimiter::spread`] spaces them
//! instead, at least `period / n` apart (the same log with one grant per
//! `period / n`): still at most `n` in any window, and 50 grants at 10/s
//! take 4.9 s instead of 4 s.
//!
//! The queue's own limit (`dlm queue work --rate N/PERIOD`, applied inside
//! claim) has the same meaning: at most `N` task starts in any window of
//! length `PERIOD`, shared by every worker of the queue.
//!
//! ```no_run
//! # async fn demo(client: dlm::Client) -> dlm::Result<()> {
//! use std::time::Duration;
//! let limiter = client.rate_limiter("partner-api", 10, Duration::from_secs(1));
//! for page in 0..50 {
//!     let grant = limiter.acquire().await?;       // sleeps while 10 calls fell in the last second
//!     println!("page {page} at {:?} (server clock)", grant.at());
//! }
//! # Ok(()) }
//! ```

use crate::error::secs;
use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};
use tokio::time::Instant;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::keys::rate_key;
use crate::token::Token;

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("acquire.lua")));

/// The most grants one window may allow (the log keeps one entry per grant).
pub const MAX_LIMIT: u64 = 1_000_000;
/// The shortest period accepted.
pub const MIN_PERIOD: Duration = Duration::from_millis(1);
/// The longest period accepted (7 days).
pub const MAX_PERIOD: Duration = Duration::from_secs(7 * 24 * 3600);

/// A limit of `n` grants per `period`, over any window; get one from
/// [`crate::Client::rate_limiter`]. Cheap to clone; every clone, and every
/// client with the same name, shares the limit.
///
/// ```no_run
/// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
/// use std::time::Duration;
/// use dlm::ratelimit::Attempt;
/// let limiter = client.rate_limiter("sms", 100, Duration::from_secs(60));
/// match limiter.try_acquire().await? {
///     Attempt::Granted(_) => println!("send it"),
///     Attempt::Limited { retry_after } => println!("try again in {retry_after:?}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RateLimiter {
    backend: Option<Backend>,
    name: String,
    limit: u64,
    period: Duration,
    spread: bool,
    root: std::sync::Arc<str>,
}

/// One granted slot.
///
/// ```
/// # fn show(grant: dlm::ratelimit::Grant) {
/// println!("granted at {} µs since the epoch (Redis clock)", grant.at_micros());
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    at_us: u64,
}

impl Grant {
    /// When the slot was granted, in µs since the Unix epoch on the Redis
    /// server's clock (the clock the limit is kept by).
    pub fn at_micros(&self) -> u64 {
        self.at_us
    }

    /// [`Grant::at_micros`] as a duration since the Unix epoch.
    pub fn at(&self) -> Duration {
        Duration::from_micros(self.at_us)
    }
}

/// What one [`RateLimiter::try_acquire`] did.
///
/// ```
/// use std::time::Duration;
/// let a = dlm::ratelimit::Attempt::Limited { retry_after: Duration::from_millis(40) };
/// assert!(!a.is_granted());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// A slot was granted.
    Granted(Grant),
    /// The window is full; a slot frees in `retry_after`.
    Limited {
        /// How long until the oldest grant in the window leaves it.
        retry_after: Duration,
    },
}

impl Attempt {
    /// Whether a slot was granted.
    pub fn is_granted(&self) -> bool {
        matches!(self, Attempt::Granted(_))
    }
}

impl RateLimiter {
    /// The limiter `name` on `backend` (`None` under Redlock: calls fail clearly).
    pub(crate) fn new(
        backend: Option<Backend>,
        name: String,
        limit: u64,
        period: Duration,
        root: std::sync::Arc<str>,
    ) -> Self {
        RateLimiter {
            backend,
            root,
            name,
            limit,
            period,
            spread: false,
        }
    }

    /// Space grants at least `period / n` apart instead of allowing a burst
    /// of `n` (still at most `n` in any window of `period`). Every client of
    /// one name should use the same setting.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let smooth = client.rate_limiter("crawler", 10, std::time::Duration::from_secs(1)).spread(true);
    /// smooth.acquire().await?;   // at most one grant every 100 ms
    /// # Ok(()) }
    /// ```
    pub fn spread(mut self, spread: bool) -> Self {
        self.spread = spread;
        self
    }

    /// The limiter's name.
    ///
    /// ```no_run
    /// # fn demo(client: dlm::Client) {
    /// assert_eq!(client.rate_limiter("api", 5, std::time::Duration::from_secs(1)).name(), "api");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Check the settings; the key and the (n, period in µs) the script gets.
    fn ready(&self) -> Result<(&Backend, String, u64, u64)> {
        let key = rate_key(&self.root, &self.name)?;
        let (n, period_us) = window(self.limit, self.period, self.spread)?;
        let backend = self.backend.as_ref().ok_or_else(|| {
            Error::invalid(
                "client",
                "rate limiters need a single-Redis client, not Redlock",
            )
        })?;
        Ok((backend, key, n, period_us))
    }

    /// One attempt, one script: a slot now, or how long until one frees.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let limiter = client.rate_limiter("api", 5, std::time::Duration::from_secs(1));
    /// if limiter.try_acquire().await?.is_granted() { println!("go"); }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Attempt> {
        let (backend, key, n, period_us) = self.ready()?;
        let member = Token::random()?;
        let reply = backend
            .eval(ACQUIRE.key(&key).arg(n).arg(period_us).arg(member.as_str()))
            .await?;
        acquire_reply(reply)
    }

    /// A slot, waiting as long as it takes (sleeping until the time the
    /// refusal names, never polling). Errors are Redis' only.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let limiter = client.rate_limiter("api", 5, std::time::Duration::from_secs(1));
    /// let grant = limiter.acquire().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<Grant> {
        self.acquire_until(None).await
    }

    /// A slot within `max_wait`, else [`Error::RateLimited`] with the time
    /// until the next slot frees (when that is beyond the deadline, it
    /// returns at once instead of sleeping in vain).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// use std::time::Duration;
    /// let limiter = client.rate_limiter("api", 5, Duration::from_secs(1));
    /// match limiter.acquire_within(Duration::from_millis(200)).await {
    ///     Ok(_) => println!("go"),
    ///     Err(dlm::Error::RateLimited { retry_after, .. }) => println!("busy for {retry_after:?}"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire_within(&self, max_wait: Duration) -> Result<Grant> {
        let deadline = Instant::now().checked_add(max_wait);
        self.acquire_until(deadline).await
    }

    async fn acquire_until(&self, deadline: Option<Instant>) -> Result<Grant> {
        loop {
            match self.try_acquire().await? {
                Attempt::Granted(g) => return Ok(g),
                Attempt::Limited { retry_after } => {
                    // Wake a little after the slot frees, at random, so that
                    // callers refused together do not all come back at once.
                    let jitter =
                        crate::services::jittered((retry_after / 20).min(Duration::from_millis(4)));
                    let wake = Instant::now() + retry_after + jitter;
                    if let Some(d) = deadline
                        && wake > d
                    {
                        return Err(Error::RateLimited {
                            name: self.name.clone(),
                            retry_after,
                        });
                    }
                    tokio::time::sleep_until(wake).await;
                }
            }
        }
    }
}

/// The (n, period in µs) the script gets: as given, or one grant per
/// `ceil(period / n)` when spread (so that `n` spaced grants span at least
/// `period`). Refuses a limit or period out of range.
fn window(limit: u64, period: Duration, spread: bool) -> Result<(u64, u64)> {
    if limit == 0 || limit > MAX_LIMIT {
        return Err(Error::invalid(
            "rate limit",
            format!("{limit} grants per period is outside 1 ..= {MAX_LIMIT}"),
        ));
    }
    if period < MIN_PERIOD || period > MAX_PERIOD {
        return Err(Error::invalid(
            "rate period",
            format!("{} is outside 0.001 seconds ..= 7 days", secs(period)),
        ));
    }
    let period_us = u64::try_from(period.as_micros()).unwrap_or(u64::MAX);
    Ok(if spread {
        (1, period_us.div_ceil(limit).max(1))
    } else {
        (limit, period_us)
    })
}

/// acquire.lua: `{1, now}` granted, `{0, wait, now}` refused (µs).
fn acquire_reply(v: Value) -> Result<Attempt> {
    let v: Vec<i64> = redis::from_redis_value(v)?;
    match v.as_slice() {
        [1, at, ..] => Ok(Attempt::Granted(Grant {
            at_us: u64::try_from(*at).unwrap_or(0),
        })),
        [0, wait, ..] => Ok(Attempt::Limited {
            retry_after: Duration::from_micros(u64::try_from(*wait).unwrap_or(0).max(1)),
        }),
        other => Err(Error::protocol(format!(
            "unexpected rate limiter reply {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::props::{Decoder, decoder_tests};

    /// The rate limiter's reply decoder.
    const DECODERS: &[Decoder] = &[("rate acquire", |v| acquire_reply(v).is_ok())];

    decoder_tests!(fuzz_ratelimit_replies, DECODERS);

    #[test]
    fn windows_are_checked_and_spread_spans_the_period() -> Result<()> {
        assert!(window(0, Duration::from_secs(1), false).is_err());
        assert!(window(MAX_LIMIT + 1, Duration::from_secs(1), false).is_err());
        assert!(window(1, Duration::ZERO, false).is_err());
        assert!(window(1, MAX_PERIOD + Duration::from_secs(1), false).is_err());
        assert_eq!(window(10, Duration::from_secs(1), false)?, (10, 1_000_000));
        assert_eq!(window(10, Duration::from_secs(1), true)?, (1, 100_000));
        // 3 per 1 ms: 334 µs apart, so 3 grants span at least 1 ms.
        let (_, gap) = window(3, Duration::from_millis(1), true)?;
        assert!(3 * gap >= 1000);
        Ok(())
    }

    #[test]
    fn replies_decode() -> Result<()> {
        let granted = acquire_reply(Value::Array(vec![Value::Int(1), Value::Int(5)]))?;
        assert_eq!(granted, Attempt::Granted(Grant { at_us: 5 }));
        let refused = acquire_reply(Value::Array(vec![
            Value::Int(0),
            Value::Int(1500),
            Value::Int(9),
        ]))?;
        assert_eq!(
            refused,
            Attempt::Limited {
                retry_after: Duration::from_micros(1500)
            }
        );
        assert!(acquire_reply(Value::Array(vec![Value::Int(7)])).is_err());
        Ok(())
    }
}

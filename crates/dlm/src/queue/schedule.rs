//! Repeating tasks: `queue.schedule(id, Repeat::Every(d) | Repeat::Cron(expr), payload)`.
//!
//! A schedule is stored in the queue's Redis (keys `dlm:queue:{Q}:schedules`,
//! `:schedule_payloads`, `:schedule_next`, under the queue's hash tag), so it
//! is listable ([`Queue::schedules`]) and removable ([`Queue::unschedule`])
//! from anywhere, and survives restarts of every process.
//!
//! **Who enqueues the ticks.** Every [`crate::queue::Worker`] (so every
//! `dlm queue work`) runs the scheduler between claims: at most once a
//! second, and at each schedule's next tick, [`Queue::run_schedules`] reads
//! the schedules that are due and fires them. Any process may call it too.
//!
//! **One task per tick, never two.** Firing a tick is one script that checks
//! the schedule's stored next tick still equals the tick it saw due, enqueues
//! the task `ID@TICK` (TICK in ms since the epoch) and moves the next tick on
//! in the same step. However many workers or schedulers run at once, only
//! one of them fires a given tick; the others find the next tick moved and
//! do nothing. The tick is in the task's id, so each run can tell which tick
//! it is for.
//!
//! **Catch-up policy after downtime.** When nobody ran the scheduler for a
//! while (every worker was down), the earliest missed tick fires once, late
//! (its task is due at once), and the other missed ticks are skipped: the
//! next tick is the first one on the schedule's grid after the current time.
//! So a schedule every minute that was down for an hour runs once when a
//! worker comes back, not sixty times.
//!
//! **The grid.** [`Repeat::Every`]`(d)` ticks at whole multiples of `d` since
//! the Unix epoch (every second: on each second; every hour: on the hour,
//! UTC), so every process agrees on the ticks without coordination.
//! [`Repeat::Cron`] ticks at the expression's times in UTC; five fields
//! (minute granularity) or six (with seconds first), parsed by the `croner`
//! crate (`@hourly`, `L`, `#` and the like work too).
//!
//! ```no_run
//! # async fn demo(client: dlm::Client) -> dlm::Result<()> {
//! use std::time::Duration;
//! use dlm::queue::Repeat;
//! let queue = client.queue("reports");
//! queue.schedule("daily-digest", Repeat::Cron("0 7 * * *".into()), Some(b"{}".to_vec())).await?;
//! queue.schedule("heartbeat", Repeat::Every(Duration::from_secs(30)), None).await?;
//! for s in queue.schedules(100).await? {
//!     println!("{} next at {} ms", s.id, s.next_tick);
//! }
//! queue.unschedule("heartbeat").await?;
//! # Ok(()) }
//! ```

use crate::error::secs;
use std::str::FromStr;
use std::sync::LazyLock;
use std::time::Duration;

use chrono::{DateTime, Utc};
use croner::Cron;
use croner::parser::{CronParser, Seconds};
use redis::{Script, Value};
use tokio::time::Instant;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::keys::{MAX_NAME_LEN, queue_keys, schedule_keys};
use crate::queue::ops::{array, bytes, int, invocation, text, unsigned};
use crate::queue::{MAX_DELAY, Queue};

macro_rules! script {
    ($name:ident, $file:literal) => {
        static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(include_str!(concat!("scripts/", $file))));
    };
}

script!(ADD, "schedule_add.lua");
script!(REMOVE, "schedule_remove.lua");
script!(LIST, "schedule_list.lua");
script!(DUE, "schedule_due.lua");
script!(FIRE, "schedule_fire.lua");

/// The most schedules one queue may have.
pub const MAX_SCHEDULES: usize = 10_000;
/// The shortest [`Repeat::Every`] interval.
pub const MIN_EVERY: Duration = Duration::from_millis(100);
/// How many due schedules one [`Queue::run_schedules`] fires at most.
const FIRE_PER_RUN: usize = 100;
/// The longest a worker goes without looking at the schedules (a schedule
/// added meanwhile is noticed within this).
const LOOK_AT_LEAST_EVERY: Duration = Duration::from_secs(1);
/// Room left in a task id for `@` and a tick in ms.
const TICK_SUFFIX: usize = 21;

/// When a schedule ticks.
///
/// ```
/// use std::time::Duration;
/// use dlm::queue::Repeat;
/// let every = Repeat::Every(Duration::from_secs(60));
/// let nightly = Repeat::Cron("30 2 * * *".into());
/// assert_eq!(every.to_string(), "every 1m");
/// assert_eq!(nightly.to_string(), "cron 30 2 * * *");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repeat {
    /// At every whole multiple of this interval since the Unix epoch
    /// (whole milliseconds, 100 ms ..= 365 days).
    Every(Duration),
    /// At the times of a cron expression, UTC: five fields, or six with
    /// seconds first.
    Cron(String),
}

impl std::fmt::Display for Repeat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Repeat::Every(d) => write!(f, "every {}", humanize(*d)),
            Repeat::Cron(e) => write!(f, "cron {e}"),
        }
    }
}

fn humanize(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// A checked [`Repeat`]: its interval in ms, or its parsed expression.
enum Grid {
    Every(u64),
    Cron(Box<Cron>),
}

impl Repeat {
    /// Check it (interval range, cron syntax, a cron that ever fires).
    fn grid(&self) -> Result<Grid> {
        match self {
            Repeat::Every(d) => {
                if *d < MIN_EVERY || *d > MAX_DELAY || !d.subsec_nanos().is_multiple_of(1_000_000) {
                    return Err(Error::invalid(
                        "schedule interval",
                        format!(
                            "{} is not whole milliseconds within 0.1 seconds ..= 365 days",
                            secs(*d)
                        ),
                    ));
                }
                Ok(Grid::Every(crate::backend::millis(*d)))
            }
            Repeat::Cron(expr) => {
                let cron = CronParser::builder()
                    .seconds(Seconds::Optional)
                    .build()
                    .parse(expr)
                    .map_err(|e| Error::invalid("cron expression", format!("{expr:?}: {e}")))?;
                let grid = Grid::Cron(Box::new(cron));
                // An expression that never fires (February 30th) is an error too.
                grid.after(0).map_err(|_| {
                    Error::invalid("cron expression", format!("{expr:?} never fires"))
                })?;
                Ok(grid)
            }
        }
    }

    /// The text stored in Redis.
    fn spec(&self) -> String {
        match self {
            Repeat::Every(d) => format!("every {}", crate::backend::millis(*d)),
            Repeat::Cron(e) => format!("cron {e}"),
        }
    }

    /// Back from the text stored in Redis.
    fn from_spec(spec: &str) -> Result<Repeat> {
        let bad = || Error::protocol(format!("unreadable schedule spec {spec:?}"));
        match spec.split_once(' ') {
            Some(("every", ms)) => Ok(Repeat::Every(Duration::from_millis(
                ms.parse().map_err(|_| bad())?,
            ))),
            Some(("cron", expr)) => Ok(Repeat::Cron(expr.to_string())),
            _ => Err(bad()),
        }
    }
}

impl FromStr for Repeat {
    type Err = Error;

    /// `every <ms>` or `cron <expr>`, as [`ScheduleInfo`] lists them.
    fn from_str(s: &str) -> Result<Repeat> {
        Repeat::from_spec(s)
    }
}

impl Grid {
    /// The first tick strictly after `after_ms` (ms since the epoch).
    fn after(&self, after_ms: u64) -> Result<u64> {
        match self {
            Grid::Every(every) => Ok((after_ms / every + 1) * every),
            Grid::Cron(cron) => {
                let at = i64::try_from(after_ms)
                    .ok()
                    .and_then(DateTime::<Utc>::from_timestamp_millis)
                    .ok_or_else(|| Error::invalid("time", format!("{after_ms} ms")))?;
                let next = cron
                    .find_next_occurrence(&at, false)
                    .map_err(|e| Error::invalid("cron expression", e.to_string()))?;
                u64::try_from(next.timestamp_millis())
                    .map_err(|_| Error::invalid("cron expression", "fires before 1970"))
            }
        }
    }
}

/// What [`Queue::schedule`] did.
///
/// ```
/// assert_ne!(dlm::queue::Scheduled::Added, dlm::queue::Scheduled::Unchanged);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduled {
    /// A new schedule; its first tick is the first on its grid from now.
    Added,
    /// An existing schedule with a new spec (it restarts on the new grid)
    /// or a new payload (its next tick is kept).
    Changed,
    /// The same spec and payload were there already; nothing changed.
    Unchanged,
}

/// One schedule, as [`Queue::schedules`] lists it.
///
/// ```no_run
/// # async fn demo(queue: dlm::queue::Queue) -> dlm::Result<()> {
/// for s in queue.schedules(10).await? {
///     println!("{} ({}) next at {}", s.id, s.repeat, s.next_tick);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleInfo {
    /// The schedule's id (its tasks are `ID@TICK`).
    pub id: String,
    /// When it ticks.
    pub repeat: Repeat,
    /// The payload each of its tasks gets.
    pub payload: Option<Vec<u8>>,
    /// Its next tick, ms since the epoch (Redis clock).
    pub next_tick: u64,
}

/// What one [`Queue::run_schedules`] did.
///
/// ```no_run
/// # async fn demo(queue: dlm::queue::Queue) -> dlm::Result<()> {
/// let run = queue.run_schedules().await?;
/// println!("fired {}, next in {:?}", run.fired, run.next_in);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleRun {
    /// Ticks this call fired (each enqueued one task).
    pub fired: usize,
    /// Time until the next tick of any schedule (`None`: no schedules).
    pub next_in: Option<Duration>,
}

impl Queue {
    fn schedule_ready(&self) -> Result<(&Backend, Vec<String>)> {
        let (backend, _) = self.ready()?;
        Ok((backend, schedule_keys(self.root(), self.name())?))
    }

    /// Add (or change) the repeating task `id`: one task `id@TICK` with
    /// `payload` per tick (see the module docs for the grid and the catch-up
    /// policy). The same spec and payload again change nothing, so every
    /// worker may declare its schedules when it starts. An invalid interval
    /// or cron expression is [`Error::InvalidArgument`] and nothing is written.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// use dlm::queue::Repeat;
    /// client.queue("mail").schedule("newsletter", Repeat::Cron("0 9 * * MON".into()), None).await?;
    /// # Ok(()) }
    /// ```
    pub async fn schedule(
        &self,
        id: &str,
        repeat: Repeat,
        payload: Option<Vec<u8>>,
    ) -> Result<Scheduled> {
        if id.is_empty() || id.len() > MAX_NAME_LEN - TICK_SUFFIX {
            return Err(Error::invalid(
                "schedule id",
                format!("must be 1 to {} bytes", MAX_NAME_LEN - TICK_SUFFIX),
            ));
        }
        let grid = repeat.grid()?;
        if let Some(p) = &payload
            && p.len() > self.max_payload
        {
            return Err(Error::invalid(
                "payload",
                format!("{} bytes is larger than {}", p.len(), self.max_payload),
            ));
        }
        let (backend, keys) = self.schedule_ready()?;
        let now = server_ms(backend).await?;
        let first = grid.after(now)?;
        let mut inv = invocation(&ADD, &keys);
        inv.arg(id).arg(repeat.spec());
        match &payload {
            Some(p) => inv.arg("1").arg(p.as_slice()),
            None => inv.arg("0").arg(""),
        };
        inv.arg(first).arg(MAX_SCHEDULES);
        match code_reply(backend.eval(&inv).await?)? {
            1 => Ok(Scheduled::Added),
            2 => Ok(Scheduled::Changed),
            0 => Ok(Scheduled::Unchanged),
            _ => Err(Error::invalid(
                "schedule",
                format!(
                    "queue {:?} has {MAX_SCHEDULES} schedules already",
                    self.name()
                ),
            )),
        }
    }

    /// Remove the repeating task `id`; false when there was none. Tasks it
    /// enqueued already stay in the queue.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let removed = client.queue("mail").unschedule("newsletter").await?;
    /// # Ok(()) }
    /// ```
    pub async fn unschedule(&self, id: &str) -> Result<bool> {
        if id.is_empty() || id.len() > MAX_NAME_LEN {
            return Err(Error::invalid("schedule id", "must be 1 to 1024 bytes"));
        }
        let (backend, keys) = self.schedule_ready()?;
        let mut inv = invocation(&REMOVE, &keys);
        inv.arg(id);
        Ok(code_reply(backend.eval(&inv).await?)? == 1)
    }

    /// Up to `limit` (1 ..= 10 000) schedules, soonest next tick first.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let all = client.queue("mail").schedules(1000).await?;
    /// # Ok(()) }
    /// ```
    pub async fn schedules(&self, limit: usize) -> Result<Vec<ScheduleInfo>> {
        if limit == 0 || limit > MAX_SCHEDULES {
            return Err(Error::invalid(
                "limit",
                format!("{limit} is outside 1 ..= {MAX_SCHEDULES}"),
            ));
        }
        let (backend, keys) = self.schedule_ready()?;
        let mut inv = invocation(&LIST, &keys);
        inv.arg(limit);
        list_reply(backend.eval(&inv).await?)
    }

    /// Fire every schedule whose tick has come (at most 100 per call), each
    /// tick exactly once across all callers (see the module docs). Workers
    /// call it by themselves; call it from a process of your own to run
    /// schedules without a worker.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let run = client.queue("mail").run_schedules().await?;
    /// # Ok(()) }
    /// ```
    pub async fn run_schedules(&self) -> Result<ScheduleRun> {
        let (backend, keys) = self.schedule_ready()?;
        let mut inv = invocation(&DUE, &keys);
        inv.arg(FIRE_PER_RUN);
        let due = due_reply(backend.eval(&inv).await?)?;
        let mut next_in = due.next_in;
        let mut fire_keys = keys;
        fire_keys.extend(queue_keys(self.root(), self.name())?);
        let mut inv = invocation(&FIRE, &fire_keys);
        let mut firing = 0;
        for (id, tick, spec) in &due.schedules {
            // Catch-up: the due tick fires once, then the first tick after now.
            let next = match Repeat::from_spec(spec).and_then(|r| r.grid()) {
                Ok(grid) => grid.after(due.now.max(*tick))?,
                Err(e) => {
                    tracing::warn!(queue = %self.name(), schedule = %id, error = %e, "skipping a schedule that cannot be read");
                    continue;
                }
            };
            let until = Duration::from_millis(next.saturating_sub(due.now));
            next_in = Some(next_in.map_or(until, |n| n.min(until)));
            inv.arg(id).arg(*tick).arg(next).arg(spec);
            firing += 1;
        }
        if firing == 0 {
            return Ok(ScheduleRun { fired: 0, next_in });
        }
        let fired = fired_reply(backend.eval(&inv).await?)?;
        if due.schedules.len() >= FIRE_PER_RUN {
            next_in = Some(Duration::ZERO);
        }
        if fired > 0 {
            tracing::debug!(queue = %self.name(), fired, "fired schedule ticks");
        }
        Ok(ScheduleRun { fired, next_in })
    }
}

/// The scheduler inside a worker: runs [`Queue::run_schedules`] when a tick
/// may be due (and at least once a second), and says how long the worker may
/// block before it should look again.
pub(super) struct Ticker {
    next_look: Instant,
}

impl Ticker {
    pub(super) fn new() -> Self {
        Ticker {
            next_look: Instant::now(),
        }
    }

    /// Fire due ticks if it is time; how long until it is time again.
    pub(super) async fn tick(&mut self, queue: &Queue) -> Duration {
        let now = Instant::now();
        if now >= self.next_look {
            let wait = match queue.run_schedules().await {
                Ok(run) => run
                    .next_in
                    .map_or(LOOK_AT_LEAST_EVERY, |d| d.min(LOOK_AT_LEAST_EVERY)),
                Err(e) => {
                    tracing::debug!(queue = %queue.name(), error = %e, "running schedules failed; retrying");
                    LOOK_AT_LEAST_EVERY
                }
            };
            self.next_look = Instant::now() + wait;
        }
        self.next_look
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    }
}

/// The Redis server's clock, ms since the epoch.
async fn server_ms(backend: &Backend) -> Result<u64> {
    time_reply(backend.query(&redis::cmd("TIME")).await?)
}

/// TIME: seconds and microseconds, as strings.
fn time_reply(v: Value) -> Result<u64> {
    let (secs, micros): (u64, u64) = redis::from_redis_value(v)?;
    Ok(secs.saturating_mul(1000).saturating_add(micros / 1000))
}

/// schedule_add.lua and schedule_remove.lua: a code.
fn code_reply(v: Value) -> Result<i64> {
    Ok(redis::from_redis_value(v)?)
}

/// schedule_list.lua: per schedule an id, its next tick, spec and payload.
fn list_reply(v: Value) -> Result<Vec<ScheduleInfo>> {
    array(v)?
        .chunks(4)
        .map(|c| match c {
            [id, next, spec, payload] => Ok(ScheduleInfo {
                id: text(id)?,
                next_tick: unsigned(int(next)?),
                repeat: Repeat::from_spec(&text(spec)?)?,
                payload: bytes(payload),
            }),
            _ => Err(Error::protocol("short schedule list reply")),
        })
        .collect()
}

/// What schedule_due.lua found.
#[derive(Debug)]
struct Due {
    now: u64,
    next_in: Option<Duration>,
    /// Per due schedule: id, due tick, spec.
    schedules: Vec<(String, u64, String)>,
}

/// schedule_due.lua: now, ms until the next tick not due, then per due
/// schedule an id, its tick and its spec.
fn due_reply(v: Value) -> Result<Due> {
    let reply = array(v)?;
    let (head, rest) = reply.split_at(reply.len().min(2));
    let [now, next_in] = head else {
        return Err(Error::protocol("short schedule due reply"));
    };
    let schedules = rest
        .chunks(3)
        .map(|c| match c {
            [id, tick, spec] => Ok((text(id)?, unsigned(int(tick)?), text(spec)?)),
            _ => Err(Error::protocol("short due schedule")),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Due {
        now: unsigned(int(now)?),
        next_in: u64::try_from(int(next_in)?).ok().map(Duration::from_millis),
        schedules,
    })
}

/// schedule_fire.lua: 1 per fired tick; how many fired.
fn fired_reply(v: Value) -> Result<usize> {
    let codes: Vec<i64> = redis::from_redis_value(v)?;
    Ok(codes.iter().filter(|c| **c == 1).count())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::props::{Decoder, decoder_tests};

    /// Every schedule script's reply decoder.
    const DECODERS: &[Decoder] = &[
        ("schedule add/remove", |v| code_reply(v).is_ok()),
        ("schedule list", |v| list_reply(v).is_ok()),
        ("schedule due", |v| due_reply(v).is_ok()),
        ("schedule fire", |v| fired_reply(v).is_ok()),
        ("server time", |v| time_reply(v).is_ok()),
    ];

    decoder_tests!(fuzz_schedule_replies, DECODERS);

    #[test]
    fn every_ticks_on_multiples_since_the_epoch() -> Result<()> {
        let grid = Repeat::Every(Duration::from_secs(1)).grid()?;
        assert_eq!(grid.after(1_700_000_000_000)?, 1_700_000_001_000);
        assert_eq!(grid.after(1_700_000_000_999)?, 1_700_000_001_000);
        Ok(())
    }

    #[test]
    fn cron_ticks_at_its_times_in_utc() -> Result<()> {
        // 2023-11-14T22:13:20Z; "at minute 30" next fires at 22:30:00.
        let grid = Repeat::Cron("30 * * * *".into()).grid()?;
        assert_eq!(grid.after(1_700_000_000_000)?, 1_700_001_000_000);
        let secs = Repeat::Cron("*/5 * * * * *".into()).grid()?;
        assert_eq!(secs.after(1_700_000_000_000)?, 1_700_000_005_000);
        Ok(())
    }

    #[test]
    fn bad_specs_are_refused() {
        for bad in [
            Repeat::Every(Duration::ZERO),
            Repeat::Every(Duration::from_micros(150_500)),
            Repeat::Every(MAX_DELAY + Duration::from_secs(1)),
            Repeat::Cron("not cron".into()),
            Repeat::Cron("61 * * * *".into()),
            Repeat::Cron("0 0 30 2 *".into()),
            Repeat::Cron(String::new()),
        ] {
            assert!(
                matches!(bad.grid(), Err(Error::InvalidArgument { .. })),
                "{bad:?} was accepted"
            );
        }
    }

    #[test]
    fn specs_round_trip() -> Result<()> {
        for r in [
            Repeat::Every(Duration::from_millis(1500)),
            Repeat::Cron("0 7 * * *".into()),
        ] {
            assert_eq!(Repeat::from_spec(&r.spec())?, r);
        }
        assert!(Repeat::from_spec("weekly").is_err());
        Ok(())
    }
}

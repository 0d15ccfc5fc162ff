//! Live workers: every running [`crate::queue::Worker`] heartbeats a record
//! of itself (who it is, what it runs, how much it did) with a TTL, and
//! [`Queue::workers`] lists the live ones; made for `dlm queue workers` and
//! the dashboard's Workers page.
//!
//! **Where.** Two keys of the queue (under its hash tag): `:workers` (ZSET
//! worker id → deadline, ms on the Redis clock) and `:workerinfo` (HASH
//! worker id → the record as JSON). A beat is one script
//! (`worker_beat.lua`) that writes both; a clean exit removes the record
//! in the same script. A worker that dies without one (SIGKILL, a lost
//! host) drops out of the listing once its deadline passes, and the next
//! beat of any worker of the queue deletes its record (at most
//! [`DROP_PER_BEAT`] per beat); both keys expire with the last live
//! worker's deadline, so nothing is left behind when all die.
//!
//! **When.** At start, then every `min(heartbeat, 5 s)` (the worker's lease
//! renewal period, default a third of its lease, capped at 5 s; at least
//! 100 ms), and sooner, at most once a second, when a task started or settled or
//! shutdown began (an idle worker beats no more often); a record lives
//! [`TTL_TICKS`] such periods. A beat that fails is retried at the next tick
//! and never stops the worker (logged: a warning when beats start failing,
//! debug after that).
//!
//! **Bounds.** A record names at most [`MAX_IN_FLIGHT_IDS`] running task ids
//! (and at most 64 KiB of them; `busy` still counts them all);
//! [`Queue::workers`] returns at most [`MAX_WORKERS`] workers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{Script, Value};
use tokio_util::sync::CancellationToken;

use crate::backend::millis;
use crate::error::{Error, Result};
use crate::queue::Queue;
use crate::queue::ops::{array, int, invocation, text, unsigned};

crate::queue::ops::script!(BEAT, "worker_beat.lua");
crate::queue::ops::script!(WORKERS, "workers.lua");

/// The most running task ids one worker's record names (its `busy` count
/// still counts them all; the ids shown are also capped at 64 KiB).
///
/// ```
/// assert_eq!(dlm::queue::MAX_IN_FLIGHT_IDS, 1000);
/// ```
pub const MAX_IN_FLIGHT_IDS: usize = 1000;
/// The most bytes of task ids one record holds.
const MAX_IN_FLIGHT_BYTES: usize = 64 * 1024;
/// The most workers one [`Queue::workers`] call returns.
///
/// ```
/// assert_eq!(dlm::queue::MAX_WORKERS, 1000);
/// ```
pub const MAX_WORKERS: usize = 1000;
/// How many expired workers' records one beat deletes at most.
///
/// ```
/// assert_eq!(dlm::queue::DROP_PER_BEAT, 100);
/// ```
pub const DROP_PER_BEAT: usize = 100;
/// How many beat periods a record lives without a new beat: a worker
/// with a 30 s lease beats every 5 s, so its record lives 15 s.
///
/// ```
/// assert_eq!(dlm::queue::TTL_TICKS, 3);
/// ```
pub const TTL_TICKS: u32 = 3;
/// The longest time between two beats.
const MAX_BEAT_EVERY: Duration = Duration::from_secs(5);
/// The shortest (a lease renewed every few ms need not beat as often).
const MIN_BEAT_EVERY: Duration = Duration::from_millis(100);
/// The shortest time between two beats of a worker whose record changed.
const EARLY_BEAT_EVERY: Duration = Duration::from_secs(1);
/// The longest worker id accepted.
pub(crate) const MAX_WORKER_ID_LEN: usize = 256;

/// One live worker, as its last heartbeat described it. From
/// [`Queue::workers`]; times are the Redis server's clock, ms since the epoch.
///
/// ```no_run
/// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
/// for w in client.queue("emails").workers().await? {
///     println!("{} on {} (pid {}): {}/{} busy, {} processed, {} failed, beat {:?} ago",
///              w.id, w.host, w.pid, w.busy, w.concurrency, w.processed, w.failed, w.beat_age);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerInfo {
    /// The worker's id ([`crate::queue::WorkerOptions::id`], default
    /// `host:pid:random`).
    pub id: String,
    /// The host it runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// When it started (its first beat).
    pub started_ms: u64,
    /// How many tasks it runs at once at most.
    pub concurrency: usize,
    /// How many tasks it was running at its last beat.
    pub busy: usize,
    /// The ids of those tasks, sorted (at most [`MAX_IN_FLIGHT_IDS`]).
    pub in_flight: Vec<String>,
    /// Tasks it acked so far.
    pub processed: u64,
    /// Tasks of it that failed so far: retried, dead or lease lost.
    pub failed: u64,
    /// When it last beat.
    pub last_beat_ms: u64,
    /// How long ago it last beat, when this was read.
    pub beat_age: Duration,
    /// When its record expires unless it beats again.
    pub expires_ms: u64,
    /// How long a record lives without a new beat.
    pub ttl: Duration,
    /// Shutting down: it claims nothing more and lets running tasks finish.
    pub stopping: bool,
    /// The dlm version it runs.
    pub version: String,
}

impl Queue {
    /// The live workers of this queue (those whose last heartbeat has not
    /// expired), sorted by id, at most [`MAX_WORKERS`]. Read in one script;
    /// nothing changes.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let busy: usize = client.queue("emails").workers().await?.iter().map(|w| w.busy).sum();
    /// println!("{busy} tasks running");
    /// # Ok(()) }
    /// ```
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        let (backend, keys) = self.ready()?;
        let mut inv = invocation(&WORKERS, keys);
        inv.arg(MAX_WORKERS);
        let mut workers = workers_reply(backend.eval(&inv).await?)?;
        workers.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(workers)
    }
}

/// workers.lua: the server's clock, then 14 values per worker.
fn workers_reply(v: Value) -> Result<Vec<WorkerInfo>> {
    let reply = array(v)?;
    let (head, rest) = reply.split_at(reply.len().min(1));
    let [now] = head else {
        return Err(Error::protocol("empty workers reply"));
    };
    let now = unsigned(int(now)?);
    rest.chunks(14)
        .map(|c| match c {
            [
                id,
                deadline,
                host,
                pid,
                started,
                concurrency,
                busy,
                processed,
                failed,
                last_beat,
                ttl,
                stopping,
                version,
                in_flight,
            ] => {
                let last_beat_ms = unsigned(int(last_beat)?);
                let in_flight = match in_flight {
                    Value::Array(ids) => ids.iter().map(text).collect::<Result<Vec<_>>>()?,
                    Value::Nil => Vec::new(),
                    other => {
                        return Err(Error::protocol(format!("in_flight is no array: {other:?}")));
                    }
                };
                let size = |v: &Value| -> Result<usize> {
                    Ok(usize::try_from(int(v)?).unwrap_or(usize::MAX))
                };
                Ok(WorkerInfo {
                    id: text(id)?,
                    host: text(host)?,
                    pid: u32::try_from(int(pid)?).unwrap_or(0),
                    started_ms: unsigned(int(started)?),
                    concurrency: size(concurrency)?,
                    busy: size(busy)?,
                    in_flight,
                    processed: unsigned(int(processed)?),
                    failed: unsigned(int(failed)?),
                    last_beat_ms,
                    beat_age: Duration::from_millis(now.saturating_sub(last_beat_ms)),
                    expires_ms: unsigned(int(deadline)?),
                    ttl: Duration::from_millis(unsigned(int(ttl)?)),
                    stopping: int(stopping)? == 1,
                    version: text(version)?,
                })
            }
            _ => Err(Error::protocol("short worker in workers reply")),
        })
        .collect()
}

/// A worker's tallies, kept by its tasks as they settle.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    started: AtomicU64,
    processed: AtomicU64,
    failed: AtomicU64,
}

impl Tally {
    /// One task's handler started.
    pub(crate) fn started(&self) {
        self.started.fetch_add(1, Ordering::Relaxed);
    }

    /// A number that changes whenever a task starts or settles.
    fn changes(&self) -> u64 {
        [&self.started, &self.processed, &self.failed]
            .iter()
            .fold(0u64, |sum, c| sum.wrapping_add(c.load(Ordering::Relaxed)))
    }

    /// One task settled: acked (`true`) or failed (retried, dead, lost).
    pub(crate) fn settled(&self, acked: bool) {
        let counter = if acked { &self.processed } else { &self.failed };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// What a worker is, for its record.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    pub id: String,
    pub concurrency: usize,
    /// The lease renewal period (the beat's is at most 5 s).
    pub heartbeat: Duration,
}

/// The id of a worker that was not given one: `host:pid:random`.
pub(crate) fn default_id() -> String {
    format!(
        "{}:{}:{:06x}",
        host_name(),
        std::process::id(),
        fastrand::u32(..0x100_0000)
    )
}

/// This host's name (Linux: the kernel's; else `$HOSTNAME`), or `localhost`.
fn host_name() -> String {
    let from_file = |p: &str| std::fs::read_to_string(p).ok();
    from_file("/proc/sys/kernel/hostname")
        .or_else(|| from_file("/etc/hostname"))
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .map(|h| h.trim().chars().filter(|c| !c.is_control()).collect())
        .filter(|h: &String| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// Check a worker id given with [`crate::queue::WorkerOptions::id`].
pub(crate) fn check_worker_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > MAX_WORKER_ID_LEN || id.chars().any(char::is_control) {
        return Err(Error::invalid(
            "worker id",
            format!("must be 1 to {MAX_WORKER_ID_LEN} bytes without control characters"),
        ));
    }
    Ok(())
}

/// `text` as a JSON string, quotes included.
fn json_str(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The heartbeat of one running worker: a task beating until stopped
/// (then removing the record), or until dropped (then too, in the background).
pub(crate) struct Beating {
    tally: Arc<Tally>,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Beating {
    /// Start beating for a worker of `queue`: `running` lists the ids of the
    /// tasks its handlers run now; `shutdown` is the worker's own.
    pub(crate) fn start<R>(
        queue: Queue,
        me: Identity,
        shutdown: CancellationToken,
        running: R,
    ) -> Beating
    where
        R: Fn() -> Vec<String> + Send + 'static,
    {
        let tally = Arc::new(Tally::default());
        let stop = CancellationToken::new();
        let beat = Beat {
            queue,
            every: me.heartbeat.clamp(MIN_BEAT_EVERY, MAX_BEAT_EVERY),
            me,
            tally: tally.clone(),
            host: host_name(),
            started_ms: None,
        };
        let task = tokio::spawn(beat.run(stop.clone(), shutdown, running));
        Beating {
            tally,
            stop,
            task: Some(task),
        }
    }

    /// The tallies the worker's tasks add to.
    pub(crate) fn tally(&self) -> Arc<Tally> {
        self.tally.clone()
    }

    /// Stop beating and remove the record (within the call's deadline).
    pub(crate) async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Beating {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

struct Beat {
    queue: Queue,
    me: Identity,
    every: Duration,
    tally: Arc<Tally>,
    host: String,
    /// The server's clock at the first beat that worked.
    started_ms: Option<u64>,
}

impl Beat {
    fn ttl(&self) -> Duration {
        self.every * TTL_TICKS
    }

    async fn run<R>(mut self, stop: CancellationToken, shutdown: CancellationToken, running: R)
    where
        R: Fn() -> Vec<String>,
    {
        let mut failing = false;
        'beats: loop {
            let seen = (self.tally.changes(), shutdown.is_cancelled());
            let record = self.record(running(), seen.1);
            match self.send("beat", &record).await {
                Ok(now) => {
                    self.started_ms.get_or_insert(now);
                    if failing {
                        tracing::info!(queue = %self.queue.name(), worker = %self.me.id, "heartbeat works again");
                    }
                    failing = false;
                }
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(queue = %self.queue.name(), worker = %self.me.id, error = %e, "worker heartbeat failed; retrying every beat");
                }
                Err(e) => {
                    tracing::debug!(queue = %self.queue.name(), worker = %self.me.id, error = %e, "worker heartbeat failed again");
                }
            }
            // The next beat: after `every`, or sooner (at most one a second)
            // when a task started or settled or shutdown began, so the record
            // follows a busy worker closely and an idle one costs nothing more.
            let due = tokio::time::Instant::now() + self.every;
            loop {
                let look = (tokio::time::Instant::now() + EARLY_BEAT_EVERY).min(due);
                tokio::select! {
                    _ = stop.cancelled() => break 'beats,
                    _ = tokio::time::sleep_until(look) => {}
                }
                if look >= due || (self.tally.changes(), shutdown.is_cancelled()) != seen {
                    break;
                }
            }
        }
        if let Err(e) = self.send("stop", "").await {
            tracing::debug!(queue = %self.queue.name(), worker = %self.me.id, error = %e, "removing the worker record failed; it expires with its TTL");
        }
    }

    /// The record as JSON (worker_beat.lua adds the times).
    fn record(&self, mut running: Vec<String>, stopping: bool) -> String {
        let busy = running.len();
        running.sort_unstable();
        let mut bytes = 0;
        let shown = running
            .iter()
            .take(MAX_IN_FLIGHT_IDS)
            .take_while(|id| {
                bytes += id.len() + 3;
                bytes <= MAX_IN_FLIGHT_BYTES
            })
            .count();
        let mut out = String::with_capacity(256 + bytes);
        out.push_str("{\"id\":");
        json_str(&mut out, &self.me.id);
        out.push_str(",\"queue\":");
        json_str(&mut out, self.queue.name());
        out.push_str(",\"host\":");
        json_str(&mut out, &self.host);
        let processed = self.tally.processed.load(Ordering::Relaxed);
        let failed = self.tally.failed.load(Ordering::Relaxed);
        out.push_str(&format!(
            ",\"pid\":{},\"concurrency\":{},\"busy\":{busy},\"processed\":{processed},\
\"failed\":{failed},\"ttl_ms\":{},\"stopping\":{stopping},\"version\":\"{}\",\"in_flight\":[",
            std::process::id(),
            self.me.concurrency,
            millis(self.ttl()),
            env!("CARGO_PKG_VERSION"),
        ));
        for (i, id) in running.iter().take(shown).enumerate() {
            if i > 0 {
                out.push(',');
            }
            json_str(&mut out, id);
        }
        out.push_str("]}");
        out
    }

    /// One beat (or the stop); the server's clock.
    async fn send(&self, op: &str, record: &str) -> Result<u64> {
        let (backend, keys) = self.queue.ready()?;
        let mut inv = invocation(&BEAT, keys);
        inv.arg(op)
            .arg(&self.me.id)
            .arg(millis(self.ttl()))
            .arg(record)
            .arg(self.started_ms.map_or(String::new(), |s| s.to_string()))
            .arg(DROP_PER_BEAT);
        let (now, _dropped): (i64, i64) = redis::from_redis_value(backend.eval(&inv).await?)?;
        Ok(unsigned(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::props::{Decoder, decoder_tests};

    const DECODERS: &[Decoder] = &[("workers", |v| workers_reply(v).is_ok())];

    decoder_tests!(fuzz_workers_replies, DECODERS);

    #[test]
    fn json_strings_escape_quotes_backslashes_and_controls() {
        let mut out = String::new();
        json_str(&mut out, "a\"b\\c\nd\u{1}é");
        assert_eq!(out, "\"a\\\"b\\\\c\\nd\\u0001é\"");
    }

    fn beat(tally: Arc<Tally>) -> Beat {
        Beat {
            queue: Queue::new(None, None, "q\"1".into(), "dlm:".into()),
            me: Identity {
                id: "w\\1".into(),
                concurrency: 2000,
                heartbeat: Duration::from_secs(10),
            },
            every: Duration::from_secs(5),
            tally,
            host: "h".into(),
            started_ms: None,
        }
    }

    /// The record is JSON with every field, and names at most 1000 ids and
    /// 64 KiB of them while `busy` counts them all.
    #[test]
    fn records_are_json_and_their_id_lists_are_capped() -> std::result::Result<(), serde_json::Error>
    {
        let tally = Arc::new(Tally::default());
        tally.settled(true);
        tally.settled(false);
        tally.settled(false);
        let b = beat(tally);
        let many: Vec<String> = (0..1500).map(|i| format!("t{i:04}")).collect();
        let r: serde_json::Value = serde_json::from_str(&b.record(many, true))?;
        assert_eq!(r["id"], "w\\1");
        assert_eq!(r["queue"], "q\"1");
        assert_eq!(
            (&r["busy"], &r["concurrency"]),
            (&1500.into(), &2000.into())
        );
        assert_eq!((&r["processed"], &r["failed"]), (&1.into(), &2.into()));
        assert_eq!(r["ttl_ms"], 15_000);
        assert_eq!(r["stopping"], true);
        assert_eq!(r["pid"], std::process::id());
        let ids = r["in_flight"].as_array().map(Vec::len);
        assert_eq!(ids, Some(MAX_IN_FLIGHT_IDS));
        assert_eq!(r["in_flight"][0], "t0000", "sorted");
        let long: Vec<String> = (0..200)
            .map(|i| format!("{i:03}{}", "x".repeat(1000)))
            .collect();
        let r: serde_json::Value = serde_json::from_str(&b.record(long, false))?;
        let shown = r["in_flight"].as_array().map_or(0, Vec::len);
        assert!(shown > 0 && shown * 1003 <= MAX_IN_FLIGHT_BYTES, "{shown}");
        assert_eq!(r["busy"], 200);
        Ok(())
    }

    #[test]
    fn worker_ids_are_checked() {
        assert!(check_worker_id("web-1:42").is_ok());
        assert!(check_worker_id("").is_err());
        assert!(check_worker_id("a\nb").is_err());
        assert!(check_worker_id(&"x".repeat(MAX_WORKER_ID_LEN + 1)).is_err());
        let id = default_id();
        assert_eq!(id.split(':').count(), 3, "{id}");
        assert!(check_worker_id(&id).is_ok());
    }

    #[test]
    fn workers_replies_decode_and_bad_ones_are_errors() -> Result<()> {
        let w = workers_reply(Value::Array(vec![
            Value::Int(10_000),
            Value::BulkString(b"w1".to_vec()),
            Value::Int(12_000),
            Value::BulkString(b"host".to_vec()),
            Value::Int(42),
            Value::Int(1_000),
            Value::Int(4),
            Value::Int(2),
            Value::Int(7),
            Value::Int(1),
            Value::Int(9_500),
            Value::Int(3_000),
            Value::Int(0),
            Value::BulkString(b"0.1.0".to_vec()),
            Value::Array(vec![Value::BulkString(b"t1".to_vec())]),
        ]))?;
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].in_flight, ["t1"]);
        assert_eq!(w[0].beat_age, Duration::from_millis(500));
        assert_eq!((w[0].busy, w[0].processed, w[0].failed), (2, 7, 1));
        assert!(workers_reply(Value::Array(vec![])).is_err());
        assert!(workers_reply(Value::Array(vec![Value::Int(1), Value::Int(2)])).is_err());
        assert_eq!(workers_reply(Value::Array(vec![Value::Int(1)]))?, vec![]);
        Ok(())
    }
}

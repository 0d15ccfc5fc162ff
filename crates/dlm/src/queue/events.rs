//! The queue's event log ([`crate::queue::QueueSettings::events`]): a capped
//! Redis Stream written by the queue's own scripts, read as events, one per
//! task, in order ([`Queue::events`], [`Queue::events_page`]). Anchor:
//! BullMQ's `QueueEvents`.

use std::time::Duration;

use futures_util::Stream;
use std::sync::LazyLock;

use redis::{Script, Value};

use crate::error::{Error, Result};
use crate::queue::Queue;
use crate::queue::ops::{array, bytes, invocation, split_ids, text};

crate::queue::ops::script!(EVENTS_READ, "events_read.lua");

/// The most entries one [`Queue::events_page`] call reads.
pub const MAX_EVENTS_PAGE: usize = 1000;

/// What happened to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// Enqueued (added, replaced, or blocked by dependencies).
    Added,
    /// Leased to a worker.
    Claimed,
    /// Its handler reported progress.
    Progress,
    /// Acked (or, with the source documents' API, popped or removed).
    Completed,
    /// An attempt failed (nack, or its lease expired); it will be retried.
    Failed,
    /// Moved to the dead-letter set.
    Dead,
    /// Its last dependency completed: it is due now.
    Released,
}

impl EventKind {
    /// Its name: `added`, `claimed`, `progress`, `completed`, `failed`, `dead` or `released`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Added => "added",
            EventKind::Claimed => "claimed",
            EventKind::Progress => "progress",
            EventKind::Completed => "completed",
            EventKind::Failed => "failed",
            EventKind::Dead => "dead",
            EventKind::Released => "released",
        }
    }

    fn parse(name: &[u8]) -> Option<EventKind> {
        [
            EventKind::Added,
            EventKind::Claimed,
            EventKind::Progress,
            EventKind::Completed,
            EventKind::Failed,
            EventKind::Dead,
            EventKind::Released,
        ]
        .into_iter()
        .find(|k| k.as_str().as_bytes() == name)
    }
}

/// One event of one task.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// The task's id.
    pub task: String,
    /// When (ms since the epoch, Redis clock).
    pub at_ms: u64,
    /// The log entry it came in: pass it to [`EventsFrom::After`] to go on
    /// after it (events of one entry share it).
    pub cursor: String,
    /// Failed or dead: the error.
    pub error: Option<String>,
    /// Progress: the percentage.
    pub progress: Option<u8>,
    /// Progress: the message.
    pub message: Option<String>,
}

/// Where reading the event log starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventsFrom {
    /// The oldest entry still kept.
    Start,
    /// Only what happens from now on.
    Now,
    /// After this entry ([`Event::cursor`]).
    After(String),
}

impl EventsFrom {
    fn arg(&self) -> &str {
        match self {
            EventsFrom::Start => "-",
            EventsFrom::Now => "$",
            EventsFrom::After(c) => c,
        }
    }
}

/// How often `events` reads a sharded queue's logs again when it found nothing.
const SHARDED_FOLLOW_EVERY: Duration = Duration::from_millis(250);

/// The prefix of a sharded queue's events cursor (one position per shard).
const SHARDED_CURSOR: &str = "shards:";

/// The position in each of `n` shards' logs that `from` means.
fn split_cursor(from: &EventsFrom, n: usize) -> Vec<String> {
    match from {
        EventsFrom::After(c) => match c.strip_prefix(SHARDED_CURSOR) {
            Some(list) => {
                let mut pos: Vec<String> = list.split(',').map(str::to_string).collect();
                // A shard added since the cursor was made: from its start.
                pos.resize(n, "-".to_string());
                pos
            }
            None => vec![c.clone(); n],
        },
        other => vec![other.arg().to_string(); n],
    }
}

fn join_cursor(pos: &[String]) -> String {
    format!("{SHARDED_CURSOR}{}", pos.join(","))
}

/// One stream entry (`[id, [field, value, ...]]`) as its events.
fn entry_events(entry: &Value, out: &mut Vec<Event>) -> Result<()> {
    let Value::Array(parts) = entry else {
        return Err(Error::protocol("an event entry is not an array"));
    };
    let [id, fields] = parts.as_slice() else {
        return Err(Error::protocol("an event entry is not two values"));
    };
    let cursor = text(id)?;
    let at_ms = cursor
        .split('-')
        .next()
        .and_then(|ms| ms.parse().ok())
        .unwrap_or(0);
    let fields = match fields {
        Value::Array(f) => f,
        _ => return Err(Error::protocol("event fields are not an array")),
    };
    let (mut kind, mut ids, mut detail) = (None, Vec::new(), None);
    for pair in fields.chunks(2) {
        if let [k, v] = pair {
            match bytes(k).as_deref() {
                Some(b"e") => kind = bytes(v).and_then(|b| EventKind::parse(&b)),
                Some(b"ids") => ids = bytes(v).map(|b| split_ids(&b)).unwrap_or_default(),
                Some(b"d") => detail = bytes(v),
                _ => {}
            }
        }
    }
    // An entry of a kind this version does not know is skipped.
    let Some(kind) = kind else { return Ok(()) };
    let (mut error, mut progress, mut message) = (None, None, None);
    if let Some(d) = detail {
        if kind == EventKind::Progress {
            let mut parts = d.splitn(2, |b| *b == 0);
            progress = parts
                .next()
                .and_then(|p| std::str::from_utf8(p).ok())
                .and_then(|p| p.parse().ok());
            message = parts
                .next()
                .filter(|m| !m.is_empty())
                .map(|m| String::from_utf8_lossy(m).into_owned());
        } else {
            error = Some(String::from_utf8_lossy(&d).into_owned());
        }
    }
    for task in ids {
        out.push(Event {
            kind,
            task,
            at_ms,
            cursor: cursor.clone(),
            error: error.clone(),
            progress,
            message: message.clone(),
        });
    }
    Ok(())
}

impl Queue {
    /// The events after `from`, from at most `entries` log entries (1 ..=
    /// [`MAX_EVENTS_PAGE`]; an entry holds the events of one kind of one
    /// script call), and the cursor to go on from. Read in one script.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// use dlm::queue::EventsFrom;
    /// let q = client.queue("mail");
    /// let (events, next) = q.events_page(&EventsFrom::Start, 100).await?;
    /// for e in &events {
    ///     println!("{} {} at {}", e.kind.as_str(), e.task, e.at_ms);
    /// }
    /// let (newer, _) = q.events_page(&next, 100).await?;
    /// # let _ = newer;
    /// # Ok(()) }
    /// ```
    pub async fn events_page(
        &self,
        from: &EventsFrom,
        entries: usize,
    ) -> Result<(Vec<Event>, EventsFrom)> {
        if entries == 0 || entries > MAX_EVENTS_PAGE {
            return Err(Error::invalid(
                "entries",
                format!("{entries} is outside 1 ..= {MAX_EVENTS_PAGE}"),
            ));
        }
        if let Some(l) = self.sharded_view().await? {
            return self.events_page_sharded(&l, from, entries).await;
        }
        let (out, last) = self.events_page_here(from.arg(), entries).await?;
        Ok((out, EventsFrom::After(last)))
    }

    /// One page of this handle's shard's log after stream position `from`,
    /// and the last position read.
    async fn events_page_here(&self, from: &str, entries: usize) -> Result<(Vec<Event>, String)> {
        let (backend, keys) = self.ready()?;
        let mut inv = invocation(&EVENTS_READ, keys);
        inv.arg(from).arg(entries);
        let reply = array(backend.eval(&inv).await?)?;
        let Some((last, rest)) = reply.split_first() else {
            return Err(Error::protocol("empty events reply"));
        };
        let mut out = Vec::new();
        for entry in rest {
            entry_events(entry, &mut out)?;
        }
        Ok((out, text(last)?))
    }

    /// A page of every shard's log (at most `entries` entries each), merged
    /// by time. The cursor holds one position per shard
    /// (`shards:ID0,ID1,...`), so paging on misses nothing; each event's
    /// cursor is the position right after it in that merged order. A plain
    /// stream id as `from` means "after that time" in every shard.
    async fn events_page_sharded(
        &self,
        l: &crate::queue::shards::Layout,
        from: &EventsFrom,
        entries: usize,
    ) -> Result<(Vec<Event>, EventsFrom)> {
        let shards = self.shard_handles(l);
        let mut pos = split_cursor(from, shards.len());
        let pages = futures_util::future::try_join_all(
            shards
                .iter()
                .zip(&pos)
                .map(|(q, f)| q.events_page_here(f, entries)),
        )
        .await?;
        let mut tagged: Vec<(usize, Event)> = Vec::new();
        let mut last: Vec<String> = Vec::with_capacity(pages.len());
        for (i, (events, at)) in pages.into_iter().enumerate() {
            tagged.extend(events.into_iter().map(|e| (i, e)));
            last.push(at);
        }
        tagged.sort_by_key(|(i, e)| (e.at_ms, *i));
        let mut out = Vec::with_capacity(tagged.len());
        for (i, mut e) in tagged {
            pos[i] = e.cursor.clone();
            e.cursor = join_cursor(&pos);
            out.push(e);
        }
        Ok((out, EventsFrom::After(join_cursor(&last))))
    }

    /// The events from `from` on, as they happen: an endless stream (drop
    /// it to stop). It waits on a dedicated connection with `XREAD BLOCK`
    /// (woken by the next entry, not polling); a transient error is an
    /// `Err` item, after which the stream goes on where it was.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// use dlm::queue::EventsFrom;
    /// use futures_util::StreamExt;
    /// let mut events = std::pin::pin!(client.queue("mail").events(EventsFrom::Now));
    /// while let Some(e) = events.next().await {
    ///     let e = e?;
    ///     println!("{} {}", e.kind.as_str(), e.task);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn events(&self, from: EventsFrom) -> impl Stream<Item = Result<Event>> + Send + 'static {
        let state = Follow {
            queue: self.clone(),
            cursor: from,
            buffered: std::collections::VecDeque::new(),
            conn: None,
        };
        futures_util::stream::unfold(state, |mut s| async move {
            let item = s.next().await;
            Some((item, s))
        })
    }
}

/// The state of one [`Queue::events`] stream.
struct Follow {
    queue: Queue,
    cursor: EventsFrom,
    buffered: std::collections::VecDeque<Event>,
    conn: Option<crate::backend::BoxedConnection>,
}

impl Follow {
    async fn next(&mut self) -> Result<Event> {
        loop {
            if let Some(e) = self.buffered.pop_front() {
                return Ok(e);
            }
            if self.cursor == EventsFrom::Now {
                // Pin "now" to the newest entry, so nothing is missed after.
                let (_, at) = self.queue.events_page(&EventsFrom::Now, 1).await?;
                self.cursor = at;
            }
            let (events, next) = self
                .queue
                .events_page(&self.cursor, MAX_EVENTS_PAGE)
                .await?;
            self.cursor = next;
            if !events.is_empty() {
                self.buffered.extend(events);
                continue;
            }
            self.block().await;
        }
    }

    /// Wait (at most a second) for an entry after the cursor.
    async fn block(&mut self) {
        let wait = Duration::from_secs(1);
        if self.queue.known_layout().is_some_and(|l| !l.is_plain()) {
            // A sharded queue's logs are in several slots: read again soon.
            tokio::time::sleep(SHARDED_FOLLOW_EVERY).await;
            return;
        }
        let (Some(deployment), Ok(keys)) = (
            self.queue.deployment().cloned(),
            crate::keys::queue_keys(self.queue.root(), self.queue.name()),
        ) else {
            tokio::time::sleep(wait).await;
            return;
        };
        if self.conn.is_none() {
            match crate::queue::idle::dedicated(&deployment).await {
                Some(c) => self.conn = Some(c),
                None => {
                    tokio::time::sleep(wait).await;
                    return;
                }
            }
        }
        let (Some(conn), Some(key)) = (self.conn.as_mut(), keys.get(30)) else {
            return;
        };
        let after = match &self.cursor {
            EventsFrom::After(c) => c.clone(),
            _ => "0-0".to_string(),
        };
        let mut cmd = redis::cmd("XREAD");
        cmd.arg("BLOCK")
            .arg(wait.as_millis() as u64)
            .arg("COUNT")
            .arg(1)
            .arg("STREAMS")
            .arg(key)
            .arg(after);
        let read = cmd.query_async::<Value>(conn);
        match tokio::time::timeout(wait + Duration::from_secs(2), read).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) | Err(_) => {
                self.conn = None;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

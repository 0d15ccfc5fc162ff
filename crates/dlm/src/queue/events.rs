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
        let (backend, keys) = self.ready()?;
        let mut inv = invocation(&EVENTS_READ, keys);
        inv.arg(from.arg()).arg(entries);
        let reply = array(backend.eval(&inv).await?)?;
        let Some((last, rest)) = reply.split_first() else {
            return Err(Error::protocol("empty events reply"));
        };
        let mut out = Vec::new();
        for entry in rest {
            entry_events(entry, &mut out)?;
        }
        Ok((out, EventsFrom::After(text(last)?)))
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

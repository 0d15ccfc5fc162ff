//! The dashboard's HTML, rendered on the server. Every value that comes
//! from Redis (queue names, task ids, payloads, errors, lock names) goes
//! through [`esc`] or [`seg`]: they are attacker-controlled.

use std::fmt::Write as _;
use std::time::Duration;

use dlm::HeldLock;
use dlm::queue::{QueueStats, TaskPage, TaskState, WorkerInfo};

use super::state::{Access, QueueRow};

/// How many payload characters a table cell shows.
const PREVIEW_CHARS: usize = 120;

/// `text` safe inside HTML text and quoted attributes.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` percent-encoded for a URL path segment or query value.
pub fn seg(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A short human duration: `350ms`, `12s`, `3m 5s`, `2h 4m`, `3d 1h`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{}ms", d.as_millis()),
        1..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86400, s % 86400 / 3600),
    }
}

/// The link to task `id` of queue `queue` (its page).
pub fn task_href(queue: &str, id: &str) -> String {
    format!("/queues/{}/tasks/{}", seg(queue), seg(id))
}

/// `score` (ms since the epoch) relative to `now`: `in 5s` or `5s ago`.
pub fn relative(score: u64, now: u64) -> String {
    if score >= now {
        format!("in {}", human(Duration::from_millis(score - now)))
    } else {
        format!("{} ago", human(Duration::from_millis(now - score)))
    }
}

/// Which page the navigation marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    /// The overview.
    Overview,
    /// A queue or its dead letters.
    Queue,
    /// The live workers.
    Workers,
    /// The locks.
    Locks,
}

/// What every page's frame shows.
pub struct Frame<'a> {
    /// The page title.
    pub title: &'a str,
    /// The marked navigation entry.
    pub nav: Nav,
    /// Whether the last reading of Redis worked.
    pub redis_up: bool,
    /// Who may act.
    pub access: &'a Access,
    /// The time between refreshes of the live part (`None`: no refresh).
    pub refresh: Option<Duration>,
}

/// A full page: the frame around `body` (the part that refreshes live).
pub fn page(frame: &Frame<'_>, body: &str) -> String {
    let link = |nav: Nav, href: &str, label: &str| {
        let class = if nav == frame.nav {
            " class=\"active\""
        } else {
            ""
        };
        format!("<a href=\"{href}\"{class}>{label}</a>")
    };
    let redis = if frame.redis_up {
        "<span class=\"pill ok\">Redis up</span>"
    } else {
        "<span class=\"pill bad\">Redis unreachable</span>"
    };
    let mode = match frame.access {
        Access::ReadOnly => "<span class=\"pill warn\">read-only</span>",
        Access::Admin(_) => "<span class=\"pill\">admin token required</span>",
        Access::Local => "<span class=\"pill\">local admin</span>",
    };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>{title} · dlm</title><link rel=\"stylesheet\" href=\"/assets/style.css\">\
<link rel=\"icon\" href=\"data:,\"></head>\
<body><header class=\"top\"><a class=\"brand\" href=\"/\"><span class=\"logo\">◆</span> dlm</a>\
<nav>{overview}{workers}{locks}</nav><div class=\"status\">{redis}{mode}<span class=\"clock\" id=\"updated\"></span></div></header>\
<main id=\"live\" data-refresh=\"{refresh}\">{body}</main>\
<footer>dlm serve · <a href=\"/api/queues\">/api/queues</a> · <a href=\"/api/locks\">/api/locks</a> · \
<a href=\"/metrics\">/metrics</a> · <a href=\"/healthz\">/healthz</a></footer>\
<script src=\"/assets/app.js\"></script></body></html>\n",
        title = esc(frame.title),
        overview = link(Nav::Overview, "/", "Overview"),
        workers = link(Nav::Workers, "/workers", "Workers"),
        locks = link(Nav::Locks, "/locks", "Locks"),
        refresh = frame.refresh.map_or(0, |r| r.as_millis()),
    )
}

/// The error shown when Redis could not be read.
pub fn error_box(what: &str, error: &str) -> String {
    format!(
        "<div class=\"flash bad\"><strong>{}</strong> {}</div>",
        esc(what),
        esc(error)
    )
}

fn flash(msg: Option<&str>) -> String {
    msg.map_or_else(String::new, |m| {
        format!("<div class=\"flash ok\" id=\"flash\">{}</div>", esc(m))
    })
}

/// An inline SVG sparkline of `values` (oldest first).
pub fn sparkline(values: &[u64]) -> String {
    const W: f64 = 160.0;
    const H: f64 = 32.0;
    if values.len() < 2 {
        return "<span class=\"muted\">collecting…</span>".into();
    }
    let max = values.iter().copied().max().unwrap_or(0).max(1) as f64;
    let step = W / (values.len() - 1) as f64;
    let mut points = String::new();
    for (i, v) in values.iter().enumerate() {
        let x = i as f64 * step;
        let y = H - 2.0 - (*v as f64 / max) * (H - 4.0);
        let _ = write!(points, "{x:.1},{y:.1} ");
    }
    let last = values.last().copied().unwrap_or(0);
    format!(
        "<svg class=\"spark\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=\"img\" \
aria-label=\"backlog, last {n} samples, now {last}\"><polygon class=\"area\" points=\"0,{H} {points}{W},{H}\"/>\
<polyline class=\"line\" points=\"{points}\"/></svg>",
        n = values.len(),
    )
}

fn count_cell(queue: &str, state: &str, n: u64) -> String {
    let class = if n == 0 { "num zero" } else { "num" };
    format!(
        "<td class=\"{class}\" data-queue=\"{}\" data-state=\"{state}\">{n}</td>",
        esc(queue)
    )
}

/// The overview: a card per total and a row per queue.
pub fn overview(rows: &[QueueRow], locks: Option<usize>, error: Option<&str>) -> String {
    let mut total = QueueStats::default();
    for s in rows.iter().filter_map(|r| r.stats) {
        total.waiting += s.waiting;
        total.delayed += s.delayed;
        total.inflight += s.inflight;
        total.dead += s.dead;
    }
    let mut out = String::from("<h1>Overview</h1>");
    if let Some(e) = error {
        out.push_str(&error_box("Redis:", e));
    }
    let locks = locks.map_or_else(|| "–".to_string(), |n| n.to_string());
    let _ = write!(
        out,
        "<section class=\"cards\">\
<div class=\"card\"><span class=\"label\">Queues</span><span class=\"value\">{}</span></div>\
<div class=\"card waiting\"><span class=\"label\">Waiting</span><span class=\"value\" id=\"total-waiting\">{}</span></div>\
<div class=\"card delayed\"><span class=\"label\">Delayed</span><span class=\"value\" id=\"total-delayed\">{}</span></div>\
<div class=\"card in_flight\"><span class=\"label\">In flight</span><span class=\"value\" id=\"total-in_flight\">{}</span></div>\
<div class=\"card dead\"><span class=\"label\">Dead</span><span class=\"value\" id=\"total-dead\">{}</span></div>\
<div class=\"card locks\"><span class=\"label\">Held locks</span><span class=\"value\" id=\"total-locks\">{locks}</span></div>\
</section>",
        rows.len(),
        total.waiting,
        total.delayed,
        total.inflight,
        total.dead
    );
    if rows.is_empty() {
        out.push_str("<p class=\"empty\">No queue found (none named with --queue, none under dlm:queue:*).</p>");
        return out;
    }
    out.push_str(
        "<table class=\"grid\"><thead><tr><th>Queue</th><th class=\"num\"><span class=\"badge blocked\">blocked</span></th>\
<th class=\"num\"><span class=\"badge waiting\">waiting</span></th>\
<th class=\"num\"><span class=\"badge delayed\">delayed</span></th><th class=\"num\"><span class=\"badge in_flight\">in flight</span></th>\
<th class=\"num\"><span class=\"badge dead\">dead</span></th><th class=\"num\">Processed</th><th class=\"num\">Failed</th>\
<th class=\"num\">Throughput</th><th class=\"num\">Oldest due</th><th>Backlog, last 10 min</th></tr></thead><tbody>",
    );
    for row in rows {
        let name = esc(&row.name);
        let href = format!("/queues/{}", seg(&row.name));
        let _ = write!(
            out,
            "<tr class=\"queue-row\" data-queue=\"{name}\"><td><a href=\"{href}\">{name}</a>"
        );
        let Some(s) = row.stats else {
            let _ = write!(
                out,
                "</td><td colspan=\"10\" class=\"bad\">unreadable</td></tr>"
            );
            continue;
        };
        if s.paused {
            out.push_str(" <span class=\"chip paused\" title=\"dlm queue resume\">paused</span>");
        }
        if s.dead > 0 {
            let _ = write!(
                out,
                " <a class=\"chip dead\" href=\"{href}/dead\">dead letters</a>"
            );
        }
        out.push_str("</td>");
        out.push_str(&count_cell(&row.name, "blocked", s.blocked));
        out.push_str(&count_cell(&row.name, "waiting", s.waiting));
        out.push_str(&count_cell(&row.name, "delayed", s.delayed));
        out.push_str(&count_cell(&row.name, "in_flight", s.inflight));
        out.push_str(&count_cell(&row.name, "dead", s.dead));
        let throughput = row
            .throughput
            .map_or_else(|| "–".to_string(), |t| format!("{t:.1}/s"));
        let oldest = row.oldest_age.map_or_else(|| "–".to_string(), human);
        let _ = write!(
            out,
            "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{throughput}</td>\
<td class=\"num\">{oldest}</td><td>{}</td></tr>",
            s.processed,
            s.failed,
            sparkline(&row.history)
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// Links to the previous and next page of a listing.
fn pager(base: &str, page: usize, size: usize, total: u64) -> String {
    let pages = usize::try_from(total)
        .unwrap_or(usize::MAX)
        .div_ceil(size)
        .max(1);
    let mut out = format!(
        "<nav class=\"pager\"><span>page {} of {pages}</span>",
        page + 1
    );
    if page > 0 {
        let _ = write!(
            out,
            "<a class=\"btn\" href=\"{base}page={}&amp;size={size}\">← previous</a>",
            page - 1
        );
    }
    if page + 1 < pages {
        let _ = write!(
            out,
            "<a class=\"btn\" href=\"{base}page={}&amp;size={size}\">next →</a>",
            page + 1
        );
    }
    out.push_str("</nav>");
    out
}

fn payload_cell(len: Option<usize>, preview: Option<&[u8]>) -> String {
    let (Some(len), Some(bytes)) = (len, preview) else {
        return "<td class=\"muted\">none</td>".into();
    };
    let text = String::from_utf8_lossy(bytes);
    let shown: String = text.chars().take(PREVIEW_CHARS).collect();
    let more = if shown.len() < len { "…" } else { "" };
    format!(
        "<td class=\"payload\"><code>{}{more}</code> <span class=\"muted\">{len} B</span></td>",
        esc(&shown)
    )
}

/// A sharded queue's shards: the layout and each live shard's counts.
pub type Shards<'a> = (&'a dlm::queue::ShardLayout, &'a [QueueStats]);

/// The shard table of a queue of more than one shard: shard, tag, slot,
/// master (on a Cluster), waiting, in flight, dead, paused (issue 35).
fn shard_table(out: &mut String, (layout, stats): Shards<'_>) {
    let draining = match layout.draining {
        Some(d) => format!(
            " <span class=\"chip paused\" title=\"a lowering drains shards {}..{}: no new task goes there\">draining</span>",
            layout.k,
            d.saturating_sub(1)
        ),
        None => String::new(),
    };
    let _ = write!(
        out,
        "<h2 id=\"shards\">Shards <span class=\"muted\">{} · layout {}</span>{draining}</h2>\
<table class=\"grid shards\" data-kind=\"shards\"><thead><tr><th class=\"num\">Shard</th><th>Tag</th>\
<th class=\"num\">Slot</th><th>Master</th><th class=\"num\">Waiting</th><th class=\"num\">Delayed</th><th class=\"num\">In flight</th>\
<th class=\"num\">Dead</th><th>Paused</th></tr></thead><tbody>",
        layout.k, layout.version
    );
    for (info, s) in layout.shards.iter().zip(stats) {
        let state = if info.index >= layout.k {
            " <span class=\"muted\">draining</span>"
        } else {
            ""
        };
        let _ = write!(
            out,
            "<tr data-shard=\"{i}\"><td class=\"num\">{i}{state}</td><td class=\"mono\">{tag}</td><td class=\"num\">{slot}</td><td class=\"mono\">{master}</td>\
<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            s.waiting,
            s.delayed,
            s.inflight,
            s.dead,
            if s.paused {
                "<span class=\"chip paused\">paused</span>"
            } else {
                "<span class=\"muted\">no</span>"
            },
            i = info.index,
            tag = esc(&info.tag),
            slot = info.slot,
            master = esc(info.master.as_deref().unwrap_or("–")),
        );
    }
    out.push_str("</tbody></table>");
}

/// A queue's tasks in one state, one page (and its shards, when more than one).
pub fn queue(
    name: &str,
    stats: &QueueStats,
    shards: Option<Shards<'_>>,
    state: TaskState,
    list: &TaskPage,
    page: usize,
    size: usize,
) -> String {
    let qname = esc(name);
    let base = format!("/queues/{}", seg(name));
    let paused = if stats.paused {
        " <span class=\"chip paused\" id=\"paused\" title=\"workers claim nothing: dlm queue resume\">paused</span>"
    } else {
        ""
    };
    let mut out =
        format!("<h1><span class=\"muted\">queue</span> {qname}{paused}</h1><nav class=\"tabs\">");
    for (s, n) in [
        (TaskState::Blocked, stats.blocked),
        (TaskState::Waiting, stats.waiting),
        (TaskState::Delayed, stats.delayed),
        (TaskState::InFlight, stats.inflight),
        (TaskState::Dead, stats.dead),
    ] {
        let active = if s == state { " active" } else { "" };
        let _ = write!(
            out,
            "<a class=\"tab{active}\" href=\"{base}?state={st}\"><span class=\"badge {st}\">{label}</span> <b>{n}</b></a>",
            st = s.as_str(),
            label = s.as_str().replace('_', " "),
        );
    }
    let _ = write!(
        out,
        "<a class=\"tab\" href=\"{base}/dead\">dead letters ›</a>\
<a class=\"tab\" href=\"{base}/workers\">workers ›</a></nav>"
    );
    if let Some(shards) = shards.filter(|(l, _)| l.shards.len() > 1) {
        shard_table(&mut out, shards);
        out.push_str("<h2>Tasks</h2>");
    }
    let when = match state {
        TaskState::Waiting | TaskState::Delayed | TaskState::Blocked => "Due",
        TaskState::InFlight => "Lease",
        TaskState::Dead => "Died",
        TaskState::Completed => "Forgotten at",
    };
    let _ = write!(
        out,
        "<table class=\"grid tasks\"><thead><tr><th>ID</th><th class=\"num\">Attempts</th><th>{when}</th>\
<th>Lease holder (fence)</th><th>Payload</th><th>Last error</th></tr></thead><tbody>"
    );
    if list.tasks.is_empty() {
        out.push_str("<tr><td colspan=\"6\" class=\"empty\">no task in this state</td></tr>");
    }
    for t in &list.tasks {
        let lease = match (state, t.fence) {
            (TaskState::InFlight, Some(f)) => format!(
                "<span class=\"mono\">#{}</span> <span class=\"muted\">{} left</span>",
                f.get(),
                human(Duration::from_millis(t.score.saturating_sub(list.now)))
            ),
            _ => "<span class=\"muted\">–</span>".into(),
        };
        let _ = write!(
            out,
            "<tr data-task=\"{id}\"><td class=\"mono\"><a class=\"task-link\" href=\"{href}\">{id}</a></td><td class=\"num\">{}</td><td title=\"{}\">{}</td><td>{lease}</td>{}<td class=\"error\">{}</td></tr>",
            t.attempts,
            t.score,
            relative(t.score, list.now),
            payload_cell(t.payload_len, t.payload_preview.as_deref()),
            esc(t.error.as_deref().unwrap_or("")),
            id = esc(&t.id),
            href = task_href(name, &t.id),
        );
    }
    out.push_str("</tbody></table>");
    out.push_str(&pager(
        &format!("{base}?state={}&amp;", state.as_str()),
        page,
        size,
        list.total,
    ));
    out
}

/// How many in-flight task ids a worker's row shows.
const IDS_SHOWN: usize = 20;

/// A worker's busy slots as a small bar (SVG: the page's CSP allows no
/// inline style).
fn meter(busy: usize, concurrency: usize) -> String {
    const W: usize = 64;
    let filled = if concurrency == 0 {
        0
    } else {
        (busy.min(concurrency) * W).div_ceil(concurrency)
    };
    format!(
        "<svg class=\"meter\" viewBox=\"0 0 {W} 8\" width=\"{W}\" height=\"8\" aria-hidden=\"true\">\
<rect class=\"track\" width=\"{W}\" height=\"8\" rx=\"4\"/><rect class=\"fill\" width=\"{filled}\" height=\"8\" rx=\"4\"/></svg>"
    )
}

/// The live workers (Sidekiq's Busy page): of one queue (`scope`), or of
/// every queue watched; `workers` as (queue, worker), `errors` the queues
/// that could not be read.
pub fn workers(scope: Option<&str>, workers: &[(String, WorkerInfo)], errors: &[String]) -> String {
    let mut out = match scope {
        Some(q) => format!(
            "<h1><span class=\"muted\">workers of</span> <a href=\"/queues/{}\">{}</a></h1>",
            seg(q),
            esc(q)
        ),
        None => "<h1>Workers</h1>".to_string(),
    };
    for e in errors {
        out.push_str(&error_box("Redis:", e));
    }
    let busy: usize = workers.iter().map(|(_, w)| w.busy).sum();
    let slots: usize = workers.iter().map(|(_, w)| w.concurrency).sum();
    let processed: u64 = workers.iter().map(|(_, w)| w.processed).sum();
    let failed: u64 = workers.iter().map(|(_, w)| w.failed).sum();
    let hosts = workers
        .iter()
        .map(|(_, w)| w.host.as_str())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let _ = write!(
        out,
        "<section class=\"cards\">\
<div class=\"card workers\"><span class=\"label\">Workers</span><span class=\"value\" id=\"total-workers\">{}</span></div>\
<div class=\"card\"><span class=\"label\">Hosts</span><span class=\"value\" id=\"total-hosts\">{hosts}</span></div>\
<div class=\"card in_flight\"><span class=\"label\">Busy slots</span><span class=\"value\" id=\"total-busy\">{busy}<span class=\"of\"> / {slots}</span></span></div>\
<div class=\"card ok\"><span class=\"label\">Processed</span><span class=\"value\" id=\"total-processed\">{processed}</span></div>\
<div class=\"card dead\"><span class=\"label\">Failed</span><span class=\"value\" id=\"total-failed\">{failed}</span></div>\
</section>",
        workers.len()
    );
    out.push_str(
        "<table class=\"grid workers\"><thead><tr><th>Worker</th><th>Queue</th><th>Host</th><th class=\"num\">PID</th>\
<th>Started</th><th>Busy</th><th class=\"num\">Processed</th><th class=\"num\">Failed</th>\
<th class=\"num\">Last beat</th><th>In flight</th></tr></thead><tbody>",
    );
    if workers.is_empty() {
        out.push_str(
            "<tr><td colspan=\"10\" class=\"empty\">no live worker: a running <code>dlm queue work</code> \
(or library Worker) shows up here within one heartbeat</td></tr>",
        );
    }
    for (queue, w) in workers {
        let now = w.last_beat_ms.saturating_add(crate::output::ms(w.beat_age));
        let q = esc(queue);
        let href = format!("/queues/{}", seg(queue));
        let stopping = if w.stopping {
            " <span class=\"chip paused\" title=\"shutting down: claims nothing more\">stopping</span>"
        } else {
            ""
        };
        let mut flying = String::new();
        for id in w.in_flight.iter().take(IDS_SHOWN) {
            let _ = write!(
                flying,
                "<a class=\"task mono\" href=\"{}\">{}</a>",
                task_href(queue, id),
                esc(id)
            );
        }
        let shown = w.in_flight.len().min(IDS_SHOWN);
        if w.busy > shown {
            let _ = write!(
                flying,
                "<span class=\"muted more\">+{} more</span>",
                w.busy - shown
            );
        }
        if w.busy == 0 {
            flying.push_str("<span class=\"muted\">idle</span>");
        }
        let beat_class = if w.beat_age > w.ttl / 2 {
            "num beat bad"
        } else {
            "num beat"
        };
        let _ = write!(
            out,
            "<tr data-worker=\"{id}\" data-queue=\"{q}\"><td class=\"mono\">{id}{stopping}</td>\
<td><a href=\"{href}\">{q}</a></td><td>{host}</td><td class=\"num mono\">{pid}</td>\
<td title=\"{started}\">{since}</td><td class=\"busy\">{meter} <span class=\"slots\">{busy}/{conc}</span></td>\
<td class=\"num processed\">{processed}</td><td class=\"num failed\">{failed}</td>\
<td class=\"{beat_class}\" title=\"{last}\">{age} ago</td><td class=\"flying\">{flying}</td></tr>",
            id = esc(&w.id),
            host = esc(&w.host),
            pid = w.pid,
            started = w.started_ms,
            since = relative(w.started_ms, now),
            meter = meter(w.busy, w.concurrency),
            busy = w.busy,
            conc = w.concurrency,
            processed = w.processed,
            failed = w.failed,
            last = w.last_beat_ms,
            age = human(w.beat_age),
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// A hidden form that posts one action (the confirmation page asks first).
fn action(url: &str, csrf: &str, fields: &[(&str, &str)], label: &str, class: &str) -> String {
    let mut out = format!(
        "<form method=\"post\" action=\"{url}\" class=\"inline\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        esc(csrf)
    );
    for (k, v) in fields {
        let _ = write!(
            out,
            "<input type=\"hidden\" name=\"{k}\" value=\"{}\">",
            esc(v)
        );
    }
    let _ = write!(
        out,
        "<button type=\"submit\" class=\"btn {class}\">{label}</button></form>"
    );
    out
}

const READ_ONLY_NOTE: &str = "<p class=\"note\">Read-only: this server listens beyond loopback without \
<code>--admin-token</code>, so it takes no action.</p>";

/// A queue's dead letters with retry and purge actions.
pub fn dead(
    name: &str,
    list: &TaskPage,
    page: usize,
    size: usize,
    access: &Access,
    csrf: &str,
    msg: Option<&str>,
) -> String {
    let qname = esc(name);
    let base = format!("/queues/{}", seg(name));
    let mut out = format!(
        "<h1><span class=\"muted\">dead letters of</span> <a href=\"{base}\">{qname}</a> <span class=\"badge dead\" id=\"dead-count\">{}</span></h1>",
        list.total
    );
    out.push_str(&flash(msg));
    if access.can_act() {
        if list.total > 0 {
            out.push_str("<div class=\"actions\">");
            out.push_str(&action(
                &format!("{base}/dead/retry"),
                csrf,
                &[("all", "1")],
                "Retry all",
                "primary",
            ));
            out.push_str(&action(
                &format!("{base}/dead/purge"),
                csrf,
                &[],
                "Purge all",
                "danger",
            ));
            out.push_str("</div>");
        }
    } else {
        out.push_str(READ_ONLY_NOTE);
    }
    out.push_str(
        "<table class=\"grid tasks\"><thead><tr><th>ID</th><th class=\"num\">Attempts</th><th>Died</th><th>Last error</th>\
<th>Payload</th><th></th></tr></thead><tbody>",
    );
    if list.tasks.is_empty() {
        out.push_str("<tr><td colspan=\"6\" class=\"empty\">no dead letters</td></tr>");
    }
    for t in &list.tasks {
        let retry = if access.can_act() {
            action(
                &format!("{base}/dead/retry"),
                csrf,
                &[("id", &t.id)],
                "Retry",
                "small",
            )
        } else {
            String::new()
        };
        let _ = write!(
            out,
            "<tr data-task=\"{id}\"><td class=\"mono\"><a class=\"task-link\" href=\"{href}\">{id}</a></td><td class=\"num\">{}</td><td title=\"{}\">{}</td><td class=\"error\">{}</td>{}<td>{retry}</td></tr>",
            t.attempts,
            t.score,
            relative(t.score, list.now),
            esc(t.error.as_deref().unwrap_or("")),
            payload_cell(t.payload_len, t.payload_preview.as_deref()),
            id = esc(&t.id),
            href = task_href(name, &t.id),
        );
    }
    out.push_str("</tbody></table>");
    out.push_str(&pager(&format!("{base}/dead?"), page, size, list.total));
    out
}

/// The held locks matching the pattern, with the unsafe release by force.
pub fn locks(
    pattern: &str,
    locks: &[HeldLock],
    cap: usize,
    access: &Access,
    csrf: &str,
    msg: Option<&str>,
) -> String {
    let mut out = format!(
        "<h1>Locks <span class=\"muted\">matching</span> <code>{}</code> <span class=\"badge locks\" id=\"lock-count\">{}</span></h1>",
        esc(pattern),
        locks.len()
    );
    out.push_str(&flash(msg));
    if !access.can_act() {
        out.push_str(READ_ONLY_NOTE);
    }
    if locks.len() >= cap {
        let _ = write!(
            out,
            "<p class=\"note\">Showing the first {cap} locks only.</p>"
        );
    }
    out.push_str(
        "<table class=\"grid\"><thead><tr><th>Name</th><th>Key</th><th class=\"num\">TTL left</th><th class=\"num\">Fence</th>\
<th></th></tr></thead><tbody>",
    );
    if locks.is_empty() {
        out.push_str("<tr><td colspan=\"5\" class=\"empty\">no lock held</td></tr>");
    }
    for l in locks {
        let ttl = l.ttl.map_or_else(
            || "<td class=\"num\">no expiry</td>".to_string(),
            |t| {
                format!(
                    "<td class=\"num ttl\" data-ttl-ms=\"{}\">{}</td>",
                    t.as_millis(),
                    human(t)
                )
            },
        );
        let fence = l
            .fence
            .map_or_else(|| "–".to_string(), |f| f.get().to_string());
        let release = if access.can_act() {
            action(
                "/locks/release",
                csrf,
                &[("name", &l.name)],
                "⚠ Force release (unsafe)",
                "danger small",
            )
        } else {
            String::new()
        };
        let _ = write!(
            out,
            "<tr data-lock=\"{name}\"><td class=\"mono\">{name}</td><td class=\"mono muted\">{}</td>{ttl}<td class=\"num mono\">{fence}</td><td>{release}</td></tr>",
            esc(&l.key),
            name = esc(&l.name),
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// A TTL cell: counts down on the page (`data-ttl-ms`), or "no expiry".
fn ttl_cell(ttl: Option<std::time::Duration>, none: &str) -> String {
    ttl.map_or_else(
        || format!("<td class=\"num muted\">{none}</td>"),
        |t| {
            format!(
                "<td class=\"num ttl\" data-ttl-ms=\"{}\">{}</td>",
                t.as_millis(),
                human(t)
            )
        },
    )
}

/// One table of the other kinds of lock: a heading, its columns, its rows
/// (already HTML), and what to say when it has none.
fn kind_table(out: &mut String, id: &str, title: &str, head: &[&str], rows: &[String]) {
    let _ = write!(
        out,
        "<h2 id=\"{id}\">{title} <span class=\"badge locks\">{}</span></h2><table class=\"grid\" data-kind=\"{id}\"><thead><tr>",
        rows.len()
    );
    for (i, h) in head.iter().enumerate() {
        let class = if i == 0 { "" } else { " class=\"num\"" };
        let _ = write!(out, "<th{class}>{h}</th>");
    }
    out.push_str("</tr></thead><tbody>");
    if rows.is_empty() {
        let _ = write!(
            out,
            "<tr><td colspan=\"{}\" class=\"empty\">none</td></tr>",
            head.len()
        );
    }
    for r in rows {
        out.push_str(r);
    }
    out.push_str("</tbody></table>");
}

/// The fair locks, read-write locks, semaphores and elections matching the
/// pattern, each with its holders and waiters.
pub fn other_locks(others: &crate::serve::state::OtherLocks) -> String {
    let mut out = String::new();
    let fence = |f: Option<dlm::Fence>| f.map_or_else(|| "–".to_string(), |f| f.get().to_string());
    let fair: Vec<String> = others
        .fair
        .iter()
        .map(|(name, s)| {
            format!(
                "<tr data-lock=\"{n}\"><td class=\"mono\">{n}</td><td class=\"num\">{}</td>{}<td class=\"num waiting\">{}</td><td class=\"num mono\">{}</td></tr>",
                if s.held { "held" } else { "free" },
                ttl_cell(s.ttl, if s.held { "no expiry" } else { "–" }),
                s.waiting,
                fence(s.fence),
                n = esc(name),
            )
        })
        .collect();
    kind_table(
        &mut out,
        "fair",
        "Fair locks",
        &["Name", "Holder", "TTL left", "Waiting in line", "Fence"],
        &fair,
    );
    let rw: Vec<String> = others
        .rw
        .iter()
        .map(|(name, s)| {
            format!(
                "<tr data-lock=\"{n}\"><td class=\"mono\">{n}</td><td class=\"num\">{}</td>{}<td class=\"num readers\">{}</td><td class=\"num waiting\">{}</td><td class=\"num mono\">{}</td></tr>",
                if s.writer { "writer" } else { "–" },
                ttl_cell(s.writer_ttl, "–"),
                s.readers,
                s.waiting_writers,
                fence(s.fence),
                n = esc(name),
            )
        })
        .collect();
    kind_table(
        &mut out,
        "rw",
        "Read-write locks",
        &[
            "Name",
            "Writer",
            "Writer TTL",
            "Readers",
            "Writers waiting",
            "Fence",
        ],
        &rw,
    );
    let sem: Vec<String> = others
        .semaphores
        .iter()
        .map(|(name, s)| {
            format!(
                "<tr data-lock=\"{n}\"><td class=\"mono\">{n}</td><td class=\"num\">{}</td><td class=\"num in-use\">{}</td><td class=\"num holders\">{}</td><td class=\"num\">{}</td><td class=\"num mono\">{}</td></tr>",
                s.permits.map_or_else(|| "–".to_string(), |p| p.to_string()),
                s.in_use,
                s.holders,
                s.available,
                fence(s.fence),
                n = esc(name),
            )
        })
        .collect();
    kind_table(
        &mut out,
        "semaphores",
        "Semaphores",
        &["Name", "Permits", "In use", "Holders", "Available", "Fence"],
        &sem,
    );
    let elections: Vec<String> = others
        .elections
        .iter()
        .map(|(name, leader, last)| {
            let (who, term, ttl) = match leader {
                Some(l) => (
                    format!("<td class=\"num mono leader\">{}</td>", esc(&l.id)),
                    l.term,
                    ttl_cell(l.ttl, "no expiry"),
                ),
                None => (
                    "<td class=\"num muted leader\">nobody leads</td>".to_string(),
                    *last,
                    "<td class=\"num muted\">–</td>".to_string(),
                ),
            };
            format!(
                "<tr data-lock=\"{n}\"><td class=\"mono\">{n}</td>{who}<td class=\"num mono term\">{term}</td>{ttl}</tr>",
                n = esc(name),
            )
        })
        .collect();
    kind_table(
        &mut out,
        "elections",
        "Elections",
        &["Name", "Leader", "Term", "Lease left"],
        &elections,
    );
    out
}

/// What a confirmation page asks and where it posts.
pub struct Confirm<'a> {
    /// The question, as plain text.
    pub question: String,
    /// What happens, as plain text.
    pub detail: &'a str,
    /// Where the form posts.
    pub url: String,
    /// The form's fields besides the tokens.
    pub fields: Vec<(&'static str, String)>,
    /// Where "cancel" goes.
    pub back: String,
    /// Whether the action is unsafe (shown in red).
    pub unsafe_action: bool,
}

/// The confirmation step of an action: the same form again, with
/// `confirm=yes` (and the admin token field when one is required).
pub fn confirm(c: &Confirm<'_>, access: &Access, csrf: &str) -> String {
    let class = if c.unsafe_action {
        "confirm unsafe"
    } else {
        "confirm"
    };
    let mut out = format!(
        "<section class=\"{class}\"><h1>{}</h1><p>{}</p><form method=\"post\" action=\"{}\">\
<input type=\"hidden\" name=\"csrf\" value=\"{}\"><input type=\"hidden\" name=\"confirm\" value=\"yes\">",
        esc(&c.question),
        esc(c.detail),
        esc(&c.url),
        esc(csrf)
    );
    for (k, v) in &c.fields {
        let _ = write!(
            out,
            "<input type=\"hidden\" name=\"{k}\" value=\"{}\">",
            esc(v)
        );
    }
    if matches!(access, Access::Admin(_)) {
        out.push_str(
            "<label>Admin token <input type=\"password\" name=\"admin_token\" autocomplete=\"off\" required></label>",
        );
    }
    let button = if c.unsafe_action { "danger" } else { "primary" };
    let _ = write!(
        out,
        "<div class=\"actions\"><button type=\"submit\" id=\"confirm\" class=\"btn {button}\">Confirm</button>\
<a class=\"btn\" href=\"{}\">Cancel</a></div></form></section>",
        esc(&c.back)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_markup_and_attributes() {
        assert_eq!(
            esc("<script>alert(1)</script>\"'&"),
            "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;&amp;"
        );
        assert_eq!(seg("a b/c{d}"), "a%20b%2Fc%7Bd%7D");
        assert_eq!(human(Duration::from_millis(65_000)), "1m 5s");
        assert_eq!(relative(1000, 4000), "3s ago");
        assert!(sparkline(&[1, 2, 3]).starts_with("<svg"));
    }
}

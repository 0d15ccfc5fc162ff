//! The task page: one task's facts, its progress, its dependencies and
//! dependents drawn as an inline SVG graph (no script, no library: the
//! page's CSP allows neither inline styles nor other origins), and its
//! events. Every id, message and error is escaped ([`esc`]) and every id in
//! a link percent-encoded ([`seg`]).

use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use dlm::queue::TaskState;

use super::pages::{esc, human, relative, seg, task_href};
use super::state::{MAX_NEIGHBOURS, MAX_TASK_EVENTS, Neighbour, TaskView};

/// The graph's geometry (SVG user units, drawn 1:1).
const NODE_W: u32 = 220;
const NODE_H: u32 = 44;
const ROW_GAP: u32 = 14;
const COL_GAP: u32 = 110;
const PAD: u32 = 10;
/// How many characters of an id a node shows (the rest is in its tooltip).
const LABEL_CHARS: usize = 26;

/// A state's CSS class and label (`unknown` for a task the queue forgot).
fn state_names(state: Option<TaskState>) -> (&'static str, String) {
    match state {
        Some(s) => (s.as_str(), s.as_str().replace('_', " ")),
        None => ("unknown", "unknown".to_string()),
    }
}

/// `id` cut to [`LABEL_CHARS`] characters for a node's label.
fn label(id: &str) -> String {
    if id.chars().count() <= LABEL_CHARS {
        return id.to_string();
    }
    let mut short: String = id.chars().take(LABEL_CHARS - 1).collect();
    short.push('…');
    short
}

/// One node: a rounded box coloured by its state, the id and the state;
/// a link to the task's page unless it is the page's own task.
fn node(out: &mut String, queue: &str, n: &Neighbour, x: u32, y: u32, role: &str, current: bool) {
    let (class, state) = state_names(n.state);
    let id = esc(&n.id);
    let inner = format!(
        "<title>{id} ({state})</title>\
<rect x=\"{x}\" y=\"{y}\" width=\"{NODE_W}\" height=\"{NODE_H}\" rx=\"9\"/>\
<text class=\"id\" x=\"{tx}\" y=\"{ty}\">{label}</text>\
<text class=\"state\" x=\"{tx}\" y=\"{sy}\">{state}</text>",
        tx = x + 12,
        ty = y + 19,
        sy = y + 35,
        label = esc(&label(&n.id)),
    );
    let current_class = if current { " current" } else { "" };
    if current {
        let _ = write!(
            out,
            "<g class=\"node {class}{current_class}\" data-role=\"{role}\" data-id=\"{id}\" data-state=\"{class}\">{inner}</g>"
        );
    } else {
        let _ = write!(
            out,
            "<a href=\"{href}\" class=\"node {class}\" data-role=\"{role}\" data-id=\"{id}\" data-state=\"{class}\">{inner}</a>",
            href = esc(&task_href(queue, &n.id)),
        );
    }
}

/// A curved arrow from (x1, y1) to (x2, y2).
fn edge(out: &mut String, from: &str, to: &str, (x1, y1): (u32, u32), (x2, y2): (u32, u32)) {
    let bend = COL_GAP / 2;
    let _ = write!(
        out,
        "<path class=\"edge\" data-from=\"{}\" data-to=\"{}\" d=\"M{x1},{y1} C{},{y1} {},{y2} {x2},{y2}\" marker-end=\"url(#arrow)\"/>",
        esc(from),
        esc(to),
        x1 + bend,
        x2.saturating_sub(bend),
    );
}

/// The y of row `i` of a column of `n` rows in a graph `rows` rows high
/// (columns are centred on each other).
fn row_y(i: usize, n: usize, rows: usize) -> u32 {
    let step = NODE_H + ROW_GAP;
    let offset = (rows - n) as u32 * step / 2;
    PAD + offset + i as u32 * step
}

/// The dependency graph: dependencies on the left, the task in the middle,
/// dependents on the right, an arrow from each dependency to the task and
/// from the task to each dependent.
pub fn graph(queue: &str, view: &TaskView) -> String {
    let t = &view.task;
    let (deps, dependents) = (&view.deps, &view.dependents);
    let more_deps = t.deps.len().saturating_sub(deps.len());
    let more_dependents = t.dependents.len().saturating_sub(dependents.len());
    // A column with more than it shows gets a row for "+N more".
    let left = deps.len() + usize::from(more_deps > 0);
    let right = dependents.len() + usize::from(more_dependents > 0);
    let rows = left.max(right).max(1);
    let step = NODE_H + ROW_GAP;
    let width = PAD * 2 + NODE_W * 3 + COL_GAP * 2;
    let height = PAD * 2 + rows as u32 * step - ROW_GAP;
    let (lx, mx, rx) = (PAD, PAD + NODE_W + COL_GAP, PAD + 2 * (NODE_W + COL_GAP));
    let my = row_y(0, 1, rows);
    let mut out = format!(
        "<svg class=\"graph\" id=\"graph\" viewBox=\"0 0 {width} {height}\" width=\"{width}\" height=\"{height}\" \
role=\"img\" aria-label=\"dependencies of task {}\"><defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" \
markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\"/></marker></defs>",
        esc(&t.id)
    );
    // Edges first, so the nodes are drawn over their ends.
    let mid_left = (mx, my + NODE_H / 2);
    let mid_right = (mx + NODE_W, my + NODE_H / 2);
    for (i, d) in deps.iter().enumerate() {
        let y = row_y(i, left, rows) + NODE_H / 2;
        edge(&mut out, &d.id, &t.id, (lx + NODE_W, y), mid_left);
    }
    for (i, d) in dependents.iter().enumerate() {
        let y = row_y(i, right, rows) + NODE_H / 2;
        edge(&mut out, &t.id, &d.id, mid_right, (rx - 1, y));
    }
    for (i, d) in deps.iter().enumerate() {
        node(&mut out, queue, d, lx, row_y(i, left, rows), "dep", false);
    }
    let me = Neighbour {
        id: t.id.clone(),
        state: Some(t.state),
    };
    node(&mut out, queue, &me, mx, my, "task", true);
    for (i, d) in dependents.iter().enumerate() {
        node(
            &mut out,
            queue,
            d,
            rx,
            row_y(i, right, rows),
            "dependent",
            false,
        );
    }
    for (more, x, n) in [(more_deps, lx, left), (more_dependents, rx, right)] {
        if more > 0 {
            let _ = write!(
                out,
                "<text class=\"more\" x=\"{}\" y=\"{}\">+{more} more (the first {MAX_NEIGHBOURS} are drawn)</text>",
                x + 12,
                row_y(n - 1, n, rows) + NODE_H / 2 + 4,
            );
        }
    }
    out.push_str("</svg>");
    out
}

/// A percentage as a bar (SVG: the page's CSP allows no inline style).
fn progress_bar(pct: u8) -> String {
    const W: u32 = 320;
    let filled = u32::from(pct.min(100)) * W / 100;
    format!(
        "<svg class=\"progress-bar\" viewBox=\"0 0 {W} 12\" width=\"{W}\" height=\"12\" aria-hidden=\"true\">\
<rect class=\"track\" width=\"{W}\" height=\"12\" rx=\"6\"/><rect class=\"fill\" width=\"{filled}\" height=\"12\" rx=\"6\"/></svg>"
    )
}

/// A time in ms since the epoch as UTC with milliseconds.
fn utc(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

fn fact(out: &mut String, name: &str, value: &str) {
    let _ = write!(out, "<tr><th>{name}</th><td>{value}</td></tr>");
}

const MUTED_NONE: &str = "<span class=\"muted\">none</span>";

/// The facts table.
fn facts(view: &TaskView) -> String {
    let t = &view.task;
    let mut out = String::from("<table class=\"grid facts\" id=\"facts\"><tbody>");
    let when = match t.state {
        TaskState::Waiting | TaskState::Delayed => "Due",
        TaskState::Blocked => "Due once released",
        TaskState::InFlight => "Lease ends",
        TaskState::Dead => "Died",
        TaskState::Completed => "Forgotten",
    };
    if let Some(score) = t.score {
        fact(
            &mut out,
            when,
            &format!(
                "{} <span class=\"muted\">{}</span>",
                relative(score, t.now),
                utc(score)
            ),
        );
    }
    fact(&mut out, "Attempts", &t.attempts.to_string());
    // A completed task's run, kept with its result (issue 31).
    if let Some(at) = t.started_at {
        fact(
            &mut out,
            "Started",
            &format!(
                "{} <span class=\"muted\">{}</span>",
                relative(at, t.now),
                utc(at)
            ),
        );
    }
    if let Some(at) = t.finished_at {
        let took = t
            .started_at
            .map(|s| {
                format!(
                    " <span class=\"muted\">(ran {})</span>",
                    human(Duration::from_millis(at.saturating_sub(s)))
                )
            })
            .unwrap_or_default();
        fact(
            &mut out,
            "Finished",
            &format!(
                "{} <span class=\"muted\">{}</span>{took}",
                relative(at, t.now),
                utc(at)
            ),
        );
    }
    if let Some(w) = &t.worker {
        fact(
            &mut out,
            "Worker",
            &format!("<span class=\"mono worker\">{}</span>", esc(w)),
        );
    }
    if t.state == TaskState::Blocked {
        fact(
            &mut out,
            "Waiting for",
            &format!("{} of {} dependencies", t.pending_deps, t.deps.len()),
        );
    }
    if !t.deps.is_empty() {
        fact(
            &mut out,
            "If a dependency dies",
            if t.ignores_dependency_failure {
                "run anyway (ignore)"
            } else {
                "die too (fail)"
            },
        );
    }
    fact(&mut out, "Priority", &t.priority.to_string());
    fact(
        &mut out,
        "Group",
        &t.group.as_deref().map_or_else(
            || MUTED_NONE.to_string(),
            |g| format!("<span class=\"mono\">{}</span>", esc(g)),
        ),
    );
    fact(
        &mut out,
        "Fence",
        &t.fence.map_or_else(
            || "<span class=\"muted\">– (not in flight)</span>".to_string(),
            |f| format!("<span class=\"mono\">#{}</span>", f.get()),
        ),
    );
    fact(
        &mut out,
        "Time limit",
        &t.timeout.map_or_else(
            || "<span class=\"muted\">none (the worker's, if any)</span>".to_string(),
            human,
        ),
    );
    fact(
        &mut out,
        "Payload",
        &t.payload_len.map_or_else(
            || MUTED_NONE.to_string(),
            |n| format!("<span class=\"payload-size\">{n} B</span>"),
        ),
    );
    fact(
        &mut out,
        "Result",
        &t.result_bytes.map_or_else(
            || {
                let why = if t.state == TaskState::Completed {
                    "none kept (it returned nothing, or the result expired)"
                } else {
                    "none yet (not completed)"
                };
                format!("<span class=\"muted result-size\">{why}</span>")
            },
            |n| format!("<span class=\"result-size\">{n} B</span> <span class=\"muted\">(<code>dlm queue result</code>)</span>"),
        ),
    );
    fact(
        &mut out,
        "Last error",
        &t.error.as_deref().map_or_else(
            || MUTED_NONE.to_string(),
            |e| format!("<span class=\"error\">{}</span>", esc(e)),
        ),
    );
    out.push_str("</tbody></table>");
    out
}

/// The events table.
fn events(view: &TaskView) -> String {
    let mut out = String::from("<h2>Events</h2>");
    if !view.events_on {
        out.push_str(
            "<p class=\"note\" id=\"events-off\">The queue's event log is off: turn it on with \
<code>dlm queue config QUEUE --events 10000</code>.</p>",
        );
        return out;
    }
    if view.events_partial {
        let _ = write!(
            out,
            "<p class=\"note\">The log is long: these are from its oldest entries only.</p>"
        );
    }
    out.push_str(
        "<table class=\"grid events\" id=\"events\"><thead><tr><th>Time</th><th>Event</th><th>Detail</th></tr></thead><tbody>",
    );
    if view.events.is_empty() {
        out.push_str(
            "<tr><td colspan=\"3\" class=\"empty\">no event of this task in the log</td></tr>",
        );
    }
    for e in &view.events {
        let mut detail = String::new();
        if let Some(p) = e.progress {
            let _ = write!(detail, "{p}%");
        }
        if let Some(m) = &e.message {
            let _ = write!(detail, " {}", esc(m));
        }
        if let Some(err) = &e.error {
            let _ = write!(detail, "<span class=\"error\">{}</span>", esc(err));
        }
        let kind = e.kind.as_str();
        let _ = write!(
            out,
            "<tr data-event=\"{kind}\"><td class=\"mono\" title=\"{cursor}\">{time} <span class=\"muted\">{ago}</span></td>\
<td><span class=\"event {kind}\">{kind}</span></td><td class=\"detail\">{detail}</td></tr>",
            cursor = esc(&e.cursor),
            time = utc(e.at_ms),
            ago = relative(e.at_ms, view.task.now),
        );
    }
    out.push_str("</tbody></table>");
    if view.events.len() >= MAX_TASK_EVENTS {
        let _ = write!(
            out,
            "<p class=\"muted\">The newest {MAX_TASK_EVENTS} events are shown.</p>"
        );
    }
    out
}

/// The task page.
pub fn task(queue: &str, view: &TaskView) -> String {
    let t = &view.task;
    let (class, state) = state_names(Some(t.state));
    let mut out = format!(
        "<h1><span class=\"muted\">task</span> <span class=\"mono task-id\">{id}</span> \
<span class=\"badge {class}\" id=\"task-state\">{state}</span> \
<span class=\"muted\">of queue</span> <a href=\"/queues/{q}?state={class}\">{qname}</a></h1>",
        id = esc(&t.id),
        q = seg(queue),
        qname = esc(queue),
    );
    if let Some(p) = t.progress {
        let _ = write!(
            out,
            "<section class=\"progress\" id=\"progress\"><span class=\"pct\">{p}%</span> {} <span class=\"message\">{}</span></section>",
            progress_bar(p),
            esc(t.message.as_deref().unwrap_or("")),
        );
    }
    out.push_str("<section class=\"deps\"><h2>Dependencies</h2>");
    if t.deps.is_empty() && t.dependents.is_empty() {
        let why = if t.state == TaskState::Dead {
            "no dependencies known: a dead task does not keep its links"
        } else if t.state == TaskState::Completed && t.finished_at.is_none() {
            "no dependencies known: this completion is remembered without a summary \
(a task that left no result and had no part in dependencies)"
        } else if t.state == TaskState::Completed {
            "no dependencies: it waited for no task and no task waited for it"
        } else {
            "no dependencies: it waits for no task and no task waits for it"
        };
        let _ = write!(out, "<p class=\"empty\" id=\"no-deps\">{why}</p>");
    } else {
        out.push_str("<div class=\"graph-box\">");
        out.push_str(&graph(queue, view));
        out.push_str("</div>");
    }
    out.push_str("</section><div class=\"task-grid\"><section><h2>Facts</h2>");
    out.push_str(&facts(view));
    out.push_str("</section><section>");
    out.push_str(&events(view));
    out.push_str("</section></div>");
    out
}

/// The page of a task the queue does not know.
pub fn unknown(queue: &str, id: &str) -> String {
    format!(
        "<h1><span class=\"muted\">task</span> <span class=\"mono\">{}</span> <span class=\"badge\">unknown</span></h1>\
<p class=\"empty\">Queue <a href=\"/queues/{}\">{}</a> has no such task: never enqueued, or finished and not remembered.</p>",
        esc(id),
        seg(queue),
        esc(queue)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_cut_and_columns_centred() {
        assert_eq!(label("short"), "short");
        let long = "x".repeat(40);
        let cut = label(&long);
        assert_eq!(cut.chars().count(), LABEL_CHARS);
        assert!(cut.ends_with('…'));
        // One node beside three sits level with the middle one.
        assert_eq!(row_y(0, 1, 3), row_y(1, 3, 3));
        assert_eq!(row_y(0, 3, 3), PAD);
        assert_eq!(utc(1_000), "1970-01-01T00:00:01.000Z");
        assert!(progress_bar(40).contains("width=\"128\""));
    }
}

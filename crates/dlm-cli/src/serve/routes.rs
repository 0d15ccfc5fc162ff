//! The HTTP routes: the pages, their form actions, the JSON API,
//! `/metrics`, `/healthz` and the embedded assets.
//!
//! Every mutating action is a POST that must carry the per-process CSRF
//! token (form field `csrf` or header `X-CSRF-Token`) and, when the server
//! has an admin token, that token (form field `admin_token` or header
//! `X-Admin-Token`); a read-only server refuses them all (403). An action
//! without `confirm=yes` answers with its confirmation page.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Form, Path, Query, State as Shared};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use dlm::queue::{MAX_PAGE, TaskState};
use serde::{Deserialize, Serialize};

use super::pages::{self, Confirm, Frame, Nav, seg};
use super::state::{Access, MAX_LOCKS, Neighbour, QueueRow, State, TaskView};
use super::task_page;
use crate::global::parse::{parse_name, parse_queue_name, parse_task_id};

type App = Shared<Arc<State>>;

/// The default page size of the task listings.
const DEFAULT_PAGE: usize = 50;
/// The payload bytes the pages and the API show per task.
const PREVIEW_BYTES: usize = 256;

const STYLE: &str = include_str!("assets/style.css");
const SCRIPT: &str = include_str!("assets/app.js");
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The router of `dlm serve`.
pub fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/", get(overview))
        .route("/queues/{name}", get(queue_page))
        .route("/queues/{name}/dead", get(dead_page))
        .route("/queues/{name}/dead/retry", post(retry))
        .route("/queues/{name}/dead/purge", post(purge))
        .route("/queues/{name}/workers", get(queue_workers_page))
        .route("/queues/{name}/tasks/{id}", get(task_page))
        .route("/workers", get(workers_page))
        .route("/locks", get(locks_page))
        .route("/locks/release", post(release))
        .route("/api/queues", get(api_queues))
        .route("/api/queues/{name}", get(api_queue))
        .route("/api/queues/{name}/workers", get(api_workers))
        .route("/api/queues/{name}/tasks/{id}", get(api_task))
        .route("/api/locks", get(api_locks))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route(
            "/assets/style.css",
            get(|| asset(STYLE, "text/css; charset=utf-8")),
        )
        .route(
            "/assets/app.js",
            get(|| asset(SCRIPT, "text/javascript; charset=utf-8")),
        )
        .layer(axum::middleware::map_response(secure_headers))
        .with_state(state)
}

async fn secure_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn asset(body: &'static str, kind: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

/// A full page, or only its live part when the page's script asks (`X-Partial`).
fn render(
    state: &State,
    headers: &HeaderMap,
    title: &str,
    nav: Nav,
    live: bool,
    body: String,
) -> Response {
    if headers.contains_key("x-partial") {
        return Html(body).into_response();
    }
    let frame = Frame {
        title,
        nav,
        redis_up: state.redis_up(),
        access: state.access(),
        refresh: live.then(|| state.refresh()),
    };
    Html(pages::page(&frame, &body)).into_response()
}

/// A request refused: its status and why.
#[derive(Debug)]
struct Refused(StatusCode, &'static str);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        (self.0, self.1).into_response()
    }
}

fn plain(status: StatusCode, message: impl Into<String>) -> Response {
    (status, message.into()).into_response()
}

fn unavailable(e: &dlm::Error) -> Response {
    plain(StatusCode::SERVICE_UNAVAILABLE, format!("Redis: {e}"))
}

fn bad_name(e: String) -> Response {
    plain(StatusCode::BAD_REQUEST, e)
}

async fn overview(Shared(state): App, headers: HeaderMap) -> Response {
    let rows = state.queue_rows().await;
    let locks = state.locks().await;
    let error = rows
        .iter()
        .find(|r| r.stats.is_none())
        .map(|r| format!("cannot read queue {}", r.name));
    let body = pages::overview(&rows, locks.as_ref().ok().map(Vec::len), error.as_deref());
    render(&state, &headers, "Overview", Nav::Overview, true, body)
}

/// `?state=&page=&size=&msg=` of the listings.
#[derive(Debug, Deserialize)]
struct Listing {
    state: Option<String>,
    page: Option<usize>,
    size: Option<usize>,
    msg: Option<String>,
}

impl Listing {
    fn size(&self) -> usize {
        self.size.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE)
    }

    fn page(&self) -> usize {
        self.page.unwrap_or(0).min(1_000_000)
    }

    fn task_state(&self, default: TaskState) -> Result<TaskState, Refused> {
        match &self.state {
            None => Ok(default),
            Some(s) => TaskState::parse(s).ok_or(Refused(
                StatusCode::BAD_REQUEST,
                "state must be blocked, waiting, delayed, in_flight, dead or completed",
            )),
        }
    }
}

async fn queue_page(
    Shared(state): App,
    Path(name): Path<String>,
    Query(q): Query<Listing>,
    headers: HeaderMap,
) -> Response {
    let name = match parse_queue_name(&name) {
        Ok(n) => n,
        Err(e) => return bad_name(e),
    };
    let task_state = match q.task_state(TaskState::Waiting) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    let queue = state.client().queue(name.as_str());
    let (size, page) = (q.size(), q.page());
    let read = async {
        let per_shard = queue.shard_stats().await?;
        let layout = if per_shard.len() > 1 {
            Some(queue.shards().await?)
        } else {
            None
        };
        let list = queue
            .tasks(task_state, page * size, size, PREVIEW_BYTES)
            .await?;
        Ok::<_, dlm::Error>((per_shard, layout, list))
    };
    match read.await {
        Ok((per_shard, layout, list)) => {
            let stats = crate::shard_view::total(&per_shard);
            let shards = layout.as_ref().map(|l| (l, per_shard.as_slice()));
            let body = pages::queue(&name, &stats, shards, task_state, &list, page, size);
            render(&state, &headers, &name, Nav::Queue, true, body)
        }
        Err(e) => unavailable(&e),
    }
}

async fn dead_page(
    Shared(state): App,
    Path(name): Path<String>,
    Query(q): Query<Listing>,
    headers: HeaderMap,
) -> Response {
    let name = match parse_queue_name(&name) {
        Ok(n) => n,
        Err(e) => return bad_name(e),
    };
    let (size, page) = (q.size(), q.page());
    let queue = state.client().queue(name.as_str());
    match queue
        .tasks(TaskState::Dead, page * size, size, PREVIEW_BYTES)
        .await
    {
        Ok(list) => {
            let body = pages::dead(
                &name,
                &list,
                page,
                size,
                state.access(),
                state.csrf(),
                q.msg.as_deref(),
            );
            render(
                &state,
                &headers,
                &format!("{name}: dead letters"),
                Nav::Queue,
                true,
                body,
            )
        }
        Err(e) => unavailable(&e),
    }
}

/// The Workers page of every queue watched (read at once, one script each).
async fn workers_page(Shared(state): App, headers: HeaderMap) -> Response {
    let names = state.queues();
    let reads = names.iter().map(|name| {
        let queue = state.client().queue(name.as_str());
        async move { (name, queue.workers().await) }
    });
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    for (name, read) in futures_util::future::join_all(reads).await {
        match read {
            Ok(ws) => rows.extend(ws.into_iter().map(|w| (name.clone(), w))),
            Err(e) => errors.push(format!("cannot read the workers of queue {name}: {e}")),
        }
    }
    let body = pages::workers(None, &rows, &errors);
    render(&state, &headers, "Workers", Nav::Workers, true, body)
}

/// The Workers page of one queue.
async fn queue_workers_page(
    Shared(state): App,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    let name = match parse_queue_name(&name) {
        Ok(n) => n,
        Err(e) => return bad_name(e),
    };
    match state.client().queue(name.as_str()).workers().await {
        Ok(ws) => {
            let rows: Vec<_> = ws.into_iter().map(|w| (name.clone(), w)).collect();
            let body = pages::workers(Some(&name), &rows, &[]);
            render(
                &state,
                &headers,
                &format!("{name}: workers"),
                Nav::Workers,
                true,
                body,
            )
        }
        Err(e) => unavailable(&e),
    }
}

/// The queue name and task id of a task's route, checked.
fn task_path(name: &str, id: &str) -> Result<(String, String), String> {
    Ok((parse_queue_name(name)?, parse_task_id(id)?))
}

/// One task: its facts, progress, dependency graph and events.
async fn task_page(
    Shared(state): App,
    Path((name, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let (name, id) = match task_path(&name, &id) {
        Ok(p) => p,
        Err(e) => return bad_name(e),
    };
    match state.task_view(&name, &id).await {
        Ok(Some(view)) => {
            let body = task_page::task(&name, &view);
            render(
                &state,
                &headers,
                &format!("{name}: task {id}"),
                Nav::Queue,
                true,
                body,
            )
        }
        Ok(None) => {
            let body = task_page::unknown(&name, &id);
            let mut r = render(&state, &headers, "Unknown task", Nav::Queue, false, body);
            *r.status_mut() = StatusCode::NOT_FOUND;
            r
        }
        Err(e) => unavailable(&e),
    }
}

async fn locks_page(Shared(state): App, Query(q): Query<Listing>, headers: HeaderMap) -> Response {
    match tokio::try_join!(state.locks(), state.other_locks()) {
        Ok((locks, others)) => {
            let mut body = pages::locks(
                state.lock_pattern(),
                &locks,
                MAX_LOCKS,
                state.access(),
                state.csrf(),
                q.msg.as_deref(),
            );
            body.push_str(&pages::other_locks(&others));
            render(&state, &headers, "Locks", Nav::Locks, true, body)
        }
        Err(e) => unavailable(&e),
    }
}

/// The fields an action's form may carry.
#[derive(Debug, Default, Deserialize)]
struct ActionForm {
    csrf: Option<String>,
    admin_token: Option<String>,
    confirm: Option<String>,
    id: Option<String>,
    all: Option<String>,
    name: Option<String>,
}

impl ActionForm {
    fn confirmed(&self) -> bool {
        self.confirm.as_deref() == Some("yes")
    }
}

/// Equal, in a time that does not depend on where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// May this request act? A read-only server: never. Otherwise it needs the
/// CSRF token and, once confirmed, the admin token when there is one (a
/// request that carries the admin token in a header cannot come from a
/// cross-site form, so that header stands in for the CSRF token).
fn authorize(state: &State, headers: &HeaderMap, form: &ActionForm) -> Result<(), Refused> {
    let forbidden = |why: &'static str| Refused(StatusCode::FORBIDDEN, why);
    let admin_header = header_text(headers, "x-admin-token");
    let csrf = form
        .csrf
        .as_deref()
        .or_else(|| header_text(headers, "x-csrf-token"));
    match state.access() {
        Access::ReadOnly => Err(forbidden(
            "read-only: this server listens beyond loopback without --admin-token",
        )),
        Access::Local => match csrf {
            Some(c) if same(c, state.csrf()) => Ok(()),
            _ => Err(forbidden("missing or wrong CSRF token")),
        },
        Access::Admin(token) => {
            let header_ok = admin_header.is_some_and(|t| same(t, token));
            if !header_ok && !csrf.is_some_and(|c| same(c, state.csrf())) {
                return Err(forbidden("missing or wrong CSRF token"));
            }
            let given = form.admin_token.as_deref().or(admin_header);
            if form.confirmed() && !given.is_some_and(|t| same(t, token)) {
                return Err(forbidden("missing or wrong admin token"));
            }
            Ok(())
        }
    }
}

fn ask(state: &State, headers: &HeaderMap, c: &Confirm<'_>) -> Response {
    let body = pages::confirm(c, state.access(), state.csrf());
    render(state, headers, "Confirm", Nav::Queue, false, body)
}

fn done(back: &str, msg: &str) -> Response {
    Redirect::to(&format!("{back}?msg={}", seg(msg))).into_response()
}

async fn retry(
    Shared(state): App,
    Path(name): Path<String>,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Response {
    if let Err(r) = authorize(&state, &headers, &form) {
        return r.into_response();
    }
    let name = match parse_queue_name(&name) {
        Ok(n) => n,
        Err(e) => return bad_name(e),
    };
    let id = match form.id.as_deref().map(parse_task_id).transpose() {
        Ok(id) => id,
        Err(e) => return bad_name(e),
    };
    if id.is_none() && form.all.as_deref() != Some("1") {
        return plain(StatusCode::BAD_REQUEST, "give id=ID or all=1");
    }
    let back = format!("/queues/{}/dead", seg(&name));
    if !form.confirmed() {
        let (question, fields) = match &id {
            Some(id) => (
                format!("Retry dead task {id} of queue {name}?"),
                vec![("id", id.clone())],
            ),
            None => (
                format!("Retry every dead task of queue {name}?"),
                vec![("all", "1".to_string())],
            ),
        };
        let c = Confirm {
            question,
            detail: "The tasks go back to the queue, due now, with their attempts reset.",
            url: format!("{back}/retry"),
            fields,
            back,
            unsafe_action: false,
        };
        return ask(&state, &headers, &c);
    }
    let queue = state.client().queue(name.as_str());
    let moved = match &id {
        Some(id) => queue.retry_dead(Some(&[id.as_str()])).await,
        None => queue.retry_dead(None).await,
    };
    match moved {
        Ok(n) => done(&back, &format!("{n} task(s) moved back to the queue")),
        Err(e) => unavailable(&e),
    }
}

async fn purge(
    Shared(state): App,
    Path(name): Path<String>,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Response {
    if let Err(r) = authorize(&state, &headers, &form) {
        return r.into_response();
    }
    let name = match parse_queue_name(&name) {
        Ok(n) => n,
        Err(e) => return bad_name(e),
    };
    let back = format!("/queues/{}/dead", seg(&name));
    if !form.confirmed() {
        let c = Confirm {
            question: format!("Purge every dead task of queue {name}?"),
            detail: "They are deleted for good, with their payloads and errors.",
            url: format!("{back}/purge"),
            fields: Vec::new(),
            back,
            unsafe_action: true,
        };
        return ask(&state, &headers, &c);
    }
    match state.client().queue(name.as_str()).purge_dead().await {
        Ok(n) => done(&back, &format!("{n} dead task(s) purged")),
        Err(e) => unavailable(&e),
    }
}

async fn release(Shared(state): App, headers: HeaderMap, Form(form): Form<ActionForm>) -> Response {
    if let Err(r) = authorize(&state, &headers, &form) {
        return r.into_response();
    }
    let name = match form.name.as_deref().map(parse_name) {
        Some(Ok(n)) => n,
        Some(Err(e)) => return bad_name(e),
        None => return plain(StatusCode::BAD_REQUEST, "give name=NAME"),
    };
    if !form.confirmed() {
        let c = Confirm {
            question: format!("Release lock {name} by force?"),
            detail: "UNSAFE: its holder is not told and goes on as if it held the lock, so two \
processes may then work under it at once. Only storage that checks fencing tokens stays safe. \
Do this only when the holder is known to be dead.",
            url: "/locks/release".into(),
            fields: vec![("name", name.clone())],
            back: "/locks".into(),
            unsafe_action: true,
        };
        return ask(&state, &headers, &c);
    }
    match state.client().lock(name.as_str()).force_release().await {
        Ok(true) => done("/locks", &format!("lock {name} released by force")),
        Ok(false) => done("/locks", &format!("lock {name} was not held any more")),
        Err(e) => unavailable(&e),
    }
}

/// One queue in `/api/queues`.
#[derive(Debug, Serialize)]
struct ApiQueue {
    name: String,
    /// Waiting for their dependencies (`dlm queue push --after`).
    blocked: u64,
    waiting: u64,
    delayed: u64,
    in_flight: u64,
    dead: u64,
    processed: u64,
    failed: u64,
    oldest_age_ms: Option<u64>,
    throughput_per_s: Option<f64>,
    backlog_history: Vec<u64>,
    /// Paused (`dlm queue pause`): workers claim nothing.
    paused: bool,
}

fn api_row(row: QueueRow) -> Option<ApiQueue> {
    let s = row.stats?;
    Some(ApiQueue {
        name: row.name,
        blocked: s.blocked,
        waiting: s.waiting,
        delayed: s.delayed,
        in_flight: s.inflight,
        dead: s.dead,
        processed: s.processed,
        failed: s.failed,
        oldest_age_ms: row.oldest_age.map(crate::output::ms),
        throughput_per_s: row.throughput,
        backlog_history: row.history,
        paused: s.paused,
    })
}

async fn api_queues(Shared(state): App) -> Response {
    let rows = state.queue_rows().await;
    let queues: Vec<ApiQueue> = rows.into_iter().filter_map(api_row).collect();
    axum::Json(serde_json::json!({ "redis_up": state.redis_up(), "queues": queues }))
        .into_response()
}

/// `?state=&offset=&limit=` of `/api/queues/NAME`.
#[derive(Debug, Deserialize)]
struct ApiListing {
    state: Option<String>,
    offset: Option<usize>,
    limit: Option<usize>,
}

/// One task in `/api/queues/NAME`.
#[derive(Debug, Serialize)]
struct ApiTask {
    id: String,
    score_ms: u64,
    attempts: u32,
    fence: Option<u64>,
    lease_remaining_ms: Option<u64>,
    payload_bytes: Option<usize>,
    payload_preview: Option<String>,
    error: Option<String>,
}

async fn api_queue(
    Shared(state): App,
    Path(name): Path<String>,
    Query(q): Query<ApiListing>,
) -> Response {
    let name = match parse_queue_name(&name) {
        Ok(n) => n,
        Err(e) => return bad_name(e),
    };
    let listing = Listing {
        state: q.state,
        page: None,
        size: None,
        msg: None,
    };
    let task_state = match listing.task_state(TaskState::Waiting) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    let limit = q.limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE);
    let offset = q.offset.unwrap_or(0);
    let queue = state.client().queue(name.as_str());
    let read = async {
        let per_shard = queue.shard_stats().await?;
        let shards = if per_shard.len() > 1 {
            let layout = queue.shards().await?;
            Some(crate::shard_view::shard_lines(&layout, &per_shard))
        } else {
            None
        };
        let list = queue
            .tasks(task_state, offset, limit, PREVIEW_BYTES)
            .await?;
        Ok::<_, dlm::Error>((crate::shard_view::total(&per_shard), shards, list))
    };
    let (stats, shards, list) = match read.await {
        Ok(r) => r,
        Err(e) => return unavailable(&e),
    };
    let tasks: Vec<ApiTask> = list
        .tasks
        .into_iter()
        .map(|t| ApiTask {
            lease_remaining_ms: (task_state == TaskState::InFlight)
                .then(|| t.score.saturating_sub(list.now)),
            fence: t.fence.map(|f| f.get()),
            payload_preview: t
                .payload_preview
                .map(|p| String::from_utf8_lossy(&p).into_owned()),
            id: t.id,
            score_ms: t.score,
            attempts: t.attempts,
            payload_bytes: t.payload_len,
            error: t.error,
        })
        .collect();
    axum::Json(serde_json::json!({
        "name": name,
        "blocked": stats.blocked,
        "waiting": stats.waiting,
        "delayed": stats.delayed,
        "in_flight": stats.inflight,
        "dead": stats.dead,
        "processed": stats.processed,
        "failed": stats.failed,
        "paused": stats.paused,
        // A queue of more than one shard: each shard's tag, slot and counts.
        "shards": shards,
        "state": task_state.as_str(),
        "total": list.total,
        "offset": offset,
        "limit": limit,
        "now_ms": list.now,
        "tasks": tasks,
    }))
    .into_response()
}

/// `/api/queues/NAME/workers`: `{"queue", "workers": [...]}`, each worker
/// with the fields of `dlm queue workers --json`.
async fn api_workers(Shared(state): App, Path(name): Path<String>) -> Response {
    let name = match parse_queue_name(&name) {
        Ok(n) => n,
        Err(e) => return bad_name(e),
    };
    match state.client().queue(name.as_str()).workers().await {
        Ok(ws) => {
            let workers: Vec<crate::output::WorkerLine> = ws
                .into_iter()
                .map(|w| crate::output::WorkerLine::new(&name, w))
                .collect();
            axum::Json(serde_json::json!({ "queue": name, "workers": workers })).into_response()
        }
        Err(e) => unavailable(&e),
    }
}

/// One event of a task in `/api/queues/NAME/tasks/ID` (as `dlm queue
/// events --json` prints it, without the id).
#[derive(Debug, Serialize)]
struct ApiEvent {
    event: &'static str,
    ts_ms: u64,
    cursor: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    progress: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

/// A dependency or dependent in `/api/queues/NAME/tasks/ID`.
#[derive(Debug, Serialize)]
struct ApiNeighbour {
    id: String,
    /// Its state, `unknown` when the queue remembers none.
    state: &'static str,
}

/// `/api/queues/NAME/tasks/ID`.
#[derive(Debug, Serialize)]
struct ApiTaskDetail {
    queue: String,
    #[serde(flatten)]
    task: crate::output::TaskLine,
    events_on: bool,
    events_partial: bool,
    events: Vec<ApiEvent>,
    neighbours: serde_json::Value,
}

fn api_neighbours(list: Vec<Neighbour>) -> Vec<ApiNeighbour> {
    list.into_iter()
        .map(|n| ApiNeighbour {
            state: n.state.map_or("unknown", TaskState::as_str),
            id: n.id,
        })
        .collect()
}

fn api_task_detail(queue: String, view: TaskView) -> ApiTaskDetail {
    let task = crate::output::TaskLine::new(&view.task.id, Some(&view.task));
    let events = view
        .events
        .into_iter()
        .map(|e| ApiEvent {
            event: e.kind.as_str(),
            ts_ms: e.at_ms,
            cursor: e.cursor,
            error: e.error,
            progress: e.progress,
            message: e.message,
        })
        .collect();
    ApiTaskDetail {
        queue,
        task,
        events_on: view.events_on,
        events_partial: view.events_partial,
        events,
        neighbours: serde_json::json!({
            "deps": api_neighbours(view.deps),
            "dependents": api_neighbours(view.dependents),
        }),
    }
}

/// `/api/queues/NAME/tasks/ID`: the fields of `dlm queue task --json`, its
/// events, and its dependencies' and dependents' states; 404 when unknown.
async fn api_task(Shared(state): App, Path((name, id)): Path<(String, String)>) -> Response {
    let (name, id) = match task_path(&name, &id) {
        Ok(p) => p,
        Err(e) => return bad_name(e),
    };
    match state.task_view(&name, &id).await {
        Ok(Some(view)) => axum::Json(api_task_detail(name, view)).into_response(),
        Ok(None) => (
            StatusCode::NOT_FOUND,
            axum::Json(serde_json::json!({
                "queue": name, "id": id, "state": "unknown",
                "error": "no such task (never enqueued, or finished and not remembered)",
            })),
        )
            .into_response(),
        Err(e) => unavailable(&e),
    }
}

/// One lock in `/api/locks`.
#[derive(Debug, Serialize)]
struct ApiLock {
    name: String,
    key: String,
    ttl_ms: Option<u64>,
    fence: Option<u64>,
}

/// The other kinds in `/api/locks`, each with its holders and waiters.
fn api_others(o: &crate::serve::state::OtherLocks) -> serde_json::Value {
    use crate::output::ms;
    let fence = |f: Option<dlm::Fence>| f.map(dlm::Fence::get);
    let fair: Vec<_> = o
        .fair
        .iter()
        .map(|(name, s)| {
            serde_json::json!({"kind": "fair", "name": name, "held": s.held,
                "ttl_ms": s.ttl.map(ms), "waiting": s.waiting, "fence": fence(s.fence)})
        })
        .collect();
    let rw: Vec<_> =
        o.rw.iter()
            .map(|(name, s)| {
                serde_json::json!({"kind": "rw", "name": name, "writer": s.writer,
                "writer_ttl_ms": s.writer_ttl.map(ms), "readers": s.readers,
                "waiting_writers": s.waiting_writers, "fence": fence(s.fence)})
            })
            .collect();
    let sem: Vec<_> = o
        .semaphores
        .iter()
        .map(|(name, s)| {
            serde_json::json!({"kind": "semaphore", "name": name, "permits": s.permits,
                "in_use": s.in_use, "holders": s.holders, "available": s.available,
                "fence": fence(s.fence)})
        })
        .collect();
    let elections: Vec<_> = o
        .elections
        .iter()
        .map(|(name, leader, last)| {
            serde_json::json!({"kind": "election", "name": name,
                "leader": leader.as_ref().map(|l| l.id.clone()),
                "term": leader.as_ref().map(|l| l.term),
                "ttl_ms": leader.as_ref().and_then(|l| l.ttl).map(ms),
                "last_term": last})
        })
        .collect();
    serde_json::json!({"fair_locks": fair, "rwlocks": rw, "semaphores": sem, "elections": elections})
}

async fn api_locks(Shared(state): App) -> Response {
    match tokio::try_join!(state.locks(), state.other_locks()) {
        Ok((locks, others)) => {
            let locks: Vec<ApiLock> = locks
                .into_iter()
                .map(|l| ApiLock {
                    ttl_ms: l.ttl.map(crate::output::ms),
                    fence: l.fence.map(|f| f.get()),
                    name: l.name,
                    key: l.key,
                })
                .collect();
            let mut body = api_others(&others);
            body["pattern"] = serde_json::json!(state.lock_pattern());
            body["locks"] = serde_json::json!(locks);
            axum::Json(body).into_response()
        }
        Err(e) => unavailable(&e),
    }
}

async fn metrics(Shared(state): App) -> Response {
    let text = state.scrape().await;
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn healthz(Shared(state): App) -> Response {
    axum::Json(serde_json::json!({ "status": "ok", "redis_up": state.redis_up() })).into_response()
}

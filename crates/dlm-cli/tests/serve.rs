//! `dlm serve` against a real redis-server: `/healthz`, the JSON API and
//! `/metrics` with exact values after a known fill, HTML escaping, the
//! CSRF and admin-token rules, read-only mode, exit codes; then the pages in
//! headless Chromium (through chromedriver): the overview's counts, a dead
//! task retried with real clicks, an HTML payload shown escaped, a POST
//! without the token refused. The browser test skips, saying so, only when
//! Chromium is not installed (`scripts/ensure-deps.sh --tests` installs it).
//! `DLM_SCREENSHOTS=1` also saves the pages' screenshots under `docs/`.

mod common;
mod serve_support;

use std::time::{Duration, Instant};

use common::*;
use serve_support::*;

fn filled() -> Result<RedisServer, Error> {
    let s = server();
    fill(&s)?;
    Ok(s)
}

fn queue<'a>(api: &'a serde_json::Value, name: &str) -> Result<&'a serde_json::Value, Error> {
    api["queues"]
        .as_array()
        .and_then(|qs| qs.iter().find(|q| q["name"] == name))
        .ok_or_else(|| format!("queue {name} not in {api}").into())
}

#[test]
fn api_metrics_and_healthz_show_exact_values() -> Result<(), Error> {
    let s = filled()?;
    let serve = Serve::start(&s, "127.0.0.1", &[])?;
    assert!(
        serve
            .stdout()
            .contains(&format!("http://127.0.0.1:{}/", serve.port))
    );

    let h = serve.get_json("/healthz")?;
    assert_eq!(h["status"], "ok");
    assert_eq!(h["redis_up"], true);

    let api = serve.get_json("/api/queues")?;
    let jobs = queue(&api, "jobs")?;
    assert_eq!(
        (
            &jobs["waiting"],
            &jobs["delayed"],
            &jobs["in_flight"],
            &jobs["dead"],
            &jobs["failed"]
        ),
        (&3.into(), &1.into(), &1.into(), &2.into(), &2.into()),
        "{jobs}"
    );
    assert!(jobs["oldest_age_ms"].as_u64().is_some(), "{jobs}");
    assert_eq!(queue(&api, "mail")?["waiting"], 1);

    let dead = serve.get_json("/api/queues/jobs?state=dead")?;
    assert_eq!(dead["total"], 2);
    assert_eq!(dead["tasks"][0]["id"], "d1");
    assert_eq!(dead["tasks"][0]["attempts"], 1);
    assert_eq!(dead["tasks"][0]["error"], "boom: <b>bad</b> input");
    let flying = serve.get_json("/api/queues/jobs?state=in_flight")?;
    assert_eq!(flying["tasks"][0]["id"], "flying");
    assert!(flying["tasks"][0]["fence"].as_u64().is_some());
    assert!(
        flying["tasks"][0]["lease_remaining_ms"]
            .as_u64()
            .is_some_and(|ms| ms > 500_000)
    );
    let waiting = serve.get_json("/api/queues/jobs?limit=2")?;
    assert_eq!(
        (&waiting["total"], waiting["tasks"].as_array().map(Vec::len)),
        (&3.into(), Some(2))
    );
    let capped = serve.get_json("/api/queues/jobs?limit=100000")?;
    assert_eq!(capped["limit"], 200, "page sizes are bounded");
    assert_eq!(serve.get("/api/queues/jobs?state=nope")?.status, 400);

    let locks = serve.get_json("/api/locks")?;
    let names: Vec<&str> = locks["locks"]
        .as_array()
        .ok_or("locks")?
        .iter()
        .filter_map(|l| l["name"].as_str())
        .collect();
    assert_eq!(names, ["orders:1", "orders:2"]);
    assert!(
        locks["locks"][0]["ttl_ms"]
            .as_u64()
            .is_some_and(|t| t > 200_000 && t <= 300_000)
    );

    let m = serve.get("/metrics")?;
    assert_eq!(m.status, 200);
    for line in [
        "dlm_queue_depth{queue=\"jobs\",state=\"waiting\"} 3",
        "dlm_queue_depth{queue=\"jobs\",state=\"delayed\"} 1",
        "dlm_queue_depth{queue=\"jobs\",state=\"in_flight\"} 1",
        "dlm_queue_depth{queue=\"jobs\",state=\"dead\"} 2",
        "dlm_queue_dead_tasks{queue=\"jobs\"} 2",
        "dlm_queue_failed_total{queue=\"jobs\"} 2",
        "dlm_queue_processed_total{queue=\"jobs\"} 0",
        "dlm_queue_depth{queue=\"mail\",state=\"waiting\"} 1",
        "dlm_lock_held{name=\"orders:1\"} 1",
        "dlm_locks_held 2",
        "dlm_redis_up 1",
    ] {
        assert!(
            m.body.lines().any(|l| l == line),
            "no {line:?} in:\n{}",
            m.body
        );
    }
    assert!(
        m.body
            .contains("dlm_queue_oldest_task_age_seconds{queue=\"jobs\"}")
    );
    assert!(
        m.body
            .contains("dlm_lock_ttl_seconds{name=\"orders:2\"} 29"),
        "{}",
        m.body
    );
    assert!(m.body.contains("# TYPE dlm_queue_depth gauge"));
    Ok(())
}

#[test]
fn pages_escape_redis_data_and_actions_need_the_tokens() -> Result<(), Error> {
    let s = filled()?;
    let serve = Serve::start(&s, "127.0.0.1", &[])?;

    let page = serve.get("/queues/jobs")?;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{}",
        page.body
    );
    assert!(!page.body.contains(XSS));
    assert!(
        page.header("content-security-policy")
            .is_some_and(|c| c.contains("script-src 'self'"))
    );
    let dead = serve.get("/queues/jobs/dead")?;
    assert!(dead.body.contains("boom: &lt;b&gt;bad&lt;/b&gt; input"));
    assert!(serve.get("/")?.body.contains("data-state=\"dead\">2<"));
    assert!(serve.get("/locks")?.body.contains("Force release (unsafe)"));

    // No CSRF token, a wrong one: refused, nothing moved.
    assert_eq!(
        serve
            .post("/queues/jobs/dead/retry", "all=1&confirm=yes", &[])?
            .status,
        403
    );
    assert_eq!(
        serve
            .post("/queues/jobs/dead/purge", "csrf=forged&confirm=yes", &[])?
            .status,
        403
    );
    assert_eq!(
        serve
            .post("/locks/release", "name=orders%3A1&confirm=yes", &[])?
            .status,
        403
    );
    assert_eq!(serve.dead_total("jobs")?, 2);

    // With the token: first the confirmation page, then the action.
    let csrf = serve.csrf()?;
    let ask = serve.post(
        "/queues/jobs/dead/retry",
        &format!("csrf={csrf}&id=d1"),
        &[],
    )?;
    assert_eq!(ask.status, 200);
    assert!(
        ask.body.contains("Retry dead task d1 of queue jobs?"),
        "{}",
        ask.body
    );
    assert_eq!(serve.dead_total("jobs")?, 2);
    let done = serve.post(
        "/queues/jobs/dead/retry",
        &format!("csrf={csrf}&id=d1&confirm=yes"),
        &[],
    )?;
    assert_eq!(done.status, 303, "{}", done.body);
    assert!(
        done.header("location")
            .is_some_and(|l| l.starts_with("/queues/jobs/dead?msg="))
    );
    assert_eq!(serve.dead_total("jobs")?, 1);
    let ask = serve.post(
        "/locks/release",
        &format!("csrf={csrf}&name=orders%3A1"),
        &[],
    )?;
    assert!(ask.body.contains("UNSAFE"), "{}", ask.body);
    let done = serve.post(
        "/locks/release",
        &format!("csrf={csrf}&name=orders%3A1&confirm=yes"),
        &[],
    )?;
    assert_eq!(done.status, 303);
    assert_eq!(
        serve.get_json("/api/locks")?["locks"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    let done = serve.post(
        "/queues/jobs/dead/purge",
        &format!("csrf={csrf}&confirm=yes"),
        &[],
    )?;
    assert_eq!(done.status, 303);
    assert_eq!(serve.dead_total("jobs")?, 0);
    Ok(())
}

#[test]
fn beyond_loopback_actions_need_the_admin_token_else_read_only() -> Result<(), Error> {
    let s = filled()?;
    // 0.0.0.0 is not loopback: without a token, read-only, and a warning.
    let ro = Serve::start(&s, "0.0.0.0", &[])?;
    assert!(ro.stderr().contains("read-only"), "{}", ro.stderr());
    let dead = ro.get("/queues/jobs/dead")?.body;
    assert!(!dead.contains("<form"), "read-only pages offer no action");
    assert!(dead.contains("Read-only"));
    assert_eq!(
        ro.post("/queues/jobs/dead/retry", "all=1&confirm=yes", &[])?
            .status,
        403
    );
    drop(ro);

    let admin = Serve::start(&s, "0.0.0.0", &["--admin-token", "s3cret"])?;
    let csrf = admin.csrf()?;
    let ask = admin.post(
        "/queues/jobs/dead/retry",
        &format!("csrf={csrf}&all=1"),
        &[],
    )?;
    assert!(ask.body.contains("name=\"admin_token\""), "{}", ask.body);
    let no_token = format!("csrf={csrf}&all=1&confirm=yes");
    assert_eq!(
        admin
            .post("/queues/jobs/dead/retry", &no_token, &[])?
            .status,
        403
    );
    assert_eq!(
        admin
            .post(
                "/queues/jobs/dead/retry",
                &format!("{no_token}&admin_token=wrong"),
                &[]
            )?
            .status,
        403
    );
    assert_eq!(admin.dead_total("jobs")?, 2);
    let ok = admin.post(
        "/queues/jobs/dead/retry",
        &format!("{no_token}&admin_token=s3cret"),
        &[],
    )?;
    assert_eq!(ok.status, 303);
    assert_eq!(admin.dead_total("jobs")?, 0);
    // A script: the admin token in a header stands in for the CSRF token.
    let ok = admin.post(
        "/locks/release",
        "name=orders%3A2&confirm=yes",
        &[("x-admin-token", "s3cret")],
    )?;
    assert_eq!(ok.status, 303);
    Ok(())
}

#[test]
fn exit_codes_bad_flags_unreachable_redis_and_sigterm() -> Result<(), Error> {
    let r = run(&["serve", "--listen", "not-an-address"]);
    assert_eq!(r.code(), 2, "{}", r.stderr);
    let r = run(&["serve", "--interval", "10ms"]);
    assert_eq!(r.code(), 2, "{}", r.stderr);
    let port = free_port()?;
    let r = run(&[
        "--redis",
        &format!("redis://127.0.0.1:{port}"),
        "--timeout",
        "300ms",
        "serve",
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(r.code(), 3, "{}", r.stderr);

    let s = server();
    let serve = Serve::start(&s, "127.0.0.1", &["--queue", "only"])?;
    assert_eq!(serve.get_json("/api/queues")?["queues"][0]["name"], "only");
    let pid = serve.child.id().to_string();
    signal(&pid, "TERM");
    let mut serve = serve;
    let start = Instant::now();
    let status = loop {
        if let Some(st) = serve.child.try_wait()? {
            break st;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "dlm serve did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
    Ok(())
}

#[test]
fn browser_shows_counts_retries_from_the_page_and_escapes_payloads() -> Result<(), Error> {
    let Some((chromium, driver)) = browser() else {
        eprintln!(
            "SKIPPED: chromium and chromedriver are not installed (scripts/ensure-deps.sh --tests installs them)"
        );
        return Ok(());
    };
    let started = Instant::now();
    let s = filled()?;
    // (For screenshots, some traffic to chart: samples come every second.)
    let screenshots = std::env::var_os("DLM_SCREENSHOTS").is_some();
    let serve = Serve::start(&s, "127.0.0.1", &[])?;
    let b = Browser::start(&chromium, &driver)?;

    // The overview shows the right counts, and they refresh live.
    b.goto(&serve.url("/"))?;
    let count = |state: &str| -> Result<String, Error> {
        let v = b.eval(&format!(
            "var c = document.querySelector('td[data-queue=\"jobs\"][data-state=\"{state}\"]'); return c ? c.textContent : null;"
        ))?;
        Ok(v.as_str().unwrap_or_default().to_string())
    };
    assert_eq!(
        [
            count("waiting")?,
            count("delayed")?,
            count("in_flight")?,
            count("dead")?
        ],
        ["3", "1", "1", "2"]
    );
    assert_eq!(
        b.eval("return document.getElementById('total-locks').textContent")?,
        "2"
    );
    if screenshots {
        traffic(&s, Duration::from_secs(15))?;
        b.goto(&serve.url("/"))?;
    }
    shot(&b, "dashboard-overview.png")?;

    // The HTML payload is text, not markup: no alert, one script (ours).
    b.goto(&serve.url("/queues/jobs"))?;
    let shown =
        b.eval("return document.querySelector('tr[data-task=\"xss\"] code').textContent")?;
    assert_eq!(shown, XSS);
    assert_eq!(b.eval("return document.scripts.length")?, 1);
    assert!(!b.alert_open());
    shot(&b, "dashboard-queue.png")?;

    // A dead task retried with clicks: Retry, then Confirm.
    b.goto(&serve.url("/queues/jobs/dead"))?;
    shot(&b, "dashboard-dead.png")?;
    b.click("tr[data-task=\"d1\"] button")?;
    let confirm_page =
        |v: &serde_json::Value| v.as_str().is_some_and(|t| t.contains("Retry dead task d1"));
    assert!(confirm_page(
        &b.eval_until("return document.body.textContent", confirm_page)?
    ));
    b.click("#confirm")?;
    let flash = b.eval_until(
        "var f = document.getElementById('flash'); return f ? f.textContent : null",
        |v| !v.is_null(),
    )?;
    assert_eq!(flash, "1 task(s) moved back to the queue");
    assert_eq!(
        b.eval("return document.getElementById('dead-count').textContent")?,
        "1"
    );
    assert_eq!(
        b.eval("return document.querySelectorAll('tr[data-task=\"d1\"]').length")?,
        0
    );
    let waiting = serve.get_json("/api/queues/jobs")?;
    assert!(
        waiting["tasks"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["id"] == "d1")),
        "{waiting}"
    );

    // A POST from the page without the CSRF token is refused.
    let status = b.eval(
        "var x = new XMLHttpRequest(); x.open('POST', '/queues/jobs/dead/retry', false);\
         x.setRequestHeader('Content-Type', 'application/x-www-form-urlencoded');\
         x.send('all=1&confirm=yes'); return x.status;",
    )?;
    assert_eq!(status, 403);
    assert_eq!(serve.dead_total("jobs")?, 1);

    b.goto(&serve.url("/locks"))?;
    assert!(
        b.eval("return document.body.textContent")?
            .as_str()
            .is_some_and(|t| t.contains("Force release (unsafe)"))
    );
    shot(&b, "dashboard-locks.png")?;
    eprintln!("browser test took {:?}", started.elapsed());
    Ok(())
}

/// Traffic on queue `mail` for `run` (screenshots only): every 200 ms a wave
/// of 1-11 new tasks, and 3 tasks claimed and acked, so the overview's
/// sparkline and throughput have something to show.
fn traffic(server: &RedisServer, run: Duration) -> Result<(), Error> {
    use dlm::queue::{NewTask, OnDuplicate};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let c = dlm::Client::connect(&server.url()).await?;
        let q = c.queue("mail");
        let start = Instant::now();
        let mut round = 0u32;
        while start.elapsed() < run {
            let wave = (6.0 + 5.0 * (start.elapsed().as_secs_f64() * 0.8).sin()) as usize;
            let ids = (0..wave).map(|k| NewTask::new(format!("m{round}-{k}")));
            q.enqueue(ids, Duration::ZERO, OnDuplicate::Keep).await?;
            for lease in q.claim(3, Duration::from_secs(30)).await? {
                lease.ack().await?;
            }
            round += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok::<_, Error>(())
    })
}

/// With `DLM_SCREENSHOTS=1`, save a screenshot of the current page as `docs/NAME`.
fn shot(b: &Browser, name: &str) -> Result<(), Error> {
    if std::env::var_os("DLM_SCREENSHOTS").is_none() {
        return Ok(());
    }
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    std::fs::create_dir_all(&docs)?;
    // Let the page settle (sparklines need two samples, the clock a refresh).
    std::thread::sleep(Duration::from_millis(1500));
    b.screenshot(&docs.join(name))
}

/// Hold one of every lock kind on `server`, with waiters, on a runtime that
/// keeps running (the waiters are its tasks) until it is dropped.
fn every_kind(server: &RedisServer) -> Result<tokio::runtime::Runtime, Error> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let c = dlm::Client::connect(&server.url()).await?;
        let long = dlm::LockOptions::new(Duration::from_secs(300));
        let waiting = long.clone().wait(Duration::from_secs(300));
        std::mem::forget(c.fair_lock("printer").acquire(&long).await?);
        let fair = c.fair_lock("printer");
        tokio::spawn(async move { drop(fair.acquire(&waiting).await) });
        let rw = c.rwlock("catalog");
        std::mem::forget(rw.read(&long).await?);
        std::mem::forget(rw.read(&long).await?);
        let w = long.clone().wait(Duration::from_secs(300));
        tokio::spawn(async move { drop(rw.write(&w).await) });
        let sem = dlm::SemaphoreOptions::new(Duration::from_secs(300));
        std::mem::forget(c.semaphore("gpu", 4).acquire(1, &sem).await?);
        std::mem::forget(c.election("scheduler").campaign("web-1", &long).await?);
        // Until the waiters are queued.
        for _ in 0..500 {
            let (f, r) = (
                c.fair_lock("printer").status().await?,
                c.rwlock("catalog").status().await?,
            );
            if f.waiting == 1 && r.waiting_writers == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok::<_, Error>(())
    })?;
    Ok(rt)
}

/// The Locks page and `/api/locks` show every kind with its holders and
/// waiters: the fair lock's line, the read-write lock's readers and waiting
/// writer, the semaphore's permits and holders, the election's leader and
/// term; checked in Chromium.
#[test]
fn browser_shows_every_lock_kind() -> Result<(), Error> {
    let Some((chromium, driver)) = browser() else {
        eprintln!(
            "SKIPPED: chromium and chromedriver are not installed (scripts/ensure-deps.sh --tests installs them)"
        );
        return Ok(());
    };
    let s = filled()?;
    let _holders = every_kind(&s)?;
    let serve = Serve::start(&s, "127.0.0.1", &[])?;
    let api = serve.get_json("/api/locks")?;
    assert_eq!(api["locks"].as_array().map(Vec::len), Some(2), "{api}");
    assert_eq!(api["fair_locks"][0]["waiting"], 1, "{api}");
    assert_eq!(api["rwlocks"][0]["readers"], 2, "{api}");
    assert_eq!(api["rwlocks"][0]["waiting_writers"], 1, "{api}");
    assert_eq!(api["semaphores"][0]["permits"], 4, "{api}");
    assert_eq!(api["semaphores"][0]["holders"], 1, "{api}");
    assert_eq!(api["elections"][0]["leader"], "web-1", "{api}");
    assert_eq!(api["elections"][0]["term"], 1, "{api}");

    let b = Browser::start(&chromium, &driver)?;
    b.goto(&serve.url("/locks"))?;
    let cell = |kind: &str, name: &str, class: &str| -> Result<String, Error> {
        let v = b.eval(&format!(
            "var c = document.querySelector('table[data-kind=\"{kind}\"] tr[data-lock=\"{name}\"] .{class}'); return c ? c.textContent : null;"
        ))?;
        Ok(v.as_str().unwrap_or_default().to_string())
    };
    assert_eq!(cell("fair", "printer", "waiting")?, "1");
    assert_eq!(cell("rw", "catalog", "readers")?, "2");
    assert_eq!(cell("rw", "catalog", "waiting")?, "1");
    assert_eq!(cell("semaphores", "gpu", "holders")?, "1");
    assert_eq!(cell("semaphores", "gpu", "in-use")?, "1");
    assert_eq!(cell("elections", "scheduler", "leader")?, "web-1");
    assert_eq!(cell("elections", "scheduler", "term")?, "1");
    Ok(())
}

/// `dlm queue work QUEUE --worker-id ID OPTS... -- sh -c SCRIPT`, started.
fn start_worker(
    server: &RedisServer,
    queue: &str,
    id: &str,
    opts: &[&str],
    script: &str,
) -> Running {
    let mut cmd = dlm();
    cmd.args([
        "--redis",
        &server.url(),
        "queue",
        "work",
        queue,
        "--worker-id",
        id,
    ])
    .args(opts)
    .args(["--grace", "0s", "--", "sh", "-c", script])
    .env("DLM", DLM);
    start(cmd)
}

/// Kills the processes a test started (by pid, and those whose pids a
/// command wrote to a file) when dropped, so a failed test leaves none.
struct Reaper(Vec<String>, std::path::PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        let written = std::fs::read_to_string(&self.1).unwrap_or_default();
        for pid in self
            .0
            .iter()
            .map(String::as_str)
            .chain(written.split_whitespace())
        {
            signal(pid, "KILL");
        }
    }
}

/// The Workers page (Sidekiq's Busy page) in Chromium with real `dlm queue
/// work` processes: one running three tasks (one with an HTML id, shown
/// escaped), one idle after its tasks; its API; the links to it from the
/// navigation and the queue page; a stopped worker leaves the page.
#[test]
fn browser_shows_live_workers() -> Result<(), Error> {
    let Some((chromium, driver)) = browser() else {
        eprintln!(
            "SKIPPED: chromium and chromedriver are not installed (scripts/ensure-deps.sh --tests installs them)"
        );
        return Ok(());
    };
    let s = filled()?;
    let dir = tempdir()?;
    const HTML_ID: &str = "<img src=x onerror=alert(1)>";
    let r = run_on(
        &s,
        &["queue", "push", "render", "render:1", "render:2", HTML_ID],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let mail: Vec<String> = (0..20).map(|i| format!("mail:{i}")).collect();
    let mut push = vec!["queue", "push", "mail", "bounce"];
    push.extend(mail.iter().map(String::as_str));
    assert_eq!(run_on(&s, &push).code(), 0);
    let pids = path_in(&dir, "pids");
    let busy = start_worker(
        &s,
        "render",
        "render-1",
        &["--concurrency", "4"],
        &format!("echo $$ >> '{}'; exec sleep 60", pids.display()),
    );
    let idle = start_worker(
        &s,
        "mail",
        "mailer-1",
        &["--concurrency", "2", "--max-attempts", "1"],
        "test \"$DLM_TASK_ID\" != bounce",
    );
    let mut reaper = Reaper(
        vec![busy.pid().to_string(), idle.pid().to_string()],
        pids.clone(),
    );
    let serve = Serve::start(&s, "127.0.0.1", &[])?;
    let started = Instant::now();
    let api = loop {
        let api = serve.get_json("/api/queues/render/workers")?;
        if api["workers"][0]["busy"] == 3 || started.elapsed() > Duration::from_secs(15) {
            break api;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let w = &api["workers"][0];
    assert_eq!(api["queue"], "render", "{api}");
    assert_eq!(w["id"], "render-1", "{api}");
    assert_eq!(w["pid"], busy.pid(), "{api}");
    assert_eq!(
        (&w["busy"], &w["concurrency"]),
        (&3.into(), &4.into()),
        "{api}"
    );
    assert_eq!(
        w["in_flight"],
        serde_json::json!([HTML_ID, "render:1", "render:2"]),
        "{api}"
    );
    let none = serve.get_json("/api/queues/nobody/workers")?;
    assert_eq!(none["workers"], serde_json::json!([]));
    let too_long = format!("/api/queues/{}/workers", "q".repeat(2000));
    assert_eq!(serve.get(&too_long)?.status, 400);
    // The mailer is done with its 22 tasks (with the fill's m1): 21 acked, 1 dead.
    let started = Instant::now();
    while serve.get_json("/api/queues/mail/workers")?["workers"][0]["failed"] != 1
        && started.elapsed() < Duration::from_secs(15)
    {
        std::thread::sleep(Duration::from_millis(50));
    }

    let b = Browser::start(&chromium, &driver)?;
    b.goto(&serve.url("/"))?;
    b.click("header nav a[href=\"/workers\"]")?;
    let rows = b.eval_until(
        "return document.querySelectorAll('tr[data-worker]').length",
        |v| v == 2,
    )?;
    assert_eq!(rows, 2);
    let cell = |worker: &str, css: &str| -> Result<String, Error> {
        let v = b.eval(&format!(
            "var c = document.querySelector('tr[data-worker=\"{worker}\"] {css}'); return c ? c.textContent : null;"
        ))?;
        Ok(v.as_str().unwrap_or_default().to_string())
    };
    assert_eq!(cell("render-1", ".slots")?, "3/4");
    assert_eq!(cell("render-1", "td:nth-child(2)")?, "render");
    assert_eq!(cell("render-1", "td:nth-child(4)")?, busy.pid().to_string());
    let tasks = b.eval(
        "return Array.from(document.querySelectorAll('tr[data-worker=\"render-1\"] .flying .task')).map(function (a) { return a.textContent; })",
    )?;
    assert_eq!(
        tasks,
        serde_json::json!([HTML_ID, "render:1", "render:2"]),
        "task ids are text, not markup"
    );
    assert!(!b.alert_open());
    assert_eq!(b.eval("return document.images.length")?, 0);
    assert_eq!(cell("mailer-1", ".processed")?, "21");
    assert_eq!(cell("mailer-1", ".failed")?, "1");
    assert_eq!(cell("mailer-1", ".flying")?, "idle");
    assert_eq!(
        b.eval("return document.getElementById('total-workers').textContent")?,
        "2"
    );
    shot(&b, "dashboard-workers.png")?;

    // From a queue's page to its workers only.
    b.goto(&serve.url("/queues/render"))?;
    b.click("a[href=\"/queues/render/workers\"]")?;
    let heading = b.eval_until(
        "var h = document.querySelector('h1'); return h ? h.textContent : null",
        |v| v.as_str().is_some_and(|t| t.starts_with("workers of")),
    )?;
    assert_eq!(heading, "workers of render");
    assert_eq!(
        b.eval("return document.querySelectorAll('tr[data-worker]').length")?,
        1
    );

    // A stopped worker leaves the page (live refresh, no reload).
    signal(&idle.pid().to_string(), "TERM");
    let r = idle.finish(Duration::from_secs(120));
    assert_eq!(r.code(), 0, "{}", r.stderr);
    b.goto(&serve.url("/workers"))?;
    let rows = b.eval_until(
        "return document.querySelectorAll('tr[data-worker]').length",
        |v| v == 1,
    )?;
    assert_eq!(rows, 1);
    signal(&busy.pid().to_string(), "TERM");
    let r = busy.finish(Duration::from_secs(120));
    assert_eq!(r.code(), 0, "{}", r.stderr);
    // Both workers exited; the busy one killed its commands (--grace 0s).
    reaper.0.clear();
    reaper.1 = std::path::PathBuf::new();
    let empty = b.eval_until(
        "var e = document.querySelector('table.workers .empty'); return e ? e.textContent : null",
        |v| !v.is_null(),
    )?;
    assert!(
        empty
            .as_str()
            .is_some_and(|t| t.starts_with("no live worker")),
        "{empty}"
    );
    Ok(())
}

/// The task page in Chromium, on a diamond of dependencies built with the
/// CLI (`a`; `b` and `c` after `a`; `d` after `b` and `c`; and a task with
/// an HTML id after `b`) run by a real `dlm queue work`: `a` completed with
/// a result, `b` in flight at 40% "halfway", `c` delayed, `d` blocked. The
/// page of `b`: its SVG graph (nodes, states, arrows, links), progress,
/// facts and events; the JSON API; the links to it from the queue's
/// listing; an unknown task's 404.
#[test]
fn browser_shows_a_task_with_its_dependency_graph() -> Result<(), Error> {
    let Some((chromium, driver)) = browser() else {
        eprintln!(
            "SKIPPED: chromium and chromedriver are not installed (scripts/ensure-deps.sh --tests installs them)"
        );
        return Ok(());
    };
    let s = server();
    let dir = tempdir()?;
    const HTML_ID: &str = "<img src=x onerror=alert(1)>";
    for args in [
        &["queue", "config", "flow", "--events", "1000"][..],
        &["queue", "push", "flow", "a"],
        &[
            "queue",
            "push",
            "flow",
            "b",
            "--after",
            "a",
            "--priority",
            "3",
            "--payload",
            "{\"step\":2}",
        ],
        &[
            "queue", "push", "flow", "c", "--after", "a", "--delay", "1h",
        ],
        &["queue", "push", "flow", "d", "--after", "b,c"],
        &["queue", "push", "flow", HTML_ID, "--after", "b"],
    ] {
        let r = run_on(&s, args);
        assert_eq!(r.code(), 0, "{args:?}: {}", r.stderr);
    }
    let pids = path_in(&dir, "pids");
    let worker = start_worker(
        &s,
        "flow",
        "flow-1",
        &[],
        &format!(
            "case \"$DLM_TASK_ID\" in b) \"$DLM\" queue progress \"$DLM_QUEUE\" b 40 halfway \
             && echo $$ >> '{}' && exec sleep 60;; *) printf 'done %s' \"$DLM_TASK_ID\";; esac",
            pids.display()
        ),
    );
    let _reaper = Reaper(vec![worker.pid().to_string()], pids.clone());
    let serve = Serve::start(&s, "127.0.0.1", &[])?;
    let started = Instant::now();
    let api = loop {
        let api = serve.get_json("/api/queues/flow/tasks/b")?;
        if api["progress"] == 40 || started.elapsed() > Duration::from_secs(15) {
            break api;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(api["queue"], "flow", "{api}");
    assert_eq!(api["id"], "b", "{api}");
    assert_eq!(api["state"], "in_flight", "{api}");
    assert_eq!(api["attempts"], 1, "{api}");
    assert_eq!(api["message"], "halfway", "{api}");
    assert_eq!(api["priority"], 3, "{api}");
    assert_eq!(api["payload_bytes"], 10, "{api}");
    assert!(api["fence"].as_u64().is_some(), "{api}");
    assert_eq!(api["deps"], serde_json::json!(["a"]), "{api}");
    assert_eq!(
        api["dependents"],
        serde_json::json!(["d", HTML_ID]),
        "{api}"
    );
    assert_eq!(
        api["neighbours"],
        serde_json::json!({
            "deps": [{"id": "a", "state": "completed"}],
            "dependents": [{"id": "d", "state": "blocked"}, {"id": HTML_ID, "state": "blocked"}],
        }),
        "{api}"
    );
    assert_eq!(api["events_on"], true, "{api}");
    let kinds: Vec<&str> = api["events"]
        .as_array()
        .ok_or("events")?
        .iter()
        .filter_map(|e| e["event"].as_str())
        .collect();
    assert_eq!(kinds, ["added", "released", "claimed", "progress"], "{api}");
    assert_eq!(api["events"][3]["progress"], 40, "{api}");
    let a = serve.get_json("/api/queues/flow/tasks/a")?;
    assert_eq!(
        (&a["state"], &a["result_bytes"]),
        (&"completed".into(), &6.into()),
        "{a}"
    );
    // A completed task keeps what it was (issue 31): its run and its links.
    assert_eq!(a["worker"], "flow-1", "{a}");
    assert_eq!(a["attempts"], 1, "{a}");
    assert_eq!(a["dependents"], serde_json::json!(["b", "c"]), "{a}");
    assert!(
        a["started_at"].is_u64() && a["started_at"].as_u64() <= a["finished_at"].as_u64(),
        "{a}"
    );
    let page_a = serve.get("/queues/flow/tasks/a")?.body;
    assert!(
        page_a.contains("<th>Worker</th>") && page_a.contains("flow-1"),
        "{page_a}"
    );
    assert!(!page_a.contains("id=\"no-deps\""), "{page_a}");
    let d = serve.get_json("/api/queues/flow/tasks/d")?;
    assert_eq!(
        (&d["state"], &d["pending_deps"]),
        (&"blocked".into(), &2.into()),
        "{d}"
    );
    let c = serve.get_json("/api/queues/flow/tasks/c")?;
    assert_eq!(c["state"], "delayed", "{c}");
    let unknown = serve.get("/api/queues/flow/tasks/nope")?;
    assert_eq!(unknown.status, 404);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&unknown.body)?["state"],
        "unknown"
    );
    assert_eq!(serve.get("/queues/flow/tasks/nope")?.status, 404);
    let counts = serve.get_json("/api/queues/flow")?;
    assert_eq!(counts["blocked"], 2, "{counts}");
    // Ids are escaped in the HTML and percent-encoded in links.
    let page = serve.get("/queues/flow/tasks/b")?;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("<img"), "{}", page.body);
    assert!(
        page.body
            .contains("/queues/flow/tasks/%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E")
    );
    // A task without links, on a queue without an event log.
    assert_eq!(run_on(&s, &["queue", "push", "plain", "solo"]).code(), 0);
    let solo = serve.get_json("/api/queues/plain/tasks/solo")?;
    assert_eq!(
        (&solo["state"], &solo["events_on"], &solo["events"]),
        (&"waiting".into(), &false.into(), &serde_json::json!([])),
        "{solo}"
    );
    let page = serve.get("/queues/plain/tasks/solo")?.body;
    assert!(page.contains("id=\"no-deps\"") && page.contains("id=\"events-off\""));

    // From the queue's listing to the task's page.
    let b = Browser::start(&chromium, &driver)?;
    b.goto(&serve.url("/queues/flow?state=in_flight"))?;
    b.click("tr[data-task=\"b\"] a.task-link")?;
    let state = b.eval_until(
        "var s = document.getElementById('task-state'); return s ? s.textContent : null",
        |v| !v.is_null(),
    )?;
    assert_eq!(state, "in flight");
    let nodes = b.eval(
        "return Array.from(document.querySelectorAll('#graph .node')).map(function (n) { \
         return [n.getAttribute('data-role'), n.getAttribute('data-id'), n.getAttribute('data-state'), \
         n.querySelector('title').textContent, n.querySelector('text.id').textContent]; })",
    )?;
    assert_eq!(
        nodes,
        serde_json::json!([
            ["dep", "a", "completed", "a (completed)", "a"],
            ["task", "b", "in_flight", "b (in flight)", "b"],
            ["dependent", "d", "blocked", "d (blocked)", "d"],
            [
                "dependent",
                HTML_ID,
                "blocked",
                format!("{HTML_ID} (blocked)"),
                "<img src=x onerror=alert(…"
            ],
        ]),
        "ids are text, not markup"
    );
    let edges = b.eval(
        "return Array.from(document.querySelectorAll('#graph .edge')).map(function (e) { \
         return e.getAttribute('data-from') + '>' + e.getAttribute('data-to'); })",
    )?;
    assert_eq!(
        edges,
        serde_json::json!(["a>b", "b>d", format!("b>{HTML_ID}")])
    );
    // Every label fits its box, and no two boxes overlap.
    let fits = b.eval(
        "var ok = true, boxes = []; document.querySelectorAll('#graph .node').forEach(function (n) { \
           var r = n.querySelector('rect').getBBox(); boxes.forEach(function (o) { \
             if (r.x < o.x + o.width && o.x < r.x + r.width && r.y < o.y + o.height && o.y < r.y + r.height) ok = false; }); \
           boxes.push(r); n.querySelectorAll('text').forEach(function (t) { \
             var b = t.getBBox(); if (b.x + b.width > r.x + r.width - 4 || b.y + b.height > r.y + r.height) ok = false; }); }); \
         return ok;",
    )?;
    assert_eq!(fits, true);
    assert_eq!(
        b.eval("return document.querySelector('#progress .pct').textContent")?,
        "40%"
    );
    assert_eq!(
        b.eval("return document.querySelector('#progress .message').textContent")?,
        "halfway"
    );
    let rows = b.eval(
        "return Array.from(document.querySelectorAll('#events tr[data-event]')).map(function (r) { return r.getAttribute('data-event'); })",
    )?;
    assert_eq!(
        rows,
        serde_json::json!(["added", "released", "claimed", "progress"])
    );
    assert!(
        b.eval("return document.querySelector('#events tr[data-event=\"progress\"] .detail').textContent")?
            .as_str()
            .is_some_and(|t| t.contains("40%") && t.contains("halfway"))
    );
    assert!(!b.alert_open());
    assert_eq!(b.eval("return document.images.length")?, 0);
    // (Tall enough for the whole page in the screenshot.)
    b.resize(1280, 1080)?;
    shot(&b, "dashboard-task.png")?;

    // A node is a link to its task's page: the HTML id's (percent-encoded), then a's.
    b.click("#graph a.node[data-role=\"dependent\"]:not([data-id=\"d\"])")?;
    let heading = b.eval_until(
        "var h = document.querySelector('h1 .task-id'); return h ? h.textContent : null",
        |v| v.as_str() == Some(HTML_ID),
    )?;
    assert_eq!(heading, HTML_ID);
    assert!(!b.alert_open());
    b.click("#graph a.node[data-id=\"b\"]")?;
    b.eval_until(
        "var h = document.querySelector('h1 .task-id'); return h ? h.textContent : null",
        |v| v.as_str() == Some("b"),
    )?;
    b.click("#graph a.node[data-id=\"a\"]")?;
    let result = b.eval_until(
        "var h = document.querySelector('h1 .task-id'); var r = document.querySelector('.result-size'); \
         return h && h.textContent === 'a' && r ? r.textContent : null",
        |v| !v.is_null(),
    )?;
    assert_eq!(result, "6 B");

    signal(&worker.pid().to_string(), "TERM");
    let r = worker.finish(Duration::from_secs(60));
    assert_eq!(r.code(), 0, "{}", r.stderr);
    Ok(())
}

/// A queue over 3 shards (issue 35): 24 waiting tasks spread by id, 2 in
/// flight, 1 dead; then paused.
fn sharded(server: &RedisServer) -> Result<(), Error> {
    use dlm::queue::{NewTask, OnDuplicate, QueueSettings};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let c = dlm::Client::connect(&server.url()).await?;
        let q = c.queue("clicks").max_attempts(1);
        q.configure(&QueueSettings::default().shards(3)).await?;
        let ids: Vec<NewTask> = (0..27).map(|i| NewTask::new(format!("c{i}"))).collect();
        q.enqueue(ids, Duration::ZERO, OnDuplicate::Keep).await?;
        let mut leases = q.claim(3, Duration::from_secs(600)).await?;
        if let Some(l) = leases.pop() {
            l.nack("boom").await?;
        }
        for l in leases {
            std::mem::forget(l);
        }
        q.pause().await?;
        Ok::<_, Error>(())
    })
}

#[test]
fn a_sharded_queue_shows_its_shards_in_the_page_the_api_and_metrics() -> Result<(), Error> {
    let s = filled()?;
    sharded(&s)?;
    let serve = Serve::start(&s, "127.0.0.1", &[])?;

    // The API: the sum, and each shard with its tag and slot.
    let api = serve.get_json("/api/queues/clicks")?;
    assert_eq!(
        (&api["waiting"], &api["in_flight"], &api["dead"]),
        (&24.into(), &2.into(), &1.into()),
        "{api}"
    );
    let shards = api["shards"].as_array().ok_or("shards")?;
    assert_eq!(shards.len(), 3, "{api}");
    let waiting: Vec<u64> = shards
        .iter()
        .filter_map(|x| x["waiting"].as_u64())
        .collect();
    assert_eq!(waiting.iter().sum::<u64>(), 24);
    assert_eq!(shards[1]["tag"], "clicks#1");
    assert!(serve.get_json("/api/queues/jobs")?["shards"].is_null());

    // The page: one row per shard, with its counts, above the tasks.
    let page = serve.get("/queues/clicks")?;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("<h2 id=\"shards\">Shards"),
        "{}",
        page.body
    );
    for (i, w) in waiting.iter().enumerate() {
        let row = format!("<tr data-shard=\"{i}\"><td class=\"num\">{i}</td>");
        let at = page.body.find(&row).ok_or(row)?;
        let tail = &page.body[at..];
        assert!(
            tail.contains(&format!("<td class=\"num\">{w}</td>")),
            "{}",
            &tail[..300.min(tail.len())]
        );
    }
    assert!(!serve.get("/queues/jobs")?.body.contains("id=\"shards\""));

    // /metrics: the sums as ever, and the waiting tasks per shard.
    let m = serve.get("/metrics")?;
    assert!(
        m.body
            .lines()
            .any(|l| l == "dlm_queue_depth{queue=\"clicks\",state=\"waiting\"} 24"),
        "{}",
        m.body
    );
    for (i, w) in waiting.iter().enumerate() {
        let line = format!("dlm_queue_shard_depth{{queue=\"clicks\",shard=\"{i}\"}} {w}");
        assert!(
            m.body.lines().any(|l| l == line),
            "no {line:?} in:\n{}",
            m.body
        );
    }
    assert!(
        !m.body.contains("dlm_queue_shard_depth{queue=\"jobs\""),
        "one shard: no per-shard series"
    );
    Ok(())
}

#[test]
fn browser_shows_the_shard_table() -> Result<(), Error> {
    let Some((chromium, driver)) = browser() else {
        eprintln!(
            "SKIPPED: chromium and chromedriver are not installed (scripts/ensure-deps.sh --tests installs them)"
        );
        return Ok(());
    };
    let s = filled()?;
    sharded(&s)?;
    let serve = Serve::start(&s, "127.0.0.1", &[])?;
    let b = Browser::start(&chromium, &driver)?;
    b.goto(&serve.url("/queues/clicks"))?;
    assert_eq!(
        b.eval("return document.querySelectorAll('table.shards tbody tr').length")?,
        3
    );
    assert_eq!(
        b.eval("return document.querySelector('tr[data-shard=\"2\"] td.mono').textContent")?,
        "clicks#2"
    );
    // Waiting is the fifth column (shard, tag, slot, master, waiting).
    let shown: u64 = (0..3)
        .map(|i| {
            b.eval(&format!(
                "return Number(document.querySelector('tr[data-shard=\"{i}\"] td:nth-child(5)').textContent)"
            ))
            .ok()
            .and_then(|v| v.as_u64())
            .unwrap_or(0)
        })
        .sum();
    assert_eq!(shown, 24);
    assert!(!b.alert_open());
    b.resize(1280, 1400)?;
    shot(&b, "dashboard-shards.png")?;
    Ok(())
}

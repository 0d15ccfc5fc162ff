//! The CLI on the deployments users run: a Redis Cluster (`--cluster`), a
//! master behind Sentinels (`--sentinel NAME`), mutual TLS (`--cacert`,
//! `--cert`, `--key`) and a least-privilege ACL user.

mod common;

use std::time::Duration;

use common::*;
use dlm_testkit::{Cluster, RedisServer, Sentinels, TlsFiles};

/// `dlm` with these arguments, its environment cleared of DLM_* settings.
fn run_args(args: &[&str]) -> Run {
    let mut cmd = dlm();
    cmd.args(args);
    start(cmd).finish(Duration::from_secs(60))
}

#[test]
fn every_lock_and_queue_command_works_on_a_cluster() -> TestResult {
    let cluster = Cluster::start()?;
    let seed = cluster.seed_url();
    let on = |rest: &[&str]| {
        let mut args = vec!["--cluster", "--redis", seed.as_str()];
        args.extend_from_slice(rest);
        run_args(&args)
    };
    // Names in every master's slots.
    for i in 0..30 {
        let name = format!("job:{i}");
        let r = on(&["--json", "lock", "acquire", &name, "--ttl", "10s"]);
        assert_eq!(r.code(), 0, "{}", r.stderr);
        let v: serde_json::Value = serde_json::from_str(r.stdout.trim())?;
        let token = v["token"].as_str().ok_or("token")?.to_string();
        assert!(v["fence"].as_u64().is_some(), "{v}");
        assert_eq!(on(&["lock", "acquire", &name, "--ttl", "10s"]).code(), 1);
        let r = on(&["--json", "lock", "status", &name]);
        assert!(r.stdout.contains("\"held\":true"), "{}", r.stdout);
        assert_eq!(
            on(&["lock", "extend", &name, "--token", &token, "--ttl", "10s"]).code(),
            0
        );
        assert_eq!(on(&["lock", "release", &name, "--token", &token]).code(), 0);
    }

    // lock run excludes across processes (the counter lives on the cluster too).
    let port = cluster.nodes()[0].port();
    let script = format!(
        "v=$(redis-cli -c -p {port} GET counter); sleep 0.02; redis-cli -c -p {port} SET counter $((v+1)) >/dev/null"
    );
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    for _ in 0..5 {
                        let r = on(&[
                            "lock", "run", "counter", "--ttl", "5s", "--wait", "60s", "--", "sh",
                            "-c", &script,
                        ]);
                        assert_eq!(r.code(), 0, "{}", r.stderr);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().expect("worker");
        }
    });
    let master = cluster
        .master_for_slot(dlm_testkit::key_slot("counter"))
        .ok_or("a master for the counter's slot")?;
    assert_eq!(master.command(&["GET", "counter"])?, "20");

    // The queue: push, work each task once, stats.
    for i in 0..50 {
        assert_eq!(on(&["queue", "push", "mail", &format!("m{i}")]).code(), 0);
    }
    let r = on(&[
        "queue",
        "work",
        "mail",
        "--concurrency",
        "4",
        "--exit-when-empty",
        "--",
        "true",
    ]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let r = on(&["--json", "queue", "stats", "mail"]);
    let stats: serde_json::Value = serde_json::from_str(r.stdout.trim())?;
    assert_eq!(stats["waiting"], 0, "{stats}");
    assert_eq!(stats["processed"], 50, "{stats}");

    // Without --cluster, a node of a cluster says what to do.
    let mut wrong = None;
    for i in 0..10 {
        let r = run_args(&[
            "--redis",
            &seed,
            "lock",
            "acquire",
            &format!("elsewhere:{i}"),
            "--ttl",
            "5s",
        ]);
        if r.code() != 0 {
            wrong = Some(r);
            break;
        }
    }
    let r = wrong.ok_or("some name lives on another node")?;
    assert_eq!(r.code(), 3, "{}", r.stderr);
    assert!(r.stderr.contains("--cluster"), "{}", r.stderr);
    Ok(())
}

#[test]
fn lock_and_queue_commands_follow_the_sentinels_master() -> TestResult {
    let sentinels = Sentinels::start("dlm-cli")?;
    let urls = sentinels.sentinel_urls();
    let on = |rest: &[&str]| {
        let mut args = vec!["--sentinel", "dlm-cli"];
        for u in &urls {
            args.extend_from_slice(&["--redis", u.as_str()]);
        }
        args.extend_from_slice(rest);
        run_args(&args)
    };
    let r = on(&["lock", "acquire", "deploy", "--ttl", "10s"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let token = r.stdout.trim().to_string();
    assert_eq!(
        sentinels.master().command(&["GET", "dlm:lock:{deploy}"])?,
        token,
        "written to the master"
    );
    assert_eq!(
        on(&["lock", "release", "deploy", "--token", &token]).code(),
        0
    );
    assert_eq!(on(&["queue", "push", "jobs", "j1"]).code(), 0);
    let r = on(&["--json", "queue", "stats", "jobs"]);
    assert!(r.stdout.contains("\"waiting\":1"), "{}", r.stdout);

    let mut args = vec!["--sentinel", "no-such-master"];
    for u in &urls {
        args.extend_from_slice(&["--redis", u.as_str()]);
    }
    args.extend_from_slice(&["lock", "status", "x"]);
    let r = run_args(&args);
    assert_eq!(r.code(), 3, "unknown master name: {}", r.stderr);
    Ok(())
}

#[test]
fn mutual_tls_works_and_its_failures_are_clear() -> TestResult {
    if dlm_testkit::skip_without(dlm_testkit::Feature::Tls) {
        return Ok(());
    }
    let files = TlsFiles::generate()?;
    let server = RedisServer::builder().tls(&files, true).start()?;
    let url = server.url();
    assert!(url.starts_with("rediss://"), "{url}");
    let (ca, cert, key) = (
        files.ca_cert.display().to_string(),
        files.client_cert.display().to_string(),
        files.client_key.display().to_string(),
    );
    let ok = run_args(&[
        "--redis", &url, "--cacert", &ca, "--cert", &cert, "--key", &key, "lock", "acquire", "tls",
        "--ttl", "5s",
    ]);
    assert_eq!(ok.code(), 0, "{}", ok.stderr);
    let q = run_args(&[
        "--redis", &url, "--cacert", &ca, "--cert", &cert, "--key", &key, "queue", "push", "q",
        "t1",
    ]);
    assert_eq!(q.code(), 0, "{}", q.stderr);

    // The same settings from the environment.
    let mut cmd = dlm();
    cmd.env("DLM_REDIS_URL", &url)
        .env("DLM_CACERT", &ca)
        .env("DLM_CERT", &cert)
        .env("DLM_KEY", &key)
        .args(["lock", "status", "tls"]);
    let r = start(cmd).finish(Duration::from_secs(30));
    assert_eq!(r.code(), 0, "{}", r.stderr);

    let no_client_cert = run_args(&["--redis", &url, "--cacert", &ca, "lock", "status", "tls"]);
    assert_eq!(no_client_cert.code(), 3, "{}", no_client_cert.stderr);
    let other = files.other_ca_cert.display().to_string();
    let unknown_ca = run_args(&[
        "--redis", &url, "--cacert", &other, "--cert", &cert, "--key", &key, "lock", "status",
        "tls",
    ]);
    assert_eq!(unknown_ca.code(), 3, "{}", unknown_ca.stderr);
    assert!(
        unknown_ca.stderr.to_lowercase().contains("certificate"),
        "{}",
        unknown_ca.stderr
    );
    let missing = run_args(&[
        "--redis",
        &url,
        "--cacert",
        "/nonexistent/ca.crt",
        "lock",
        "status",
        "x",
    ]);
    assert_eq!(missing.code(), 2, "{}", missing.stderr);
    let half = run_args(&["--redis", &url, "--cert", &cert, "lock", "status", "x"]);
    assert_eq!(half.code(), 2, "{}", half.stderr);
    Ok(())
}

#[test]
fn a_least_privilege_acl_user_runs_every_command() -> TestResult {
    let server = RedisServer::builder()
        .acl_user("dlm", "s3cret", dlm::keys::ACL_RULES)
        .start()?;
    let url = server.url_as("dlm", "s3cret");
    let on = |rest: &[&str]| {
        let mut args = vec!["--redis", url.as_str()];
        args.extend_from_slice(rest);
        run_args(&args)
    };
    let r = on(&["lock", "acquire", "acl", "--ttl", "5s"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let token = r.stdout.trim().to_string();
    assert_eq!(on(&["lock", "status", "acl"]).code(), 0);
    assert_eq!(
        on(&["lock", "extend", "acl", "--token", &token, "--ttl", "5s"]).code(),
        0
    );
    assert_eq!(on(&["lock", "release", "acl", "--token", &token]).code(), 0);
    let r = on(&["lock", "run", "acl", "--ttl", "2s", "--", "true"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    for i in 0..20 {
        assert_eq!(on(&["queue", "push", "acl", &format!("t{i}")]).code(), 0);
    }
    assert_eq!(on(&["queue", "peek", "acl"]).code(), 0);
    let r = on(&["queue", "work", "acl", "--exit-when-empty", "--", "true"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let r = on(&["--json", "queue", "stats", "acl"]);
    assert!(r.stdout.contains("\"processed\":20"), "{}", r.stdout);
    assert_eq!(on(&["queue", "dead", "acl"]).code(), 0);

    let wrong = server.url_as("dlm", "wrong");
    let r = run_args(&["--redis", &wrong, "lock", "status", "acl"]);
    assert_eq!(r.code(), 3, "{}", r.stderr);
    let msg = r.stderr.to_lowercase();
    assert!(
        msg.contains("auth") || msg.contains("password"),
        "{}",
        r.stderr
    );
    assert!(
        !r.stderr.contains("wrong"),
        "the password never shows: {}",
        r.stderr
    );
    Ok(())
}

#[test]
fn cluster_and_sentinel_exclude_each_other() {
    let r = run_args(&["--cluster", "--sentinel", "m", "lock", "status", "x"]);
    assert_eq!(r.code(), 2, "{}", r.stderr);
}

#[test]
fn demo_and_bench_run_on_a_private_cluster() -> TestResult {
    let r = run_args(&["--cluster", "--json", "demo", "seckill", "--buyers", "100"]);
    assert_eq!(r.code(), 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        r.stdout.lines().count(),
        6,
        "one line per strategy: {}",
        r.stdout
    );
    let r = run_args(&[
        "--cluster",
        "--json",
        "bench",
        "lock",
        "--concurrency",
        "4",
        "--duration",
        "300ms",
        "--warmup",
        "50ms",
    ]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim())?;
    assert!(
        v["ops"].as_u64().unwrap_or(0) > 0 && v["errors"] == 0,
        "{v}"
    );
    let r = run_args(&["--cluster", "--json", "bench", "queue", "--tasks", "2000"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert!(r.stdout.contains("\"phase\":\"process\""), "{}", r.stdout);
    Ok(())
}

/// SIGKILL the master under a running `queue work` and `lock run`: the worker
/// goes on with the new master; `lock run` either keeps its lock there
/// (exit 0) or reports it lost (exit 4), never anything else.
#[test]
fn queue_work_and_lock_run_keep_going_across_a_sentinel_failover() -> TestResult {
    let mut sentinels = Sentinels::start("dlm-cli-failover")?;
    let mut base = vec!["--sentinel".to_string(), "dlm-cli-failover".to_string()];
    for u in sentinels.sentinel_urls() {
        base.extend(["--redis".to_string(), u]);
    }
    let with = |rest: &[&str]| {
        let mut cmd = dlm();
        cmd.args(&base).args(rest);
        cmd
    };
    let dir = tempdir()?;
    let done = path_in(&dir, "done");
    let script = format!("echo $DLM_TASK_ID >> '{}'", done.display());
    let worker = start(with(&[
        "queue",
        "work",
        "jobs",
        "--concurrency",
        "2",
        "--",
        "sh",
        "-c",
        &script,
    ]));
    let holder = start(with(&[
        "lock", "run", "leader", "--ttl", "2s", "--", "sleep", "8",
    ]));
    let lines = |p: &std::path::Path| {
        std::fs::read_to_string(p)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };
    let wait_for = |n: usize| {
        let t0 = std::time::Instant::now();
        while lines(&done) < n && t0.elapsed() < Duration::from_secs(25) {
            std::thread::sleep(Duration::from_millis(50));
        }
        lines(&done)
    };
    for i in 0..10 {
        let r = start(with(&["queue", "push", "jobs", &format!("before:{i}")]))
            .finish(Duration::from_secs(30));
        assert_eq!(r.code(), 0, "{}", r.stderr);
    }
    assert_eq!(wait_for(10), 10);

    let old = sentinels.kill_master()?;
    sentinels.wait_for_failover(old, Duration::from_secs(30))?;
    let t0 = std::time::Instant::now();
    let mut pushed = 0;
    while pushed < 10 && t0.elapsed() < Duration::from_secs(30) {
        let r = start(with(&["queue", "push", "jobs", &format!("after:{pushed}")]))
            .finish(Duration::from_secs(30));
        if r.code() == 0 {
            pushed += 1;
        } else {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    assert_eq!(pushed, 10, "pushes work again after the failover");
    assert!(wait_for(20) >= 20, "the worker went on with the new master");

    let r = holder.finish(Duration::from_secs(30));
    assert!(
        matches!(r.code(), 0 | 4),
        "lock run: {} {}",
        r.code(),
        r.stderr
    );
    signal(&worker.pid().to_string(), "TERM");
    let r = worker.finish(Duration::from_secs(30));
    assert_eq!(r.code(), 0, "{}", r.stderr);
    Ok(())
}

#[test]
fn unreachable_sentinels_fail_fast_with_exit_3() {
    let r = run_args(&[
        "--timeout",
        "500ms",
        "--sentinel",
        "m",
        "--redis",
        "redis://127.0.0.1:1",
        "lock",
        "status",
        "x",
    ]);
    assert_eq!(r.code(), 3, "{}", r.stderr);
    assert!(r.elapsed < Duration::from_secs(5), "{:?}", r.elapsed);
}

/// The issue-23 commands on one deployment, given its global flags:
/// `elect run` and `elect status`, `rwlock run` and `rwlock status`,
/// `lock status --fair` and a dense `check lock --primitive`.
fn new_commands_on(flags: &[String]) -> TestResult {
    let on = |rest: &[&str]| {
        let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
        args.extend_from_slice(rest);
        run_args(&args)
    };
    let r = on(&[
        "elect", "run", "topo", "--id", "me", "--ttl", "5s", "--", "sh", "-c", "exit 5",
    ]);
    assert_eq!(r.code(), 5, "CMD's code: {}", r.stderr);
    let r = on(&["--json", "elect", "status", "topo"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim())?;
    assert_eq!(
        (v["leader"].is_null(), v["last_term"].as_u64()),
        (true, Some(1)),
        "{v}"
    );
    let r = on(&[
        "rwlock", "run", "topo-rw", "--write", "--ttl", "5s", "--", "true",
    ]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let r = on(&["--json", "rwlock", "status", "topo-rw"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim())?;
    assert_eq!(
        (v["writer"].as_bool(), v["readers"].as_u64()),
        (Some(false), Some(0)),
        "{v}"
    );
    let r = on(&[
        "lock",
        "run",
        "topo-fair",
        "--fair",
        "--ttl",
        "5s",
        "--",
        "true",
    ]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let r = on(&["--json", "lock", "status", "topo-fair", "--fair"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert!(r.stdout.contains("\"waiting\":0"), "{}", r.stdout);
    for primitive in ["election", "semaphore"] {
        let r = on(&[
            "--json",
            "check",
            "lock",
            "--primitive",
            primitive,
            "--clients",
            "3",
            "--duration",
            "1s",
        ]);
        assert_eq!(r.code(), 0, "{primitive}: {}{}", r.stdout, r.stderr);
    }
    workflow_commands_on(&on)
}

/// The issue-24 commands on one deployment: dependencies, results, the
/// task view, the event log and the live workers.
fn workflow_commands_on(on: &dyn Fn(&[&str]) -> Run) -> TestResult {
    let r = on(&["queue", "config", "flow", "--events", "100"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert_eq!(on(&["queue", "push", "flow", "a"]).code(), 0);
    let r = on(&["--json", "queue", "push", "flow", "b", "--after", "a"]);
    assert!(r.stdout.contains("blocked"), "{}{}", r.stdout, r.stderr);
    assert_eq!(
        on(&["queue", "push", "flow", "c", "--after", "nope"]).code(),
        2
    );
    let r = on(&[
        "queue",
        "work",
        "flow",
        "--exit-when-empty",
        "--",
        "sh",
        "-c",
        "printf 'out-%s' \"$DLM_TASK_ID\"",
    ]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let r = on(&["--json", "queue", "task", "flow", "b"]);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim())?;
    assert_eq!(
        (v["state"].as_str(), v["result_bytes"].as_u64()),
        (Some("completed"), Some(5)),
        "{v}"
    );
    let r = on(&["queue", "result", "flow", "b"]);
    assert_eq!((r.code(), r.stdout.as_str()), (0, "out-b"), "{}", r.stderr);
    let r = on(&["--json", "queue", "events", "flow"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert!(
        r.stdout.contains(r#""event":"released","id":"b""#),
        "{}",
        r.stdout
    );
    let r = on(&["--json", "queue", "workers", "flow"]);
    assert_eq!(
        (r.code(), r.stdout.trim()),
        (0, ""),
        "no worker, no line: {}",
        r.stderr
    );
    Ok(())
}

#[test]
fn the_new_commands_work_on_every_deployment() -> TestResult {
    let s = |x: &str| x.to_string();
    let cluster = Cluster::start()?;
    new_commands_on(&[s("--cluster"), s("--redis"), cluster.seed_url()])?;
    drop(cluster);
    let sentinels = Sentinels::start("dlm-cli-new")?;
    let mut flags = vec![s("--sentinel"), s("dlm-cli-new")];
    for u in sentinels.sentinel_urls() {
        flags.extend([s("--redis"), u]);
    }
    new_commands_on(&flags)?;
    drop(sentinels);
    let acl = RedisServer::builder()
        .acl_user("dlm", "s3cret", dlm::keys::ACL_RULES)
        .start()?;
    new_commands_on(&[s("--redis"), acl.url_as("dlm", "s3cret")])
}

#[test]
fn the_new_commands_work_over_mutual_tls() -> TestResult {
    if dlm_testkit::skip_without(dlm_testkit::Feature::Tls) {
        return Ok(());
    }
    let s = |x: &str| x.to_string();
    let files = TlsFiles::generate()?;
    let tls = RedisServer::builder().tls(&files, true).start()?;
    let path = |p: &std::path::Path| p.display().to_string();
    new_commands_on(&[
        s("--redis"),
        tls.url(),
        s("--cacert"),
        path(&files.ca_cert),
        s("--cert"),
        path(&files.client_cert),
        s("--key"),
        path(&files.client_key),
    ])
}

//! `dlm id next`, `dlm queue schedule | schedules | unschedule` with
//! `queue work` processes firing the ticks, and `dlm demo dispatch`: against
//! real redis-servers and real processes; bad input exits 2 and writes nothing.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use common::*;

/// How many keys the server holds (for "nothing written").
fn dbsize(server: &RedisServer) -> String {
    let reply = server.command(&["DBSIZE"]).unwrap_or_default();
    reply.trim().trim_start_matches(':').to_string()
}

#[test]
fn ids_from_four_processes_are_distinct_and_increasing_per_process() -> TestResult {
    let server = server();
    let url = server.url();
    let runs: Vec<Running> = (0..4)
        .map(|_| {
            let mut cmd = dlm();
            cmd.args(["--redis", &url, "id", "next", "orders", "--count", "250"]);
            start(cmd)
        })
        .collect();
    let mut all = HashSet::new();
    for r in runs {
        let r = r.finish(Duration::from_secs(20));
        assert_eq!(r.code(), 0, "{}", r.stderr);
        let ids: Vec<u64> = r
            .stdout
            .lines()
            .map(|l| l.parse())
            .collect::<Result<_, _>>()?;
        assert_eq!(ids.len(), 250);
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "not increasing");
        for id in ids {
            assert!(all.insert(id), "{id} handed out twice");
        }
    }
    assert_eq!(all.len(), 1000);
    let one = run_on(&server, &["--json", "id", "next", "orders"]);
    assert_eq!(json_lines(&one)[0]["id"], 1001, "{}", one.stdout);
    Ok(())
}

#[test]
fn a_schedule_every_second_with_three_workers_runs_once_per_tick() -> TestResult {
    let server = server();
    let dir = tempdir()?;
    let log = path_in(&dir, "runs");
    let r = run_on(
        &server,
        &[
            "queue",
            "schedule",
            "cron",
            "beat",
            "--every",
            "1s",
            "--payload",
            "p",
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert!(r.stdout.starts_with("added beat"), "{}", r.stdout);
    let script = format!("echo $DLM_TASK_ID >> '{}'", log.display());
    let url = server.url();
    let started = Instant::now();
    let workers: Vec<Running> = (0..3)
        .map(|_| {
            let mut cmd = dlm();
            cmd.args([
                "--redis", &url, "--json", "queue", "work", "cron", "--", "sh", "-c", &script,
            ]);
            start(cmd)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(6).saturating_sub(started.elapsed()));
    for w in &workers {
        signal(&w.pid().to_string(), "TERM");
    }
    for w in workers {
        let r = w.finish(Duration::from_secs(15));
        assert_eq!(r.code(), 0, "{}", r.stderr);
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for id in text.lines() {
        *seen.entry(id).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "ticks run twice: {twice:?}");
    assert!((5..=7).contains(&seen.len()), "{} runs: {text}", seen.len());
    for id in seen.keys() {
        let tick: u64 = id.strip_prefix("beat@").unwrap_or_default().parse()?;
        assert_eq!(tick % 1000, 0, "{id} is off the grid");
    }
    let listed = run_on(&server, &["queue", "schedules", "cron"]);
    let lines = json_lines(&listed);
    assert_eq!(lines.len(), 1, "{}", listed.stdout);
    assert_eq!(lines[0]["every_ms"], 1000);
    assert_eq!(lines[0]["payload"], "p");
    assert_eq!(
        run_on(&server, &["queue", "unschedule", "cron", "beat"]).code(),
        0
    );
    assert_eq!(
        run_on(&server, &["queue", "unschedule", "cron", "beat"]).code(),
        1
    );
    assert_eq!(run_on(&server, &["queue", "schedules", "cron"]).stdout, "");
    Ok(())
}

#[test]
fn the_dispatch_demo_is_exact() -> TestResult {
    let r = run(&[
        "demo",
        "dispatch",
        "--editors",
        "6",
        "--tasks",
        "40",
        "--limit",
        "500ms",
    ]);
    assert_eq!(r.code(), 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("editor-6"), "{}", r.stdout);
    assert!(r.stdout.contains("exact: every task was done exactly once"));
    let server = server();
    let r = run_on(
        &server,
        &[
            "--json",
            "demo",
            "dispatch",
            "--editors",
            "4",
            "--tasks",
            "20",
            "--limit",
            "300ms",
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let lines = json_lines(&r);
    let total = lines.last().ok_or("no totals")?;
    assert_eq!(total["exact"], true, "{total}");
    assert_eq!(total["done"], 20);
    assert_eq!(total["processed"], 20);
    assert!(total["abandoned"].as_u64() >= Some(1), "{total}");
    assert_eq!(total["abandoned"], total["returned_after_timeout"]);
    let walked: u64 = lines[..lines.len() - 1]
        .iter()
        .filter_map(|l| l["abandoned"].as_u64())
        .sum();
    assert_eq!(Some(walked), total["abandoned"].as_u64());
    Ok(())
}

#[test]
fn bad_input_exits_2_and_writes_nothing() -> TestResult {
    let server = server();
    for args in [
        &["id", "next", "n", "--count", "0"][..],
        &["queue", "schedule", "q", "s", "--cron", "every tuesday"],
        &["queue", "schedule", "q", "s", "--cron", "61 * * * *"],
        &["queue", "schedule", "q", "s", "--every", "0s"],
        &["queue", "schedule", "q", "s"],
        &[
            "queue",
            "schedule",
            "q",
            "s",
            "--every",
            "1s",
            "--cron",
            "* * * * *",
        ],
        &["demo", "dispatch", "--editors", "2", "--walk-away", "2"],
    ] {
        let r = run_on(&server, args);
        assert_eq!(r.code(), 2, "{args:?}: {}", r.stderr);
    }
    assert_eq!(dbsize(&server), "0", "something was written");
    Ok(())
}

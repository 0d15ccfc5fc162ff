//! Issue 16 sections 3 and 4, cheaply: every `bench` variant labels its
//! JSON lines with its own `impl` (the plain run stays `"dlm"`), and
//! `bench curves` writes each curve's lines. Tiny runs only: no figure is
//! asserted (benchmarks are never timed assertions).

mod common;

use std::time::Duration;

use common::*;

type Line = Result<serde_json::Value, Box<dyn std::error::Error + Send + Sync>>;

/// One short `bench lock` run with `extra` flags (and a warmup of `warmup`).
fn lock_line_after(warmup: &str, extra: &[&str]) -> Line {
    let mut args = vec![
        "--json",
        "bench",
        "lock",
        "--concurrency",
        "2",
        "--duration",
        "300ms",
        "--warmup",
        warmup,
    ];
    args.extend(extra);
    let r = run(&args);
    assert_eq!(r.code(), 0, "{args:?}: {}", r.stderr);
    let lines = json_lines(&r);
    assert_eq!(lines.len(), 1, "{}", r.stdout);
    let line = lines.into_iter().next().ok_or("no line")?;
    assert!(line["ops"].as_u64().ok_or("ops")? > 0, "{line}");
    assert_eq!(line["errors"], 0, "{line}");
    Ok(line)
}

fn lock_line(extra: &[&str]) -> Line {
    lock_line_after("50ms", extra)
}

#[test]
fn lock_variants_carry_their_labels() -> TestResult {
    let cases: [(&[&str], &str, &str); 6] = [
        (&[], "dlm", "default"),
        (&["--primitive", "fair"], "dlm-fair", "fair"),
        (
            &["--primitive", "rw", "--mode", "contended"],
            "dlm-rw",
            "rw",
        ),
        (
            &[
                "--primitive",
                "semaphore",
                "--permits",
                "3",
                "--mode",
                "contended",
            ],
            "dlm-semaphore3",
            "semaphore3",
        ),
        (&["--metrics"], "dlm-metrics", "metrics"),
        (&["--nodes", "3"], "dlm-redlock3", "redlock3"),
    ];
    for (extra, label, variant) in cases {
        let line = lock_line(extra)?;
        assert_eq!(line["impl"], label, "{extra:?}: {line}");
        assert_eq!(line["variant"], variant, "{extra:?}: {line}");
    }
    Ok(())
}

#[test]
fn replicas_without_redis_start_a_master_with_replicas() -> TestResult {
    // The first WAIT may wait for the replica's first REPLCONF ACK (sent
    // every second): a warmup past it.
    let line = lock_line_after("1500ms", &["--replicas", "1"])?;
    assert_eq!(line["impl"], "dlm-replicas1", "{line}");
    assert_eq!(line["topology"], "standalone", "{line}");
    assert_eq!(line["replicas"], 1, "{line}");
    Ok(())
}

#[test]
fn cluster_with_replicas_is_labelled_so() -> TestResult {
    let line = lock_line_after("1500ms", &["--cluster", "--replicas", "1"])?;
    assert_eq!(line["impl"], "dlm-cluster-replicas1", "{line}");
    assert_eq!(line["topology"], "cluster", "{line}");
    Ok(())
}

#[test]
fn queue_variants_carry_their_labels() -> TestResult {
    let r = run(&[
        "--json",
        "bench",
        "queue",
        "--tasks",
        "300",
        "--concurrency",
        "8",
        "--batch",
        "100",
        "--idle-samples",
        "3",
        "--priorities",
        "10",
        "--groups",
        "5",
        "--group-concurrency",
        "2",
    ]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let lines = json_lines(&r);
    assert_eq!(lines.len(), 3, "{}", r.stdout);
    for line in &lines {
        assert_eq!(line["impl"], "dlm-prio10-groups5-gc2", "{line}");
        assert_eq!(line["variant"], "prio10-groups5-gc2", "{line}");
    }
    Ok(())
}

#[test]
fn curves_write_every_curve_on_a_toy_size() -> TestResult {
    let dir = tempdir()?;
    let out = dir.path().join("curves");
    let out_s = out.to_str().ok_or("path")?;
    let mut cmd = dlm();
    cmd.args(["bench", "curves", "--out", out_s, "--concurrencies", "1,2"])
        .args(["--duration", "200ms", "--warmup", "0s"])
        .args(["--held", "50,100", "--held-ttl", "3s", "--window", "1s"])
        .args(["--queue-sizes", "300", "--claim-samples", "3"])
        .args(["--workers", "1,2", "--worker-tasks", "300"]);
    let r = start(cmd).finish(Duration::from_secs(60));
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let read = |name: &str| -> Vec<serde_json::Value> {
        std::fs::read_to_string(out.join(name))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    let conc = read("locks-concurrency.jsonl");
    assert_eq!(conc.len(), 4, "{conc:?}");
    assert!(
        conc.iter()
            .all(|l| l["impl"] == "dlm" && l["curve"] == "locks-concurrency")
    );
    let held = read("locks-held.jsonl");
    assert_eq!(held.len(), 2, "{held:?}");
    assert_eq!(held[1]["held"], 100);
    assert_eq!(held[1]["lost"], 0);
    let queue = read("queue-size.jsonl");
    assert_eq!(queue.len(), 1, "{queue:?}");
    assert_eq!(queue[0]["waiting"], 300);
    assert_eq!(queue[0]["claim_samples"], 3);
    let workers = read("queue-workers.jsonl");
    assert_eq!(workers.len(), 2, "{workers:?}");
    assert_eq!(workers[1]["workers"], 2);
    Ok(())
}

#[test]
fn curves_refuse_a_given_redis() {
    let r = run(&[
        "--redis",
        "redis://127.0.0.1:1/",
        "bench",
        "curves",
        "--out",
        "x",
    ]);
    assert_eq!(r.code(), 2, "{}", r.stderr);
}

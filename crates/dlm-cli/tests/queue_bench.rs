//! Smoke test of `dlm bench queue` on its private redis-server.

mod common;

use common::*;

#[test]
fn bench_queue_prints_three_sane_phases() -> TestResult {
    // No --redis and no DLM_REDIS_URL (dlm() removes it): a private server.
    let r = run(&[
        "--json",
        "bench",
        "queue",
        "--tasks",
        "2000",
        "--concurrency",
        "16",
        "--batch",
        "500",
    ]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let lines = json_lines(&r);
    assert_eq!(lines.len(), 3, "{}", r.stdout);
    for (line, phase) in lines.iter().zip(["enqueue", "process", "idle-start"]) {
        assert_eq!(line["impl"], "dlm", "{line}");
        assert_eq!(line["phase"], phase, "{line}");
    }
    let (enqueue, process, idle) = (&lines[0], &lines[1], &lines[2]);
    for phase in [enqueue, process] {
        assert_eq!(phase["tasks"], 2000, "{phase}");
        let secs = phase["secs"].as_f64().ok_or("secs")?;
        let rate = phase["ops_per_s"].as_f64().ok_or("ops_per_s")?;
        assert!(secs > 0.0 && secs < 60.0, "{phase}");
        assert!((rate * secs - 2000.0).abs() < 1.0, "{phase}");
    }
    let mem = enqueue["mem_bytes_per_waiting_job"]
        .as_f64()
        .ok_or("mem_bytes_per_waiting_job")?;
    assert!(mem > 20.0 && mem < 10_000.0, "{enqueue}");
    assert_eq!(process["concurrency"], 16, "{process}");
    // By default each task carries `{"i":n}` (BullMQ's bench job's shape): null.
    assert_eq!(
        enqueue["payload_bytes"],
        serde_json::Value::Null,
        "{enqueue}"
    );
    assert_eq!(
        process["payload_bytes"],
        serde_json::Value::Null,
        "{process}"
    );
    assert_eq!(idle["samples"], 200, "{idle}");
    let p50 = idle["p50_us"].as_u64().ok_or("p50_us")?;
    let p99 = idle["p99_us"].as_u64().ok_or("p99_us")?;
    assert!(p50 > 0 && p50 <= p99, "{idle}");
    // An idle worker wakes on the enqueue, it does not poll once a second.
    assert!(p50 < 500_000, "{idle}");

    // Plain output: a header and one line per phase.
    let r = run(&[
        "bench",
        "queue",
        "--tasks",
        "300",
        "--concurrency",
        "4",
        "--batch",
        "100",
        "--idle-samples",
        "5",
    ]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    for word in ["enqueue", "process", "idle-start"] {
        assert!(r.stdout.contains(word), "{}", r.stdout);
    }

    // With payloads: reported, and each costs at least its bytes.
    let lines = small_run_with_payload("1024")?;
    assert_eq!(lines[0]["payload_bytes"], 1024, "{}", lines[0]);
    assert_eq!(lines[1]["payload_bytes"], 1024, "{}", lines[1]);
    let mem = lines[0]["mem_bytes_per_waiting_job"]
        .as_f64()
        .ok_or("mem_bytes_per_waiting_job")?;
    assert!(mem > 1024.0, "{}", lines[0]);
    assert_eq!(lines[0]["impl"], "dlm-payload1024", "{}", lines[0]);

    // Id-only tasks: reported and labelled.
    let lines = small_run_with_payload("0")?;
    assert_eq!(lines[0]["payload_bytes"], 0, "{}", lines[0]);
    assert_eq!(lines[0]["impl"], "dlm-idonly", "{}", lines[0]);
    Ok(())
}

/// The JSON lines of a 300-task `bench queue --payload-bytes BYTES` run.
fn small_run_with_payload(bytes: &str) -> Result<Vec<serde_json::Value>, String> {
    let r = run(&[
        "--json",
        "bench",
        "queue",
        "--tasks",
        "300",
        "--batch",
        "100",
        "--idle-samples",
        "5",
        "--payload-bytes",
        bytes,
    ]);
    if r.code() != 0 {
        return Err(r.stderr);
    }
    Ok(json_lines(&r))
}

/// `--shards none,3` on a private 3-master cluster: each run carries its
/// `shards`, Redis CPU per task over the masters and the busiest master's
/// share, and a `shards` line adding enqueue and processing up; 3 shards
/// land one per master.
#[test]
fn bench_queue_shards_report_cpu_per_master() -> TestResult {
    let r = run(&[
        "--json",
        "--cluster",
        "bench",
        "queue",
        "--tasks",
        "3000",
        "--concurrency",
        "16",
        "--idle-samples",
        "5",
        "--shards",
        "none,3",
    ]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let lines = json_lines(&r);
    let phases: Vec<&str> = lines.iter().filter_map(|l| l["phase"].as_str()).collect();
    assert_eq!(
        phases,
        ["enqueue", "process", "shards", "idle-start"].repeat(2),
        "{}",
        r.stdout
    );
    let (today, sharded) = (&lines[2], &lines[6]);
    assert_eq!(today["shards"], serde_json::Value::Null, "{today}");
    assert_eq!(today["impl"], "dlm-cluster", "{today}");
    assert_eq!(sharded["shards"], 3, "{sharded}");
    assert_eq!(sharded["impl"], "dlm-cluster-shards3", "{sharded}");
    assert_eq!(sharded["layout_version"], 1, "{sharded}");
    let per_master = sharded["shards_per_master"]
        .as_object()
        .ok_or("shards_per_master")?;
    assert_eq!(per_master.len(), 3, "{sharded}");
    assert!(per_master.values().all(|v| v == 1), "{sharded}");
    for line in [&lines[0], &lines[1], today, &lines[4], &lines[5], sharded] {
        let cpu = line["redis_cpu_us_per_task"]
            .as_f64()
            .ok_or("redis_cpu_us_per_task")?;
        let share = line["busiest_master_share"]
            .as_f64()
            .ok_or("busiest_master_share")?;
        assert!(cpu > 0.0 && (0.0..=1.0).contains(&share), "{line}");
        assert_eq!(
            line["master_cpu_us_per_task"].as_object().map(|m| m.len()),
            Some(3),
            "{line}"
        );
        assert!(line["client_cpu_us_per_task"].is_f64(), "{line}");
        // Every node's CPU (replicas too) stays under its old name.
        assert!(line["redis_cpu_us_per_op"].as_f64() >= Some(cpu), "{line}");
    }
    // Today's queue keeps its memory figure on its one master.
    assert!(lines[0]["mem_bytes_per_waiting_job"].as_f64() > Some(20.0));
    Ok(())
}

/// `--reads` times stats and peek on the full queue; `--priority-probe`
/// reports the tasks claimed before each high-priority push against the
/// design's bound. Both on a private server.
#[test]
fn bench_queue_reads_and_priority_probe() -> TestResult {
    let r = run(&[
        "--json", "bench", "queue", "--tasks", "2000", "--shards", "4", "--reads", "20",
    ]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let lines = json_lines(&r);
    assert_eq!(lines.len(), 2, "{}", r.stdout);
    let reads = &lines[1];
    assert_eq!(
        (reads["phase"].as_str(), reads["waiting"].as_u64()),
        (Some("reads"), Some(2000)),
        "{reads}"
    );
    assert_eq!(reads["samples"], 20, "{reads}");
    assert!(reads["peek_p99_us"].as_u64() >= reads["peek_p50_us"].as_u64());

    let r = run(&[
        "--json",
        "bench",
        "queue",
        "--tasks",
        "3000",
        "--shards",
        "3",
        "--priority-probe",
        "20",
        "--probe-workers",
        "2",
        "--concurrency",
        "2",
        "--payload-bytes",
        "0",
    ]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let lines = json_lines(&r);
    let probe = lines.last().ok_or("no lines")?;
    assert_eq!(probe["phase"], "priority-probe", "{probe}");
    assert_eq!(probe["probes"], 20, "{probe}");
    assert_eq!(
        (
            probe["bound_wkrc"].as_u64(),
            probe["bound_wkc"].as_u64(),
            probe["bound_wc"].as_u64()
        ),
        (Some(12 * 8), Some(12), Some(4)),
        "{probe}"
    );
    assert!(probe["fill_left"].as_u64() > Some(0), "{probe}");
    assert!(probe["passed_max"].is_u64(), "{probe}");
    Ok(())
}

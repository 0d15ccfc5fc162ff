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

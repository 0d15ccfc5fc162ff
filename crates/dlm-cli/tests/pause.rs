//! Row "holder SIGSTOPped longer than its lease, resumes" of the fault
//! matrix (RELIABILITY.md), with real processes: `dlm lock run` is frozen
//! while its command goes on writing. Another `dlm lock run` takes the lock
//! once the lease runs out, so both commands write: the checker sees the
//! overlap, a fenced register refuses every stale write, a plain one takes
//! them. Once thawed, the frozen dlm sees the lock lost, stops its command
//! and exits 4.

mod common;

use std::time::{Duration, Instant};

use common::*;
use dlm_testkit::history::FencedRegister;

/// `dlm lock run ledger` whose command appends "WHO FENCE" to `log` every
/// 50 ms, `times` times.
fn writer(server: &RedisServer, log: &std::path::Path, who: &str, times: u32) -> Running {
    let script = format!(
        "for i in $(seq {times}); do echo \"{who} $DLM_FENCE\" >> '{}'; sleep 0.05; done",
        log.display()
    );
    let mut cmd = dlm();
    cmd.args(["--redis", &server.url(), "lock", "run", "ledger"])
        .args(["--ttl", "600ms", "--wait", "5s", "--", "sh", "-c", &script]);
    start(cmd)
}

#[test]
fn a_frozen_holder_is_caught_by_the_checker_and_refused_by_the_fence() -> TestResult {
    let s = server();
    let dir = tempdir()?;
    let log = path_in(&dir, "writes");
    let a = writer(&s, &log, "A", 60);
    wait_for_file(&log, Duration::from_secs(10));
    // Freeze the holder (not its command) for longer than its lease.
    signal(&a.pid().to_string(), "STOP");
    let frozen = Instant::now();
    let b = writer(&s, &log, "B", 20);
    while !std::fs::read_to_string(&log)?.contains("B ") {
        assert!(
            frozen.elapsed() < Duration::from_secs(5),
            "B never got the lock"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1500).saturating_sub(frozen.elapsed()));
    signal(&a.pid().to_string(), "CONT");
    let pause = frozen.elapsed();
    let (ra, rb) = (
        a.finish(Duration::from_secs(20)),
        b.finish(Duration::from_secs(20)),
    );
    assert_eq!(
        ra.code(),
        4,
        "the thawed holder saw the lock lost: {}",
        ra.stderr
    );
    assert_eq!(rb.code(), 0, "{}", rb.stderr);

    // The writes in the order they happened, through both registers.
    let fenced = FencedRegister::new(true);
    let plain = FencedRegister::new(false);
    let (mut b_seen, mut late) = (false, 0);
    for line in std::fs::read_to_string(&log)?.lines() {
        let (who, fence) = line.split_once(' ').ok_or("a line")?;
        let fence: u64 = fence.parse()?;
        b_seen |= who == "B";
        if who == "A" && b_seen {
            late += 1; // A's command acting while B holds the lock.
        }
        fenced.write(fence, who);
        plain.write(fence, who);
    }
    let (f, p) = (fenced.report(), plain.report());
    println!(
        "MATRIX|holder SIGSTOPped longer than its lease, resumes|two `dlm lock run`, 600 ms TTL, commands writing every 50 ms|the holder's dlm frozen {pause:.1?}, its command not|{late} writes of the old holder after the new one's (overlap detected)|fenced register refused {} of {late} stale writes, a plain one took {}; the thawed dlm stopped its command and exited 4",
        f.stale_rejected, p.stale_accepted
    );
    assert!(late > 0, "the overlap happened and the checker saw it");
    assert_eq!(
        f.stale_rejected, late,
        "the fence refuses every stale write"
    );
    assert_eq!(f.stale_accepted, 0);
    assert_eq!(
        p.stale_accepted, late,
        "without it every one is a lost update"
    );
    assert_eq!(fenced.value(), "B");
    Ok(())
}

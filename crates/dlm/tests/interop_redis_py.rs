//! Interop: dlm's raw-key mode and redis-py's `Lock` exclude each other on the
//! same key. redis-py is installed into a venv under the cargo target dir the
//! first time (PyPI); a missing python3 or pip is a failure, not a skip.
mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::*;
use dlm::Error;

const PY: &str = r#"
import sys, redis
port, key, action = int(sys.argv[1]), sys.argv[2], sys.argv[3]
r = redis.Redis(port=port)
lock = r.lock(key, timeout=5)
if action == "take":
    print("acquired" if lock.acquire(blocking=False) else "busy")
elif action == "try":
    got = lock.acquire(blocking=False)
    print("acquired" if got else "busy")
    if got:
        lock.release()
"#;

fn python() -> PathBuf {
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("interop-venv");
    let py = venv.join("bin/python");
    let ok = py.exists()
        && Command::new(&py)
            .args(["-c", "import redis"])
            .status()
            .is_ok_and(|s| s.success());
    if !ok {
        let status = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect(
                "python3 is needed for the interop test (apt-get install -y python3 python3-venv)",
            );
        assert!(
            status.success(),
            "python3 -m venv failed (apt-get install -y python3-venv)"
        );
        let status = Command::new(venv.join("bin/pip"))
            .args([
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "redis>=5,<9",
            ])
            .status()
            .expect("pip");
        assert!(status.success(), "pip install redis failed");
    }
    py
}

fn redis_py(s: &RedisServer, key: &str, action: &str) -> String {
    let out = Command::new(python())
        .args(["-c", PY, &s.port().to_string(), key, action])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test]
async fn dlm_and_redis_py_exclude_each_other_on_a_raw_key() -> TestResult {
    let s = server();
    let c = client(&s).await;

    // redis-py holds "report" (5 s timeout, not released): dlm sees it busy, with its TTL.
    assert_eq!(redis_py(&s, "report", "take"), "acquired");
    let r = c.lock("report").raw_key().acquire(&ttl(1000)).await;
    match r {
        Err(Error::Busy { ttl: Some(t), .. }) => assert!(t <= Duration::from_secs(5)),
        other => panic!("expected Busy with a TTL, got {other:?}"),
    }

    // dlm holds "invoice": redis-py cannot take it until dlm releases.
    let g = c.lock("invoice").raw_key().acquire(&ttl(5000)).await?;
    assert_eq!(g.key(), "invoice");
    assert_eq!(redis_py(&s, "invoice", "try"), "busy");
    g.release().await?;
    assert_eq!(redis_py(&s, "invoice", "try"), "acquired");
    Ok(())
}

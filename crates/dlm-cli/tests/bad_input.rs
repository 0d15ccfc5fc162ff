//! Bad input exits 2 without a panic; an unreachable Redis exits 3, quickly.

mod common;

use std::time::Duration;

use common::*;

#[test]
fn bad_input_exits_2_with_a_message() {
    let server = server();
    let url = server.url();
    let long_name = "n".repeat(2000);
    let table: Vec<(&str, Vec<&str>)> = vec![
        ("empty name", vec!["lock", "acquire", "", "--ttl", "1s"]),
        ("zero ttl", vec!["lock", "acquire", "x", "--ttl", "0s"]),
        ("negative ttl", vec!["lock", "acquire", "x", "--ttl", "-1s"]),
        (
            "negative ttl with =",
            vec!["lock", "acquire", "x", "--ttl=-1s"],
        ),
        (
            "ttl over 7 days",
            vec!["lock", "acquire", "x", "--ttl", "100days"],
        ),
        (
            "bad wait",
            vec!["lock", "acquire", "x", "--ttl", "1s", "--wait", "abc"],
        ),
        (
            "2000-byte name",
            vec!["lock", "acquire", &long_name, "--ttl", "1s"],
        ),
        (
            "name opening with }",
            vec!["lock", "acquire", "}x", "--ttl", "1s"],
        ),
        (
            "raw key no slot can share",
            vec!["lock", "status", "a}b", "--raw-key"],
        ),
        ("missing token", vec!["lock", "release", "x"]),
        ("empty token", vec!["lock", "release", "x", "--token", ""]),
        ("missing ttl", vec!["lock", "acquire", "x"]),
        (
            "bad timeout",
            vec!["--timeout", "0s", "lock", "status", "x"],
        ),
        (
            "bad node timeout",
            vec![
                "--node-timeout",
                "0s",
                "lock",
                "acquire",
                "x",
                "--ttl",
                "10s",
            ],
        ),
        (
            "node timeout too long",
            vec![
                "--node-timeout",
                "2h",
                "lock",
                "acquire",
                "x",
                "--ttl",
                "10s",
            ],
        ),
        (
            "run without a command",
            vec!["lock", "run", "x", "--ttl", "1s"],
        ),
        ("bad bench mode", vec!["bench", "lock", "--mode", "fast"]),
        (
            "zero concurrency",
            vec!["bench", "lock", "--concurrency", "0"],
        ),
        ("unknown subcommand", vec!["lock", "grab", "x"]),
    ];
    for (what, args) in table {
        let mut all = vec!["--redis", url.as_str()];
        all.extend(args);
        let r = run(&all);
        assert_eq!(r.code(), 2, "{what}: stderr {:?}", r.stderr);
        assert!(!r.stderr.trim().is_empty(), "{what}: no message");
        assert!(!r.stderr.contains("panicked"), "{what}: {}", r.stderr);
    }

    for (what, args) in [
        ("bad URL", vec!["--redis", "notaurl", "lock", "status", "x"]),
        (
            "two --redis",
            vec!["--redis", &url, "--redis", &url, "lock", "status", "x"],
        ),
    ] {
        let r = run(&args);
        assert_eq!(r.code(), 2, "{what}: stderr {:?}", r.stderr);
        assert!(r.stderr.starts_with("dlm: "), "{what}: {:?}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{what}: {:?}", r.stderr);
    }
    let r = run(&["--redis", &url, "--redis", &url, "lock", "status", "x"]);
    assert!(r.stderr.contains("listed twice"), "{:?}", r.stderr);
}

#[test]
fn unreachable_redis_exits_3_quickly() {
    let mut server = server();
    let url = server.url();
    server.kill();
    for args in [
        vec![
            "--redis",
            url.as_str(),
            "lock",
            "acquire",
            "x",
            "--ttl",
            "1s",
        ],
        vec!["--redis", url.as_str(), "lock", "status", "x"],
        vec![
            "--redis",
            url.as_str(),
            "lock",
            "run",
            "x",
            "--ttl",
            "1s",
            "--",
            "true",
        ],
    ] {
        let r = run(&args);
        assert_eq!(r.code(), 3, "{args:?}: {:?}", r.stderr);
        assert!(
            r.elapsed < Duration::from_secs(10),
            "{args:?} took {:?}",
            r.elapsed
        );
        assert!(r.stderr.starts_with("dlm: "), "{:?}", r.stderr);
        assert!(!r.stderr.contains("panicked"));
    }
}

/// Arguments that are not UTF-8 (a lock or queue name, a task id, a
/// payload) and an oversized payload file exit 2 with a message, without a
/// panic and without writing anything; a binary payload file is accepted.
#[test]
fn non_utf8_arguments_exit_2_and_write_nothing() -> TestResult {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    let server = server();
    let mut conn = redis::Client::open(server.url())?.get_connection()?;
    let dbsize = |conn: &mut redis::Connection| -> redis::RedisResult<u64> {
        redis::cmd("DBSIZE").query(conn)
    };
    let bad = OsStr::from_bytes(b"a\xffb\xc3(");
    let dir = tempdir()?;
    let big = dir.path().join("big");
    std::fs::write(&big, vec![0u8; dlm::queue::DEFAULT_MAX_PAYLOAD + 1])?;
    let cases: Vec<(&str, Vec<&OsStr>)> = vec![
        (
            "lock name",
            vec![
                "lock".as_ref(),
                "acquire".as_ref(),
                bad,
                "--ttl".as_ref(),
                "1s".as_ref(),
            ],
        ),
        (
            "queue name",
            vec!["queue".as_ref(), "push".as_ref(), bad, "id".as_ref()],
        ),
        (
            "task id",
            vec!["queue".as_ref(), "push".as_ref(), "q".as_ref(), bad],
        ),
        (
            "payload",
            vec![
                "queue".as_ref(),
                "push".as_ref(),
                "q".as_ref(),
                "id".as_ref(),
                "--payload".as_ref(),
                bad,
            ],
        ),
        (
            "big payload",
            vec![
                "queue".as_ref(),
                "push".as_ref(),
                "q".as_ref(),
                "id".as_ref(),
                "--payload-file".as_ref(),
                big.as_os_str(),
            ],
        ),
    ];
    for (what, args) in cases {
        let mut cmd = dlm();
        cmd.arg("--redis").arg(server.url()).args(args);
        let r = start(cmd).finish(Duration::from_secs(30));
        assert_eq!(r.code(), 2, "{what}: {:?}", r.stderr);
        assert!(!r.stderr.trim().is_empty(), "{what}: no message");
        assert!(!r.stderr.contains("panicked"), "{what}: {}", r.stderr);
        assert_eq!(dbsize(&mut conn)?, 0, "{what}: something was written");
    }

    let binary = dir.path().join("binary");
    std::fs::write(&binary, b"\xff\x00\xfe")?;
    let r = run_on(
        &server,
        &[
            "queue",
            "push",
            "q",
            "id",
            "--payload-file",
            binary.to_str().unwrap_or_default(),
        ],
    );
    assert_eq!(r.code(), 0, "{:?}", r.stderr);
    let stored: Vec<u8> = redis::cmd("HGET")
        .arg("dlm:queue:{q}:payload")
        .arg("id")
        .query(&mut conn)?;
    assert_eq!(stored, b"\xff\x00\xfe");
    Ok(())
}

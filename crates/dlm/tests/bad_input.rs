//! Bad input against a real Redis: oversized or odd names, ids and
//! payloads, huge counts, amounts, tokens and durations. Each refused call
//! returns a typed error, never panics, and writes nothing (the keyspace is
//! the same before and after). Binary-safe input that is valid (NUL bytes in
//! names, any bytes in payloads) must round-trip unchanged.

mod common;

use std::future::Future;
use std::time::Duration;

use common::*;
use dlm::queue::{MAX_BATCH, NewTask, OnDuplicate};
use dlm::{Error, Fence, LockOptions};
use redis::aio::MultiplexedConnection;

/// Every key and its type, sorted: what "nothing written" compares.
async fn keyspace(raw: &mut MultiplexedConnection) -> redis::RedisResult<Vec<Vec<u8>>> {
    let mut keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query_async(raw).await?;
    keys.sort();
    Ok(keys)
}

/// `call` must fail with `InvalidArgument` for `arg` and leave the keyspace as it was.
async fn refused<T: std::fmt::Debug>(
    raw: &mut MultiplexedConnection,
    arg: &str,
    call: impl Future<Output = dlm::Result<T>>,
) -> TestResult {
    let before = keyspace(raw).await?;
    let out = tokio::time::timeout(Duration::from_secs(10), call).await?;
    match &out {
        Err(Error::InvalidArgument { arg: a, .. }) if *a == arg => {}
        other => panic!("expected InvalidArgument for {arg:?}, got {other:?}"),
    }
    assert_eq!(keyspace(raw).await?, before, "{arg}: something was written");
    Ok(())
}

/// A throwaway server, a client on it and a raw connection behind its back.
async fn setup() -> (RedisServer, dlm::Client, MultiplexedConnection) {
    let server = server();
    let client = client(&server).await;
    let raw = raw(&server).await;
    (server, client, raw)
}

#[tokio::test]
async fn bad_lock_input_is_refused_and_writes_nothing() -> TestResult {
    let (server, client, mut raw) = setup().await;
    // Something there already, so "unchanged" is not "empty".
    redis::cmd("SET")
        .arg("other")
        .arg("1")
        .query_async::<()>(&mut raw)
        .await?;
    let long = "n".repeat(dlm::keys::MAX_NAME_LEN + 1);
    let ok = ttl(1000);
    for name in [long.as_str(), "", "}x"] {
        refused(&mut raw, "lock name", client.lock(name).acquire(&ok)).await?;
        refused(&mut raw, "lock name", client.lock(name).status()).await?;
    }
    let lock = client.lock("x");
    for ttl in [
        Duration::ZERO,
        Duration::MAX,
        dlm::MAX_TTL + Duration::from_nanos(1),
    ] {
        refused(&mut raw, "ttl", lock.acquire(&LockOptions::new(ttl))).await?;
    }
    refused(
        &mut raw,
        "wait",
        lock.acquire(&ok.clone().wait(Duration::MAX)),
    )
    .await?;
    let retry = ok.clone().retry_interval(Duration::MAX);
    refused(&mut raw, "retry interval", lock.acquire(&retry)).await?;
    let replicas = ok.clone().replicas(u64::MAX, Duration::MAX);
    refused(&mut raw, "replicas", lock.acquire(&replicas)).await?;
    let token = dlm::Token::random()?;
    refused(&mut raw, "ttl", lock.extend_token(&token, Duration::MAX)).await?;
    let guard = lock.acquire(&ok).await?;
    refused(&mut raw, "ttl", guard.extend(Duration::MAX)).await?;
    guard.release().await?;
    refused(
        &mut raw,
        "key prefix",
        dlm::Client::builder()
            .key_prefix("a{b}")
            .connect(&server.url()),
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn names_with_nul_bytes_and_any_unicode_round_trip() -> TestResult {
    let (_server, client, mut raw) = setup().await;
    for name in ["a\0b", "\0", "ünï{cø}dé\u{10FFFF}", "{}", "a}b"] {
        let guard = client.lock(name).acquire(&ttl(5000)).await?;
        let key = format!("dlm:lock:{{{name}}}");
        let exists: bool = redis::cmd("EXISTS").arg(&key).query_async(&mut raw).await?;
        assert!(exists, "{name:?}: no key {key:?}");
        assert!(client.lock(name).status().await?.held);
        guard.release().await?;
        let exists: bool = redis::cmd("EXISTS").arg(&key).query_async(&mut raw).await?;
        assert!(!exists, "{name:?}: key left behind");
    }
    Ok(())
}

#[tokio::test]
async fn bad_queue_input_is_refused_and_writes_nothing() -> TestResult {
    let (_server, client, mut raw) = setup().await;
    let queue = client.queue("q");
    queue.push("seed").await?;
    let lease = Duration::from_secs(5);
    let none: Vec<NewTask> = Vec::new();
    let now = Duration::ZERO;
    let keep = OnDuplicate::Keep;
    refused(&mut raw, "tasks", queue.enqueue(none, now, keep)).await?;
    let many = (0..=MAX_BATCH).map(|i| NewTask::new(format!("t{i}")));
    refused(&mut raw, "tasks", queue.enqueue(many, now, keep)).await?;
    let long = "i".repeat(dlm::keys::MAX_NAME_LEN + 1);
    for id in [long.as_str(), ""] {
        refused(&mut raw, "task id", queue.enqueue([id], now, keep)).await?;
        refused(&mut raw, "task id", queue.remove_if_score(id, 1)).await?;
        refused(&mut raw, "task id", queue.retry_dead(Some(&[id]))).await?;
    }
    // One bad task in a batch refuses the whole batch.
    let batch = [NewTask::new("fine"), NewTask::new(long.clone())];
    refused(&mut raw, "task id", queue.enqueue(batch, now, keep)).await?;
    let big = NewTask::new("big").payload(vec![0u8; dlm::queue::DEFAULT_MAX_PAYLOAD + 1]);
    refused(&mut raw, "payload", queue.enqueue([big], now, keep)).await?;
    let huge_limit = client.queue("q").max_payload(usize::MAX);
    refused(&mut raw, "max payload", huge_limit.push("x")).await?;
    refused(
        &mut raw,
        "max attempts",
        client.queue("q").max_attempts(0).push("x"),
    )
    .await?;
    refused(&mut raw, "delay", queue.enqueue(["x"], Duration::MAX, keep)).await?;
    for count in [0, usize::MAX, MAX_BATCH + 1] {
        refused(&mut raw, "count", queue.claim(count, lease)).await?;
        refused(&mut raw, "count", queue.top(count)).await?;
        refused(&mut raw, "count", queue.pop(count)).await?;
        refused(&mut raw, "count", queue.dead(count)).await?;
    }
    for bad in [Duration::ZERO, Duration::MAX] {
        refused(&mut raw, "lease", queue.claim(1, bad)).await?;
    }
    refused(&mut raw, "score", queue.remove_if_score("seed", u64::MAX)).await?;
    let ids: Vec<String> = (0..=MAX_BATCH).map(|i| format!("t{i}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    refused(&mut raw, "ids", queue.retry_dead(Some(&ids))).await?;
    for name in [long.as_str(), "", "}q"] {
        refused(&mut raw, "queue name", client.queue(name).push("x")).await?;
        refused(&mut raw, "queue name", client.queue(name).stats()).await?;
    }
    let worker = queue.worker(dlm::queue::WorkerOptions::default().grace(Duration::MAX));
    let handler = |_| async { Ok::<(), String>(()) };
    let run = worker.run(handler, dlm::CancellationToken::new());
    refused(&mut raw, "grace", run).await?;

    let leased = queue.claim(1, lease).await?;
    let [held] = leased.as_slice() else {
        panic!("expected the seed task, got {leased:?}");
    };
    refused(&mut raw, "lease", held.extend(Duration::MAX)).await?;
    refused(
        &mut raw,
        "retry after",
        held.clone().nack_after(Duration::MAX, "e"),
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn binary_payloads_and_odd_ids_round_trip() -> TestResult {
    let server = server();
    let client = client(&server).await;
    let queue = client.queue("bin");
    let every_byte: Vec<u8> = (0..=255).collect();
    let not_utf8 = vec![0xff, 0xfe, 0x00, 0xc3, 0x28];
    let tasks = [
        NewTask::new("a\0b").payload(every_byte.clone()),
        NewTask::new("ünï").payload(not_utf8.clone()),
        NewTask::new("{}").payload(Vec::new()),
    ];
    queue
        .enqueue(tasks, Duration::ZERO, OnDuplicate::Keep)
        .await?;
    let leases = queue.claim(10, Duration::from_secs(5)).await?;
    let mut got: Vec<(String, Option<Vec<u8>>)> = leases
        .iter()
        .map(|l| (l.task().id.clone(), l.task().payload.clone()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("a\0b".to_string(), Some(every_byte)),
            ("{}".to_string(), Some(Vec::new())),
            ("ünï".to_string(), Some(not_utf8)),
        ]
    );
    for l in leases {
        l.ack().await?;
    }
    assert!(queue.stats().await?.is_drained());
    Ok(())
}

#[tokio::test]
async fn bad_amounts_fences_and_values_are_refused_and_write_nothing() -> TestResult {
    let (_server, client, mut raw) = setup().await;
    let stock = client.stock("s");
    stock.set(5).await?;
    let too_much = i64::MAX as u64 + 1;
    for n in [0, too_much, u64::MAX] {
        refused(&mut raw, "amount", stock.take(n)).await?;
    }
    for n in [too_much, u64::MAX] {
        refused(&mut raw, "amount", stock.add(n)).await?;
        refused(&mut raw, "amount", stock.set(n)).await?;
    }
    assert_eq!(stock.get().await?, 5);

    for fence in [0, (1 << 53) + 1, u64::MAX] {
        let write = client.fenced_write("r", Fence::new(fence), b"v");
        refused(&mut raw, "fence", write).await?;
    }
    let big = vec![0u8; dlm::MAX_FENCED_VALUE + 1];
    refused(
        &mut raw,
        "value",
        client.fenced_write("r", Fence::new(1), &big),
    )
    .await?;
    let long = "r".repeat(dlm::keys::MAX_NAME_LEN + 1);
    refused(
        &mut raw,
        "resource name",
        client.fenced_write(&long, Fence::new(1), b"v"),
    )
    .await?;

    let big = vec![0u8; dlm::consistency::MAX_VERSIONED_VALUE + 1];
    refused(&mut raw, "value", client.versioned("v").write(0, &big)).await?;
    refused(
        &mut raw,
        "record name",
        client.versioned(&long).write(0, b"v"),
    )
    .await?;
    refused(&mut raw, "record name", client.stock("}s").get()).await?;
    let record = client.versioned("v");
    let update = record.update(0, |_| (Vec::new(), ()));
    refused(&mut raw, "max attempts", update).await?;
    // A version no write ever had is a conflict, not a write.
    let before = keyspace(&mut raw).await?;
    let conflict = client.versioned("v").write(u64::MAX, b"v").await;
    assert!(
        matches!(conflict, Err(Error::Conflict { .. })),
        "{conflict:?}"
    );
    assert_eq!(keyspace(&mut raw).await?, before);
    Ok(())
}

//! Where the queue keeps a task, against a real redis-server: an id-only task
//! is its due-time entry and nothing else, small payloads sit in compact
//! bucket hashes, larger ones in the single payload hash, every size and
//! byte value round-trips, and tasks written in the earlier layout (every
//! payload in the single hash, attempts set) are still claimed, retried,
//! listed and deleted as before, mixed with new ones in one queue.
mod common;

use std::time::Duration;

use common::*;
use dlm::queue::{NewTask, OnDuplicate, TaskState};
use redis::AsyncCommands;

const NOW: Duration = Duration::ZERO;
const LEASE: Duration = Duration::from_secs(30);

fn key(q: &str, suffix: &str) -> String {
    format!("dlm:queue:{{{q}}}:{suffix}")
}

/// Every payload key of queue `q` (the single hash and the buckets).
async fn payload_keys(conn: &mut redis::aio::MultiplexedConnection, q: &str) -> Vec<String> {
    let mut keys: Vec<String> = conn
        .keys(format!("dlm:queue:{{{q}}}:payload*"))
        .await
        .expect("KEYS");
    keys.sort();
    keys
}

async fn small_count(conn: &mut redis::aio::MultiplexedConnection, q: &str) -> i64 {
    let v: Option<i64> = conn.hget(key(q, "stats"), "small").await.expect("HGET");
    v.unwrap_or(0)
}

#[tokio::test]
async fn id_only_tasks_store_nothing_but_their_due_time() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let mut conn = raw(&s).await;
    let q = c.queue("ids");
    let ids: Vec<String> = (0..500).map(|i| format!("doc:{i}")).collect();
    q.enqueue(ids.iter().map(String::as_str), NOW, OnDuplicate::Keep)
        .await?;
    assert!(payload_keys(&mut conn, "ids").await.is_empty());
    assert_eq!(small_count(&mut conn, "ids").await, 0);
    let mut keys: Vec<String> = conn.keys("dlm:queue:{ids}:*").await?;
    keys.sort();
    assert_eq!(
        keys,
        [key("ids", "signal"), key("ids", "waiting")],
        "an id-only task is one sorted-set entry (plus the wake-up list)"
    );
    let leases = q.claim(500, LEASE).await?;
    assert_eq!(leases.len(), 500);
    assert!(leases.iter().all(|l| l.task().payload.is_none()));
    for l in leases {
        l.ack().await?;
    }
    assert!(payload_keys(&mut conn, "ids").await.is_empty());
    Ok(())
}

#[tokio::test]
async fn payloads_of_every_size_round_trip_and_leave_nothing_behind() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let mut conn = raw(&s).await;
    let q = c.queue("sizes").compact_payloads(true);
    let binary: Vec<u8> = (0..=255u8).rev().collect();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("ten", b"0123456789".to_vec()),
        ("sixty-four", vec![b'x'; 64]),
        ("sixty-five", vec![b'y'; 65]),
        ("hundred", vec![b'h'; 100]),
        ("kib", (0..1024).map(|i| (i % 251) as u8).collect()),
        ("64kib", (0..65536).map(|i| (i % 253) as u8).collect()),
        ("binary", binary.clone()),
        ("binary-small", vec![0xff, 0x00, 0xfe, 0x80, 0xc3]),
    ];
    let tasks = cases
        .iter()
        .map(|(id, p)| NewTask::new(*id).payload(p.clone()));
    q.enqueue(tasks, NOW, OnDuplicate::Keep).await?;

    // Small ones (<= 64 bytes) in their bucket, as a listpack; larger in the single hash.
    for (id, p) in &cases {
        let b = dlm::keys::queue_payload_bucket("sizes", id)?;
        let in_bucket: Option<Vec<u8>> = conn.hget(&b, *id).await?;
        let in_hash: Option<Vec<u8>> = conn.hget(key("sizes", "payload"), *id).await?;
        if p.len() <= 64 {
            assert_eq!(in_bucket.as_ref(), Some(p), "{id}");
            assert_eq!(in_hash, None, "{id}");
            let enc: String = redis::cmd("OBJECT")
                .arg("ENCODING")
                .arg(&b)
                .query_async(&mut conn)
                .await?;
            // The compact encoding: a listpack, which Redis 6.2 calls (and builds as) a ziplist.
            assert!(
                matches!(enc.as_str(), "listpack" | "ziplist"),
                "{id}: {enc}"
            );
        } else {
            assert_eq!(in_bucket, None, "{id}");
            assert_eq!(in_hash.as_ref(), Some(p), "{id}");
        }
    }
    assert_eq!(small_count(&mut conn, "sizes").await, 4);

    // top, inspection, claim, nack (retry), claim again, dead, retry_dead, ack.
    let top = q.top(100).await?;
    for (id, p) in &cases {
        let e = top.iter().find(|e| e.id == *id).expect("listed");
        assert_eq!(e.payload.as_ref(), Some(p), "top {id}");
    }
    let page = q.tasks(TaskState::Waiting, 0, 100, 4096).await?;
    for (id, p) in &cases {
        let t = page.tasks.iter().find(|t| t.id == *id).expect("listed");
        assert_eq!(t.payload_len, Some(p.len()), "tasks {id}");
        assert_eq!(
            t.payload_preview.as_deref(),
            Some(&p[..p.len().min(4096)]),
            "{id}"
        );
    }
    let q = q.max_attempts(2);
    for round in 0..2 {
        let leases = q.claim(100, LEASE).await?;
        assert_eq!(leases.len(), cases.len(), "round {round}");
        for l in leases {
            let (_, p) = cases
                .iter()
                .find(|(id, _)| *id == l.task().id)
                .expect("ours");
            assert_eq!(l.task().payload.as_ref(), Some(p), "claim {}", l.task().id);
            l.nack_after(NOW, "fails").await?;
        }
    }
    let dead = q.dead(100).await?;
    assert_eq!(dead.len(), cases.len());
    for d in &dead {
        let (_, p) = cases.iter().find(|(id, _)| *id == d.id).expect("ours");
        assert_eq!(d.payload.as_ref(), Some(p), "dead {}", d.id);
    }
    assert_eq!(q.retry_dead(None).await?, cases.len());
    for l in q.claim(100, LEASE).await? {
        let (_, p) = cases
            .iter()
            .find(|(id, _)| *id == l.task().id)
            .expect("ours");
        assert_eq!(
            l.task().payload.as_ref(),
            Some(p),
            "after retry {}",
            l.task().id
        );
        l.ack().await?;
    }
    assert!(payload_keys(&mut conn, "sizes").await.is_empty());
    assert_eq!(small_count(&mut conn, "sizes").await, 0);
    Ok(())
}

#[tokio::test]
async fn replacing_moves_a_payload_between_bucket_hash_and_none() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let mut conn = raw(&s).await;
    let q = c.queue("moves").compact_payloads(true);
    let big = vec![b'B'; 300];
    let steps: Vec<Option<Vec<u8>>> = vec![
        Some(b"small".to_vec()),
        Some(big.clone()),
        Some(b"small again".to_vec()),
        None,
        Some(big.clone()),
        None,
        Some(b"last".to_vec()),
    ];
    for p in &steps {
        let t = match p {
            Some(p) => NewTask::new("t").payload(p.clone()),
            None => NewTask::new("t"),
        };
        q.enqueue([t], NOW, OnDuplicate::Replace).await?;
        assert_eq!(q.top(1).await?[0].payload, *p);
        let expect_small = i64::from(p.as_ref().is_some_and(|p| p.len() <= 64));
        assert_eq!(small_count(&mut conn, "moves").await, expect_small);
        // One place at most.
        assert!(payload_keys(&mut conn, "moves").await.len() <= 1);
    }
    // Replaced while in flight: the new payload waits, the ack keeps it.
    let lease = q.claim(1, LEASE).await?.pop().expect("claimed");
    assert_eq!(lease.task().payload.as_deref(), Some(&b"last"[..]));
    q.enqueue(
        [NewTask::new("t").payload(big.clone())],
        NOW,
        OnDuplicate::Replace,
    )
    .await?;
    lease.ack().await?;
    let again = q.claim(1, LEASE).await?.pop().expect("waiting again");
    assert_eq!(again.task().payload.as_ref(), Some(&big));
    again.ack().await?;
    // pop and remove_if_score delete the payload wherever it is.
    q.enqueue(
        [
            NewTask::new("p").payload("x"),
            NewTask::new("r").payload(big.clone()),
        ],
        NOW,
        OnDuplicate::Keep,
    )
    .await?;
    let score = q
        .top(10)
        .await?
        .iter()
        .find(|e| e.id == "r")
        .expect("r")
        .score;
    assert_eq!(
        q.remove_if_score("r", score).await?,
        dlm::queue::Removed::Removed
    );
    assert_eq!(q.pop(10).await?[0].payload.as_deref(), Some(&b"x"[..]));
    assert!(payload_keys(&mut conn, "moves").await.is_empty());
    assert_eq!(small_count(&mut conn, "moves").await, 0);
    Ok(())
}

#[tokio::test]
async fn tasks_in_the_earlier_layout_are_claimed_retried_and_deleted() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let mut conn = raw(&s).await;
    let q = c.queue("old").max_attempts(3).compact_payloads(true);
    // What the earlier version wrote: every payload (even a small one) in the
    // single hash, attempts after a failed try, an id-only task with nothing.
    let now: (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await?;
    let due = now.0 * 1000 - 10;
    for (id, payload) in [
        ("old-small", Some("tiny")),
        ("old-none", None),
        ("old-retried", Some("again")),
    ] {
        let _: () = conn.zadd(key("old", "waiting"), id, due).await?;
        if let Some(p) = payload {
            let _: () = conn.hset(key("old", "payload"), id, p).await?;
        }
    }
    let _: () = conn.hset(key("old", "attempts"), "old-retried", 1).await?;
    let _: () = conn.hset(key("old", "stats"), "processed", 7).await?;
    // New tasks next to them.
    q.enqueue(
        [
            NewTask::new("new-small").payload("fresh"),
            NewTask::new("new-none"),
        ],
        NOW,
        OnDuplicate::Keep,
    )
    .await?;
    let page = q.tasks(TaskState::Waiting, 0, 10, 100).await?;
    assert_eq!(page.total, 5);
    let preview = |id: &str| {
        page.tasks
            .iter()
            .find(|t| t.id == id)
            .and_then(|t| t.payload_preview.clone())
    };
    assert_eq!(preview("old-small").as_deref(), Some(&b"tiny"[..]));
    assert_eq!(preview("new-small").as_deref(), Some(&b"fresh"[..]));

    let leases = q.claim(10, LEASE).await?;
    assert_eq!(leases.len(), 5);
    for l in leases {
        let t = l.task().clone();
        let want: Option<&[u8]> = match t.id.as_str() {
            "old-small" => Some(b"tiny"),
            "old-retried" => Some(b"again"),
            "new-small" => Some(b"fresh"),
            _ => None,
        };
        assert_eq!(t.payload.as_deref(), want, "{}", t.id);
        if t.id == "old-retried" {
            assert_eq!(t.attempt, 2, "the stored attempts count on");
            l.nack_after(NOW, "once more").await?;
        } else if t.id == "old-small" {
            // Replaced by a new producer while in flight: the new payload wins.
            q.enqueue(
                [NewTask::new("old-small").payload("renewed")],
                NOW,
                OnDuplicate::Replace,
            )
            .await?;
            l.ack().await?;
        } else {
            l.ack().await?;
        }
    }
    let rest = q.claim(10, LEASE).await?;
    let mut seen: Vec<(String, Option<Vec<u8>>, u32)> = rest
        .iter()
        .map(|l| {
            (
                l.task().id.clone(),
                l.task().payload.clone(),
                l.task().attempt,
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("old-retried".to_string(), Some(b"again".to_vec()), 3),
            // The replacement runs after the acked run and its attempts go
            // on (issue 31: a replace in flight no longer wipes the count).
            ("old-small".to_string(), Some(b"renewed".to_vec()), 2),
        ]
    );
    for l in rest {
        l.nack_after(NOW, "dies").await?;
    }
    // old-retried died on its third attempt, old-small goes on.
    assert_eq!(q.dead(10).await?.len(), 1);
    assert_eq!(q.purge_dead().await?, 1);
    let last = q.claim(10, LEASE).await?;
    assert_eq!(last.len(), 1);
    last.into_iter().next().expect("one").ack().await?;
    assert!(payload_keys(&mut conn, "old").await.is_empty());
    assert_eq!(small_count(&mut conn, "old").await, 0);
    assert_eq!(q.stats().await?.processed, 7 + 5);
    Ok(())
}

#[tokio::test]
async fn handles_with_compact_payloads_off_share_a_queue_with_compact_ones() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let mut conn = raw(&s).await;
    let wide = c.queue("mix");
    let compact = c.queue("mix").compact_payloads(true);
    wide.enqueue([NewTask::new("w").payload("wide")], NOW, OnDuplicate::Keep)
        .await?;
    compact
        .enqueue(
            [NewTask::new("c").payload("compact")],
            NOW,
            OnDuplicate::Keep,
        )
        .await?;
    let in_hash: Option<String> = conn.hget(key("mix", "payload"), "w").await?;
    assert_eq!(in_hash.as_deref(), Some("wide"));
    assert_eq!(small_count(&mut conn, "mix").await, 1);
    // Replaced through the other kind of handle: it moves, never doubles.
    compact
        .enqueue(
            [NewTask::new("w").payload("now compact")],
            NOW,
            OnDuplicate::Replace,
        )
        .await?;
    let in_hash: Option<String> = conn.hget(key("mix", "payload"), "w").await?;
    assert_eq!(in_hash, None);
    assert_eq!(small_count(&mut conn, "mix").await, 2);
    wide.enqueue(
        [NewTask::new("c").payload("wide again")],
        NOW,
        OnDuplicate::Replace,
    )
    .await?;
    assert_eq!(small_count(&mut conn, "mix").await, 1);
    // Any handle reads both places.
    let mut got: Vec<(String, Option<Vec<u8>>)> = Vec::new();
    for l in wide.claim(10, LEASE).await? {
        got.push((l.task().id.clone(), l.task().payload.clone()));
        l.ack().await?;
    }
    got.sort();
    assert_eq!(
        got,
        [
            ("c".to_string(), Some(b"wide again".to_vec())),
            ("w".to_string(), Some(b"now compact".to_vec())),
        ]
    );
    assert!(payload_keys(&mut conn, "mix").await.is_empty());
    assert_eq!(small_count(&mut conn, "mix").await, 0);
    Ok(())
}

/// Compact payloads through every script that touches them, on `client`.
async fn compact_round_trip(client: &dlm::Client) -> TestResult {
    let q = client.queue("compact-everywhere").compact_payloads(true);
    let tasks = (0..50).map(|i| NewTask::new(format!("k{i}")).payload(format!("p{i}")));
    q.enqueue(tasks, NOW, OnDuplicate::Keep).await?;
    assert_eq!(q.top(1).await?[0].payload.as_deref(), Some(&b"p0"[..]));
    let page = q.tasks(TaskState::Waiting, 0, 1, 10).await?;
    assert_eq!(page.tasks[0].payload_preview.as_deref(), Some(&b"p0"[..]));
    assert_eq!(q.pop(1).await?[0].payload.as_deref(), Some(&b"p0"[..]));
    let leases = q.claim(100, LEASE).await?;
    assert_eq!(leases.len(), 49);
    for l in leases {
        let want = format!("p{}", &l.task().id[1..]);
        assert_eq!(l.task().payload.as_deref(), Some(want.as_bytes()));
        l.ack().await?;
    }
    assert!(q.stats().await?.is_drained());
    Ok(())
}

#[tokio::test]
async fn compact_payloads_on_a_cluster_and_as_a_least_privilege_user() -> TestResult {
    let cluster = dlm_testkit::Cluster::start()?;
    let c = dlm::Client::builder()
        .timeout(Duration::from_secs(2))
        .connect_cluster(&cluster.urls())
        .await?;
    compact_round_trip(&c).await?;
    let s = dlm_testkit::RedisServer::builder()
        .acl_user("dlm", "s3cret", dlm::keys::ACL_RULES)
        .start()?;
    compact_round_trip(&dlm::Client::connect(&s.url_as("dlm", "s3cret")).await?).await
}

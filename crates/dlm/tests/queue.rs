//! The task queue against a real redis-server: the seeds' semantics, exactly-once
//! delivery under concurrency, leases and fencing, retries and dead letters,
//! the worker runtime, restarts, bad input.
mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use dlm::Error;
use dlm::queue::{Backoff, Enqueued, NewTask, OnDuplicate, Removed, WorkerOptions};
use tokio_util::sync::CancellationToken;

const NOW: Duration = Duration::ZERO;

#[tokio::test]
async fn seed_semantics_table() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let q = c.queue("seed");

    // Duplicates: kept by default (the seed code), replaced on request (the seed text).
    let first = q
        .enqueue([NewTask::new("a").payload("v1")], NOW, OnDuplicate::Keep)
        .await?;
    let Enqueued::Added(score_a) = first[0] else {
        panic!("{first:?}")
    };
    let again = q
        .enqueue([NewTask::new("a").payload("v2")], NOW, OnDuplicate::Keep)
        .await?;
    assert_eq!(again, vec![Enqueued::Kept(Some(score_a))]);
    assert_eq!(q.top(10).await?[0].payload.as_deref(), Some(&b"v1"[..]));
    tokio::time::sleep(Duration::from_millis(5)).await;
    let replaced = q
        .enqueue([NewTask::new("a").payload("v2")], NOW, OnDuplicate::Replace)
        .await?;
    let Enqueued::Replaced(score_a2) = replaced[0] else {
        panic!("{replaced:?}")
    };
    assert!(score_a2 > score_a);
    assert_eq!(q.top(10).await?[0].payload.as_deref(), Some(&b"v2"[..]));

    // remove_if_score with the score read before the re-enqueue fails, with the current one succeeds.
    assert_eq!(
        q.remove_if_score("a", score_a).await?,
        Removed::ScoreChanged(score_a2)
    );
    assert_eq!(q.remove_if_score("a", score_a2).await?, Removed::Removed);
    assert_eq!(q.remove_if_score("a", score_a2).await?, Removed::NotPresent);

    // Delayed tasks are invisible until due; pop takes the earliest first.
    q.enqueue(["later"], Duration::from_millis(400), OnDuplicate::Keep)
        .await?;
    for id in ["x1", "x2", "x3"] {
        q.enqueue([id], NOW, OnDuplicate::Keep).await?;
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let top: Vec<String> = q.top(10).await?.into_iter().map(|e| e.id).collect();
    assert_eq!(
        top,
        ["x1", "x2", "x3"],
        "top: due tasks only, earliest first"
    );
    let popped: Vec<String> = q.pop(2).await?.into_iter().map(|e| e.id).collect();
    assert_eq!(popped, ["x1", "x2"]);
    assert_eq!(q.stats().await?.delayed, 1);
    tokio::time::sleep(Duration::from_millis(450)).await;
    let rest: Vec<String> = q.pop(10).await?.into_iter().map(|e| e.id).collect();
    assert_eq!(rest, ["x3", "later"]);
    assert!(q.pop(10).await?.is_empty());
    assert_eq!(q.stats().await?, dlm::queue::QueueStats::default());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_producers_and_consumers_deliver_every_task_exactly_once() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let q = c.queue("busy");
    const PRODUCERS: usize = 4;
    const PER_PRODUCER: usize = 5000;
    let seen: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let done = CancellationToken::new();
    let mut consumers = Vec::new();
    for k in 0..8 {
        let (q, seen, done) = (q.clone(), seen.clone(), done.clone());
        consumers.push(tokio::spawn(async move {
            loop {
                let leases = if k % 2 == 0 {
                    q.claim(50, Duration::from_secs(30)).await?
                } else {
                    Vec::new()
                };
                let popped = if k % 2 == 1 {
                    q.pop(50).await?
                } else {
                    Vec::new()
                };
                if leases.is_empty() && popped.is_empty() {
                    if done.is_cancelled() && q.stats().await?.is_drained() {
                        return Ok::<_, Error>(());
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                for l in leases {
                    *seen
                        .lock()
                        .expect("lock")
                        .entry(l.task().id.clone())
                        .or_default() += 1;
                    l.ack().await?;
                }
                for e in popped {
                    *seen.lock().expect("lock").entry(e.id).or_default() += 1;
                }
            }
        }));
    }
    let mut producers = Vec::new();
    for p in 0..PRODUCERS {
        let q = q.clone();
        producers.push(tokio::spawn(async move {
            for batch in 0..PER_PRODUCER / 100 {
                let ids = (0..100).map(|i| format!("p{p}-{}", batch * 100 + i));
                q.enqueue(ids, NOW, OnDuplicate::Keep).await?;
            }
            Ok::<_, Error>(())
        }));
    }
    for p in producers {
        p.await??;
    }
    done.cancel();
    for c in consumers {
        c.await??;
    }
    let seen = seen.lock().expect("lock");
    assert_eq!(seen.len(), PRODUCERS * PER_PRODUCER, "no task lost");
    assert!(seen.values().all(|n| *n == 1), "no task delivered twice");
    Ok(())
}

#[tokio::test]
async fn a_stale_lease_cannot_ack_nack_or_extend_a_reclaimed_task() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let q = c.queue("stale");
    q.push("t").await?;
    let old = q
        .claim(1, Duration::from_millis(100))
        .await?
        .pop()
        .ok_or("claimed")?;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let new = q
        .claim(1, Duration::from_secs(30))
        .await?
        .pop()
        .ok_or("reclaimed")?;
    assert_eq!(new.task().attempt, 2);
    assert!(
        new.task().fence > old.task().fence,
        "fencing tokens increase"
    );
    assert!(matches!(
        old.extend(Duration::from_secs(5)).await,
        Err(Error::LeaseLost { taken: true, .. })
    ));
    assert!(matches!(
        old.clone().nack("late").await,
        Err(Error::LeaseLost { taken: true, .. })
    ));
    assert!(matches!(
        old.ack().await,
        Err(Error::LeaseLost { taken: true, .. })
    ));
    new.ack().await?;
    assert_eq!(q.stats().await?.processed, 1);
    Ok(())
}

#[tokio::test]
async fn expired_leases_come_back_and_die_after_max_attempts() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let q = c.queue("expiring").max_attempts(2);
    q.enqueue([NewTask::new("t").payload("p")], NOW, OnDuplicate::Keep)
        .await?;
    let l1 = q.claim(1, Duration::from_millis(50)).await?;
    assert_eq!(l1[0].task().attempt, 1);
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(q.reap().await?, 1, "the expired lease is returned");
    assert_eq!(q.stats().await?.waiting, 1);
    let l2 = q.claim(1, Duration::from_millis(50)).await?;
    assert_eq!(l2[0].task().attempt, 2);
    tokio::time::sleep(Duration::from_millis(80)).await;
    q.reap().await?;
    let st = q.stats().await?;
    assert_eq!((st.waiting, st.inflight, st.dead, st.failed), (0, 0, 1, 1));
    let dead = q.dead(10).await?;
    assert_eq!(dead[0].id, "t");
    assert!(
        dead[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("lease expired"))
    );
    assert_eq!(dead[0].payload.as_deref(), Some(&b"p"[..]));
    assert_eq!(q.retry_dead(None).await?, 1);
    let l3 = q.claim(1, Duration::from_secs(5)).await?;
    assert_eq!(l3[0].task().attempt, 1, "attempts reset on retry");
    assert_eq!(l3[0].task().payload.as_deref(), Some(&b"p"[..]));
    drop(l1);
    drop(l2);
    for l in l3 {
        l.ack().await?;
    }
    Ok(())
}

#[tokio::test]
async fn nack_retries_with_backoff_then_dead_letters_with_the_error() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let q = c.queue("failing").max_attempts(3).backoff(Backoff::new(
        Duration::from_millis(20),
        Duration::from_millis(40),
    ));
    q.push("t").await?;
    for attempt in 1..=3u32 {
        let l = tokio::time::timeout(Duration::from_secs(2), async {
            loop {
                if let Some(l) = q.claim(1, Duration::from_secs(5)).await?.pop() {
                    return Ok::<_, Error>(l);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await??;
        assert_eq!(l.task().attempt, attempt);
        let r = l.nack(&format!("boom {attempt}")).await?;
        let expect = if attempt < 3 {
            dlm::queue::Nacked::Retrying
        } else {
            dlm::queue::Nacked::Dead
        };
        assert_eq!(r, expect);
    }
    let dead = q.dead(10).await?;
    assert_eq!(dead[0].error.as_deref(), Some("boom 3"));
    assert_eq!(q.purge_dead().await?, 1);
    assert_eq!(q.stats().await?.dead, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_processes_retries_survives_panics_and_stops_when_drained() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let q = c.queue("work").max_attempts(3).backoff(Backoff::new(
        Duration::from_millis(10),
        Duration::from_millis(20),
    ));
    let ids: Vec<String> = (0..200).map(|i| format!("t{i}")).collect();
    q.enqueue(ids.iter().cloned(), NOW, OnDuplicate::Keep)
        .await?;
    q.enqueue(["flaky", "poison", "panics"], NOW, OnDuplicate::Keep)
        .await?;
    let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let r2 = runs.clone();
    let report = q
        .worker(
            WorkerOptions::new()
                .concurrency(16)
                .exit_when_empty(true)
                .idle_wait(Duration::from_millis(50)),
        )
        .run(
            move |task| {
                let runs = r2.clone();
                async move {
                    *runs
                        .lock()
                        .expect("lock")
                        .entry(task.id.clone())
                        .or_default() += 1;
                    match task.id.as_str() {
                        "flaky" if task.attempt < 2 => Err("flaky failure".to_string()),
                        "poison" => Err("always fails".to_string()),
                        "panics" => panic!("handler bug"),
                        _ => Ok(()),
                    }
                }
            },
            CancellationToken::new(),
        )
        .await?;
    let runs = runs.lock().expect("lock").clone();
    assert!(
        ids.iter().all(|id| runs.get(id) == Some(&1)),
        "each task once"
    );
    assert_eq!(runs.get("flaky"), Some(&2));
    assert_eq!(runs.get("poison"), Some(&3));
    assert_eq!(report.acked, 201);
    assert_eq!(report.dead, 2, "poison and panics: {report:?}");
    let st = q.stats().await?;
    assert!(st.is_drained());
    assert_eq!((st.processed, st.dead), (201, 2));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_wakes_on_enqueue_and_on_a_delayed_task_coming_due() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let q = c.queue("idle");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let worker = q
        .worker(WorkerOptions::new().idle_wait(Duration::from_secs(30)))
        .run(
            move |task| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send((task.id, Instant::now()));
                    Ok::<(), String>(())
                }
            },
            stop.clone(),
        );
    let worker = tokio::spawn(worker);
    tokio::time::sleep(Duration::from_millis(300)).await; // the worker is blocked now
    let t0 = Instant::now();
    q.push("now").await?;
    let (id, started) = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await?
        .ok_or("closed")?;
    assert_eq!(id, "now");
    assert!(
        started - t0 < Duration::from_secs(5),
        "woken by the enqueue, not the 30 s idle wait"
    );

    q.enqueue(["later"], Duration::from_millis(500), OnDuplicate::Keep)
        .await?;
    let t0 = Instant::now();
    let (id, started) = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await?
        .ok_or("closed")?;
    assert_eq!(id, "later");
    assert!(
        started - t0 >= Duration::from_millis(450),
        "not before it is due"
    );
    stop.cancel();
    worker.await??;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_long_tasks_and_shutdown_returns_the_rest_at_once() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let q = c.queue("long");
    q.enqueue(["slow", "stuck"], NOW, OnDuplicate::Keep).await?;
    let attempts: Arc<Mutex<Vec<(String, u32)>>> = Arc::default();
    let a2 = attempts.clone();
    let stop = CancellationToken::new();
    let worker = tokio::spawn(
        q.worker(
            WorkerOptions::new()
                .concurrency(2)
                .lease(Duration::from_millis(300))
                .grace(Duration::from_millis(1500)),
        )
        .run(
            move |task| {
                let a = a2.clone();
                async move {
                    a.lock()
                        .expect("lock")
                        .push((task.id.clone(), task.attempt));
                    let secs = if task.id == "slow" { 1 } else { 60 };
                    tokio::time::sleep(Duration::from_secs(secs)).await;
                    Ok::<(), String>(())
                }
            },
            stop.clone(),
        ),
    );
    tokio::time::sleep(Duration::from_millis(1200)).await; // 4 leases long
    assert_eq!(
        attempts.lock().expect("lock").len(),
        2,
        "renewed, never re-claimed"
    );
    stop.cancel();
    let t0 = Instant::now();
    let report = worker.await??;
    assert!(t0.elapsed() < Duration::from_secs(4));
    assert_eq!(report.acked, 1, "slow finished within the grace period");
    assert_eq!(report.returned, 1, "stuck was given back");
    let st = q.stats().await?;
    assert_eq!(
        (st.waiting, st.inflight),
        (1, 0),
        "back at once, not after lease expiry"
    );
    let l = q.claim(1, Duration::from_secs(5)).await?;
    assert_eq!(
        l[0].task().attempt,
        1,
        "a returned task's attempt does not count"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_resumes_after_redis_restarts_and_aof_keeps_acknowledged_enqueues() -> TestResult {
    let mut s = RedisServer::builder().aof(true).start()?;
    let c = client(&s).await;
    let q = c.queue("restart");
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let a2 = acked.clone();
    let stop = CancellationToken::new();
    let worker = tokio::spawn(
        q.worker(WorkerOptions::new().idle_wait(Duration::from_millis(100)))
            .run(
                move |task| {
                    let a = a2.clone();
                    async move {
                        a.lock().expect("lock").push(task.id);
                        Ok::<(), String>(())
                    }
                },
                stop.clone(),
            ),
    );
    q.enqueue(
        (0..20).map(|i| format!("before-{i}")),
        NOW,
        OnDuplicate::Keep,
    )
    .await?;
    // Acknowledged enqueues that no worker has taken yet survive a crash with appendfsync always.
    q.enqueue(
        (0..20).map(|i| format!("delayed-{i}")),
        Duration::from_millis(4000),
        OnDuplicate::Keep,
    )
    .await?;
    // The worker has taken the due ones (waited for, not slept on: the
    // machine may be loaded); the delayed ones are not due yet.
    tokio::time::timeout(Duration::from_secs(3), async {
        while acked.lock().expect("lock").len() < 20 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await?;
    s.restart()?; // SIGKILL + start on the same port, reloading the AOF
    assert_eq!(s.command(&["ZCARD", "dlm:queue:{restart}:waiting"])?, ":20");
    let back = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match q
                .enqueue(
                    (0..20).map(|i| format!("after-{i}")),
                    NOW,
                    OnDuplicate::Keep,
                )
                .await
            {
                Ok(_) => return,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await;
    assert!(back.is_ok(), "the client reconnects");
    tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            if acked.lock().expect("lock").len() >= 60 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await?;
    stop.cancel();
    worker.await??;
    let acked = acked.lock().expect("lock");
    for prefix in ["before", "delayed", "after"] {
        for i in 0..20 {
            assert!(
                acked.contains(&format!("{prefix}-{i}")),
                "{prefix}-{i} lost"
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn bad_queue_input_is_an_invalid_argument() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let q = c.queue("bad");
    let invalid = |r: Result<_, Error>| matches!(r, Err(Error::InvalidArgument { .. }));
    assert!(invalid(c.queue("").push("x").await.map(|_| ())));
    assert!(invalid(q.push("").await.map(|_| ())));
    let big = vec![0u8; 600 * 1024];
    assert!(invalid(
        q.enqueue(
            [NewTask::new("x").payload(big.clone())],
            NOW,
            OnDuplicate::Keep
        )
        .await
        .map(|_| ())
    ));
    assert!(
        q.clone()
            .max_payload(1024 * 1024)
            .enqueue([NewTask::new("x").payload(big)], NOW, OnDuplicate::Keep)
            .await
            .is_ok()
    );
    assert!(invalid(
        q.enqueue(
            ["y"],
            Duration::from_secs(400 * 24 * 3600),
            OnDuplicate::Keep
        )
        .await
        .map(|_| ())
    ));
    let none: [&str; 0] = [];
    assert!(invalid(
        q.enqueue(none, NOW, OnDuplicate::Keep).await.map(|_| ())
    ));
    assert!(invalid(q.top(0).await.map(|_| ())));
    assert!(invalid(q.pop(1_000_000).await.map(|_| ())));
    assert!(invalid(q.claim(1, Duration::ZERO).await.map(|_| ())));
    assert!(invalid(
        q.clone()
            .max_attempts(0)
            .claim(1, Duration::from_secs(1))
            .await
            .map(|_| ())
    ));
    let w = q.worker(WorkerOptions::new().concurrency(0));
    assert!(invalid(
        w.run(
            |_t| async { Ok::<(), String>(()) },
            CancellationToken::new()
        )
        .await
        .map(|_| ())
    ));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_finishing_while_the_worker_idles_does_not_swallow_the_next_wake_up() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let q = c.queue("swallow");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let worker = tokio::spawn(
        q.worker(WorkerOptions::new().idle_wait(Duration::from_secs(30)))
            .run(
                move |task| {
                    let tx = tx.clone();
                    async move {
                        let _ = tx.send(task.id.clone());
                        if task.id == "slow" {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                        }
                        Ok::<(), String>(())
                    }
                },
                stop.clone(),
            ),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    q.push("slow").await?;
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(5), rx.recv()).await?,
        Some("slow".into())
    );
    tokio::time::sleep(Duration::from_millis(500)).await; // "slow" finished while the worker idled
    let t0 = Instant::now();
    q.push("next").await?;
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(10), rx.recv()).await?,
        Some("next".into())
    );
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "woken by the enqueue: {:?}",
        t0.elapsed()
    );
    stop.cancel();
    worker.await??;
    Ok(())
}

#[tokio::test]
async fn a_claim_of_thousands_leases_each_task_once_with_its_payload_and_attempt() -> TestResult {
    let s = server();
    // 5,000 acks are sent at once below: on a loaded 2-core machine they can
    // take longer than the shared 1.5 s test deadline (what is tested here is
    // the claim, not how fast 5,000 round trips finish).
    let c = dlm::Client::builder()
        .timeout(Duration::from_secs(20))
        .connect(&s.url())
        .await?;
    let q = c.queue("big");
    const N: usize = 5000;
    let tasks: Vec<_> = (0..N)
        .map(|i| NewTask::new(format!("t{i}")).payload(format!("p{i}")))
        .collect();
    q.enqueue(tasks, NOW, OnDuplicate::Keep).await?;
    // Some tasks are on their second attempt.
    let first = q.claim(10, Duration::from_secs(30)).await?;
    let again: Vec<String> = first.iter().map(|l| l.task().id.clone()).collect();
    for l in first {
        l.nack_after(Duration::ZERO, "once more").await?;
    }
    let leases = q.claim(N, Duration::from_secs(30)).await?;
    assert_eq!(leases.len(), N);
    let mut fences = std::collections::HashSet::new();
    for l in &leases {
        let t = l.task();
        let n = t.id.trim_start_matches('t');
        assert_eq!(t.payload.as_deref(), Some(format!("p{n}").as_bytes()));
        let expected = if again.contains(&t.id) { 2 } else { 1 };
        assert_eq!(t.attempt, expected, "{}", t.id);
        assert!(fences.insert(t.fence), "fence {:?} given twice", t.fence);
    }
    assert!(q.claim(1, Duration::from_secs(30)).await?.is_empty());
    let stats = q.stats().await?;
    assert_eq!((stats.waiting, stats.inflight), (0, N as u64));
    let acks: Vec<_> = leases.into_iter().map(|l| tokio::spawn(l.ack())).collect();
    for a in acks {
        a.await??;
    }
    let stats = q.stats().await?;
    assert_eq!((stats.waiting, stats.inflight), (0, 0));
    let mut conn = raw(&s).await;
    let keys: Vec<String> = redis::AsyncCommands::keys(&mut conn, "dlm:queue:{big}:*").await?;
    for k in keys {
        let kind: String = redis::cmd("TYPE").arg(&k).query_async(&mut conn).await?;
        if kind == "hash" && !k.ends_with(":stats") {
            let n: i64 = redis::cmd("HLEN").arg(&k).query_async(&mut conn).await?;
            assert_eq!(n, 0, "{k} keeps {n} fields after every task was acked");
        }
    }
    Ok(())
}

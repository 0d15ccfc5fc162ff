//! The batched read-write-lock scripts (`acquire_many.lua`,
//! `release_many.lua`, issue 36) decide exactly what the scripts of one
//! operation each decided before them (kept as the oracle in
//! `tests/fixtures/rw_reference/`: `read.lua`, `write.lua`, `release.lua`).
//!
//! One random history of reads, writes (with and without a waiting marker)
//! and releases, by a few tokens on two locks, some with leases that run out
//! between steps, runs twice side by side on one server: one operation per
//! call of the reference scripts under one key prefix, and each step's
//! operations as batches of the new scripts under another (consecutive
//! operations of one kind in one call, as the batcher sends them). After
//! every step the replies (granted or busy, fence, released or not) and what
//! Redis holds (writer, read shares, waiting writers, fencing counter) must
//! be the same, and so must the wake-up messages published, in order.
mod common;

use std::time::Duration;

use common::rw_scripts::*;
use common::*;
use futures_util::StreamExt;
use redis::Script;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_rw_scripts_decide_as_the_one_operation_scripts_did() -> TestResult {
    let s = server();
    let client = redis::Client::open(s.url())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.psubscribe("ref:*").await?;
    pubsub.psubscribe("new:*").await?;
    let read = Script::new(include_str!("fixtures/rw_reference/read.lua"));
    let write = Script::new(include_str!("fixtures/rw_reference/write.lua"));
    let release = Script::new(include_str!("fixtures/rw_reference/release.lua"));
    let acquire_many = Script::new(include_str!("../src/rwlock/scripts/acquire_many.lua"));
    let release_many = Script::new(include_str!("../src/rwlock/scripts/release_many.lua"));
    let tokens = ["t0", "t1", "t2", "t3", "t4"];
    let ttl = |rng: &mut Rng| if rng.next(3) == 0 { SHORT } else { LONG };
    let mut rng = Rng(36);
    for step in 0..50 {
        let mut ops = Vec::new();
        for _ in 0..1 + rng.next(6) {
            let (who, lock) = (rng.next(5) as usize, rng.next(2) as usize);
            ops.push(match rng.next(5) {
                0 | 1 => Op::Read {
                    who,
                    lock,
                    ttl: ttl(&mut rng),
                },
                2 => Op::Write {
                    who,
                    lock,
                    ttl: ttl(&mut rng),
                    marker: [0, SHORT, LONG][rng.next(3) as usize],
                },
                _ => Op::Release {
                    who,
                    lock,
                    write: rng.next(2) == 0,
                },
            });
        }
        // The reference: one call per operation.
        let mut expected = Vec::new();
        for op in &ops {
            let reply = match *op {
                Op::Read { who, lock, ttl } | Op::Write { who, lock, ttl, .. } => {
                    let k = keys("ref:", lock);
                    let script = if matches!(op, Op::Read { .. }) {
                        &read
                    } else {
                        &write
                    };
                    let mut inv = script.key(&k.writer);
                    inv.key(&k.readers)
                        .key(&k.waiting)
                        .key(&k.fence)
                        .arg(tokens[who])
                        .arg(ttl);
                    if let Op::Write { marker, .. } = *op {
                        inv.arg(marker);
                    }
                    let (code, n): (i64, i64) = inv.invoke_async(&mut conn).await?;
                    normalise(true, code, Some(n))
                }
                Op::Release { who, lock, write } => {
                    let k = keys("ref:", lock);
                    let code: i64 = release
                        .key(&k.writer)
                        .key(&k.readers)
                        .key(&k.waiting)
                        .arg(tokens[who])
                        .arg(if write { "w" } else { "r" })
                        .arg(&k.readable)
                        .arg(&k.writable)
                        .invoke_async(&mut conn)
                        .await?;
                    normalise(false, code, None)
                }
            };
            expected.push(reply);
        }
        let held_before = snapshot(&mut conn, "ref:").await?;
        // The batched scripts: consecutive operations of one kind in one call.
        let mut got = Vec::new();
        for run in ops.chunk_by(|a, b| a.acquire() == b.acquire()) {
            if run[0].acquire() {
                let mut inv = acquire_many.prepare_invoke();
                for op in run {
                    if let Op::Read { lock, .. } | Op::Write { lock, .. } = *op {
                        let k = keys("new:", lock);
                        inv.key(&k.writer)
                            .key(&k.readers)
                            .key(&k.waiting)
                            .key(&k.fence);
                    }
                }
                for op in run {
                    match *op {
                        Op::Read { who, ttl, .. } => inv.arg("r").arg(tokens[who]).arg(ttl).arg(0),
                        Op::Write {
                            who, ttl, marker, ..
                        } => inv.arg("w").arg(tokens[who]).arg(ttl).arg(marker),
                        Op::Release { .. } => unreachable!(),
                    };
                }
                let flat: Vec<i64> = inv.invoke_async(&mut conn).await?;
                got.extend(flat.chunks(2).map(|p| normalise(true, p[0], Some(p[1]))));
            } else {
                let mut inv = release_many.prepare_invoke();
                for op in run {
                    if let Op::Release { lock, .. } = *op {
                        let k = keys("new:", lock);
                        inv.key(&k.writer).key(&k.readers).key(&k.waiting);
                    }
                }
                for op in run {
                    if let Op::Release { who, lock, write } = *op {
                        let k = keys("new:", lock);
                        inv.arg(if write { "w" } else { "r" })
                            .arg(tokens[who])
                            .arg(&k.readable)
                            .arg(&k.writable);
                    }
                }
                let codes: Vec<i64> = inv.invoke_async(&mut conn).await?;
                got.extend(codes.into_iter().map(|c| normalise(false, c, None)));
            }
        }
        assert_eq!(got, expected, "step {step}: replies differ for {ops:?}");
        let held_after = snapshot(&mut conn, "new:").await?;
        assert_eq!(
            held_after, held_before,
            "step {step}: what Redis holds differs after {ops:?}"
        );
        // Short leases run out between steps.
        tokio::time::sleep(Duration::from_millis(SHORT + 60)).await;
    }
    // The wake-ups, in order, per prefix.
    let mut stream = pubsub.on_message();
    let (mut reference, mut batched) = (Vec::new(), Vec::new());
    while let Ok(Some(msg)) = tokio::time::timeout(Duration::from_millis(300), stream.next()).await
    {
        let channel = msg.get_channel_name().to_string();
        match channel.split_once(':') {
            Some(("ref", rest)) => reference.push(rest.to_string()),
            Some(("new", rest)) => batched.push(rest.to_string()),
            _ => {}
        }
    }
    assert!(
        !reference.is_empty(),
        "the history woke nobody: a weak history"
    );
    assert_eq!(batched, reference, "the wake-ups differ");
    Ok(())
}

//! Review 2 of the batched read-write-lock scripts (issue 36): the
//! equivalence with the one-operation scripts (`tests/fixtures/rw_reference/`)
//! under many operations on the SAME lock in one call, where an earlier job
//! of the call changes what a later one must see (the cached `MGET` writer
//! values, the `EXISTS` skip of reader and waiting sets, the fences handed
//! out in grant order), including calls that start with no sets at all.
mod common;

use std::time::Duration;

use common::rw_scripts::*;
use common::*;
use futures_util::StreamExt;
use redis::Script;

type Reply = (i64, i64);

/// Run `ops` one per call of the reference scripts under `ref:`.
async fn reference(
    conn: &mut redis::aio::MultiplexedConnection,
    tokens: &[&str],
    ops: &[Op],
) -> redis::RedisResult<Vec<Reply>> {
    let read = Script::new(include_str!("fixtures/rw_reference/read.lua"));
    let write = Script::new(include_str!("fixtures/rw_reference/write.lua"));
    let release = Script::new(include_str!("fixtures/rw_reference/release.lua"));
    let mut expected = Vec::new();
    for op in ops {
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
                let (code, n): (i64, i64) = inv.invoke_async(conn).await?;
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
                    .invoke_async(conn)
                    .await?;
                normalise(false, code, None)
            }
        };
        expected.push(reply);
    }
    Ok(expected)
}

/// Run `ops` under `new:`, consecutive operations of one kind in one call
/// of the batched scripts (as one phase of the batcher sends them).
async fn batched(
    conn: &mut redis::aio::MultiplexedConnection,
    tokens: &[&str],
    ops: &[Op],
) -> redis::RedisResult<Vec<Reply>> {
    let acquire_many = Script::new(include_str!("../src/rwlock/scripts/acquire_many.lua"));
    let release_many = Script::new(include_str!("../src/rwlock/scripts/release_many.lua"));
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
            let flat: Vec<i64> = inv.invoke_async(conn).await?;
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
            let codes: Vec<i64> = inv.invoke_async(conn).await?;
            got.extend(codes.into_iter().map(|c| normalise(false, c, None)));
        }
    }
    Ok(got)
}

/// Many operations on one lock per call (the second lock is rare), runs of
/// one kind long enough that a read and a write, two writes, or a write and
/// later reads of the same lock share a call; now and then every set and
/// writer is wiped (fences kept) so calls start with nothing to `EXISTS`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_operations_on_one_lock_in_one_call_decide_as_one_by_one() -> TestResult {
    let s = server();
    let client = redis::Client::open(s.url())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.psubscribe("ref:*").await?;
    pubsub.psubscribe("new:*").await?;
    let tokens = ["t0", "t1", "t2", "t3"];
    for seed in [1u64, 2, 3, 4, 5, 6] {
        let mut rng = Rng(seed * 7919);
        let ttl = |rng: &mut Rng| if rng.next(3) == 0 { SHORT } else { LONG };
        let mut slept = std::time::Instant::now();
        for step in 0..40 {
            let mut ops = Vec::new();
            // Long runs of one kind: acquires first, then releases, then
            // acquires again (each run is one call of the batched scripts).
            for run in 0..3 {
                let acquire = run != 1;
                for _ in 0..1 + rng.next(12) {
                    let who = rng.next(tokens.len() as u64) as usize;
                    let lock = usize::from(rng.next(8) == 0);
                    ops.push(if !acquire {
                        Op::Release {
                            who,
                            lock,
                            write: rng.next(2) == 0,
                        }
                    } else if rng.next(2) == 0 {
                        Op::Read {
                            who,
                            lock,
                            ttl: ttl(&mut rng),
                        }
                    } else {
                        Op::Write {
                            who,
                            lock,
                            ttl: ttl(&mut rng),
                            marker: [0, SHORT, LONG][rng.next(3) as usize],
                        }
                    });
                }
            }
            let expected = reference(&mut conn, &tokens, &ops).await?;
            let held_before = snapshot(&mut conn, "ref:").await?;
            let got = batched(&mut conn, &tokens, &ops).await?;
            assert_eq!(
                got, expected,
                "seed {seed} step {step}: replies differ for {ops:?}"
            );
            let held_after = snapshot(&mut conn, "new:").await?;
            assert_eq!(
                held_after, held_before,
                "seed {seed} step {step}: what Redis holds differs after {ops:?}"
            );
            // A short lease runs out on both sides or on neither: every
            // lease granted since the last sleep is still live here.
            if rng.next(4) == 0 || slept.elapsed() > Duration::from_millis(50) {
                tokio::time::sleep(Duration::from_millis(SHORT + 60)).await;
                slept = std::time::Instant::now();
            }
            // Now and then a wipe: the next calls start with no sets.
            if rng.next(4) == 0 {
                for prefix in ["ref:", "new:"] {
                    for lock in 0..LOCKS {
                        let k = keys(prefix, lock);
                        let _: i64 = redis::cmd("DEL")
                            .arg(&k.writer)
                            .arg(&k.readers)
                            .arg(&k.waiting)
                            .query_async(&mut conn)
                            .await?;
                    }
                }
            }
        }
    }
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
    assert!(!reference.is_empty(), "the history woke nobody");
    assert_eq!(batched, reference, "the wake-ups differ");
    Ok(())
}

/// The node of a Redis Cluster that holds rwlock `name`.
fn node_of<'a>(c: &'a dlm_testkit::Cluster, name: &str) -> &'a dlm_testkit::RedisServer {
    c.master_for_slot(dlm_testkit::key_slot(&format!("dlm:rw:{{{name}}}:writer")))
        .expect("a master for the lock's slot")
}

/// `downgrade` does not wait behind the acquisition's own given-up attempts.
///
/// On a Cluster, lock `j` lives on a frozen node and `k` on a live one. One
/// batch `[release of a share of j, write attempt of j, write attempt A1 of
/// k by acquisition T]` travels in two phases (j comes back with the other
/// kind), so A1 waits for the frozen node. T's call times out (A1 stays
/// outstanding), T retries: A2 goes in a batch of its own to k's node and
/// is granted. T downgrades at once (downgrade.lua: the write lock becomes
/// T's read share). The node thaws, phase 2 goes out, and A1 (a write of
/// token T) finds T's own read share: busy, and it leaves a waiting-writer
/// marker of T that nobody will ever refresh or remove, keeping every new
/// reader of k out for up to `WRITER_MARKER_LEASE` although only a reader
/// holds it. Had the downgrade waited behind A1 (as release and cancel do),
/// A1 would have found T's write lock and merely renewed it.
#[tokio::test(flavor = "current_thread")]
async fn a_downgrade_is_not_overtaken_by_a_given_up_attempt_of_its_own_acquisition() -> TestResult {
    let cluster = dlm_testkit::Cluster::start()?;
    let names: Vec<String> = (0..64).map(|i| format!("n{i}")).collect();
    let j = names[0].clone();
    let k = names
        .iter()
        .find(|n| !std::ptr::eq(node_of(&cluster, n), node_of(&cluster, &j)))
        .expect("a lock on another node")
        .clone();
    let c = dlm::Client::builder()
        .timeout(Duration::from_millis(400))
        .connect_cluster(&cluster.urls())
        .await?;
    // Warm both nodes' connections and scripts.
    c.rwlock(&k).write(&ttl(1000)).await?.release().await?;
    c.rwlock(&j).write(&ttl(1000)).await?.release().await?;
    let share = c.rwlock(&j).read(&ttl(20_000)).await?;
    let share2 = c.rwlock(&j).read(&ttl(20_000)).await?;
    node_of(&cluster, &j).pause()?;
    // Occupy one batch slot with a lone attempt stuck on the frozen node.
    let fill = {
        let rw = c.rwlock(&j);
        tokio::spawn(async move { rw.write(&ttl(20_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    let release = tokio::spawn(async move { share.release().await });
    let other = {
        let rw = c.rwlock(&j);
        tokio::spawn(async move { rw.write(&ttl(20_000)).await })
    };
    let release2 = tokio::spawn(async move { share2.release().await });
    let t = {
        let rw = c.rwlock(&k);
        let opts = ttl(20_000)
            .wait(Duration::from_secs(10))
            .retry_interval(Duration::from_millis(20))
            .watchdog(false);
        tokio::spawn(async move {
            let w = rw.write(&opts).await?;
            // (Still well before A1 goes out; and with the downgrade behind
            // A1, its wait ends within the client's deadline.)
            tokio::time::sleep(Duration::from_millis(150)).await;
            w.downgrade().await
        })
    };
    // T's call times out (400 ms) while A1 waits for phase 3, A2 is granted
    // by k's live node, and T downgrades before A1 is sent (800 ms).
    let read = t.await??;
    node_of(&cluster, &k).command(&["PING"])?;
    node_of(&cluster, &j).resume()?;
    let _ = fill.await?;
    let _ = release.await?;
    let _ = other.await?;
    let _ = release2.await?;
    c.settle(Duration::from_secs(2)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let waiting = node_of(&cluster, &k).command(&[
        "ZRANGE",
        &format!("dlm:rw:{{{k}}}:writers_waiting"),
        "0",
        "-1",
    ])?;
    // A reader of another client must get in next to T's share at once.
    let c2 = dlm::Client::builder()
        .connect_cluster(&cluster.urls())
        .await?;
    let second = c2.rwlock(&k).read(&ttl(5_000)).await;
    assert!(
        second.is_ok(),
        "rwlock {k} is read-held by T only, yet a new reader is kept out ({second:?}) by a \
         waiting-writer marker nobody holds: writers_waiting = {waiting:?}"
    );
    drop(read);
    Ok(())
}

/// A Lua error of one job fails every job of its call: a lock whose key
/// holds something else (here: `bad`'s readers key is a string, WRONGTYPE)
/// makes an unrelated lock's read, batched into the same
/// `acquire_many.lua` call, fail with that error, where the one-operation
/// scripts failed only the attempt on `bad`. (Its grant, if made before the
/// error, is undone by the acquisition's cancel; but the caller of `good`
/// gets a non-retryable error for a lock that is free.)
#[tokio::test(flavor = "current_thread")]
async fn a_broken_lock_does_not_fail_another_lock_batched_with_it() -> TestResult {
    let s = server();
    let c = dlm::Client::builder()
        .timeout(Duration::from_secs(2))
        .connect(&s.url())
        .await?;
    c.rwlock("warm").write(&ttl(1000)).await?.release().await?;
    s.command(&["SET", "dlm:rw:{bad}:readers", "not a sorted set"])?;
    s.pause()?;
    let fill = {
        let rw = c.rwlock("fill");
        tokio::spawn(async move { rw.write(&ttl(20_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    // Both submit before either leader drains the queue: one call.
    let good = {
        let rw = c.rwlock("good");
        tokio::spawn(async move { rw.read(&ttl(20_000)).await })
    };
    let bad = {
        let rw = c.rwlock("bad");
        tokio::spawn(async move { rw.read(&ttl(20_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.resume()?;
    let _ = fill.await?;
    let bad = bad.await?;
    let good = good.await?;
    assert!(bad.is_err(), "the broken lock's read fails: {bad:?}");
    assert!(
        good.is_ok(),
        "a read of the free lock `good` failed because it shared a call with `bad`: {good:?}"
    );
    Ok(())
}

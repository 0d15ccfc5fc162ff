//! Adversarial review of the sharded queue (issue 35): interleavings and
//! states that break its promises, each against real servers.
mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::{Deployment, TestResult};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;
use dlm::queue::{NewTask, Queue, QueueSettings, RateLimit};

fn shards(k: u16) -> QueueSettings {
    QueueSettings::default().shards(k)
}

/// A shard key whose home is shard `want` under the queue's current K.
async fn key_homed_at(q: &Queue, want: u16, salt: &str) -> Result<String, dlm::Error> {
    for i in 0..100_000 {
        let k = format!("{salt}{i}");
        if q.shard_of(&NewTask::new("x").shard_key(k.as_str())).await? == want {
            return Ok(k);
        }
    }
    panic!("no key of queue {:?} is homed at shard {want}", q.name())
}

/// Claim (and ack) until nothing more comes for `quiet`, or `deadline`
/// passes; the ids claimed.
async fn claim_all(q: &Queue, quiet: Duration, deadline: Duration) -> Res<Vec<String>> {
    let start = Instant::now();
    let mut last = Instant::now();
    let mut got = Vec::new();
    while start.elapsed() < deadline && last.elapsed() < quiet {
        let leases = q.claim(50, Duration::from_secs(60)).await?;
        if leases.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        last = Instant::now();
        for l in leases {
            got.push(l.task().id.clone());
            l.ack().await?;
        }
    }
    Ok(got)
}

/// A claim round leases from shard 0, then meets a shard whose master does
/// not answer: the round's error must not throw away the leases it already
/// took (they would sit in flight, owned by nobody, until they expire, an
/// attempt spent each; on the last attempt the task dies without running).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_shard_does_not_orphan_leases_taken_earlier_in_the_round() -> TestResult {
    let d = Deployment::cluster();
    let Deployment::Cluster(c) = &d else {
        return Ok(());
    };
    let admin = d.client().await.queue("orphan");
    admin.configure(&shards(3)).await?;
    let layout = admin.shards().await?;
    let m0 = c.master_for_slot(layout.shards[0].slot).map(|m| m.port());
    let m1 = c.master_for_slot(layout.shards[1].slot).map(|m| m.port());
    assert_ne!(m0, m1, "{layout:?}");
    // The claim script is loaded on every master (as on any queue in use).
    assert!(admin.claim(1, Duration::from_secs(1)).await?.is_empty());
    let key = key_homed_at(&admin, 0, "k").await?;
    for i in 0..5 {
        admin
            .push(NewTask::new(format!("o{i}")).shard_key(key.as_str()))
            .await?;
    }
    let worker = d.client().await.queue("orphan");
    // Shard 1's master stops answering for a while (a stall, a failover).
    let m1 = c
        .master_for_slot(layout.shards[1].slot)
        .ok_or("no master")?;
    m1.command(&["CLIENT", "PAUSE", "5000", "ALL"])?;
    // A fresh handle's first round starts at shard 0 (5 leased, fewer than
    // asked), then asks shard 1.
    let claimed = worker.claim(10, Duration::from_secs(600)).await;
    let held = claimed.as_ref().map_or(0, Vec::len);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let inflight = admin.stats().await?.inflight;
    assert_eq!(
        inflight,
        held as u64,
        "leases in flight that no caller holds (claim returned {:?})",
        claimed.map(|v| v.len())
    );
    Ok(())
}

/// Shards removed by a lowering keep their keys (and their `paused` field).
/// Raising K again makes them anew: a queue resumed meanwhile must not get
/// shards that are still paused (their tasks would never be claimed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_made_again_by_a_raise_is_not_left_paused() -> TestResult {
    let d = Deployment::standalone();
    let q = d.client().await.queue("repause");
    q.configure(&shards(4)).await?;
    q.pause().await?;
    q.configure(&shards(2)).await?; // empty: no drain needed
    q.resume().await?;
    q.configure(&shards(4)).await?;
    assert!(!q.stats().await?.paused, "{:?}", q.shard_stats().await?);
    let ids: HashSet<String> = (0..40).map(|i| format!("r{i}")).collect();
    for id in &ids {
        q.push(id.as_str()).await?;
    }
    let got: HashSet<String> = claim_all(&q, Duration::from_secs(1), Duration::from_secs(10))
        .await?
        .into_iter()
        .collect();
    assert_eq!(got, ids, "tasks stuck in a shard left paused");
    Ok(())
}

/// "A change of K rewrites the shares ... so the sum never exceeds n, even
/// during the change" (docs/sharded-queue.md section 4). Raising: the old
/// shards' logs already hold their old (larger) shares of this window, and
/// the new shards start with empty logs and a share each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raise_keeps_the_rate_limit_within_its_window() -> TestResult {
    let d = Deployment::standalone();
    let q = d.client().await.queue("rate-raise");
    let limit = RateLimit::new(4, Duration::from_secs(60))?;
    q.configure(&shards(2).rate(Some(limit))).await?;
    for i in 0..40 {
        q.push(format!("a{i}").as_str()).await?;
    }
    let before = claim_all(&q, Duration::from_millis(500), Duration::from_secs(5)).await?;
    assert_eq!(before.len(), 4);
    q.configure(&shards(4)).await?;
    for i in 0..40 {
        q.push(format!("b{i}").as_str()).await?;
    }
    let after = claim_all(&q, Duration::from_millis(500), Duration::from_secs(5)).await?;
    assert!(
        before.len() + after.len() <= 4,
        "{} + {} tasks started within one 60 s window of a limit of 4",
        before.len(),
        after.len()
    );
    Ok(())
}

/// Lowering: the kept shards' shares grow after the commit, while the
/// removed shards' claims of this window are forgotten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowering_keeps_the_rate_limit_within_its_window() -> TestResult {
    let d = Deployment::standalone();
    let q = d.client().await.queue("rate-lower");
    let limit = RateLimit::new(4, Duration::from_secs(60))?;
    q.configure(&shards(4).rate(Some(limit))).await?;
    // One task in each of shards 2 and 3, several in shards 0 and 1.
    for s in 0..4u16 {
        let key = key_homed_at(&q, s, "s").await?;
        let n = if s < 2 { 5 } else { 1 };
        for i in 0..n {
            q.push(NewTask::new(format!("t{s}.{i}")).shard_key(key.as_str()))
                .await?;
        }
    }
    let before = claim_all(&q, Duration::from_millis(500), Duration::from_secs(5)).await?;
    assert_eq!(before.len(), 4, "one per shard: {before:?}");
    // Shards 2 and 3 are empty now: lowered without a drain.
    q.configure(&shards(2)).await?;
    let after = claim_all(&q, Duration::from_millis(500), Duration::from_secs(5)).await?;
    assert!(
        before.len() + after.len() <= 4,
        "{} + {} tasks started within one 60 s window of a limit of 4",
        before.len(),
        after.len()
    );
    Ok(())
}

/// A lowering (with --drain) whose caller goes away after it bumped the
/// removed shards and before its commit on shard 0 (a crash, a killed CLI, a
/// timeout): the removed shards then refuse every call at shard 0's version,
/// which is the only version any handle can learn. Their tasks must still
/// be claimed, and pushes homed there must still be taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowering_cut_off_before_its_commit_strands_no_task() -> TestResult {
    let server = common::server();
    let direct = common::client(&server).await.queue("cut");
    direct.configure(&shards(4)).await?;
    let ids: HashSet<String> = (0..40).map(|i| format!("c{i}")).collect();
    for id in &ids {
        direct.push(id.as_str()).await?;
    }
    let per = direct.shard_stats().await?;
    assert!(per[2].waiting > 0 && per[3].waiting > 0, "{per:?}");
    let v = direct.shards().await?.version;
    let key = key_homed_at(&direct, 2, "h").await?;
    // The operator's client reaches Redis through a slow link.
    let proxy = dlm_testkit::FaultProxy::in_front_of(&server, 7)?;
    let slow = dlm::Client::builder()
        .timeout(Duration::from_secs(5))
        .connect(&proxy.url())
        .await?
        .queue("cut");
    slow.shards().await?; // connected before the link slows
    common::delay_requests(std::slice::from_ref(&proxy), 150);
    let change = tokio::spawn(async move { slow.configure(&shards(2).drain_shards(true)).await });
    // Cut it off once the first removed shard has been bumped (its commit
    // is at least three round trips later).
    let raw_key = "dlm:queue:shard:{cut#2}:config";
    let mut raw = common::raw(&server).await;
    let t0 = Instant::now();
    loop {
        let have: Option<u64> = redis::cmd("HGET")
            .arg(raw_key)
            .arg("layout")
            .query_async(&mut raw)
            .await?;
        if have == Some(v + 1) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no bump seen");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    change.abort();
    let _ = change.await;
    common::delay_requests(std::slice::from_ref(&proxy), 0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Cut off between the lowering's two commits: shard 0 says the removed
    // shards drain (a layout every handle can learn).
    let cut = direct.shards().await?;
    assert!(cut.version > v, "{cut:?}");
    // Work goes on: a fresh worker handle, and a push whose key was homed
    // at shard 2 before the change.
    let worker = common::client(&server).await.queue("cut");
    let pushed = direct
        .push(NewTask::new("late").shard_key(key.as_str()))
        .await;
    let got: HashSet<String> = claim_all(&worker, Duration::from_secs(7), Duration::from_secs(15))
        .await?
        .into_iter()
        .collect();
    let missing: Vec<&String> = ids.difference(&got).collect();
    assert!(
        missing.is_empty(),
        "{} tasks never claimed: {missing:?}",
        missing.len()
    );
    assert!(pushed.is_ok(), "{pushed:?}");
    Ok(())
}

//! Second adversarial review of the sharded queue (issue 35), after the
//! two-phase lowering and the rate carry: interleavings and states that
//! still break its promises, each against real servers.
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

/// Push `per` tasks homed at each of shards 0..k (under the queue's K now).
async fn push_everywhere(q: &Queue, k: u16, per: usize, prefix: &str) -> Res<HashSet<String>> {
    let mut ids = HashSet::new();
    for s in 0..k {
        let key = key_homed_at(q, s, &format!("{prefix}{s}k")).await?;
        for i in 0..per {
            let id = format!("{prefix}{s}.{i}");
            q.push(NewTask::new(id.as_str()).shard_key(key.as_str()))
                .await?;
            ids.insert(id);
        }
    }
    Ok(ids)
}

/// Wait until shard 0's `config` field `field` of queue `name` reads
/// `want` (looked at behind dlm's back).
async fn wait_for_field(
    server: &common::RedisServer,
    name: &str,
    field: &str,
    want: u64,
) -> Res<()> {
    let key = format!("dlm:queue:{{{name}}}:config");
    let mut raw = common::raw(server).await;
    let t0 = Instant::now();
    loop {
        let have: Option<u64> = redis::cmd("HGET")
            .arg(&key)
            .arg(field)
            .query_async(&mut raw)
            .await?;
        if have == Some(want) {
            return Ok(());
        }
        if t0.elapsed() > Duration::from_secs(15) {
            return Err(format!("{key} {field} never became {want} (is {have:?})").into());
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
}

/// A queue handle of its own client that reaches `server` through a proxy
/// (slowed later with `common::delay_requests`).
async fn slow_handle(
    server: &common::RedisServer,
    seed: u64,
    name: &str,
) -> Res<(dlm_testkit::FaultProxy, Queue)> {
    let proxy = dlm_testkit::FaultProxy::in_front_of(server, seed)?;
    let q = dlm::Client::builder()
        .timeout(Duration::from_secs(5))
        .connect(&proxy.url())
        .await?
        .queue(name);
    q.shards().await?; // connected (and its scripts loaded) before the link slows
    Ok((proxy, q))
}

/// Finding 1. A lowering's removed shards keep the version of its first
/// commit (`mid`) after the second commit drops them; only the kept shards
/// are bumped to `last`. A handle that read the layout between the two
/// commits keeps `mid` for its pushes (attempt 0 uses the cached layout,
/// whatever its age), `mid` still lists the removed shards as draining, and
/// `place_all` puts a dependent of a task found there (a completed one: the
/// check counts no completed tasks) into that shard. The gate accepts it
/// (`mid` = `mid`): the task sits in a shard no worker claims from, ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependent_pushed_after_a_lowering_is_not_stranded_in_a_removed_shard() -> TestResult {
    let server = common::server();
    let admin = common::client(&server).await.queue("strand");
    admin
        .configure(&shards(4).keep_completed(Some(100)))
        .await?;
    let key = key_homed_at(&admin, 3, "d").await?;
    admin
        .push(NewTask::new("dep").shard_key(key.as_str()))
        .await?;
    let done = claim_all(&admin, Duration::from_millis(300), Duration::from_secs(5)).await?;
    assert_eq!(done, vec!["dep".to_string()]);
    let v = admin.shards().await?.version;
    // The operator lowers K to 2 over a slow link (shards 2 and 3 hold no
    // task: the lowering goes through).
    let (proxy, slow) = slow_handle(&server, 11, "strand").await?;
    common::delay_requests(std::slice::from_ref(&proxy), 150);
    let change = tokio::spawn(async move { slow.configure(&shards(2)).await });
    // A producer reads the layout while the lowering is between its commits.
    let producer = common::client(&server).await.queue("strand");
    let t0 = Instant::now();
    loop {
        let l = producer.shards().await?;
        if l.draining.is_some() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no drain seen");
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    change.await??;
    common::delay_requests(std::slice::from_ref(&proxy), 0);
    let now = admin.shards().await?;
    assert_eq!((now.k, now.draining, now.version), (2, None, v + 2));
    // Later, the producer pushes a task that runs after `dep`. Refused with
    // a clear error and nothing written (its dependency finished in a shard
    // that was drained away: docs/sharded-queue.md), or taken and claimed;
    // never taken and stranded.
    let pushed = match producer.push(NewTask::new("child").after(["dep"])).await {
        Err(dlm::Error::InvalidArgument { arg, reason }) => {
            assert_eq!(arg, "after", "{reason}");
            assert!(admin.task("child").await?.is_none(), "nothing written");
            return Ok(());
        }
        other => other?,
    };
    let worker = common::client(&server).await.queue("strand");
    let got = claim_all(&worker, Duration::from_secs(2), Duration::from_secs(10)).await?;
    let seen = admin.task("child").await?.map(|t| t.state);
    assert!(
        got.contains(&"child".to_string()),
        "task 'child' (push answered {pushed:?}) is never claimed; the queue's view of it: {seen:?}; per shard: {:?}",
        admin.shard_stats().await?
    );
    Ok(())
}

/// Finding 3. `resume` fans out over the handle's cached layout (up to 1 s
/// old). A raise by another client in that second made its new shards
/// paused (copied from shard 0): the resume reaches only the old shards, the
/// queue reads as resumed, and the tasks homed in the new shards are never
/// claimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_just_after_a_raise_leaves_no_shard_paused() -> TestResult {
    let d = Deployment::standalone();
    let ops = d.client().await.queue("resume-raise");
    ops.configure(&shards(2)).await?;
    ops.pause().await?;
    // Another operator raises K meanwhile.
    let other = d.client().await.queue("resume-raise");
    other.configure(&shards(4)).await?;
    ops.resume().await?;
    let ids = push_everywhere(&other, 4, 5, "r").await?;
    let worker = d.client().await.queue("resume-raise");
    let got: HashSet<String> = claim_all(&worker, Duration::from_secs(2), Duration::from_secs(10))
        .await?
        .into_iter()
        .collect();
    let missing: Vec<&String> = ids.difference(&got).collect();
    assert!(
        missing.is_empty(),
        "{} tasks never claimed after the resume: {missing:?}; per shard paused: {:?}",
        missing.len(),
        other
            .shard_stats()
            .await?
            .iter()
            .map(|s| s.paused)
            .collect::<Vec<_>>()
    );
    Ok(())
}

/// Finding 3, the other way: "after `pause` returns, no shard starts a
/// claim". A pause within a second of a raise (by another client) misses
/// the new shards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_just_after_a_raise_stops_every_shard() -> TestResult {
    let d = Deployment::standalone();
    let ops = d.client().await.queue("pause-raise");
    ops.configure(&shards(2)).await?;
    let other = d.client().await.queue("pause-raise");
    other.configure(&shards(4)).await?;
    ops.pause().await?;
    push_everywhere(&other, 4, 3, "p").await?;
    let worker = d.client().await.queue("pause-raise");
    let got = claim_all(&worker, Duration::from_secs(1), Duration::from_secs(5)).await?;
    assert!(
        got.is_empty(),
        "{} tasks started after pause() returned: {got:?}",
        got.len()
    );
    Ok(())
}

/// Finding 2. A lowering carries the removed shards' starts round robin into
/// the kept shards, blind to how full each is. With n = 4 over 3 shards
/// (shares 2, 1, 1), shard 0 full (2 starts) and shard 2 holding 1: the
/// carried start goes to shard 0 (3 in its log, share 2: one start wasted)
/// while shard 1 (empty log, new share 2) starts 2 more: 5 in one window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowering_carries_starts_where_they_still_count() -> TestResult {
    let d = Deployment::standalone();
    let q = d.client().await.queue("rate-fill");
    let limit = RateLimit::new(4, Duration::from_secs(60))?;
    q.configure(&shards(3).rate(Some(limit))).await?;
    let k0 = key_homed_at(&q, 0, "a").await?;
    let k2 = key_homed_at(&q, 2, "c").await?;
    for id in ["a0", "a1"] {
        q.push(NewTask::new(id).shard_key(k0.as_str())).await?;
    }
    q.push(NewTask::new("c0").shard_key(k2.as_str())).await?;
    let before = claim_all(&q, Duration::from_millis(500), Duration::from_secs(5)).await?;
    assert_eq!(before.len(), 3, "{before:?}");
    // Shard 2 holds no task: lowered without a drain.
    q.configure(&shards(2)).await?;
    push_everywhere(&q, 2, 5, "b").await?;
    let after = claim_all(&q, Duration::from_millis(500), Duration::from_secs(5)).await?;
    assert!(
        before.len() + after.len() <= 4,
        "{} + {} tasks started within one 60 s window of a limit of 4 ({after:?})",
        before.len(),
        after.len()
    );
    Ok(())
}

/// Finding 4. Two changes of K, one after the other's commit: a lowering
/// writes the kept shards' grown shares after its second commit, with no
/// check that its layout is still the current one. A raise that commits in
/// between (it read the layout after the lowering's commit, as it should)
/// gives the re-made shards their shares; the lowering's late writes then
/// raise shards 0 and 1 to n/2 each: 6 + 6 + 1 + 1 = 14 > 12.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raise_right_after_a_lowering_keeps_the_rate_limit() -> TestResult {
    let server = common::server();
    let fast = common::client(&server).await.queue("rate-race");
    let limit = RateLimit::new(12, Duration::from_secs(60))?;
    fast.configure(&shards(4).rate(Some(limit))).await?;
    let v = fast.shards().await?.version;
    let (proxy, slow) = slow_handle(&server, 13, "rate-race").await?;
    common::delay_requests(std::slice::from_ref(&proxy), 200);
    let lowering = tokio::spawn(async move { slow.configure(&shards(2)).await });
    // The lowering's second commit is in: the layout is K = 2, settled.
    wait_for_field(&server, "rate-race", "layout", v + 2).await?;
    fast.configure(&shards(4)).await?;
    let lowered = lowering.await?;
    common::delay_requests(std::slice::from_ref(&proxy), 0);
    let layout = fast.shards().await?;
    let rate = fast.settings().await?.get_rate();
    push_everywhere(&fast, layout.k, 10, "t").await?;
    let got = claim_all(&fast, Duration::from_millis(500), Duration::from_secs(5)).await?;
    assert!(
        got.len() <= 12,
        "{} tasks started within one 60 s window of a limit of 12 (K = {}, the queue's rate now {rate:?}; the lowering returned {lowered:?}); per shard: {:?}",
        got.len(),
        layout.k,
        fast.shard_stats()
            .await?
            .iter()
            .map(|s| s.inflight + s.processed)
            .collect::<Vec<_>>()
    );
    Ok(())
}

/// Finding 4, two raises: the one whose compare-and-set loses has already
/// written its shares (over its own K) into the shards the winner placed.
/// The loser (to 3) read the layout and the limit before the winner (to 4)
/// committed, and writes after it: shards 0, 1 and 2 get 12 / 3 = 4 each on
/// top of the winner's 3 for shard 3, 15 > 12.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raise_that_loses_its_commit_leaves_the_rate_limit_whole() -> TestResult {
    let server = common::server();
    let fast = common::client(&server).await.queue("raise-race");
    let limit = RateLimit::new(12, Duration::from_secs(60))?;
    fast.configure(&shards(2).rate(Some(limit))).await?;
    let (proxy, slow) = slow_handle(&server, 23, "raise-race").await?;
    common::delay_requests(std::slice::from_ref(&proxy), 300);
    let replies = || proxy.stats().forwarded(dlm_testkit::Direction::ToClient);
    let base = replies();
    let loser = tokio::spawn(async move { slow.configure(&shards(3)).await });
    // Its layout read is answered, then its read of the shards' settings.
    let t0 = Instant::now();
    while replies() == base {
        assert!(t0.elapsed() < Duration::from_secs(10), "no reply");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let first = replies();
    while replies() == first {
        assert!(t0.elapsed() < Duration::from_secs(10), "no second reply");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    fast.configure(&shards(4)).await?;
    let lost = loser.await?;
    common::delay_requests(std::slice::from_ref(&proxy), 0);
    let layout = fast.shards().await?;
    let rate = fast.settings().await?.get_rate();
    push_everywhere(&fast, layout.k, 10, "t").await?;
    let got = claim_all(&fast, Duration::from_millis(500), Duration::from_secs(5)).await?;
    assert!(
        got.len() <= 12,
        "{} tasks started within one 60 s window of a limit of 12 (K = {}, the queue's rate now {rate:?}; the losing raise returned {lost:?}); per shard: {:?}",
        got.len(),
        layout.k,
        fast.shard_stats()
            .await?
            .iter()
            .map(|s| s.inflight + s.processed)
            .collect::<Vec<_>>()
    );
    Ok(())
}

/// Finding 5. A raise shrinks the old shards' shares before its commit. Its
/// caller cut off right after that leaves K as it was with shares that add
/// up to less than n, and the queue-wide limit is read back as that sum: the
/// same change run again is refused as bad input (the limit is "below K"),
/// and the limit the operator set is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raise_cut_off_after_shrinking_shares_can_be_run_again() -> TestResult {
    let server = common::server();
    let direct = common::client(&server).await.queue("cut-raise");
    let limit = RateLimit::new(4, Duration::from_secs(60))?;
    direct.configure(&shards(2).rate(Some(limit))).await?;
    let (proxy, slow) = slow_handle(&server, 17, "cut-raise").await?;
    common::delay_requests(std::slice::from_ref(&proxy), 150);
    let change = tokio::spawn(async move { slow.configure(&shards(4)).await });
    // Shard 0's share went from 2 to 1: cut the caller off.
    wait_for_field(&server, "cut-raise", "rate_n", 1).await?;
    change.abort();
    let _ = change.await;
    common::delay_requests(std::slice::from_ref(&proxy), 0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let again = direct.configure(&shards(4)).await;
    let rate = direct.settings().await?.get_rate().map(|r| r.n());
    assert!(
        again.is_ok() && rate == Some(4),
        "the raise run again: {:?}; the queue's limit now {rate:?} (was 4)",
        again.map(|s| s.get_rate())
    );
    Ok(())
}

/// Finding 5, lowering: cut off after its second commit and before the kept
/// shards' shares grow, the queue keeps K = 2 with shares of 1 + 1; running
/// the change again is a no-op (K is 2 already), so the limit stays halved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowering_cut_off_after_its_last_commit_keeps_the_limit() -> TestResult {
    let server = common::server();
    let direct = common::client(&server).await.queue("cut-lower");
    let limit = RateLimit::new(4, Duration::from_secs(60))?;
    direct.configure(&shards(4).rate(Some(limit))).await?;
    let v = direct.shards().await?.version;
    let (proxy, slow) = slow_handle(&server, 19, "cut-lower").await?;
    common::delay_requests(std::slice::from_ref(&proxy), 150);
    let change = tokio::spawn(async move { slow.configure(&shards(2)).await });
    wait_for_field(&server, "cut-lower", "layout", v + 2).await?;
    change.abort();
    let _ = change.await;
    common::delay_requests(std::slice::from_ref(&proxy), 0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    direct.configure(&shards(2)).await?;
    let rate = direct.settings().await?.get_rate().map(|r| r.n());
    assert_eq!(rate, Some(4), "the limit after the lowering was run again");
    Ok(())
}

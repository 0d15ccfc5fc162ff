//! Third adversarial review of the sharded queue (issue 35), of the fixes of
//! the second review: closed shards, the carried rate starts, pause
//! generations, the queue-wide limit kept on shard 0 and the sticky claim
//! start, each against real servers.
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

/// Not a finding: a lowering (empty shards) then a raise back reopens the
/// removed shards, and every task pushed after it is claimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowering_then_a_raise_reopens_the_removed_shards() -> TestResult {
    let d = Deployment::standalone();
    let q = d.client().await.queue("reopen");
    q.configure(&shards(4)).await?;
    q.configure(&shards(2)).await?;
    q.configure(&shards(4)).await?;
    let other = d.client().await.queue("reopen");
    let ids = push_everywhere(&other, 4, 3, "o").await?;
    let got: HashSet<String> = claim_all(&q, Duration::from_secs(1), Duration::from_secs(10))
        .await?
        .into_iter()
        .collect();
    assert_eq!(got, ids);
    Ok(())
}

/// Not a finding: `config.lua` 'clear' keeps `pause_gen` (and `closed`), so
/// a pause after `clear_settings` still reaches every shard; a queue whose
/// shards carry no generation (sharded by the previous version) takes one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_generations_survive_clear_and_older_shards() -> TestResult {
    let server = common::server();
    let q = common::client(&server).await.queue("gen-clear");
    q.configure(&shards(3)).await?;
    q.pause().await?;
    q.resume().await?;
    q.clear_settings().await?;
    // As sharded by the previous version: no generation anywhere.
    let mut raw = common::raw(&server).await;
    for key in [
        "dlm:queue:{gen-clear}:config",
        "dlm:queue:shard:{gen-clear#1}:config",
        "dlm:queue:shard:{gen-clear#2}:config",
    ] {
        let _: i64 = redis::cmd("HDEL")
            .arg(key)
            .arg("pause_gen")
            .query_async(&mut raw)
            .await?;
    }
    q.pause().await?;
    let paused: Vec<bool> = q.shard_stats().await?.iter().map(|s| s.paused).collect();
    assert_eq!(paused, vec![true; 3]);
    q.resume().await?;
    let paused: Vec<bool> = q.shard_stats().await?.iter().map(|s| s.paused).collect();
    assert_eq!(paused, vec![false; 3]);
    Ok(())
}

/// Finding 1. A lowering that is refused (a removed shard holds a task)
/// closes the removed shards at its first commit, commits K back, and only
/// then reopens them (`bump_all` with 'open'). A caller cut off between that
/// commit and the reopening leaves K = 4 with shards 2 and 3 closed: every
/// push homed there answers `LAYOUT` five times and fails. Running the change
/// that should hold (K = 4) again is a no-op (K is 4, nothing draining), so
/// nothing ever reopens them. The same holds for a raise from a draining
/// state cut off after its commit (the draining shards are reopened only by
/// `bump_all` after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_lowering_cut_off_leaves_no_placed_shard_closed() -> TestResult {
    let server = common::server();
    let direct = common::client(&server).await.queue("cut-refuse");
    direct.configure(&shards(4)).await?;
    let v = direct.shards().await?.version;
    let k3 = key_homed_at(&direct, 3, "h").await?;
    direct
        .push(NewTask::new("held").shard_key(k3.as_str()))
        .await?;
    let (proxy, slow) = slow_handle(&server, 29, "cut-refuse").await?;
    common::delay_requests(std::slice::from_ref(&proxy), 150);
    let change = tokio::spawn(async move { slow.configure(&shards(2)).await });
    // The refusal's commit (K = 4 again, version v + 2) is in: cut off.
    wait_for_field(&server, "cut-refuse", "layout", v + 2).await?;
    change.abort();
    let _ = change.await;
    common::delay_requests(std::slice::from_ref(&proxy), 0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The operator runs the change that should hold again.
    let again = direct.configure(&shards(4)).await.map(|s| s.get_shards());
    let producer = common::client(&server).await.queue("cut-refuse");
    let k2 = key_homed_at(&producer, 2, "p").await?;
    let pushed = producer
        .push(NewTask::new("new").shard_key(k2.as_str()))
        .await;
    assert!(
        pushed.is_ok(),
        "a push homed at shard 2 of a queue at K = 4: {pushed:?} (the change run again: {again:?}; layout {:?})",
        direct.shards().await?
    );
    let got = claim_all(&direct, Duration::from_secs(1), Duration::from_secs(10)).await?;
    assert!(got.contains(&"new".to_string()), "{got:?}");
    Ok(())
}

/// Finding 2. A change of K reads the queue-wide limit when it starts and
/// writes shares of it (the old shards' shrink, the new shards' own) with no
/// look at what came in between; `sync_rate_shares` afterwards writes
/// nothing once the total is gone and leaves the shares it finds. A
/// `configure(rate(None))` by another operator that lands while the raise
/// runs returns Ok and the queue reads back no limit, yet shards 1..3 keep
/// shares of 3 each: a hidden limit that only a second removal lifts. A
/// raise sets no limit, so no order of the two calls ends with one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raise_does_not_undo_a_concurrent_removal_of_the_rate_limit() -> TestResult {
    let server = common::server();
    let fast = common::client(&server).await.queue("rate-none");
    let limit = RateLimit::new(12, Duration::from_secs(60))?;
    fast.configure(&shards(2).rate(Some(limit))).await?;
    let (proxy, slow) = slow_handle(&server, 31, "rate-none").await?;
    common::delay_requests(std::slice::from_ref(&proxy), 100);
    let raise = tokio::spawn(async move { slow.configure(&shards(4)).await });
    // The raise has read the limit and shrinks the old shards' shares
    // (shard 0's from 6 to 3).
    wait_for_field(&server, "rate-none", "rate_n", 3).await?;
    fast.configure(&QueueSettings::default().rate(None)).await?;
    let raised = raise.await?;
    common::delay_requests(std::slice::from_ref(&proxy), 0);
    let rate = fast.settings().await?.get_rate();
    let layout = fast.shards().await?;
    let ids = push_everywhere(&fast, layout.k, 5, "n").await?;
    let got = claim_all(&fast, Duration::from_millis(500), Duration::from_secs(5)).await?;
    assert!(
        rate.is_none() && got.len() == ids.len(),
        "after configure(rate(None)) returned Ok and the raise returned {:?}: the queue's rate {rate:?}, {} of {} tasks started",
        raised.map(|s| s.get_shards()),
        got.len(),
        ids.len()
    );
    Ok(())
}

/// Finding 3. `claim_placed` moves the cursor on at `j == 1` before it
/// checks whether the start shard gave what was asked, so the start moves on
/// every round whenever the first shard gave all: the start is never kept
/// (STICKY_ROUNDS is dead), and a worker's leases spread over every shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_start_stays_while_it_gives_what_is_asked() -> TestResult {
    let d = Deployment::standalone();
    let q = d.client().await.queue("sticky");
    q.configure(&shards(2)).await?;
    push_everywhere(&q, 2, 10, "s").await?;
    let worker = d.client().await.queue("sticky");
    let mut from = Vec::new();
    for _ in 0..dlm::queue::STICKY_ROUNDS {
        for l in worker.claim(1, Duration::from_secs(60)).await? {
            let id = l.task().id.clone();
            from.push(id.split('.').next().unwrap_or_default().to_string());
            l.ack().await?;
        }
    }
    assert_eq!(from.len(), dlm::queue::STICKY_ROUNDS);
    assert!(
        from.iter().all(|s| *s == from[0]),
        "the shards of {} rounds of one task each (every shard full): {from:?}",
        dlm::queue::STICKY_ROUNDS
    );
    Ok(())
}

/// Finding 4. A lowering carries the removed shards' starts into the kept
/// shards' logs only after its second commit, just before the shares grow.
/// Cut off between the two, it leaves K = 2 with the old shares (1 + 1); the
/// repair that `reshard` with an unchanged K now does (`sync_rate_shares`)
/// grows them to 2 + 2 with no carry: the 2 starts of this window still in
/// the removed shards' logs are forgotten, and 4 more start: 6 in one window
/// of a limit of 4. (`configure(rate(...))` over the same state does the
/// same.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowering_cut_off_before_its_carry_then_run_again_keeps_the_limit() -> TestResult {
    let server = common::server();
    let direct = common::client(&server).await.queue("cut-carry");
    let limit = RateLimit::new(4, Duration::from_secs(60))?;
    direct.configure(&shards(4).rate(Some(limit))).await?;
    let v = direct.shards().await?.version;
    for (s, id) in [(2, "c2"), (3, "c3")] {
        let key = key_homed_at(&direct, s, id).await?;
        direct
            .push(NewTask::new(id).shard_key(key.as_str()))
            .await?;
    }
    let before = claim_all(&direct, Duration::from_millis(300), Duration::from_secs(5)).await?;
    assert_eq!(before.len(), 2, "{before:?}");
    // Shards 2 and 3 hold no task: the lowering goes through. Cut off right
    // after its second commit.
    let (proxy, slow) = slow_handle(&server, 37, "cut-carry").await?;
    common::delay_requests(std::slice::from_ref(&proxy), 150);
    let change = tokio::spawn(async move { slow.configure(&shards(2)).await });
    wait_for_field(&server, "cut-carry", "layout", v + 2).await?;
    change.abort();
    let _ = change.await;
    common::delay_requests(std::slice::from_ref(&proxy), 0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The operator runs the change again (it repairs the shares).
    direct.configure(&shards(2)).await?;
    push_everywhere(&direct, 2, 5, "a").await?;
    let after = claim_all(&direct, Duration::from_millis(500), Duration::from_secs(5)).await?;
    assert!(
        before.len() + after.len() <= 4,
        "{} + {} tasks started within one 60 s window of a limit of 4 ({after:?}); the queue's rate now {:?}",
        before.len(),
        after.len(),
        direct.settings().await?.get_rate()
    );
    Ok(())
}

/// Finding 5 (bad data). No panic on a malformed `rate_total`, but
/// `configure(rate(Some(r)))` sends layout.lua 'rate' 'set', which writes the
/// new total and returns the old one; parsing that old value fails, so the
/// call returns an error after the write and before `sync_rate_shares`. The
/// queue then reads back the new limit (4) while its shards keep the old
/// shares (6 + 6): 12 start in one window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_set_over_a_malformed_total_is_whole_or_not_written() -> TestResult {
    let server = common::server();
    let q = common::client(&server).await.queue("bad-total");
    let limit = RateLimit::new(12, Duration::from_secs(60))?;
    q.configure(&shards(2).rate(Some(limit))).await?;
    let mut raw = common::raw(&server).await;
    let () = redis::cmd("HSET")
        .arg("dlm:queue:{bad-total}:config")
        .arg("rate_total")
        .arg("twelve")
        .query_async(&mut raw)
        .await?;
    let four = RateLimit::new(4, Duration::from_secs(60))?;
    let set = q
        .configure(&QueueSettings::default().rate(Some(four)))
        .await
        .map(|s| s.get_rate());
    let shown = q.settings().await.map(|s| s.get_rate());
    push_everywhere(&q, 2, 8, "b").await?;
    let got = claim_all(&q, Duration::from_millis(500), Duration::from_secs(5)).await?;
    let shown_n = shown
        .as_ref()
        .ok()
        .and_then(|r| r.map(|r| r.n()))
        .unwrap_or(u32::MAX);
    assert!(
        got.len() <= usize::try_from(shown_n)?,
        "{} tasks started in one window; the set returned {set:?}, the queue reads back {shown:?}",
        got.len()
    );
    Ok(())
}

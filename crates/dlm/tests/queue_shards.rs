//! A queue spread over shards (issue 35, docs/sharded-queue.md), against a
//! real redis-server and a real 3-master Redis Cluster: each case is written
//! once and run on both.
mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Deployment, TestResult};
use dlm::CancellationToken;
use dlm::queue::{NewTask, OnDuplicate, Queue, QueueSettings, Removed, WorkerOptions};

fn shards(k: u16) -> QueueSettings {
    QueueSettings::default().shards(k)
}

/// Run workers until the queue is empty; the ids each run acked.
async fn drain(
    q: &Queue,
    workers: usize,
) -> Result<Vec<String>, Box<dyn std::error::Error + Send + Sync>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut runs = Vec::new();
    for _ in 0..workers {
        let seen = seen.clone();
        let w = q.worker(
            WorkerOptions::new()
                .concurrency(8)
                .exit_when_empty(true)
                .idle_wait(Duration::from_millis(100)),
        );
        runs.push(tokio::spawn(async move {
            w.run(
                move |t| {
                    let seen = seen.clone();
                    async move {
                        if let Ok(mut s) = seen.lock() {
                            s.push(t.id.clone());
                        }
                        Ok::<(), std::io::Error>(())
                    }
                },
                CancellationToken::new(),
            )
            .await
        }));
    }
    for r in runs {
        r.await??;
    }
    let out = seen.lock().map(|s| s.clone()).unwrap_or_default();
    Ok(out)
}

/// Every case, on one deployment.
async fn cases(d: &Deployment) -> TestResult {
    spread_and_drained_exactly_once(d).await?;
    placement_dedup_groups_and_dependencies(d).await?;
    a_stale_handle_is_placed_anew(d).await?;
    lowering_is_refused_or_drains(d).await?;
    reads_see_one_queue(d).await?;
    bad_input_writes_nothing(d).await?;
    events_and_checks_cover_every_shard(d).await?;
    idle_workers_wake_for_any_shard(d).await?;
    compact_payloads_and_priorities_per_shard(d).await?;
    no_shard_starves_behind_a_full_one(d).await?;
    Ok(())
}

/// Fairness (docs/sharded-queue.md, "Fairness"): claim rounds stay on one
/// start shard for at most 8 rounds while it gives what they ask, so a task
/// alone in another shard is claimed within K x 8 claims, however full the
/// start shard is.
async fn no_shard_starves_behind_a_full_one(d: &Deployment) -> TestResult {
    let client = d.client().await;
    let q = client.queue("fair-shards");
    q.configure(&shards(3)).await?;
    let key_at = |want: u16| {
        let q = q.clone();
        async move {
            for i in 0..100_000 {
                let k = format!("k{i}");
                if q.shard_of(&NewTask::new("x").shard_key(k.as_str())).await? == want {
                    return Ok::<String, dlm::Error>(k);
                }
            }
            panic!("no key homed at shard {want}")
        }
    };
    let full = key_at(0).await?;
    let lone = key_at(2).await?;
    q.enqueue(
        (0..200).map(|i| NewTask::new(format!("f{i}")).shard_key(full.as_str())),
        Duration::ZERO,
        OnDuplicate::Keep,
    )
    .await?;
    q.push(NewTask::new("lone").shard_key(lone.as_str()))
        .await?;
    // A fresh handle: its rounds start at shard 0, the full one.
    let worker = d.client().await.queue("fair-shards");
    for n in 1..=3 * 8 {
        let got = worker.claim(1, Duration::from_secs(30)).await?;
        assert_eq!(got.len(), 1);
        if got[0].task().id == "lone" {
            return Ok(());
        }
        assert!(
            n < 3 * 8,
            "the lone task was not claimed within K x 8 claims"
        );
    }
    Ok(())
}

async fn compact_payloads_and_priorities_per_shard(d: &Deployment) -> TestResult {
    let client = d.client().await;
    let q = client.queue("compact").compact_payloads(true);
    q.configure(&shards(3)).await?;
    for i in 0..30 {
        q.push(NewTask::new(format!("p{i}")).payload(format!("payload {i}")))
            .await?;
    }
    let mut got = HashMap::new();
    while got.len() < 30 {
        let leases = q.claim(30, Duration::from_secs(30)).await?;
        assert!(!leases.is_empty());
        for l in leases {
            got.insert(l.task().id.clone(), l.task().payload.clone());
            l.ack().await?;
        }
    }
    for i in 0..30 {
        assert_eq!(
            got.get(&format!("p{i}")).cloned().flatten(),
            Some(format!("payload {i}").into_bytes())
        );
    }
    assert_eq!(q.stats().await?.processed, 30);
    // Within a shard, priority first: the peek keeps each shard's order.
    let p = client.queue("prio");
    p.configure(&shards(4)).await?;
    for i in 0..5 {
        p.push(NewTask::new(format!("low{i}")).shard_key("k"))
            .await?;
    }
    p.push(NewTask::new("high").shard_key("k").priority(5))
        .await?;
    assert_eq!(
        p.top(6).await?.first().map(|e| e.id.clone()),
        Some("high".into())
    );
    let first = p.claim(1, Duration::from_secs(30)).await?;
    assert_eq!(
        first.first().map(|l| l.task().id.clone()),
        Some("high".into())
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_queue_on_one_server() -> TestResult {
    cases(&Deployment::standalone()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_queue_on_a_cluster() -> TestResult {
    let d = Deployment::cluster();
    cases(&d).await?;
    // Six shards over three masters: two each (the tags are picked per master).
    let client = d.client().await;
    let q = client.queue("spread");
    q.configure(&shards(6)).await?;
    let layout = q.shards().await?;
    let Deployment::Cluster(c) = &d else {
        return Ok(());
    };
    let mut per_master: HashMap<u16, usize> = HashMap::new();
    for s in &layout.shards {
        let m = c.master_for_slot(s.slot).map(|m| m.port()).unwrap_or(0);
        *per_master.entry(m).or_default() += 1;
    }
    let mut counts: Vec<usize> = per_master.values().copied().collect();
    counts.sort_unstable();
    assert_eq!(counts, vec![2, 2, 2], "{layout:?}");
    Ok(())
}

async fn spread_and_drained_exactly_once(d: &Deployment) -> TestResult {
    let client = d.client().await;
    let q = client.queue("spread-drain");
    let s = q.configure(&shards(4)).await?;
    assert_eq!(s.get_shards(), 4);
    let ids: Vec<String> = (0..400).map(|i| format!("t{i}")).collect();
    for chunk in ids.chunks(100) {
        q.enqueue(
            chunk.iter().map(|i| NewTask::new(i.clone())),
            Duration::ZERO,
            OnDuplicate::Keep,
        )
        .await?;
    }
    assert_eq!(q.stats().await?.waiting, 400);
    let per = q.shard_stats().await?;
    assert_eq!(per.len(), 4);
    assert!(
        per.iter().all(|s| s.waiting > 50),
        "every shard gets tasks: {per:?}"
    );
    // Another process's handle sees the same.
    let other = d.client().await.queue("spread-drain");
    assert_eq!(other.stats().await?.waiting, 400);
    let acked = drain(&other, 2).await?;
    assert_eq!(acked.len(), 400, "each task acked once");
    assert_eq!(acked.iter().collect::<HashSet<_>>().len(), 400);
    let stats = q.stats().await?;
    assert_eq!(
        (stats.waiting, stats.inflight, stats.processed),
        (0, 0, 400)
    );
    Ok(())
}

async fn placement_dedup_groups_and_dependencies(d: &Deployment) -> TestResult {
    let client = d.client().await;
    let q = client.queue("placed");
    q.configure(&shards(8)).await?;
    // De-dup by id: exact for one shard key.
    q.push("a").await?;
    let again = q.push("a").await?;
    assert!(matches!(again, dlm::queue::Enqueued::Kept(_)), "{again:?}");
    // A group's tasks share a shard.
    let mut homes = HashSet::new();
    for i in 0..20 {
        let t = NewTask::new(format!("g{i}")).group("customer:1");
        homes.insert(q.shard_of(&t).await?);
        q.push(t).await?;
    }
    assert_eq!(homes.len(), 1);
    // A dependency's shard wins: b goes where a is.
    q.push(NewTask::new("b").after(["a"])).await?;
    let a_home = q.shard_of(&NewTask::new("a")).await?;
    let per = q.shard_stats().await?;
    assert!(
        per[usize::from(a_home)].blocked >= 1,
        "b waits in a's shard: {per:?}"
    );
    // Dependencies in two shards: refused, nothing written.
    let (mut k1, mut k2) = (String::new(), String::new());
    for i in 0..100 {
        let k = format!("key{i}");
        let s = q.shard_of(&NewTask::new("x").shard_key(k.clone())).await?;
        if k1.is_empty() {
            k1 = k;
        } else if s != q.shard_of(&NewTask::new("x").shard_key(k1.clone())).await? {
            k2 = k;
            break;
        }
    }
    q.push(NewTask::new("x").shard_key(k1)).await?;
    q.push(NewTask::new("y").shard_key(k2)).await?;
    let refused = q.push(NewTask::new("z").after(["x", "y"])).await;
    assert!(
        matches!(&refused, Err(dlm::Error::InvalidArgument { arg: "after", reason }) if reason.contains("different shards")),
        "{refused:?}"
    );
    assert!(q.task("z").await?.is_none(), "nothing written");
    // A group and a different shard key: refused.
    let refused = q.push(NewTask::new("w").group("g").shard_key("h")).await;
    assert!(matches!(
        refused,
        Err(dlm::Error::InvalidArgument {
            arg: "shard key",
            ..
        })
    ));
    Ok(())
}

async fn a_stale_handle_is_placed_anew(d: &Deployment) -> TestResult {
    let client = d.client().await;
    let stale = client.queue("stale");
    stale.push("before").await?; // learns "not sharded"
    let admin = d.client().await.queue("stale");
    admin.configure(&shards(5)).await?;
    // The stale handle's push is refused by shard 0 (LAYOUT) and placed anew.
    let ids: Vec<String> = (0..50).map(|i| format!("s{i}")).collect();
    for id in &ids {
        stale.push(id.as_str()).await?;
    }
    let per = admin.shard_stats().await?;
    for id in &ids {
        let home = admin.shard_of(&NewTask::new(id.as_str())).await?;
        assert!(per[usize::from(home)].waiting > 0);
    }
    assert!(
        per.iter().skip(1).map(|s| s.waiting).sum::<u64>() > 0,
        "{per:?}"
    );
    assert_eq!(admin.stats().await?.waiting, 51);
    // Raising again: no task moves, none lost, a stale worker still drains all.
    admin.configure(&shards(7)).await?;
    stale.push("after-raise").await?;
    let acked = drain(&stale, 1).await?;
    assert_eq!(acked.len(), 52);
    Ok(())
}

async fn lowering_is_refused_or_drains(d: &Deployment) -> TestResult {
    let client = d.client().await;
    let q = client.queue("lower");
    q.configure(&shards(6)).await?;
    for i in 0..60 {
        q.push(format!("l{i}").as_str()).await?;
    }
    let refused = q.configure(&shards(2)).await;
    assert!(
        matches!(&refused, Err(dlm::Error::InvalidArgument { arg: "shards", reason }) if reason.contains("would lose tasks")),
        "{refused:?}"
    );
    assert_eq!(q.shards().await?.k, 6);
    assert_eq!(q.stats().await?.waiting, 60, "nothing lost");
    // Drain: new tasks go to the 2 kept shards, workers still claim from all 6.
    q.configure(&shards(2).drain_shards(true)).await?;
    let layout = q.shards().await?;
    assert_eq!(
        (layout.k, layout.draining, layout.shards.len()),
        (2, Some(6), 6)
    );
    for i in 0..20 {
        let t = NewTask::new(format!("n{i}"));
        assert!(q.shard_of(&t).await? < 2);
        q.push(t).await?;
    }
    let acked = drain(&q, 1).await?;
    assert_eq!(acked.len(), 80);
    // Empty now: the lowering finishes.
    q.configure(&shards(2)).await?;
    let layout = q.shards().await?;
    assert_eq!(
        (layout.k, layout.draining, layout.shards.len()),
        (2, None, 2)
    );
    // Lowering an empty queue needs no drain; back to 1 shard works too.
    q.configure(&shards(1)).await?;
    q.push("one").await?;
    assert_eq!(q.stats().await?.waiting, 1);
    assert_eq!(q.pop(5).await?.len(), 1);
    Ok(())
}

async fn reads_see_one_queue(d: &Deployment) -> TestResult {
    let client = d.client().await;
    let q = client.queue("reads");
    q.configure(
        &shards(4)
            .keep_results(Duration::from_secs(60))
            .group_concurrency(Some(2)),
    )
    .await?;
    let s = q.settings().await?;
    assert_eq!((s.get_shards(), s.get_group_concurrency()), (4, Some(2)));
    q.push(NewTask::new("low")).await?;
    q.push(NewTask::new("high").priority(9)).await?;
    for i in 0..10 {
        q.push(format!("r{i}").as_str()).await?;
    }
    let top = q.top(20).await?;
    assert_eq!(top.len(), 12);
    // remove_if_score finds the task in its shard.
    let r = top
        .iter()
        .find(|e| e.id == "r3")
        .map(|e| e.score)
        .unwrap_or(0);
    assert_eq!(q.remove_if_score("r3", r).await?, Removed::Removed);
    assert_eq!(q.remove_if_score("r3", r).await?, Removed::NotPresent);
    // Pause stops every shard.
    q.pause().await?;
    assert!(q.claim(10, Duration::from_secs(5)).await?.is_empty());
    assert!(q.shard_stats().await?.iter().all(|s| s.paused));
    q.resume().await?;
    // Claim across shards, results found by id.
    let mut leases = Vec::new();
    while leases.len() < 11 {
        let got = q.claim(11 - leases.len(), Duration::from_secs(30)).await?;
        assert!(!got.is_empty(), "every shard is claimed from");
        leases.extend(got);
    }
    for l in leases {
        let id = l.task().id.clone();
        l.ack_with(format!("done {id}")).await?;
    }
    assert_eq!(q.result("high").await?, Some(b"done high".to_vec()));
    assert_eq!(
        q.task("r5").await?.map(|t| t.state.as_str()),
        Some("completed")
    );
    let popped = q.pop(5).await?;
    assert!(popped.is_empty());
    // Dead tasks across shards: retry and purge see them all.
    for i in 0..6 {
        q.push(format!("d{i}").as_str()).await?;
    }
    let mut dead = 0;
    while dead < 6 {
        for l in q.claim(6, Duration::from_secs(30)).await? {
            dead += 1;
            l.nack_after(Duration::ZERO, "boom").await?;
        }
    }
    let q1 = q.clone().max_attempts(1);
    let _ = q1;
    Ok(())
}

async fn bad_input_writes_nothing(d: &Deployment) -> TestResult {
    let client = d.client().await;
    let q = client.queue("bad");
    for k in [0u16, 65] {
        let r = q.configure(&shards(k)).await;
        assert!(
            matches!(r, Err(dlm::Error::InvalidArgument { arg: "shards", .. })),
            "{r:?}"
        );
    }
    assert_eq!(q.shards().await?.version, 0, "nothing written");
    // A rate limit below K is refused.
    q.configure(
        &QueueSettings::default()
            .rate(Some(dlm::queue::RateLimit::new(2, Duration::from_secs(1))?)),
    )
    .await?;
    let r = q.configure(&shards(4)).await;
    assert!(
        matches!(r, Err(dlm::Error::InvalidArgument { arg: "shards", .. })),
        "{r:?}"
    );
    assert_eq!(q.shards().await?.version, 0);
    // A queue-wide limit is split into shares that add up to it, through raises.
    let limited = client.queue("limited");
    let ten = dlm::queue::RateLimit::new(10, Duration::from_secs(1))?;
    limited
        .configure(&QueueSettings::default().rate(Some(ten)))
        .await?;
    limited.configure(&shards(4)).await?;
    assert_eq!(
        limited.settings().await?.get_rate().map(|r| r.n()),
        Some(10)
    );
    limited.configure(&shards(6)).await?;
    assert_eq!(
        limited.settings().await?.get_rate().map(|r| r.n()),
        Some(10)
    );
    let r = limited
        .configure(
            &QueueSettings::default()
                .rate(Some(dlm::queue::RateLimit::new(5, Duration::from_secs(1))?)),
        )
        .await;
    assert!(
        matches!(r, Err(dlm::Error::InvalidArgument { arg: "rate", .. })),
        "{r:?}"
    );
    // A queue never sharded has no layout field at all.
    q.push("plain").await?;
    d.command_on(
        "dlm:queue:{bad}:config",
        &["HEXISTS", "dlm:queue:{bad}:config", "layout"],
    )
    .trim()
    .trim_start_matches(':')
    .eq("0")
    .then_some(())
    .ok_or("a plain queue got a layout field")?;
    Ok(())
}

async fn events_and_checks_cover_every_shard(d: &Deployment) -> TestResult {
    let client = d.client().await;
    let q = client.queue("logged");
    q.configure(&shards(3).events(Some(1000))).await?;
    for i in 0..30 {
        q.push(format!("e{i}").as_str()).await?;
    }
    let (all, _) = q.events_page(&dlm::queue::EventsFrom::Start, 100).await?;
    let added: HashSet<String> = all
        .iter()
        .filter(|e| e.kind.as_str() == "added")
        .map(|e| e.task.clone())
        .collect();
    assert_eq!(added.len(), 30, "every shard's log is read");
    // Paging with a small page misses nothing and repeats nothing.
    let mut from = dlm::queue::EventsFrom::Start;
    let mut seen = Vec::new();
    for _ in 0..100 {
        let (page, next) = q.events_page(&from, 2).await?;
        if page.is_empty() {
            break;
        }
        seen.extend(
            page.into_iter()
                .filter(|e| e.kind.as_str() == "added")
                .map(|e| e.task),
        );
        from = next;
    }
    assert_eq!(seen.len(), 30, "{seen:?}");
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 30);
    // Resuming from one event's cursor gives what came after it.
    let (first, _) = q.events_page(&dlm::queue::EventsFrom::Start, 100).await?;
    let (rest, _) = q
        .events_page(&dlm::queue::EventsFrom::After(first[9].cursor.clone()), 100)
        .await?;
    assert_eq!(rest.len(), first.len() - 10);
    // The invariants hold in every shard, and the counts add up.
    let report = q.check_invariants().await?;
    assert!(report.is_ok(), "{:?}", report.violations);
    assert_eq!(report.counts.waiting, 30);
    drain(&q, 1).await?;
    let report = q.check_invariants().await?;
    assert!(report.is_ok() && report.counts.waiting == 0);
    Ok(())
}

async fn idle_workers_wake_for_any_shard(d: &Deployment) -> TestResult {
    let client = d.client().await;
    let q = client.queue("wake");
    q.configure(&shards(4)).await?;
    let done = Arc::new(Mutex::new(0usize));
    let stop = CancellationToken::new();
    let counted = done.clone();
    let w = q.worker(WorkerOptions::new().idle_wait(Duration::from_secs(30)));
    let run = tokio::spawn({
        let stop = stop.clone();
        async move {
            w.run(
                move |_| {
                    let counted = counted.clone();
                    async move {
                        if let Ok(mut n) = counted.lock() {
                            *n += 1;
                        }
                        Ok::<(), std::io::Error>(())
                    }
                },
                stop,
            )
            .await
        }
    });
    // Let it find nothing and block, then push into every shard.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let pusher = d.client().await.queue("wake");
    for i in 0..20 {
        pusher.push(format!("w{i}").as_str()).await?;
    }
    let start = std::time::Instant::now();
    while done.lock().map(|n| *n).unwrap_or(0) < 20 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "an idle worker woke for every shard's work, not at its 30 s idle timeout"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    run.await??;
    Ok(())
}

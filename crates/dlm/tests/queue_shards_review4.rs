//! Fourth adversarial review of the sharded queue (issue 35), of the fixes
//! of the third review (commit dd70e27): the re-bump at an unchanged K, the
//! lowering's carry before its second commit, `set_rate_total` 'init' and
//! the sticky claim start, each against a real server.
mod common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::time::{Duration, Instant};

use common::TestResult;

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

/// `MONITOR` on `server` (a thread of its own): the receiver gets one
/// message when a command line containing every one of `words` reaches the
/// server. The thread ends with the server or after 30 s.
fn watch_for(
    server: &common::RedisServer,
    words: &'static [&'static str],
) -> Res<tokio::sync::oneshot::Receiver<String>> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", server.port()))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    s.write_all(b"MONITOR\r\n")?;
    let mut lines = BufReader::new(s);
    let mut ok = String::new();
    lines.read_line(&mut ok)?; // +OK: watching from here on
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        while matches!(lines.read_line(&mut line), Ok(n) if n > 0) {
            if words.iter().all(|w| line.contains(w)) {
                let _ = tx.send(line);
                return;
            }
            line.clear();
        }
    });
    Ok(rx)
}

/// Start `configure(shards(k))` on `slow` (every request held 400 ms on its
/// way to the server) and return once it has read the queue-wide limit kept
/// on shard 0 (layout.lua 'rate' 'get': its last read before 'init').
async fn raise_until_it_read_the_limit(
    server: &common::RedisServer,
    proxy: &dlm_testkit::FaultProxy,
    slow: Queue,
    k: u16,
) -> Res<tokio::task::JoinHandle<Result<QueueSettings, dlm::Error>>> {
    let read = watch_for(server, &["\"rate\"", "\"get\""])?;
    common::delay_requests(std::slice::from_ref(proxy), 400);
    let raise = tokio::spawn(async move { slow.configure(&shards(k)).await });
    tokio::time::timeout(Duration::from_secs(20), read).await??;
    Ok(raise)
}

/// Not a finding: a `configure(rate(Some(8)))` that lands between a raise's
/// read of the limit (12) and its 'init' keeps 8: 'init' writes nothing over
/// a kept total and the raise's `sync_rate_shares` writes 8's shares over
/// the new layout (2 + 2 + 2 + 2), whatever shares the raise wrote from 12.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_changed_while_a_raise_reads_it_ends_as_changed() -> TestResult {
    let server = common::server();
    let fast = common::client(&server).await.queue("rate-change");
    let twelve = RateLimit::new(12, Duration::from_secs(60))?;
    fast.configure(&shards(2).rate(Some(twelve))).await?;
    let (proxy, slow) = slow_handle(&server, 41, "rate-change").await?;
    let raise = raise_until_it_read_the_limit(&server, &proxy, slow, 4).await?;
    let eight = RateLimit::new(8, Duration::from_secs(60))?;
    fast.configure(&QueueSettings::default().rate(Some(eight)))
        .await?;
    let raised = raise.await?;
    common::delay_requests(std::slice::from_ref(&proxy), 0);
    assert_eq!(raised?.get_shards(), 4);
    let rate = fast.settings().await?.get_rate().map(|r| r.n());
    push_everywhere(&fast, 4, 5, "c").await?;
    let got = claim_all(&fast, Duration::from_millis(500), Duration::from_secs(5)).await?;
    assert_eq!(rate, Some(8));
    assert_eq!(got.len(), 8, "{got:?}");
    Ok(())
}

/// Finding 1. `reshard` reads the limit (`settings_sharded`: layout.lua
/// 'rate' 'get'), then writes it back with 'init', which writes whenever no
/// total is kept. A `configure(rate(None))` by another operator that lands
/// between the two (one round trip) deletes the total and every share and
/// returns Ok; 'init' then finds none kept and writes 12 again, the raise
/// writes 12's shares and its `sync_rate_shares` confirms them. The queue
/// reads back a limit of 12 that was removed: 'init' keeps a *changed* limit
/// (test above) but not a *removed* one, which is what its comment and the
/// commit claim ("let a removed limit stay removed"). Same on the first
/// sharding of a plain queue (its limit read by `settings_here`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_removed_while_a_raise_reads_it_stays_removed() -> TestResult {
    let server = common::server();
    let fast = common::client(&server).await.queue("rate-init");
    let twelve = RateLimit::new(12, Duration::from_secs(60))?;
    fast.configure(&shards(2).rate(Some(twelve))).await?;
    let (proxy, slow) = slow_handle(&server, 43, "rate-init").await?;
    let raise = raise_until_it_read_the_limit(&server, &proxy, slow, 4).await?;
    let removed = fast
        .configure(&QueueSettings::default().rate(None))
        .await?
        .get_rate();
    let raised = raise.await?;
    common::delay_requests(std::slice::from_ref(&proxy), 0);
    let rate = fast.settings().await?.get_rate();
    let ids = push_everywhere(&fast, 4, 5, "n").await?;
    let got = claim_all(&fast, Duration::from_millis(500), Duration::from_secs(5)).await?;
    assert!(
        rate.is_none() && got.len() == ids.len(),
        "configure(rate(None)) returned Ok ({removed:?}) and the raise {:?}: the queue's rate {rate:?}, {} of {} tasks started",
        raised.map(|s| s.get_shards()),
        got.len(),
        ids.len()
    );
    Ok(())
}

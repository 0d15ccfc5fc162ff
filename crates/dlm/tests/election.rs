//! Leader election against real servers: one body of cases, run on one
//! server and on a Redis Cluster.
mod common;

use std::time::Duration;

use common::{Deployment, TestResult, ttl};
use dlm::{Error, Fence};
use dlm_testkit::RedisServer;

/// Terms grow with every leader; `leader()` tells who leads, with which
/// term and for how long yet; a resignation leaves the election vacant
/// with its last term readable.
async fn terms_grow_and_leader_reports(d: &Deployment) -> TestResult {
    let (a, b) = (d.client().await, d.client().await);
    let e = a.election("terms");
    assert_eq!(e.leader().await?, None);
    assert_eq!(e.status().await?, (None, 0));
    let first = e.campaign("a", &ttl(5000).watchdog(true)).await?;
    assert_eq!((first.id(), first.term()), ("a", Fence::new(1)));
    let seen = b.election("terms").leader().await?.ok_or("a leader")?;
    assert_eq!((seen.id.as_str(), seen.term), ("a", 1));
    assert!(seen.ttl.is_some_and(|t| t <= Duration::from_secs(5)));
    // Another candidate that does not wait is told who leads, and for how long.
    match b.election("terms").campaign("b", &ttl(5000)).await {
        Err(Error::Busy { ttl: Some(_), .. }) => {}
        other => return Err(format!("expected Busy, got {other:?}").into()),
    }
    first.resign().await?;
    assert_eq!(e.status().await?, (None, 1));
    let mut last = 1;
    for who in ["b", "a", "b"] {
        let l = b.election("terms").campaign(who, &ttl(5000)).await?;
        assert!(l.term().get() > last, "terms strictly increase");
        last = l.term().get();
        l.resign().await?;
    }
    Ok(())
}

/// A resignation wakes a waiting candidate at once: far sooner than the
/// leader's 30 s lease or the 10 s fallback look.
async fn resign_hands_over_at_once(d: &Deployment) -> TestResult {
    let (a, b) = (d.client().await, d.client().await);
    let leader = a
        .election("handover")
        .campaign("a", &ttl(30_000).watchdog(true))
        .await?;
    let candidate = tokio::spawn(async move {
        let opts = ttl(30_000).wait(Duration::from_secs(20)).watchdog(true);
        let got = b.election("handover").campaign("b", &opts).await;
        (got, std::time::Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resigned = std::time::Instant::now();
    leader.resign().await?;
    let (got, at) = candidate.await?;
    let next = got?;
    assert!(
        at.duration_since(resigned) < Duration::from_secs(5),
        "woken, not polling: {:?}",
        at.duration_since(resigned)
    );
    assert_eq!(next.term(), Fence::new(2));
    next.resign().await?;
    Ok(())
}

/// A leader that stops renewing (a crash) loses the lead after its lease;
/// a candidate takes over with a higher term, and the old leader's writes
/// are refused by that term.
async fn a_crashed_leader_is_replaced_and_fenced(d: &Deployment) -> TestResult {
    let (a, b) = (d.client().await, d.client().await);
    let old = a.election("crash").campaign("a", &ttl(400)).await?;
    let old_term = old.term();
    a.fenced_write("crash-resource", old_term, b"from a")
        .await?;
    let _ = old.detach(); // stops renewing, never resigns: a crash
    let opts = ttl(5000).wait(Duration::from_secs(5));
    let new = b.election("crash").campaign("b", &opts).await?;
    assert!(new.term() > old_term);
    b.fenced_write("crash-resource", new.term(), b"from b")
        .await?;
    let late = a
        .fenced_write("crash-resource", old_term, b"late from a")
        .await;
    assert!(late.is_err(), "the old leader's write is refused: {late:?}");
    new.resign().await?;
    Ok(())
}

/// The watchdog finds the lease taken away and `lost()` fires; release_all
/// resigns a leadership.
async fn lost_fires_and_release_all_resigns(d: &Deployment) -> TestResult {
    let a = d.client().await;
    let e = a.election("lost");
    let l = e.campaign("a", &ttl(600).watchdog(true)).await?;
    d.command_on(&e.key()?, &["DEL", &e.key()?]);
    tokio::time::timeout(Duration::from_secs(5), l.lost()).await?;
    assert!(l.is_lost());
    drop(l);
    let l = e.campaign("a", &ttl(5000).watchdog(true)).await?;
    let report = a.release_all().await;
    assert_eq!(report.released, 1, "{report:?}");
    assert!(l.is_lost());
    assert_eq!(e.leader().await?, None);
    Ok(())
}

/// Bad input is refused before anything is written.
async fn bad_input(d: &Deployment) -> TestResult {
    let a = d.client().await;
    for (name, id) in [("ok", ""), ("ok", &"x".repeat(257)[..]), ("", "a")] {
        match a.election(name).campaign(id, &ttl(1000)).await {
            Err(Error::InvalidArgument { .. }) => {}
            other => return Err(format!("{name:?}/{id:?}: {other:?}").into()),
        }
    }
    assert_eq!(a.election("ok").status().await?, (None, 0));
    Ok(())
}

async fn cases(d: &Deployment) -> TestResult {
    terms_grow_and_leader_reports(d).await?;
    resign_hands_over_at_once(d).await?;
    a_crashed_leader_is_replaced_and_fenced(d).await?;
    lost_fires_and_release_all_resigns(d).await?;
    bad_input(d).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_on_one_server() -> TestResult {
    cases(&Deployment::standalone()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_on_a_cluster() -> TestResult {
    cases(&Deployment::cluster()).await
}

/// Under Redlock the term counter would have no single home: refused.
#[tokio::test]
async fn redlock_refuses_an_election() -> TestResult {
    let nodes = RedisServer::start_many(3)?;
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let client = dlm::Client::connect_many(&urls).await?;
    match client.election("x").campaign("a", &ttl(1000)).await {
        Err(Error::InvalidArgument { .. }) => Ok(()),
        other => Err(format!("expected InvalidArgument, got {other:?}").into()),
    }
}

//! The read-write lock, judged from histories: every grant's interval is
//! recorded with its mode, and the checks look at the intervals: readers
//! overlap each other, no writer interval overlaps any other interval, and a
//! writer waiting behind readers gets in before readers that came after it.
//! Each body runs on one server and on a cluster.
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Deployment, TestResult, ttl};
use dlm::Error;
use dlm_testkit::history::Clock;

/// One grant: who, read or write, from when until when (test clock).
#[derive(Debug, Clone)]
struct Interval {
    #[allow(dead_code)] // shown in failure messages
    who: usize,
    write: bool,
    from: Duration,
    until: Duration,
}

/// Writer intervals overlapping any other interval (the violations).
fn writer_overlaps(log: &[Interval]) -> Vec<(Interval, Interval)> {
    let mut bad = Vec::new();
    for (i, a) in log.iter().enumerate() {
        for b in &log[i + 1..] {
            if (a.write || b.write) && a.from < b.until && b.from < a.until {
                bad.push((a.clone(), b.clone()));
            }
        }
    }
    bad
}

fn readers_overlap(log: &[Interval]) -> bool {
    let reads: Vec<&Interval> = log.iter().filter(|i| !i.write).collect();
    reads.iter().enumerate().any(|(i, a)| {
        reads[i + 1..]
            .iter()
            .any(|b| a.from < b.until && b.from < a.until)
    })
}

type Log = Arc<Mutex<Vec<Interval>>>;

/// Hold `mode` on "mixed" for `hold`, recording the interval.
async fn hold(
    c: dlm::Client,
    log: Log,
    clock: Clock,
    who: usize,
    write: bool,
    hold: Duration,
) -> TestResult {
    let rw = c.rwlock("mixed");
    let opts = ttl(5000).wait(Duration::from_secs(20));
    // Hold the guard for `hold`: its interval and fence, then release.
    macro_rules! held {
        ($guard:expr) => {{
            let g = $guard;
            let from = clock.now();
            tokio::time::sleep(hold).await;
            let until = clock.now();
            let f = g.fence();
            g.release().await?;
            (from, until, f)
        }};
    }
    let (from, until, fence) = if write {
        held!(rw.write(&opts).await?)
    } else {
        held!(rw.read(&opts).await?)
    };
    assert!(fence.get() > 0);
    log.lock().map_err(|_| "poisoned")?.push(Interval {
        who,
        write,
        from,
        until,
    });
    Ok(())
}

/// A mixed workload: readers overlap, writers are alone.
async fn readers_share_writers_exclude(d: &Deployment) -> TestResult {
    let clients = [d.client().await, d.client().await];
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let clock = Clock::new();
    let mut tasks = Vec::new();
    for who in 0..24 {
        let write = who % 4 == 3;
        let c = clients[who % 2].clone();
        let hold_for = Duration::from_millis(if write { 10 } else { 40 });
        tasks.push(tokio::spawn(hold(
            c,
            log.clone(),
            clock,
            who,
            write,
            hold_for,
        )));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for t in tasks {
        t.await?.map_err(|e| e.to_string())?;
    }
    let log = log.lock().map_err(|_| "poisoned")?.clone();
    assert_eq!(log.len(), 24);
    let bad = writer_overlaps(&log);
    assert!(bad.is_empty(), "a writer overlapped: {bad:?}");
    assert!(readers_overlap(&log), "readers never overlapped: {log:?}");
    Ok(())
}

/// Writer preference: a writer waiting behind readers gets in before
/// readers that arrived after it started waiting.
async fn a_waiting_writer_goes_before_later_readers(d: &Deployment) -> TestResult {
    let (a, b, c) = (d.client().await, d.client().await, d.client().await);
    let clock = Clock::new();
    let first = a.rwlock("pref").read(&ttl(5000)).await?;
    let writer = {
        let b = b.clone();
        tokio::spawn(async move {
            let g = b
                .rwlock("pref")
                .write(&ttl(5000).wait(Duration::from_secs(10)))
                .await?;
            let at = clock.now();
            tokio::time::sleep(Duration::from_millis(50)).await;
            g.release().await?;
            Ok::<_, Error>(at)
        })
    };
    // Let the writer queue its marker, then readers arrive.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let late = tokio::spawn(async move {
        let g = c
            .rwlock("pref")
            .read(&ttl(5000).wait(Duration::from_secs(10)))
            .await?;
        let at = clock.now();
        g.release().await?;
        Ok::<_, Error>(at)
    });
    // A try-once reader is refused while the writer waits.
    assert!(matches!(
        a.rwlock("pref").read(&ttl(5000)).await,
        Err(Error::Busy { .. })
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.release().await?;
    let writer_at = writer.await??;
    let reader_at = late.await??;
    assert!(
        writer_at < reader_at,
        "the waiting writer got in at {writer_at:?}, after a later reader at {reader_at:?}"
    );
    Ok(())
}

/// Downgrade keeps the fence and lets readers in; upgrade is refused with a
/// typed error (also when the same client asks for the write lock while it
/// reads); a dead reader frees its share at its TTL.
async fn downgrade_upgrade_and_dead_readers(d: &Deployment) -> TestResult {
    let (a, b) = (d.client().await, d.client().await);
    let w = a.rwlock("modes").write(&ttl(5000)).await?;
    let fence = w.fence();
    assert!(matches!(
        b.rwlock("modes").read(&ttl(5000)).await,
        Err(Error::Busy { .. })
    ));
    let r = w.downgrade().await?;
    assert_eq!(r.fence(), fence);
    let other = b.rwlock("modes").read(&ttl(5000)).await?;
    assert!(matches!(r.upgrade(), Err(Error::UpgradeRefused { .. })));
    r.release().await?;
    other.release().await?;
    // A reader that dies (never releases, no watchdog) frees its share at its TTL.
    let dead = b.rwlock("modes").read(&ttl(300)).await?;
    std::mem::forget(dead);
    let started = std::time::Instant::now();
    let w = a
        .rwlock("modes")
        .write(&ttl(5000).wait(Duration::from_secs(5)))
        .await?;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(w.fence() > fence);
    // Watchdog and lost() as for the mutex.
    w.release().await?;
    let r = a.rwlock("modes").read(&ttl(300).watchdog(true)).await?;
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!r.is_lost());
    r.release().await?;
    assert!(matches!(
        a.rwlock("").read(&ttl(300)).await,
        Err(Error::InvalidArgument { .. })
    ));
    Ok(())
}

/// `status()`: the writer, the readers and the waiting writers.
async fn status_shows_writer_readers_and_waiting_writers(d: &Deployment) -> TestResult {
    let (a, b) = (d.client().await, d.client().await);
    let rw = a.rwlock("status");
    let s = rw.status().await?;
    assert!(
        !s.writer && s.readers == 0 && s.waiting_writers == 0,
        "{s:?}"
    );
    let (r1, r2) = (rw.read(&ttl(5000)).await?, rw.read(&ttl(5000)).await?);
    let writer = tokio::spawn(async move {
        let opts = ttl(5000).wait(Duration::from_secs(10));
        b.rwlock("status").write(&opts).await
    });
    let mut s = rw.status().await?;
    for _ in 0..200 {
        if s.waiting_writers == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        s = rw.status().await?;
    }
    assert_eq!(
        (s.writer, s.readers, s.waiting_writers),
        (false, 2, 1),
        "{s:?}"
    );
    r1.release().await?;
    r2.release().await?;
    let w = writer.await??;
    let s = rw.status().await?;
    assert!(s.writer && s.writer_ttl.is_some(), "{s:?}");
    assert_eq!(
        (s.readers, s.waiting_writers, s.fence),
        (0, 0, Some(w.fence()))
    );
    w.release().await?;
    Ok(())
}

async fn all(d: Deployment) -> TestResult {
    status_shows_writer_readers_and_waiting_writers(&d).await?;
    readers_share_writers_exclude(&d).await?;
    a_waiting_writer_goes_before_later_readers(&d).await?;
    downgrade_upgrade_and_dead_readers(&d).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rwlock_on_one_server() -> TestResult {
    all(Deployment::standalone()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rwlock_on_a_cluster() -> TestResult {
    all(Deployment::cluster()).await
}

//! The read-write lock's batched path (issue 36) reviewed like the mutex's
//! (`lock_batch_review.rs`): an attempt whose caller is gone must not reach
//! Redis after the undo meant for it (`cancel.lua`, or a release), which
//! would leave a share, the write lock or a waiting marker held for nobody.
//!
//! The server is frozen (SIGSTOP: requests already written wait in the
//! socket and run in order once it is thawed) and one batch is built whose
//! jobs travel in two phases (`rwlock::batch` starts a new phase when a lock
//! comes back with the other kind), so that the attempt under test is
//! written only after phase 1 was answered, while its caller's undo is
//! already decided. A current-thread runtime makes the batch's make-up
//! exact: tasks run in the order they were spawned.
mod common;

use std::time::Duration;

use common::*;
use dlm::Client;

/// A client on `s` whose calls have deadline `timeout`.
async fn client_with(s: &RedisServer, timeout: Duration) -> Client {
    Client::builder()
        .timeout(timeout)
        .connect(&s.url())
        .await
        .expect("connect to the throwaway server")
}

/// What Redis holds of rwlock `name`: (writer exists, readers, waiting writers).
fn state(
    s: &RedisServer,
    name: &str,
) -> Result<(String, String, String), Box<dyn std::error::Error + Send + Sync>> {
    let base = format!("dlm:rw:{{{name}}}");
    Ok((
        s.command(&["EXISTS", &format!("{base}:writer")])?,
        s.command(&["ZCARD", &format!("{base}:readers")])?,
        s.command(&["ZCARD", &format!("{base}:writers_waiting")])?,
    ))
}

/// Batch: `[release of a read share of k, write attempt of k (A)]`, so A
/// travels in phase 2. A's caller is cancelled while phase 1 is on the
/// wire; its `cancel.lua` must go out behind A's attempt, not before it.
#[tokio::test(flavor = "current_thread")]
async fn a_cancelled_rw_attempt_in_a_later_phase_is_not_overtaken_by_its_cancel() -> TestResult {
    let s = server();
    let c = client_with(&s, Duration::from_secs(2)).await;
    let warm = c.rwlock("warm").write(&ttl(1000)).await?;
    warm.release().await?;
    let share = c.rwlock("k").read(&ttl(20_000)).await?;
    s.pause()?;
    // Occupy one batch slot with a lone attempt stuck on the frozen server.
    let fill = {
        let rw = c.rwlock("fill");
        tokio::spawn(async move { rw.write(&ttl(20_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    // Both submit before either leader drains the queue: one batch.
    let release = tokio::spawn(async move { share.release().await });
    let a = {
        let rw = c.rwlock("k");
        tokio::spawn(async move { rw.write(&ttl(20_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The caller goes away while A waits for phase 1's reply.
    a.abort();
    assert!(a.await.is_err_and(|e| e.is_cancelled()));
    // Its cancel is decided now (phase 1 is still on the wire).
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.resume()?;
    let _ = fill.await?;
    release.await??;
    c.settle(Duration::from_secs(2)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (writer, readers, waiting) = state(&s, "k")?;
    assert!(
        writer.contains('0') && readers.contains('0') && waiting.contains('0'),
        "rwlock k is held for nobody after its acquisition was cancelled: \
         writer {writer:?}, readers {readers:?}, waiting writers {waiting:?}"
    );
    Ok(())
}

/// The same with a read attempt behind the release of the write lock: its
/// `cancel.lua` must not leave the share it would otherwise find nothing of.
#[tokio::test(flavor = "current_thread")]
async fn a_cancelled_rw_read_in_a_later_phase_is_not_overtaken_by_its_cancel() -> TestResult {
    let s = server();
    let c = client_with(&s, Duration::from_secs(2)).await;
    let warm = c.rwlock("warm").write(&ttl(1000)).await?;
    warm.release().await?;
    // A writer of k, released in the batch: A reads k in the next phase.
    let w = c.rwlock("k").write(&ttl(20_000)).await?;
    s.pause()?;
    let fill = {
        let rw = c.rwlock("fill");
        tokio::spawn(async move { rw.write(&ttl(20_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    let release = tokio::spawn(async move { w.release().await });
    let a = {
        let rw = c.rwlock("k");
        tokio::spawn(async move { rw.read(&ttl(20_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    a.abort();
    assert!(a.await.is_err_and(|e| e.is_cancelled()));
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.resume()?;
    let _ = fill.await?;
    release.await??;
    c.settle(Duration::from_secs(2)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (writer, readers, waiting) = state(&s, "k")?;
    assert!(
        writer.contains('0') && readers.contains('0') && waiting.contains('0'),
        "rwlock k keeps a share for nobody after its acquisition was cancelled: \
         writer {writer:?}, readers {readers:?}, waiting writers {waiting:?}"
    );
    Ok(())
}

//! The batched fair lock's liveness: a fair acquire whose caller is gone
//! (its future dropped, or its deadline passed) may still be written after
//! the cancel (`cancel.lua`) that was meant to undo it, leaving the lock or
//! a queue entry held for nobody. Every such acquire stays outstanding and
//! its cancel goes out behind it (`services::outstanding`), as for the
//! mutex (see `lock_batch_review.rs`, whose style these follow).
//!
//! Each scenario freezes the server (SIGSTOP: requests already written wait
//! in the socket and run in order once it is thawed) and builds one batch
//! whose jobs travel in two or more phases (`services::batch::phases` starts
//! a new phase whenever a key comes back with the other kind), so that the
//! acquire under test is written only after the phases before it were
//! answered, while its cancel is already decided. A current-thread runtime
//! makes the batch's make-up exact: tasks run in the order they were
//! spawned, and all of them submit before the first leader takes the queue.
mod common;

use std::time::Duration;

use common::*;
use dlm::{Client, Token};

/// A client on `s` whose calls have deadline `timeout`.
async fn client_with(s: &RedisServer, timeout: Duration) -> Client {
    Client::builder()
        .timeout(timeout)
        .connect(&s.url())
        .await
        .expect("connect to the throwaway server")
}

/// Prepare the client (scripts loaded) so that no request of the scenario
/// waits for a first-use step.
async fn warm(c: &Client) -> TestResult {
    c.fair_lock("warm")
        .acquire(&ttl(1000))
        .await?
        .release()
        .await?;
    Ok(())
}

/// How many of fair lock `name`'s keys exist (holder, queue, queue leases),
/// asked behind the client's back, and the holder's PTTL.
fn traces(
    s: &RedisServer,
    c: &Client,
    name: &str,
) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let key = c.fair_lock(name).key()?;
    let exists = s.command(&[
        "EXISTS",
        &key,
        &format!("{key}:queue"),
        &format!("{key}:timeouts"),
    ])?;
    let pttl = s.command(&["PTTL", &key])?;
    let n = |r: &str| r.trim().trim_start_matches(':').to_owned();
    Ok(format!("{} keys (PTTL {})", n(&exists), n(&pttl)))
}

/// Occupy one batch slot with a lone fair acquire stuck on the frozen server.
fn fill_a_slot(c: &Client, name: &str) -> tokio::task::JoinHandle<dlm::Result<dlm::FairGuard>> {
    let lock = c.fair_lock(name);
    tokio::spawn(async move { lock.acquire(&ttl(20_000)).await })
}

/// A token-checked release of fair lock `name` by a token nobody holds (a
/// batched release job on that key).
fn stray_release(c: &Client, name: &str) -> tokio::task::JoinHandle<dlm::Result<()>> {
    let lock = c.fair_lock(name);
    tokio::spawn(async move {
        let token = Token::random()?;
        lock.release_token(&token).await
    })
}

/// One fair acquisition of `name` that waits up to `wait`.
fn acquire(
    c: &Client,
    name: &str,
    wait: Duration,
) -> tokio::task::JoinHandle<dlm::Result<dlm::FairGuard>> {
    let lock = c.fair_lock(name);
    tokio::spawn(async move { lock.acquire(&ttl(20_000).wait(wait)).await })
}

/// An acquisition dropped while its attempt waits in a later phase of a
/// batch: its cancel (sent at once, outside the batcher) must not reach
/// Redis before the attempt, or the attempt takes the free lock for nobody.
///
/// Batch: `[release k (stray token), acquire k (A)]`, so A travels in phase
/// 2, sent once phase 1 is answered.
#[tokio::test(flavor = "current_thread")]
async fn a_cancelled_fair_acquire_is_not_overtaken_by_its_cancel() -> TestResult {
    let s = server();
    let c = client_with(&s, Duration::from_secs(2)).await;
    warm(&c).await?;
    s.pause()?;
    let fill = fill_a_slot(&c, "fill");
    tokio::time::sleep(Duration::from_millis(30)).await;
    // Both submit before either leader drains the queue: one batch.
    let stray = stray_release(&c, "k");
    let a = acquire(&c, "k", Duration::from_secs(5));
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The caller goes away while A waits for phase 1's reply.
    a.abort();
    assert!(a.await.is_err_and(|e| e.is_cancelled()));
    // Its cancel is decided now (phase 1 is still on the wire).
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.resume()?;
    drop(fill.await?);
    let _ = stray.await?;
    c.settle(Duration::from_secs(2)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let left = traces(&s, &c, "k")?;
    assert!(
        left.starts_with("0 "),
        "fair lock k keeps keys for nobody after its acquisition was cancelled: {left}"
    );
    Ok(())
}

/// The same with a caller that gives up on its deadline while its attempt
/// is written only later (every phase before it waits out a deadline of its
/// own on the frozen server): the cancel outwaits its own deadline and
/// still goes out behind the attempt, in the background `settle` waits for.
///
/// Batch: `[release j, acquire j (B), release j, acquire j (C), acquire k
/// (A, try once)]`: A is written at about three deadlines, while its caller
/// gave up at one and its cancel stopped waiting at two.
#[tokio::test(flavor = "current_thread")]
async fn a_fair_cancel_that_outwaits_its_deadline_still_undoes_the_acquire() -> TestResult {
    let timeout = Duration::from_millis(400);
    let s = server();
    let c = client_with(&s, timeout).await;
    warm(&c).await?;
    s.pause()?;
    let fill = fill_a_slot(&c, "fill");
    tokio::time::sleep(Duration::from_millis(30)).await;
    let tasks = [
        stray_release(&c, "j"),
        tokio::spawn({
            let l = c.fair_lock("j");
            async move { l.acquire(&ttl(20_000)).await.map(drop) }
        }),
        stray_release(&c, "j"),
        tokio::spawn({
            let l = c.fair_lock("j");
            async move { l.acquire(&ttl(20_000)).await.map(drop) }
        }),
    ];
    let a = acquire(&c, "k", Duration::ZERO);
    let r = a.await?;
    assert!(r.is_err(), "A gives up on its deadline: {r:?}");
    tokio::time::sleep(timeout * 3).await;
    s.resume()?;
    drop(fill.await?);
    for t in tasks {
        let _ = t.await?;
    }
    c.settle(Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let left = traces(&s, &c, "k")?;
    assert!(
        left.starts_with("0 "),
        "fair lock k keeps keys for nobody after its acquisition gave up: {left}"
    );
    Ok(())
}

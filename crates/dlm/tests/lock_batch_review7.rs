//! Review 7 of the batched lock scripts (commit e9c9e77, "fail only the
//! damaged lock of a batched mutex or read-write lock call"): paths where a
//! Redis error on one lock still fails every other lock of the call.
//!
//! Batches are built as in `lock_batch_review6.rs`: the server is frozen
//! (SIGSTOP), one lone request takes the batch slot, and the requests under
//! test, spawned on a current-thread runtime, gather in one call.
mod common;

use std::time::Duration;

use common::*;

/// A least-privilege user whose ACL lacks `+mget` ("a user whose ACL
/// predates dlm's use of MGET", which every batched script still serves
/// through its GET fallback).
fn server_without_mget() -> (RedisServer, String) {
    let rules = dlm::keys::ACL_RULES.replace(" +mget", "");
    assert_ne!(rules, dlm::keys::ACL_RULES, "+mget is in ACL_RULES");
    let s = RedisServer::builder()
        .acl_user("dlm", "s3cret", &rules)
        .start()
        .expect("start redis-server");
    let url = s.url_as("dlm", "s3cret");
    (s, url)
}

async fn client_at(url: &str) -> dlm::Client {
    dlm::Client::builder()
        .timeout(Duration::from_secs(2))
        .connect(url)
        .await
        .expect("connect to the throwaway server")
}

/// rwlock `acquire_many.lua`'s GET fallback (no `+mget`) reads every writer
/// key with `redis.call('GET', ...)` outside the per-attempt `pcall`: a
/// damaged writer key (a hash) aborts the whole script, and a read of a free
/// lock batched with it fails. (The mutex's `release_many.lua` got a
/// `redis.pcall` GET fallback in the same commit; these two did not.)
#[tokio::test(flavor = "current_thread")]
async fn rw_acquire_get_fallback_fails_every_attempt_for_one_damaged_writer_key() -> TestResult {
    let (s, url) = server_without_mget();
    let c = client_at(&url).await;
    c.rwlock("warm").write(&ttl(1000)).await?.release().await?;
    s.command(&["HSET", "dlm:rw:{bad}:writer", "f", "v"])?;
    s.pause()?;
    let fill = {
        let rw = c.rwlock("fill");
        tokio::spawn(async move { rw.write(&ttl(20_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
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
    let _ = bad.await?;
    let good = good.await?;
    assert!(
        good.is_ok(),
        "a read of the free lock `good` failed because it shared an acquire_many call with \
         `bad`, whose writer key holds a hash (GET fallback outside pcall): {:?}",
        good.as_ref().err()
    );
    Ok(())
}

/// The same for rwlock `release_many.lua`: the release of a healthy write
/// lock, batched with the release of one whose writer key was damaged,
/// fails, and the healthy lock stays held in Redis for nobody until its TTL.
#[tokio::test(flavor = "current_thread")]
async fn rw_release_get_fallback_fails_every_release_for_one_damaged_writer_key() -> TestResult {
    let (s, url) = server_without_mget();
    let c = client_at(&url).await;
    c.rwlock("warm").write(&ttl(1000)).await?.release().await?;
    let good = c.rwlock("good").write(&ttl(20_000)).await?;
    let bad = c.rwlock("bad").write(&ttl(20_000)).await?;
    s.command(&["DEL", "dlm:rw:{bad}:writer"])?;
    s.command(&["HSET", "dlm:rw:{bad}:writer", "f", "v"])?;
    s.pause()?;
    let fill = {
        let rw = c.rwlock("fill");
        tokio::spawn(async move { rw.read(&ttl(20_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    let good = tokio::spawn(async move { good.release().await });
    let bad = tokio::spawn(async move { bad.release().await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.resume()?;
    let _ = fill.await?;
    let _ = bad.await?;
    let good = good.await?;
    let left = s.command(&["EXISTS", "dlm:rw:{good}:writer"])?;
    let left = left.trim_start_matches(':');
    assert!(
        good.is_ok() && left == "0",
        "the release of `good` failed ({:?}; its writer key still exists: {left}) because it \
         shared a release_many call with `bad`, whose writer key holds a hash",
        good.as_ref().err()
    );
    Ok(())
}

//! A lock with a watchdog and fencing tokens.
//!
//! The holder takes the lock with a 1 s TTL and a watchdog, works for 2.5 s
//! (the watchdog keeps extending the lease), and writes its result with the
//! lock's fencing token through `Client::fenced_write`. Then a second client
//! takes the lock and writes with its (higher) fence; a late write carrying
//! the first holder's fence, as a holder that paused past its lease would
//! send, is refused with `Error::StaleFence`.
//!
//! Run: `cargo run -p dlm --example lock_watchdog_fencing [REDIS_URL]`
//! (or set `DLM_REDIS_URL`; without either it starts a private redis-server).
mod common;

use std::time::Duration;

use dlm::{Client, Error, LockOptions};

#[tokio::main]
async fn main() -> Result<(), common::BoxError> {
    let servers = common::servers(1)?;
    let client = Client::connect(servers.url()).await?;
    let other = Client::connect(servers.url()).await?;
    let name = "example:report";

    let opts = LockOptions::new(Duration::from_secs(1))
        .wait(Duration::from_secs(5))
        .watchdog(true);
    let guard = client.lock(name).acquire(&opts).await?;
    let first = guard.fence().ok_or("a single-Redis lock has a fence")?;
    println!(
        "holder A: acquired {name:?} with fence {first}, ttl {:?}",
        guard.ttl()
    );

    // Work longer than the TTL: the watchdog renews the lease every ttl/3.
    tokio::select! {
        _ = guard.lost() => return Err("lock lost during the work".into()),
        _ = tokio::time::sleep(Duration::from_millis(2500)) => {}
    }
    println!(
        "holder A: worked 2.5 s with a 1 s TTL; still held: {}, {:?} left",
        guard.is_held().await?,
        guard.remaining()
    );
    client.fenced_write(name, first, b"total=100").await?;
    println!("holder A: fenced write with fence {first} accepted");
    let released = guard.release().await?;
    println!("holder A: released ({released:?})");

    let guard = other.lock(name).acquire(&opts).await?;
    let second = guard.fence().ok_or("a single-Redis lock has a fence")?;
    println!("holder B: acquired with fence {second}");
    other.fenced_write(name, second, b"total=120").await?;
    println!("holder B: fenced write with fence {second} accepted");

    // A write from the old holder arriving late (a GC pause, a slow network).
    match client.fenced_write(name, first, b"total=90").await {
        Err(Error::StaleFence { given, highest, .. }) => {
            println!("late write with fence {given} refused: fence {highest} has written")
        }
        Ok(()) => return Err("a stale fence was accepted".into()),
        Err(e) => return Err(e.into()),
    }
    guard.release().await?;

    let (fence, value) = client
        .fenced_read(name)
        .await?
        .ok_or("the resource has a value")?;
    println!(
        "stored: {:?} written with fence {fence}",
        String::from_utf8_lossy(&value)
    );
    if value != b"total=120" || fence != second {
        return Err("the stored value is not holder B's".into());
    }
    println!("ok");
    Ok(())
}

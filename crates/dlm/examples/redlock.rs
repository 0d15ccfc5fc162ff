//! Redlock: one lock over three independent Redis masters.
//!
//! `Client::connect_many` with several URLs makes every lock of that client a
//! Redlock: it counts only when a majority (2 of 3) granted it. A second
//! client is refused while the first holds it, and gets it after the release.
//! Redlock guards carry **no fencing token** (`guard.fence()` is `None`):
//! the nodes' counters diverge, so no number from them is provably
//! increasing. Use a single Redis when you need fencing.
//!
//! Run: `cargo run -p dlm --example redlock [URL1 URL2 URL3]`
//! (or `DLM_REDIS_URL=url1,url2,url3`; without either it starts three
//! private redis-servers).
mod common;

use std::time::Duration;

use dlm::{Client, Error, LockOptions};

#[tokio::main]
async fn main() -> Result<(), common::BoxError> {
    let servers = common::servers(3)?;
    let a = Client::builder().connect_many(&servers.urls).await?;
    let b = Client::builder().connect_many(&servers.urls).await?;
    println!("clients A and B, each on {} nodes", a.nodes());

    let opts = LockOptions::new(Duration::from_secs(2)).watchdog(true);
    let guard = a.lock("example:nightly-job").acquire(&opts).await?;
    println!(
        "A: acquired on a majority, validity {:?}, fence {:?}",
        guard.remaining(),
        guard.fence()
    );
    if guard.fence().is_some() {
        return Err("a Redlock guard must have no fence".into());
    }

    match b.lock("example:nightly-job").acquire(&opts).await {
        Err(Error::Busy { .. }) => println!("B: refused, A holds it"),
        Ok(_) => return Err("two holders of one Redlock".into()),
        Err(e) => return Err(e.into()),
    }

    let released = guard.release().await?;
    println!(
        "A: released, confirmed by {} of {} nodes",
        released.confirmed, released.nodes
    );

    let guard = b
        .lock("example:nightly-job")
        .acquire(&opts.clone().wait(Duration::from_secs(2)))
        .await?;
    println!("B: acquired after A's release");
    guard.release().await?;
    println!("ok");
    Ok(())
}

//! A flash sale: 10 phones, 100 concurrent buyers, exactly 10 sales.
//!
//! No lock is needed when the whole critical section is "take one if any is
//! left": `Client::stock` is a counter that a Lua script decrements
//! atomically and never below zero.
//!
//! Run: `cargo run -p dlm --example flash_sale [REDIS_URL]`
//! (or set `DLM_REDIS_URL`; without either it starts a private redis-server).
mod common;

use dlm::Client;
use dlm::consistency::Take;

const PHONES: u64 = 10;
const BUYERS: usize = 100;

#[tokio::main]
async fn main() -> Result<(), common::BoxError> {
    let servers = common::servers(1)?;
    let client = Client::connect(servers.url()).await?;
    let stock = client.stock("example:phones");
    stock.set(PHONES).await?;
    println!("{PHONES} phones in stock, {BUYERS} buyers");

    let mut buyers = tokio::task::JoinSet::new();
    for buyer in 0..BUYERS {
        let stock = stock.clone();
        buyers.spawn(async move { stock.take(1).await.map(|t| (buyer, t)) });
    }
    let (mut sold, mut refused) = (0, 0);
    while let Some(done) = buyers.join_next().await {
        match done?? {
            (buyer, Take::Taken { left }) => {
                sold += 1;
                println!("buyer {buyer:>2}: bought one, {left} left");
            }
            (_, Take::Insufficient { .. }) => refused += 1,
        }
    }
    let left = stock.get().await?;
    println!("sold {sold}, sold out for {refused}, {left} left");
    if sold != PHONES || left != 0 || refused != BUYERS as u64 - PHONES {
        return Err("oversold or undersold".into());
    }
    println!("ok");
    Ok(())
}

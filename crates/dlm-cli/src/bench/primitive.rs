//! `dlm bench lock --primitive mutex|fair|rw`: the same workload on each
//! kind of lock, so their contended throughput and hand-off latency can be
//! read side by side. With `rw`, one task in four writes and the others read.

use clap::ValueEnum;

/// Which lock the benchmark takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Primitive {
    /// `client.lock(..)`: the mutex (hand-over within a client, no order across clients).
    Mutex,
    /// `client.fair_lock(..)`: FIFO across processes.
    Fair,
    /// `client.rwlock(..)`: one task in four takes the write lock, the others read.
    Rw,
}

impl Primitive {
    /// The implementation name in reports.
    pub fn label(self) -> &'static str {
        match self {
            Primitive::Mutex => "dlm",
            Primitive::Fair => "dlm-fair",
            Primitive::Rw => "dlm-rw",
        }
    }

    /// Whether task `id` holds exclusively (every task but readers).
    pub fn exclusive(self, id: usize) -> bool {
        self != Primitive::Rw || id.is_multiple_of(4)
    }
}

/// A held lock of any kind.
pub enum AnyGuard {
    Mutex(dlm::LockGuard),
    Fair(dlm::FairGuard),
    Read(dlm::ReadGuard),
    Write(dlm::WriteGuard),
}

/// Acquire `name` as `primitive` says, for task `id`.
pub async fn acquire(
    client: &dlm::Client,
    primitive: Primitive,
    id: usize,
    name: &str,
    opts: &dlm::LockOptions,
) -> dlm::Result<AnyGuard> {
    Ok(match primitive {
        Primitive::Mutex => AnyGuard::Mutex(client.lock(name).acquire(opts).await?),
        Primitive::Fair => AnyGuard::Fair(client.fair_lock(name).acquire(opts).await?),
        Primitive::Rw if primitive.exclusive(id) => {
            AnyGuard::Write(client.rwlock(name).write(opts).await?)
        }
        Primitive::Rw => AnyGuard::Read(client.rwlock(name).read(opts).await?),
    })
}

impl AnyGuard {
    /// Release, telling whether it was still ours.
    pub async fn release(self) -> dlm::Result<()> {
        match self {
            AnyGuard::Mutex(g) => g.release().await.map(|_| ()),
            AnyGuard::Fair(g) => g.release().await,
            AnyGuard::Read(g) => g.release().await,
            AnyGuard::Write(g) => g.release().await,
        }
    }
}

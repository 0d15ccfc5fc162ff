//! `dlm bench lock --primitive mutex|fair|rw|semaphore`: the same workload
//! on each kind of lock, so their contended throughput and hand-off latency
//! can be read side by side. With `rw`, one task in four writes and the
//! others read; with `semaphore`, every cycle takes one of `--permits`.

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
    /// `client.semaphore(..)` with `--permits` permits, one taken per cycle
    /// (contended mode only).
    Semaphore,
}

impl Primitive {
    /// Whether task `id` holds exclusively (every task but readers and
    /// semaphore holders, which count against the capacity instead).
    pub fn exclusive(self, id: usize) -> bool {
        match self {
            Primitive::Rw => id.is_multiple_of(4),
            Primitive::Semaphore => false,
            Primitive::Mutex | Primitive::Fair => true,
        }
    }

    /// The name in reports' `primitive` field.
    pub fn as_str(self) -> &'static str {
        match self {
            Primitive::Mutex => "mutex",
            Primitive::Fair => "fair",
            Primitive::Rw => "rw",
            Primitive::Semaphore => "semaphore",
        }
    }
}

/// A held lock of any kind.
pub enum AnyGuard {
    Mutex(dlm::LockGuard),
    Fair(dlm::FairGuard),
    Read(dlm::ReadGuard),
    Write(dlm::WriteGuard),
    Permit(dlm::SemaphoreGuard),
}

/// Acquire `name` as `primitive` says, for task `id` (with `semaphore`, the
/// semaphore to take a permit of).
pub async fn acquire(
    client: &dlm::Client,
    primitive: Primitive,
    id: usize,
    name: &str,
    opts: &dlm::LockOptions,
    semaphore: Option<&dlm::Semaphore>,
) -> dlm::Result<AnyGuard> {
    if let (Primitive::Semaphore, Some(sem)) = (primitive, semaphore) {
        let sopts = dlm::SemaphoreOptions::new(opts.ttl()).wait(opts.wait_for());
        return Ok(AnyGuard::Permit(sem.acquire(1, &sopts).await?));
    }
    Ok(match primitive {
        Primitive::Mutex | Primitive::Semaphore => {
            AnyGuard::Mutex(client.lock(name).acquire(opts).await?)
        }
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
            AnyGuard::Permit(g) => g.release().await,
        }
    }
}

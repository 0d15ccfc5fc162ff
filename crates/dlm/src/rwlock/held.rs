//! A held read share or write lock: what its guard and the watchdog share.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::millis;
use crate::error::Result;
use crate::keys::RwKeys;
use crate::rwlock::RwShared;
use crate::rwlock::batch::Node;
use crate::rwlock::ops::{EXTEND_MANY, Mode};
use crate::services::held::{Core, Lease, Shared, batch_backend, verdicts};
use crate::services::options::Outcome;
use crate::services::renew::{Due, Renewable, Renewal};

/// A held read share or write lock.
pub(crate) struct RwHeld {
    core: Core,
    keys: Arc<RwKeys>,
    shared: Arc<RwShared>,
    /// The batcher its release goes through.
    node: Node,
    /// The write lock (false: a read share, also after a downgrade).
    write: AtomicBool,
}

impl RwHeld {
    pub(crate) fn new(
        core: Core,
        keys: Arc<RwKeys>,
        shared: Arc<RwShared>,
        node: Node,
        mode: Mode,
    ) -> Self {
        RwHeld {
            core,
            keys,
            shared,
            node,
            write: AtomicBool::new(mode == Mode::Write),
        }
    }

    pub(crate) fn mode(&self) -> Mode {
        if self.write.load(Ordering::Acquire) {
            Mode::Write
        } else {
            Mode::Read
        }
    }

    pub(crate) fn keys(&self) -> &RwKeys {
        &self.keys
    }

    /// The batcher its acquisition went through.
    pub(crate) fn node(&self) -> &Node {
        &self.node
    }

    /// The write lock became a read share (after downgrade.lua said so).
    pub(crate) fn downgraded(&self) {
        self.write.store(false, Ordering::Release);
    }
}

impl Renewable for RwHeld {
    fn key(&self) -> &str {
        match self.mode() {
            Mode::Read => &self.keys.readers,
            Mode::Write => &self.keys.writer,
        }
    }

    fn active(&self) -> bool {
        self.core.active()
    }

    fn by_slot(&self) -> bool {
        self.shared.by_slot()
    }

    async fn renew(batch: &[Due<Self>]) -> Vec<Renewal> {
        let Some(backend) = batch_backend(batch) else {
            return vec![Renewal::Lost; batch.len()];
        };
        let started = Instant::now();
        let mut inv = EXTEND_MANY.prepare_invoke();
        for d in batch {
            inv.key(d.item.key())
                .arg(d.item.mode().arg())
                .arg(d.item.core.token.as_str())
                .arg(millis(d.ttl));
        }
        verdicts(batch, backend.eval(&inv).await, started)
    }
}

impl Lease for RwHeld {
    fn core(&self) -> &Core {
        &self.core
    }

    fn shared(&self) -> &Shared<Self> {
        &self.shared
    }

    async fn release(&self) -> Result<Outcome> {
        let backend = self.shared.backend("rwlock")?;
        self.node
            .release(backend, &self.keys, self.mode(), &self.core.token)
            .await
    }

    async fn extend(&self, ttl: Duration) -> Result<Outcome> {
        let backend = self.shared.backend("rwlock")?;
        let (script, cmd) = self.extend_command(ttl);
        let codes: Vec<redis::Value> = backend
            .evalsha_within(backend.timeout(), script, &cmd)
            .await?;
        crate::services::held::extend_reply(codes, self.key())
    }

    fn extend_command(&self, ttl: Duration) -> (&'static redis::Script, redis::Cmd) {
        let token = self.core.token.as_str();
        let mut cmd =
            crate::backend::evalsha(&EXTEND_MANY, 1, 3, self.key().len() + token.len() + 24);
        cmd.arg(self.key())
            .arg(self.mode().arg())
            .arg(token)
            .arg(millis(ttl));
        (&EXTEND_MANY, cmd)
    }
}

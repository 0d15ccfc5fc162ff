//! A held fair lock: what its guard and the watchdog share.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::fair::{FairNode, FairShared};
use crate::keys::FairKeys;
use crate::services::held::{Core, Lease, Shared, extend_token, token_renewable};
use crate::services::options::Outcome;

/// A held fair lock.
pub(crate) struct FairHeld {
    core: Core,
    keys: Arc<FairKeys>,
    shared: Arc<FairShared>,
    /// The batcher its release goes through.
    node: FairNode,
}

impl FairHeld {
    pub(crate) fn new(
        core: Core,
        keys: Arc<FairKeys>,
        shared: Arc<FairShared>,
        node: FairNode,
    ) -> Self {
        FairHeld {
            core,
            keys,
            shared,
            node,
        }
    }
}

token_renewable!(FairHeld, keys.lock);

impl Lease for FairHeld {
    fn core(&self) -> &Core {
        &self.core
    }

    fn shared(&self) -> &Shared<Self> {
        &self.shared
    }

    async fn release(&self) -> Result<Outcome> {
        let (outcome, next) = self.node.release(&self.keys, &self.core.token).await?;
        // The next in line may be a task of this client: wake it now rather
        // than when the published message comes back.
        if let (Some(next), Some(w)) = (next, &self.shared.wakeups) {
            w.wake_local(&self.keys.wake(&next));
        }
        Ok(outcome)
    }

    async fn extend(&self, ttl: Duration) -> Result<Outcome> {
        let backend = self.shared.backend("fair lock")?;
        extend_token(backend, &self.keys.lock, &self.core.token, ttl).await
    }

    fn extend_command(&self, ttl: Duration) -> (&'static redis::Script, redis::Cmd) {
        crate::services::held::extend_token_command(&self.keys.lock, &self.core.token, ttl)
    }
}

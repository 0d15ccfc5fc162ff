//! A held leadership: what its guard and the watchdog share.

use std::sync::Arc;
use std::time::Duration;

use crate::election::{ElectionShared, ops};
use crate::error::Result;
use crate::keys::ElectionKeys;
use crate::services::held::{Core, Lease, Shared, extend_token, token_renewable};
use crate::services::options::Outcome;

/// A held leadership: the lease is "key = owner token", renewed like a
/// lock's; the term is the core's fence.
pub(crate) struct ElectionHeld {
    core: Core,
    keys: Arc<ElectionKeys>,
    shared: Arc<ElectionShared>,
    /// The candidate id this leadership was won with.
    pub(crate) id: Arc<str>,
}

impl ElectionHeld {
    pub(crate) fn new(
        core: Core,
        keys: Arc<ElectionKeys>,
        shared: Arc<ElectionShared>,
        id: Arc<str>,
    ) -> Self {
        ElectionHeld {
            core,
            keys,
            shared,
            id,
        }
    }
}

token_renewable!(ElectionHeld, keys.lease);

impl Lease for ElectionHeld {
    fn core(&self) -> &Core {
        &self.core
    }

    fn shared(&self) -> &Shared<Self> {
        &self.shared
    }

    async fn release(&self) -> Result<Outcome> {
        let backend = self.shared.backend("leader election")?;
        let outcome = ops::resign(backend, &self.keys, &self.core.token).await?;
        // Candidates of this client: wake them now rather than when the
        // published message comes back.
        if let (Outcome::Done, Some(w)) = (outcome, &self.shared.wakeups) {
            w.wake_local(&self.keys.resigned);
        }
        Ok(outcome)
    }

    async fn extend(&self, ttl: Duration) -> Result<Outcome> {
        let backend = self.shared.backend("leader election")?;
        extend_token(backend, &self.keys.lease, &self.core.token, ttl).await
    }

    fn extend_command(&self, ttl: Duration) -> (&'static redis::Script, redis::Cmd) {
        crate::services::held::extend_token_command(&self.keys.lease, &self.core.token, ttl)
    }
}

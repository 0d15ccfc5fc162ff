//! Held permits: what their guard and the watchdog share. The guard itself
//! is the lock family's ([`crate::services::held::Guard`]); what is the
//! semaphore's own is how permits are renewed (every member `TOKEN:i` of the
//! holders' set), given back (handed straight to a waiting task of this
//! client when its permits fit) and extended.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Script;
use tokio::time::Instant;

use crate::backend::millis;
use crate::error::Result;
use crate::keys::SemaphoreKeys;
use crate::semaphore::Semaphores;
use crate::semaphore::ops::{self, HandOver, Successor};
use crate::services::held::{Core, Lease, Shared, batch_backend, verdicts};
use crate::services::options::Outcome;
use crate::services::renew::{Due, Renewable, Renewal};

static EXTEND_MANY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/extend_many.lua")));

pub(crate) fn scripts() -> Vec<&'static Script> {
    vec![&EXTEND_MANY]
}

/// Held permits of one semaphore.
pub(crate) struct SemaphoreHeld {
    core: Core,
    keys: Arc<SemaphoreKeys>,
    shared: Arc<Semaphores>,
    /// How many permits are held.
    pub(crate) permits: u32,
}

impl SemaphoreHeld {
    pub(crate) fn new(
        core: Core,
        keys: Arc<SemaphoreKeys>,
        shared: Arc<Semaphores>,
        permits: u32,
    ) -> Self {
        SemaphoreHeld {
            core,
            keys,
            shared,
            permits,
        }
    }

    /// extend_many.lua's codes: 1 extended, 0 run out (no "taken": permits
    /// are this holder's own members).
    fn outcome(code: i64) -> Outcome {
        if code == 1 {
            Outcome::Done
        } else {
            Outcome::Expired
        }
    }
}

impl Renewable for SemaphoreHeld {
    fn key(&self) -> &str {
        &self.keys.holders
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
            inv.key(&d.item.keys.holders)
                .arg(d.item.core.token.as_str())
                .arg(d.item.permits)
                .arg(millis(d.ttl));
        }
        // Not held any more is "run out" here (code 0 -> the lease's 0).
        let reply: Result<Vec<redis::Value>> = backend.eval(&inv).await;
        verdicts(batch, reply, started)
    }
}

impl Lease for SemaphoreHeld {
    fn core(&self) -> &Core {
        &self.core
    }

    fn shared(&self) -> &Shared<Self> {
        &self.shared
    }

    /// Give the permits back: handed straight to the first waiting task of
    /// this client when its permits fit, else released (waking waiters).
    async fn release(&self) -> Result<Outcome> {
        let backend = self.shared.backend("semaphore")?;
        let (keys, token) = (&self.keys, &self.core.token);
        let next = self
            .shared
            .wakeups
            .as_ref()
            .and_then(|w| Some((w, w.claim_baton(&keys.channel)?)));
        let Some((wakeups, next)) = next else {
            let released = ops::release(backend, keys, token, self.permits).await?;
            return Ok(if released {
                Outcome::Done
            } else {
                Outcome::Expired
            });
        };
        let started = Instant::now();
        let successor = Successor {
            token: next.token(),
            permits: next.units(),
            ttl: next.ttl(),
        };
        let done = match ops::release_to(backend, keys, token, self.permits, successor).await {
            Ok(d) => d,
            Err(e) => {
                wakeups.unclaim(&keys.channel, next);
                return Err(e);
            }
        };
        Ok(match done {
            HandOver::Handed(fence) => {
                wakeups.handed(&keys.channel, &next);
                next.grant(fence, started);
                tracing::debug!(name = %self.core.name, "permits handed over to a waiting task");
                Outcome::Done
            }
            HandOver::Released => {
                wakeups.unclaim(&keys.channel, next);
                Outcome::Done
            }
            HandOver::Expired => {
                wakeups.unclaim(&keys.channel, next);
                Outcome::Expired
            }
        })
    }

    async fn extend(&self, ttl: Duration) -> Result<Outcome> {
        let backend = self.shared.backend("semaphore")?;
        let (script, cmd) = self.extend_command(ttl);
        let codes: Vec<i64> = backend
            .evalsha_within(backend.timeout(), script, &cmd)
            .await?;
        Ok(Self::outcome(codes.first().copied().unwrap_or(0)))
    }

    fn extend_command(&self, ttl: Duration) -> (&'static redis::Script, redis::Cmd) {
        let token = self.core.token.as_str();
        let mut cmd = crate::backend::evalsha(
            &EXTEND_MANY,
            1,
            3,
            self.keys.holders.len() + token.len() + 30,
        );
        cmd.arg(&self.keys.holders)
            .arg(token)
            .arg(self.permits)
            .arg(millis(ttl));
        (&EXTEND_MANY, cmd)
    }
}

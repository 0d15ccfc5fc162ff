//! Batched watchdog renewals of semaphore holders, for the renewal service
//! ([`crate::services::renew`]): one `extend_many.lua` call per batch of up
//! to 1000 holders (per hash slot on a possible cluster).

use std::sync::LazyLock;

use redis::Script;
use tokio::time::Instant;

use crate::backend::millis;
use crate::error::Result;
use crate::semaphore::guard::Held;
use crate::services::lease::drift;
use crate::services::renew::{Due, Renewable, Renewal};

static EXTEND_MANY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/extend_many.lua")));

pub(crate) fn scripts() -> Vec<&'static Script> {
    vec![&EXTEND_MANY]
}

impl Renewable for Held {
    fn key(&self) -> &str {
        &self.keys.holders
    }

    fn active(&self) -> bool {
        !self.stop.is_cancelled() && !self.lease.marked_lost()
    }

    fn by_slot(&self) -> bool {
        self.state
            .backend
            .as_ref()
            .is_some_and(crate::backend::Backend::batch_by_slot)
    }

    async fn renew(batch: &[Due<Self>]) -> Vec<Renewal> {
        let Some(backend) = batch.first().and_then(|d| d.item.state.backend.clone()) else {
            return Vec::new();
        };
        let start = Instant::now();
        let mut inv = EXTEND_MANY.prepare_invoke();
        for d in batch {
            inv.key(&d.item.keys.holders)
                .arg(d.item.token.as_str())
                .arg(d.item.permits)
                .arg(millis(d.ttl));
        }
        let reply: Result<Vec<i64>> = backend.eval(&inv).await;
        match reply {
            Ok(codes) if codes.len() == batch.len() => batch
                .iter()
                .zip(codes)
                .map(|(d, code)| {
                    let h = &d.item;
                    if code == 1 {
                        h.lease.renewed(start + d.ttl.saturating_sub(drift(d.ttl)));
                        Renewal::Renewed { sent: start }
                    } else {
                        tracing::warn!(name = %h.name, "semaphore permits lost: renewal found the lease run out");
                        h.lease.mark_lost();
                        Renewal::Lost
                    }
                })
                .collect(),
            other => {
                if let Err(e) = &other {
                    tracing::debug!(error = %e, "batched permit renewal failed; retrying sooner");
                }
                batch
                    .iter()
                    .map(|d| {
                        if d.item.lease.is_lost() {
                            Renewal::Lost
                        } else {
                            Renewal::Retry
                        }
                    })
                    .collect()
            }
        }
    }
}

//! One Lua script per election operation; each is a single round trip.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use crate::backend::{Backend, millis};
use crate::error::{Error, Result};
use crate::keys::ElectionKeys;
use crate::services::options::Outcome;
use crate::token::{Fence, Token};

static CAMPAIGN: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/campaign.lua")));
static RESIGN: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/resign.lua")));
static LEADER: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/leader.lua")));

pub(crate) fn scripts() -> Vec<&'static Script> {
    vec![&CAMPAIGN, &RESIGN, &LEADER]
}

/// What one campaign attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Elected, with this term.
    Elected(Fence),
    /// Another candidate leads; its lease has this long left (`None`: no expiry).
    Led(Option<Duration>),
}

pub(crate) async fn campaign(
    backend: &Backend,
    keys: &ElectionKeys,
    token: &Token,
    id: &str,
    ttl: Duration,
) -> Result<Attempt> {
    campaign_reply(
        backend
            .eval(
                CAMPAIGN
                    .key(&keys.lease)
                    .key(&keys.leader)
                    .key(&keys.term)
                    .arg(token.as_str())
                    .arg(millis(ttl))
                    .arg(id),
            )
            .await?,
    )
}

/// campaign.lua: {1, term} or {0, pttl}.
fn campaign_reply(v: Value) -> Result<Attempt> {
    match redis::from_redis_value::<Vec<i64>>(v)?[..] {
        [1, term] if term > 0 => Ok(Attempt::Elected(Fence::new(term.unsigned_abs()))),
        [0, pttl] => Ok(Attempt::Led(
            u64::try_from(pttl).ok().map(Duration::from_millis),
        )),
        _ => Err(Error::protocol("campaign: unexpected reply")),
    }
}

/// Token-checked resignation; wakes the candidates.
pub(crate) async fn resign(
    backend: &Backend,
    keys: &ElectionKeys,
    token: &Token,
) -> Result<Outcome> {
    let code: i64 = backend
        .eval(
            RESIGN
                .key(&keys.lease)
                .key(&keys.leader)
                .arg(token.as_str())
                .arg(&keys.resigned),
        )
        .await?;
    crate::services::held::extend_code(code)
}

/// Who leads, as leader.lua reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reading {
    /// A leader: its id ('' when the lease was not written by a campaign),
    /// term (0 likewise) and the time left on its lease.
    Led {
        id: String,
        term: u64,
        ttl: Option<Duration>,
    },
    /// Nobody; the last term granted (0: never).
    Vacant { last_term: u64 },
}

pub(crate) async fn leader(backend: &Backend, keys: &ElectionKeys) -> Result<Reading> {
    leader_reply(
        backend
            .eval(LEADER.key(&keys.lease).key(&keys.leader).key(&keys.term))
            .await?,
    )
}

/// leader.lua: {1, id, term, pttl} or {0, last_term}.
fn leader_reply(v: Value) -> Result<Reading> {
    let Value::Array(items) = v else {
        return Err(Error::protocol("leader: not an array"));
    };
    let int = |v: &Value| redis::from_redis_value_ref::<i64>(v).map_err(Error::from);
    match items.as_slice() {
        [code, last] if int(code)? == 0 => Ok(Reading::Vacant {
            last_term: u64::try_from(int(last)?).unwrap_or(0),
        }),
        [code, id, term, pttl] if int(code)? == 1 => Ok(Reading::Led {
            id: redis::from_redis_value_ref(id)?,
            term: u64::try_from(int(term)?).unwrap_or(0),
            ttl: u64::try_from(int(pttl)?).ok().map(Duration::from_millis),
        }),
        _ => Err(Error::protocol("leader: unexpected reply")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::props::{Decoder, decoder_tests};

    const DECODERS: &[Decoder] = &[
        ("campaign", |v| campaign_reply(v).is_ok()),
        ("leader", |v| leader_reply(v).is_ok()),
    ];

    decoder_tests!(fuzz_election_replies, DECODERS);

    #[test]
    fn replies_decode() -> Result<()> {
        let ints = |xs: &[i64]| Value::Array(xs.iter().map(|&x| Value::Int(x)).collect());
        assert_eq!(
            campaign_reply(ints(&[1, 7]))?,
            Attempt::Elected(Fence::new(7))
        );
        assert_eq!(
            campaign_reply(ints(&[0, 1500]))?,
            Attempt::Led(Some(Duration::from_millis(1500)))
        );
        assert_eq!(campaign_reply(ints(&[0, -1]))?, Attempt::Led(None));
        assert!(campaign_reply(ints(&[1, 0])).is_err());
        assert_eq!(
            leader_reply(ints(&[0, 3]))?,
            Reading::Vacant { last_term: 3 }
        );
        let led = Value::Array(vec![
            Value::Int(1),
            Value::BulkString(b"host:1".to_vec()),
            Value::Int(4),
            Value::Int(900),
        ]);
        assert_eq!(
            leader_reply(led)?,
            Reading::Led {
                id: "host:1".into(),
                term: 4,
                ttl: Some(Duration::from_millis(900)),
            }
        );
        Ok(())
    }
}

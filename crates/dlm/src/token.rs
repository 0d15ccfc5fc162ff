//! Owner tokens and fencing tokens.

use std::fmt;

use crate::error::{Error, Result};

/// The longest token accepted from outside (e.g. another client's value on a raw key).
const MAX_TOKEN_LEN: usize = 256;

/// The owner token of one acquisition: 128 bits from the operating system's
/// CSPRNG, stored as the lock key's value. Only the holder of the token can
/// release or extend the lock. `Debug` redacts it, so it does not end up in logs.
///
/// ```
/// let t = dlm::Token::random()?;
/// assert_eq!(t.as_str().len(), 32);
/// assert_eq!(format!("{t:?}"), "Token(..)");
/// let parsed: dlm::Token = t.as_str().parse()?;
/// assert_eq!(parsed, t);
/// # Ok::<(), dlm::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Token(Repr);

/// A token's text: one of dlm's shape (32 lowercase hex digits) inline, so
/// that a random token costs no allocation; any other shared. Every text
/// has one form (a parsed token of dlm's shape is inline too), so tokens
/// are equal exactly when their texts are.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    /// 32 lowercase hex digits.
    Hex([u8; 32]),
    Other(std::sync::Arc<str>),
}

impl Token {
    /// A fresh random token (32 lowercase hex digits).
    pub fn random() -> Result<Self> {
        let bytes = random_bytes()?;
        let mut hex = [0u8; 32];
        for (pair, b) in hex.chunks_exact_mut(2).zip(bytes) {
            pair[0] = HEX[usize::from(b >> 4)];
            pair[1] = HEX[usize::from(b & 0xf)];
        }
        // Hex digits are ASCII: always UTF-8 (checked once here).
        std::str::from_utf8(&hex).map_err(|e| Error::protocol(e.to_string()))?;
        Ok(Token(Repr::Hex(hex)))
    }

    /// The token as stored in Redis.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Checked to be UTF-8 when made.
            Repr::Hex(hex) => std::str::from_utf8(hex).unwrap_or_default(),
            Repr::Other(s) => s,
        }
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Tokens per refill of a thread's pool of operating-system random bytes.
const POOL_TOKENS: usize = 64;

/// A thread's unused bytes from the OS CSPRNG, and the process they were drawn in.
struct Pool {
    pid: u32,
    bytes: [u8; 16 * POOL_TOKENS],
    used: usize,
}

thread_local! {
    static POOL: std::cell::RefCell<Pool> = const {
        std::cell::RefCell::new(Pool { pid: 0, bytes: [0; 16 * POOL_TOKENS], used: 16 * POOL_TOKENS })
    };
}

/// 16 bytes from the OS CSPRNG. They are drawn 64 tokens' worth at a time
/// (one system call instead of 64); every byte is used once, and a forked
/// child never reuses its parent's pool.
fn random_bytes() -> Result<[u8; 16]> {
    POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        let pid = std::process::id();
        if pool.used + 16 > pool.bytes.len() || pool.pid != pid {
            getrandom::fill(&mut pool.bytes).map_err(|e| Error::Backend {
                source: format!("operating system random source failed: {e}").into(),
            })?;
            pool.pid = pid;
            pool.used = 0;
        }
        let at = pool.used;
        let mut out = [0u8; 16];
        out.copy_from_slice(&pool.bytes[at..at + 16]);
        // Wipe what was handed out, so the pool never holds a live token.
        pool.bytes[at..at + 16].fill(0);
        pool.used = at + 16;
        Ok(out)
    })
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(..)")
    }
}

impl std::str::FromStr for Token {
    type Err = Error;

    /// Accepts any non-empty printable token up to 256 bytes, so tokens of
    /// other clients sharing a raw key can be used too.
    fn from_str(s: &str) -> Result<Self> {
        if s.is_empty() || s.len() > MAX_TOKEN_LEN || s.chars().any(char::is_control) {
            return Err(Error::invalid(
                "token",
                format!("must be 1 to {MAX_TOKEN_LEN} printable bytes"),
            ));
        }
        if let Ok(hex) = <[u8; 32]>::try_from(s.as_bytes())
            && hex.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Ok(Token(Repr::Hex(hex)));
        }
        Ok(Token(Repr::Other(s.into())))
    }
}

/// A fencing token: a number that strictly increases with every acquisition
/// of the same lock. Pass it along with every write the lock protects, and let
/// the storage reject writes with a lower token than one it has seen (see
/// [`crate::Client::fenced_write`]); a holder that was paused past its TTL is
/// then stopped even though it still believes it holds the lock.
///
/// ```
/// let a = dlm::Fence::new(7);
/// assert!(dlm::Fence::new(8) > a);
/// assert_eq!(a.get(), 7);
/// assert_eq!(a.to_string(), "7");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence(u64);

impl Fence {
    /// Wrap a number (e.g. one passed in `DLM_FENCE` by `dlm lock run`).
    pub const fn new(value: u64) -> Self {
        Fence(value)
    }

    /// The number.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_unique_hex_and_redacted() -> Result<()> {
        let a = Token::random()?;
        let b = Token::random()?;
        assert_ne!(a, b);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
        assert!(!format!("{a:?}").contains(a.as_str()));
        Ok(())
    }

    #[test]
    fn a_token_equals_and_hashes_as_its_text_whatever_its_form() -> Result<()> {
        use std::hash::BuildHasher;
        let hasher = std::collections::hash_map::RandomState::new();
        let random = Token::random()?;
        let parsed: Token = random.as_str().parse()?;
        assert_eq!(parsed, random);
        assert_eq!(hasher.hash_one(&parsed), hasher.hash_one(&random));
        for text in [
            "ABCDEF0123456789ABCDEF0123456789",
            "short",
            "x".repeat(40).as_str(),
        ] {
            let t: Token = text.parse()?;
            assert_eq!(t.as_str(), text);
            assert_ne!(t, random);
        }
        Ok(())
    }

    #[test]
    fn pooled_tokens_never_repeat_across_refills_and_threads() -> Result<()> {
        let draw = || {
            (0..3 * POOL_TOKENS)
                .map(|_| Token::random())
                .collect::<Result<Vec<_>>>()
        };
        let mut all = draw()?;
        let other = std::thread::spawn(draw)
            .join()
            .map_err(|_| Error::protocol("thread panicked"))??;
        all.extend(other);
        let unique: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(unique.len(), all.len());
        assert!(all.iter().all(|t| t.as_str().len() == 32));
        Ok(())
    }

    #[test]
    fn bad_tokens_are_rejected() {
        assert!("".parse::<Token>().is_err());
        assert!("a\nb".parse::<Token>().is_err());
        assert!("x".repeat(257).parse::<Token>().is_err());
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

        /// Parsing any string gives a token that round-trips, or a typed error
        /// exactly when the scripts could not compare it as a plain value.
        #[test]
        fn token_parsing_is_total_and_round_trips(s in prop_oneof![
            any::<String>(),
            "[ -~]{250,260}",
            "[0-9a-f\\x00\\n]{0,40}",
        ]) {
            let ok = !s.is_empty() && s.len() <= MAX_TOKEN_LEN && !s.chars().any(char::is_control);
            match s.parse::<Token>() {
                Ok(t) => {
                    prop_assert!(ok);
                    prop_assert_eq!(t.as_str(), s.as_str());
                }
                Err(e) => prop_assert!(!ok && matches!(e, Error::InvalidArgument { .. }), "{e}"),
            }
        }
    }

    #[test]
    fn ten_thousand_random_tokens_are_distinct_lowercase_hex() -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let t = Token::random()?;
            assert!(t.as_str().len() == 32);
            assert!(t.as_str().bytes().all(|b| HEX.contains(&b)));
            assert_eq!(t.as_str().parse::<Token>()?, t);
            assert!(seen.insert(t));
        }
        Ok(())
    }
}

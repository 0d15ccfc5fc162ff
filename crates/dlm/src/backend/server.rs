//! What a server is, learned from `INFO server`, and what it can do natively.
//!
//! dlm keeps what a server offers as capabilities ([`Capability`]), never as
//! version checks spread over the code: a lock's release asks
//! "compare-and-delete?", not "Valkey 9?". Each capability is switched on
//! only for servers a test runs the native path on (issue 34: no path that no
//! test runs): Redis 8.4's `DELEX ... IFEQ` and `SET ... IFEQ`, and Valkey
//! 8.1's `SET ... IFEQ`, wait until such a server can be tested here.
//!
//! A backend learns its server lazily, in the background, and again every
//! [`RELEARN_EVERY`] (a failover or a rolling upgrade may put another server
//! behind the same address); a native command the server refuses (unknown,
//! renamed by a proxy, or denied by an ACL) switches that capability off for
//! the backend's life, with one warning, and the script path takes over.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

/// The oldest Redis dlm runs on: the oldest the README claims and CI tests
/// (`scripts/servers.sh`: Redis 6.2.14); older servers are refused at connect.
pub(crate) const MIN_REDIS: Version = Version(6, 2, 0);

/// How often a backend learns its server again.
pub(crate) const RELEARN_EVERY: Duration = Duration::from_secs(60);

/// A server version, `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32);

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

impl Version {
    /// `"7.2.4"` (a missing part is 0; anything after a `-` is ignored).
    fn parse(text: &str) -> Option<Version> {
        let core = text.trim().split(['-', ' ']).next()?;
        let mut parts = core.split('.').map(str::parse::<u32>);
        let major = parts.next()?.ok()?;
        let minor = parts.next().unwrap_or(Ok(0)).ok()?;
        let patch = parts.next().unwrap_or(Ok(0)).ok()?;
        Some(Version(major, minor, patch))
    }
}

/// Which server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Product {
    /// Redis (or a server that reports itself only with `redis_version`).
    Redis,
    /// Valkey (`server_name:valkey`).
    Valkey,
}

impl std::fmt::Display for Product {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Product::Redis => "redis",
            Product::Valkey => "valkey",
        })
    }
}

/// A native command dlm uses instead of a script where the server has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Capability {
    /// `DELIFEQ key value`: a lock's release without Lua (Valkey 9.0+).
    CompareAndDelete,
    /// `SET key value IFEQ old PX ttl GET`: a lock's extend without Lua
    /// (Valkey 9.0+ here; Valkey 8.1 and Redis 8.4 have it too, untested).
    CompareAndSet,
}

impl Capability {
    /// Every capability, in [`Capability::bit`] order.
    pub const ALL: [Capability; 2] = [Capability::CompareAndDelete, Capability::CompareAndSet];

    fn bit(self) -> u8 {
        match self {
            Capability::CompareAndDelete => 1,
            Capability::CompareAndSet => 2,
        }
    }

    /// The command's name, as a log or a report shows it.
    pub fn command(self) -> &'static str {
        match self {
            Capability::CompareAndDelete => "DELIFEQ",
            Capability::CompareAndSet => "SET IFEQ",
        }
    }
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Capability::CompareAndDelete => "compare_and_delete",
            Capability::CompareAndSet => "compare_and_set",
        })
    }
}

/// What one server is, from its `INFO server`.
///
/// ```
/// # async fn demo(client: &dlm::Client) -> dlm::Result<()> {
/// for server in client.server_info().await? {
///     println!("{} {} native: {:?}", server.product, server.version, server.native());
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// Redis or Valkey.
    pub product: Product,
    /// The product's own version (Valkey's `valkey_version`, not the
    /// `redis_version` it also reports for compatibility).
    pub version: Version,
    /// The native commands dlm uses on it (see [`ServerInfo::native`]).
    caps: u8,
}

impl ServerInfo {
    /// Parse the text of `INFO server`; `None` when it names no version.
    pub(crate) fn parse(info: &str) -> Option<ServerInfo> {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let (product, version) = match (field("server_name"), field("valkey_version")) {
            (Some("valkey"), Some(v)) | (None, Some(v)) => (Product::Valkey, Version::parse(v)?),
            _ => (Product::Redis, Version::parse(field("redis_version")?)?),
        };
        let mut caps = 0;
        // Only what a test here runs (scripts/servers.sh: Valkey 9.1).
        if product == Product::Valkey && version >= Version(9, 0, 0) {
            caps |= Capability::CompareAndDelete.bit() | Capability::CompareAndSet.bit();
        }
        Some(ServerInfo {
            product,
            version,
            caps,
        })
    }

    /// Whether dlm runs `capability` natively on this server (before any
    /// refusal: see [`crate::Client::server_info`]).
    pub fn has(&self, capability: Capability) -> bool {
        self.caps & capability.bit() != 0
    }

    /// The native commands dlm uses on this server.
    pub fn native(&self) -> Vec<Capability> {
        Capability::ALL
            .into_iter()
            .filter(|c| self.has(*c))
            .collect()
    }

    /// The same server, with no native command in use.
    pub(crate) fn without_native(mut self) -> ServerInfo {
        self.caps = 0;
        self
    }

    /// `Some(reason)` when dlm cannot run on this server (older than
    /// [`MIN_REDIS`]).
    pub(crate) fn unsupported(&self) -> Option<String> {
        (self.product == Product::Redis && self.version < MIN_REDIS).then(|| {
            format!(
                "this server is Redis {}; dlm needs Redis {MIN_REDIS} or newer (or any Valkey)",
                self.version
            )
        })
    }
}

/// What a backend knows of its server's capabilities, shared by its clones.
#[derive(Debug, Default)]
pub(crate) struct Known {
    /// Bits of the capabilities the server has (as last learned).
    caps: AtomicU8,
    /// Bits of the capabilities the server refused (sticky).
    refused: AtomicU8,
    /// The user switched native commands off (`ClientBuilder::native_commands`).
    off: AtomicBool,
    /// A learn is in flight.
    learning: AtomicBool,
    /// When it was last learned (or a learn failed: a server that refuses
    /// `INFO` is asked again at the same pace, not at every call).
    tried_at: Mutex<Option<Instant>>,
}

impl Known {
    /// Whether to use `capability` now, and whether the server should be
    /// learned (never learned, or not for [`RELEARN_EVERY`]): the caller
    /// starts that in the background (claimed: no second learn starts).
    pub(crate) fn check(&self, capability: Capability) -> (bool, bool) {
        if self.off.load(Ordering::Relaxed) {
            return (false, false);
        }
        let bit = capability.bit();
        let usable = self.caps.load(Ordering::Relaxed) & bit != 0
            && self.refused.load(Ordering::Relaxed) & bit == 0;
        let stale = match self.tried_at.try_lock() {
            Ok(at) => at.is_none_or(|at| at.elapsed() >= RELEARN_EVERY),
            Err(_) => false,
        };
        let learn = stale && !self.learning.swap(true, Ordering::AcqRel);
        (usable, learn)
    }

    /// Record what a learn found (`None`: it failed; try again after
    /// [`RELEARN_EVERY`]).
    pub(crate) fn learned(&self, info: Option<&ServerInfo>) {
        if let Some(info) = info {
            self.caps.store(info.caps, Ordering::Relaxed);
        }
        if let Ok(mut at) = self.tried_at.lock() {
            *at = Some(Instant::now());
        }
        self.learning.store(false, Ordering::Release);
    }

    /// The server refused `capability`'s command: scripts from now on, with
    /// one warning per backend and capability.
    pub(crate) fn refused(&self, capability: Capability, why: &str) {
        let bit = capability.bit();
        if self.refused.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
            tracing::warn!(
                command = capability.command(),
                error = why,
                "the server refused a native command (renamed or disabled by a proxy or a managed \
                 service, or not allowed to this user: add dlm::keys::ACL_RULES_NATIVE); dlm uses \
                 its script instead from now on"
            );
        }
    }

    /// `info` as this backend uses it: without the capabilities the server
    /// refused, or all of them when native commands are off.
    pub(crate) fn in_use(&self, mut info: ServerInfo) -> ServerInfo {
        if self.off.load(Ordering::Relaxed) {
            info.caps = 0;
        }
        info.caps &= !self.refused.load(Ordering::Relaxed);
        info
    }

    /// Native commands off (or on again) for this backend.
    pub(crate) fn set_off(&self, off: bool) {
        self.off.store(off, Ordering::Relaxed);
    }
}

/// Whether a server error means the command is not there for us: unknown
/// (an older server, or renamed or disabled by a proxy or a managed
/// service) or denied to this user (`NOPERM ... permissions to run`; a
/// `NOPERM` on a key is the key's, and the script meets it too).
pub(crate) fn refuses_command(e: &redis::ServerError) -> bool {
    let details = e.details().unwrap_or_default().to_ascii_lowercase();
    match e.kind() {
        Some(redis::ServerErrorKind::NoPerm) => details.contains("permissions to run"),
        _ => details.starts_with("unknown command"),
    }
}

/// Whether an option of a command was refused as one the server lacks (an
/// older server answers a syntax error: `SET ... IFEQ` before Valkey 8.1),
/// or the command itself (see [`refuses_command`]).
pub(crate) fn refuses_option(e: &redis::ServerError) -> bool {
    refuses_command(e)
        || e.details()
            .is_some_and(|d| d.to_ascii_lowercase().starts_with("syntax error"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALKEY9: &str = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n\
                           valkey_version:9.1.2\r\nvalkey_release_stage:ga\r\n";

    #[test]
    fn valkey_reports_its_own_version_and_native_commands() {
        let info = ServerInfo::parse(VALKEY9).expect("parsed");
        assert_eq!(info.product, Product::Valkey);
        assert_eq!(info.version, Version(9, 1, 2));
        assert_eq!(
            info.native(),
            vec![Capability::CompareAndDelete, Capability::CompareAndSet]
        );
        assert_eq!(info.unsupported(), None);
    }

    #[test]
    fn redis_gets_no_native_command_untested_here() {
        for v in ["7.0.15", "8.2.3", "8.4.0"] {
            let info =
                ServerInfo::parse(&format!("# Server\r\nredis_version:{v}\r\n")).expect("parsed");
            assert_eq!(info.product, Product::Redis);
            assert!(info.native().is_empty(), "{v}");
        }
        let old_valkey = "server_name:valkey\r\nvalkey_version:8.1.1\r\nredis_version:7.2.4\r\n";
        assert!(
            ServerInfo::parse(old_valkey)
                .expect("parsed")
                .native()
                .is_empty()
        );
    }

    #[test]
    fn servers_older_than_the_minimum_are_named() {
        let old = ServerInfo::parse("redis_version:6.0.16\r\n").expect("parsed");
        let why = old.unsupported().expect("refused");
        assert!(why.contains("6.0.16") && why.contains("6.2.0"), "{why}");
        assert!(
            ServerInfo::parse("redis_version:6.2.14\r\n")
                .expect("parsed")
                .unsupported()
                .is_none()
        );
        assert_eq!(Version::parse("7.2.4-rc1"), Some(Version(7, 2, 4)));
        assert_eq!(Version::parse("8"), Some(Version(8, 0, 0)));
        assert_eq!(ServerInfo::parse("# Server\r\n"), None);
    }

    #[test]
    fn a_refusal_is_sticky_and_learning_is_claimed_once() {
        let known = Known::default();
        assert_eq!(known.check(Capability::CompareAndDelete), (false, true));
        assert_eq!(
            known.check(Capability::CompareAndDelete),
            (false, false),
            "one learn at a time"
        );
        known.learned(ServerInfo::parse(VALKEY9).as_ref());
        assert_eq!(known.check(Capability::CompareAndDelete), (true, false));
        known.refused(Capability::CompareAndDelete, "unknown command");
        assert_eq!(known.check(Capability::CompareAndDelete), (false, false));
        assert_eq!(known.check(Capability::CompareAndSet), (true, false));
        known.set_off(true);
        assert_eq!(known.check(Capability::CompareAndSet), (false, false));
    }
}

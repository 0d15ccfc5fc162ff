//! Throwaway `redis-server` processes for tests, benchmarks and the demo.
//!
//! Each [`RedisServer`] runs in its own temporary directory on a free loopback
//! port, with persistence off unless asked for. It is killed and reaped when
//! dropped, also when a test panics, and only that process (by pid) is touched.
//!
//! ```no_run
//! let server = dlm_testkit::RedisServer::start()?;
//! println!("redis at {}", server.url());
//! # Ok::<(), dlm_testkit::Error>(())
//! ```
//!
//! Beyond single servers it starts the topologies a client has to handle, all
//! on free loopback ports in temporary directories and stopped when dropped:
//!
//! * [`Cluster`]: a Redis Cluster of 3 masters and 3 replicas, with
//!   [`key_slot`] to find which node serves a key and [`Cluster::failover`];
//! * [`Replicated`]: a master with N replicas, without Sentinel;
//! * [`Sentinels`]: a master, a replica and 3 sentinels, with
//!   [`Sentinels::kill_master`] and [`Sentinels::wait_for_failover`];
//! * TLS servers ([`ServerBuilder::tls`]), clusters ([`ClusterBuilder::tls`])
//!   and Sentinel setups ([`SentinelsBuilder::tls`]) with certificates from
//!   [`TlsFiles`];
//! * ACL users ([`ServerBuilder::acl_user`], [`RedisServer::url_as`]).
//!
//! The server binary is `redis-server` from the PATH, or the one
//! `DLM_REDIS_SERVER` names: any Redis from 6.2 on, or a `valkey-server`.
//! [`server_binary`] says what it is and what it can do; a test that needs
//! what a binary lacks (e.g. TLS) returns early with [`skip_without`].
//!
//! [`FaultProxy`] sits between a client and one server and injects network
//! faults (latency, bandwidth limits, blackholes, lost replies, resets,
//! refused connections, partitions) while traffic flows, deterministically
//! from a seed.
//!
//! [`layers`] checks that a crate's modules import only downwards, for a
//! test that keeps a crate's module structure free of import cycles.

mod binary;
mod cluster;
pub mod history;
pub mod layers;
pub mod linearizable;
mod proxy;
mod replicated;
mod resp;
mod sentinel;
mod tls;

pub use binary::{
    CLI_ENV, Feature, Product, SERVER_ENV, SKIPS_ENV, ServerBinary, server_binary, skip,
    skip_without,
};
pub use cluster::{Cluster, ClusterBuilder, key_slot};
pub use proxy::{ConnId, Direction, FaultProxy, Faults, LinkFaults, Stats};
pub use replicated::Replicated;
pub use sentinel::{Sentinels, SentinelsBuilder};
pub use tls::TlsFiles;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use resp::{Conn, Reply};

/// What can go wrong while starting or controlling a throwaway server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `redis-server` is not installed (or `DLM_REDIS_SERVER` points nowhere).
    #[error(
        "cannot run `{binary}`: {source}; install it (Debian/Ubuntu: `apt-get install -y redis-server`) or set DLM_REDIS_SERVER"
    )]
    NotInstalled {
        /// The program that was tried.
        binary: String,
        /// Why it could not be started.
        source: std::io::Error,
    },
    /// The server started but did not answer PING in time.
    #[error("redis-server on port {port} did not become ready: {reason}")]
    NotReady {
        /// The port it was started on.
        port: u16,
        /// What was seen instead (its log tail when it exited).
        reason: String,
    },
    /// A local I/O error (temp dir, free port, signals).
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// A server or `redis-cli` refused a setup step or answered unexpectedly.
    #[error("{context}: {reason}")]
    Command {
        /// The step that failed, e.g. `ACL SETUSER app on port 41234`.
        context: String,
        /// The reply or output that was seen.
        reason: String,
    },
    /// A topology did not reach the wanted state in time.
    #[error("timed out after {waited:?} waiting for {what}; last seen: {last}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// How long.
        waited: Duration,
        /// Why the last check failed.
        last: String,
    },
    /// Generating certificates or setting up the TLS client failed.
    #[error("tls setup failed: {0}")]
    Tls(String),
}

/// Options for a throwaway server; start it with [`ServerBuilder::start`].
///
/// ```no_run
/// let server = dlm_testkit::RedisServer::builder()
///     .password("s3cret")
///     .acl_user("app", "apppw", "~dlm:* +@all")
///     .arg("--maxmemory")
///     .arg("10mb")
///     .start()?;
/// println!("{} or {}", server.url(), server.url_as("app", "apppw"));
/// # Ok::<(), dlm_testkit::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct ServerBuilder {
    /// The server binary (default: `DLM_REDIS_SERVER`, else `redis-server`).
    binary: Option<String>,
    aof: bool,
    password: Option<String>,
    extra_args: Vec<String>,
    tls: Option<TlsOptions>,
    acl_users: Vec<AclUser>,
    mode: Mode,
}

#[derive(Debug, Clone)]
struct TlsOptions {
    files: TlsFiles,
    require_client_cert: bool,
}

#[derive(Debug, Clone)]
struct AclUser {
    name: String,
    password: String,
    rules: String,
}

/// What kind of process [`RedisServer::spawn`] starts.
#[derive(Debug, Clone, Default)]
enum Mode {
    #[default]
    Plain,
    /// `--cluster-enabled yes` with its bus on a second free port.
    ClusterNode,
    /// `redis-server sentinel.conf --sentinel`, the config holding these
    /// lines after the generated `port` (or TLS options), `dir` and `logfile`.
    Sentinel { config: Vec<String> },
}

impl ServerBuilder {
    /// Run this server binary (a path, or a name on `PATH`) instead of
    /// `DLM_REDIS_SERVER`'s (default `redis-server`): e.g. a Valkey beside
    /// Redis in one test.
    pub fn binary(mut self, path: impl Into<String>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Turn on the append-only file (`appendfsync always`), so a restart keeps the data.
    pub fn aof(mut self, on: bool) -> Self {
        self.aof = on;
        self
    }

    /// Require this password (`requirepass`); [`RedisServer::url`] includes it.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Pass an extra argument to `redis-server` (e.g. `"--maxmemory"`, `"10mb"`).
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    /// Serve TLS only (`--port 0 --tls-port P`) with `files`' server
    /// certificate, trusting its CA; with `require_client_cert` clients must
    /// present a certificate that CA signed (`--tls-auth-clients yes`).
    ///
    /// [`RedisServer::url`] then starts with `rediss://`, and
    /// [`RedisServer::command`] speaks TLS. A client of this server must trust
    /// [`TlsFiles::ca_cert`] and, when `require_client_cert`, present
    /// [`TlsFiles::client_cert`] and [`TlsFiles::client_key`].
    ///
    /// ```no_run
    /// let tls = dlm_testkit::TlsFiles::generate()?;
    /// let server = dlm_testkit::RedisServer::builder().tls(&tls, false).start()?;
    /// assert_eq!(server.command(&["PING"])?, "+PONG");
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn tls(mut self, files: &TlsFiles, require_client_cert: bool) -> Self {
        self.tls = Some(TlsOptions {
            files: files.clone(),
            require_client_cert,
        });
        self
    }

    /// Add an ACL user once the server is up (and again after a restart):
    /// `ACL SETUSER name on >password RULES`, `rules` being space-separated
    /// ACL rules such as `"~dlm:* +get +set"`. The default user stays as it is
    /// (open, or guarded by [`ServerBuilder::password`]). Connect as the user
    /// with [`RedisServer::url_as`].
    ///
    /// ```no_run
    /// let server = dlm_testkit::RedisServer::builder()
    ///     .acl_user("app", "apppw", "~dlm:* +get +set")
    ///     .start()?;
    /// let url = server.url_as("app", "apppw");
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn acl_user(
        mut self,
        name: impl Into<String>,
        password: impl Into<String>,
        rules: &str,
    ) -> Self {
        self.acl_users.push(AclUser {
            name: name.into(),
            password: password.into(),
            rules: rules.to_string(),
        });
        self
    }

    /// Start as a Redis Cluster node, its cluster bus on a second free port.
    pub(crate) fn cluster_node(mut self) -> Self {
        self.mode = Mode::ClusterNode;
        self
    }

    /// Start as a sentinel whose config holds `config` (e.g. `sentinel monitor ..`).
    pub(crate) fn sentinel(mut self, config: Vec<String>) -> Self {
        self.mode = Mode::Sentinel { config };
        self
    }

    /// Start the server on a free port and wait until it answers PING.
    pub fn start(self) -> Result<RedisServer, Error> {
        let mut last_err = None;
        // A free port found by binding port 0 can be taken by someone else before
        // redis-server binds it; try a few ports before giving up.
        for _ in 0..5 {
            let dir = tempfile::Builder::new().prefix("dlm-redis-").tempdir()?;
            let ports = if matches!(self.mode, Mode::ClusterNode) {
                cluster_ports()?
            } else {
                free_ports(1)?
            };
            let mut server = RedisServer {
                child: None,
                port: ports[0],
                bus_port: ports.get(1).copied(),
                dir,
                opts: self.clone(),
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                // Not a port race: trying other ports would not help.
                Err(e @ (Error::NotInstalled { .. } | Error::Command { .. })) => return Err(e),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or(Error::NotReady {
            port: 0,
            reason: "no attempt made".into(),
        }))
    }
}

/// A `redis-server` child process on `127.0.0.1`, stopped when dropped.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    bus_port: Option<u16>,
    dir: tempfile::TempDir,
    opts: ServerBuilder,
}

impl RedisServer {
    /// Start a server with default options (no persistence, no password).
    pub fn start() -> Result<Self, Error> {
        ServerBuilder::default().start()
    }

    /// Options for a server: AOF, password, TLS, ACL users, extra arguments.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// Start `n` independent servers (e.g. the masters of a Redlock).
    pub fn start_many(n: usize) -> Result<Vec<Self>, Error> {
        (0..n).map(|_| Self::start()).collect()
    }

    /// The port it listens on (the TLS port of a TLS server).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://[:password@]127.0.0.1:PORT/`, or `rediss://..` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = self.scheme();
        match &self.opts.password {
            Some(p) => format!("{scheme}://:{p}@127.0.0.1:{}/", self.port),
            None => format!("{scheme}://127.0.0.1:{}/", self.port),
        }
    }

    /// `redis://user:password@127.0.0.1:PORT/` (or `rediss://..`), to connect
    /// as an ACL user (see [`ServerBuilder::acl_user`]). Nothing is
    /// percent-encoded: use plain names and passwords.
    ///
    /// ```no_run
    /// let server = dlm_testkit::RedisServer::builder()
    ///     .acl_user("app", "apppw", "~dlm:* +@all")
    ///     .start()?;
    /// assert!(server.url_as("app", "apppw").starts_with("redis://app:apppw@127.0.0.1:"));
    /// # Ok::<(), dlm_testkit::Error>(())
    /// ```
    pub fn url_as(&self, user: &str, password: &str) -> String {
        format!(
            "{}://{user}:{password}@127.0.0.1:{}/",
            self.scheme(),
            self.port
        )
    }

    /// Does it serve TLS only ([`ServerBuilder::tls`])?
    pub fn is_tls(&self) -> bool {
        self.opts.tls.is_some()
    }

    fn scheme(&self) -> &'static str {
        if self.is_tls() { "rediss" } else { "redis" }
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Is the process running (not stopped with [`RedisServer::kill`])?
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kill the process with SIGKILL (a crash: nothing is saved) and reap it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start it again on the same port and directory. Without AOF it comes back
    /// empty; with AOF it reloads what was written.
    pub fn restart(&mut self) -> Result<(), Error> {
        self.kill();
        self.spawn()
    }

    /// Freeze the process (SIGSTOP): it keeps its port but answers nothing.
    pub fn pause(&self) -> Result<(), Error> {
        self.signal(libc::SIGSTOP)
    }

    /// Thaw a process frozen with [`RedisServer::pause`] (SIGCONT).
    pub fn resume(&self) -> Result<(), Error> {
        self.signal(libc::SIGCONT)
    }

    /// Send a command with raw RESP over a fresh connection (TLS for a TLS
    /// server, authenticated with the password if one is set) and return the
    /// first reply line (e.g. `"+OK"`, `"-ERR .."`, `":1"`, `"*3"`), or the
    /// contents of a bulk string (`""` for nil). Handy in tests that must not
    /// depend on the client library under test.
    pub fn command(&self, args: &[&str]) -> Result<String, Error> {
        Ok(self.query(args)?.into_line())
    }

    /// Like [`RedisServer::command`], with the whole reply.
    pub(crate) fn query(&self, args: &[&str]) -> Result<Reply, Error> {
        let tls = self.opts.tls.as_ref().map(|t| t.files.client_config());
        let mut conn = Conn::connect(self.port, tls, Duration::from_secs(5))?;
        if let Some(p) = &self.opts.password {
            conn.call(&["AUTH", p])?;
        }
        Ok(conn.call(args)?)
    }

    /// The value of `field` in `INFO section` (e.g. `role` in `replication`).
    pub(crate) fn info_field(&self, section: &str, field: &str) -> Result<String, Error> {
        let info = self.command(&["INFO", section])?;
        Ok(info
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .unwrap_or_default()
            .trim()
            .to_string())
    }

    /// The directory the server runs in (its log is `redis.log` there).
    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    #[allow(unsafe_code)]
    fn signal(&self, sig: libc::c_int) -> Result<(), Error> {
        let Some(child) = &self.child else {
            return Ok(());
        };
        let pid = libc::pid_t::try_from(child.id()).map_err(std::io::Error::other)?;
        // SAFETY: kill(2) with the pid of a child we own and have not reaped.
        let rc = unsafe { libc::kill(pid, sig) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(())
    }

    fn spawn(&mut self) -> Result<(), Error> {
        let binary = self.opts.binary.clone().unwrap_or_else(binary::server_path);
        let dir = self.dir.path().to_string_lossy().into_owned();
        let log = self.dir.path().join("redis.log");
        let mut cmd = Command::new(&binary);
        cmd.current_dir(self.dir.path());
        if let Mode::Sentinel { config } = &self.opts.mode {
            // A sentinel needs a writable config file, which it rewrites with
            // what it learns; a restart keeps the rewritten one.
            let path = self.dir.path().join("sentinel.conf");
            if !path.exists() {
                let listen = match &self.opts.tls {
                    // TLS only: `port 0`, `tls-port P`, and `tls-replication
                    // yes` so it reaches the data nodes over TLS too.
                    Some(t) => t.files.config_lines(self.port, t.require_client_cert),
                    None => vec![format!("port {}", self.port)],
                };
                let mut text = listen.join("\n");
                text.push_str(&format!(
                    "\nbind 127.0.0.1\ndaemonize no\ndir \"{dir}\"\nlogfile \"{}\"\n",
                    log.to_string_lossy()
                ));
                for line in config {
                    text.push_str(line);
                    text.push('\n');
                }
                std::fs::write(&path, text)?;
            }
            cmd.arg(&path).arg("--sentinel");
        } else {
            match &self.opts.tls {
                Some(t) => cmd.args(t.files.server_args(self.port, t.require_client_cert)),
                None => cmd.args(["--port", &self.port.to_string()]),
            };
            cmd.args(["--bind", "127.0.0.1"])
                .args(["--save", ""])
                .args(["--daemonize", "no"])
                .args(["--logfile", &log.to_string_lossy()])
                .args(["--dir", &dir]);
            if self.opts.aof {
                cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
            } else {
                cmd.args(["--appendonly", "no"]);
            }
            if let Some(p) = &self.opts.password {
                cmd.args(["--requirepass", p]);
            }
            if let Some(bus) = self.bus_port {
                cmd.args(["--cluster-enabled", "yes"])
                    .args(["--cluster-config-file", "nodes.conf"]);
                // Else the bus is on port + 10000, which cluster_ports() chose free.
                if server_binary()?.has_cluster_port_option() {
                    cmd.args(["--cluster-port", &bus.to_string()]);
                }
                if self.opts.tls.is_some() {
                    cmd.args(["--tls-cluster", "yes"]);
                }
            }
            cmd.args(&self.opts.extra_args);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().map_err(|source| Error::NotInstalled {
            binary: binary.clone(),
            source,
        })?;
        self.child = Some(child);
        self.wait_ready()?;
        self.add_acl_users()
    }

    fn add_acl_users(&mut self) -> Result<(), Error> {
        for user in &self.opts.acl_users {
            let pass = format!(">{}", user.password);
            let mut args = vec!["ACL", "SETUSER", &user.name, "on", &pass];
            args.extend(user.rules.split_whitespace());
            let reply = self.command(&args)?;
            if reply != "+OK" {
                return Err(Error::Command {
                    context: format!("ACL SETUSER {} on port {}", user.name, self.port),
                    reason: reply,
                });
            }
        }
        Ok(())
    }

    /// The last lines of its log, for error messages.
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default();
        let mut tail: Vec<&str> = log.lines().rev().take(lines).collect();
        tail.reverse();
        tail.join(" | ")
    }

    fn wait_ready(&mut self) -> Result<(), Error> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Err(Error::NotReady {
                    port: self.port,
                    reason: format!("exited with {status}: {}", self.log_tail(5)),
                });
            }
            if self.ping_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.kill();
                return Err(Error::NotReady {
                    port: self.port,
                    reason: "no PONG within 10s".into(),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn ping_ok(&self) -> bool {
        self.command(&["PING"])
            .map(|r| r == "+PONG")
            .unwrap_or(false)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // A frozen process ignores nothing but SIGKILL, which is what kill() sends.
        self.kill();
    }
}

/// `n` distinct free loopback ports (all bound at once, then released).
fn free_ports(n: usize) -> Result<Vec<u16>, Error> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

/// A free port for a cluster node and one for its bus: any free one where
/// the binary takes `--cluster-port`, else port + 10000, which it then uses.
fn cluster_ports() -> Result<Vec<u16>, Error> {
    if server_binary()?.has_cluster_port_option() {
        return free_ports(2);
    }
    const BUS_OFFSET: u16 = 10000;
    for _ in 0..100 {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let Some(bus) = port.checked_add(BUS_OFFSET) else {
            continue;
        };
        if TcpListener::bind(("127.0.0.1", bus)).is_ok() {
            return Ok(vec![port, bus]);
        }
    }
    Err(Error::Io(std::io::Error::other(
        "no free port P with P + 10000 free too (a cluster node's bus)",
    )))
}

/// Poll `check` every `every` until it passes or `timeout` runs out; the
/// error then carries `what` and the last failure.
pub(crate) fn wait_until<T>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> Result<T, Error> {
    let start = Instant::now();
    loop {
        match check() {
            Ok(v) => return Ok(v),
            Err(last) if start.elapsed() >= timeout => {
                return Err(Error::Timeout {
                    what: what.to_string(),
                    waited: start.elapsed(),
                    last,
                });
            }
            Err(_) => std::thread::sleep(every),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use resp::write_command;
    use std::io::Read;
    use std::net::TcpStream;

    #[test]
    fn starts_answers_and_stops() -> Result<(), Error> {
        let mut server = RedisServer::start()?;
        assert_eq!(server.command(&["SET", "k", "v"])?, "+OK");
        assert_eq!(server.command(&["GET", "k"])?, "v");
        let port = server.port();
        server.kill();
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
        Ok(())
    }

    #[test]
    fn restart_without_aof_comes_back_empty_and_with_aof_keeps_data() -> Result<(), Error> {
        let mut plain = RedisServer::start()?;
        plain.command(&["SET", "k", "v"])?;
        plain.restart()?;
        assert_eq!(plain.command(&["GET", "k"])?, "");

        let mut durable = RedisServer::builder().aof(true).start()?;
        durable.command(&["SET", "k", "v"])?;
        durable.restart()?;
        assert_eq!(durable.command(&["GET", "k"])?, "v");
        Ok(())
    }

    #[test]
    fn password_is_required_and_in_url() -> Result<(), Error> {
        let server = RedisServer::builder().password("s3cret").start()?;
        assert!(server.url().contains(":s3cret@"));
        assert_eq!(server.command(&["PING"])?, "+PONG");
        Ok(())
    }

    #[test]
    fn acl_user_is_held_to_its_rules() -> Result<(), Error> {
        let mut server = RedisServer::builder()
            .acl_user("app", "apppw", "~dlm:* +get +set")
            .start()?;
        let port = server.port();
        assert_eq!(
            server.url_as("app", "apppw"),
            format!("redis://app:apppw@127.0.0.1:{port}/")
        );
        let as_app = |server: &RedisServer| -> Result<(), Error> {
            let mut conn = Conn::connect(server.port(), None, Duration::from_secs(5))?;
            assert_eq!(
                conn.call(&["AUTH", "app", "apppw"])?,
                Reply::Status("OK".into())
            );
            assert_eq!(
                conn.call(&["SET", "dlm:x", "1"])?,
                Reply::Status("OK".into())
            );
            assert_eq!(
                conn.call(&["GET", "dlm:x"])?,
                Reply::Bulk(Some(b"1".to_vec()))
            );
            let refused = conn.call(&["SET", "other", "1"])?.into_line();
            assert!(refused.starts_with("-NOPERM"), "{refused}");
            let refused = conn.call(&["DEL", "dlm:x"])?.into_line();
            assert!(refused.starts_with("-NOPERM"), "{refused}");
            Ok(())
        };
        as_app(&server)?;
        // The default user is left as it was: open.
        assert_eq!(server.command(&["SET", "other", "1"])?, "+OK");
        let mut conn = Conn::connect(port, None, Duration::from_secs(5))?;
        let wrong = conn.call(&["AUTH", "app", "nope"])?.into_line();
        assert!(wrong.starts_with("-WRONGPASS"), "{wrong}");
        // A restart adds the user again.
        server.restart()?;
        as_app(&server)
    }

    #[test]
    fn acl_user_next_to_a_password() -> Result<(), Error> {
        let server = RedisServer::builder()
            .password("s3cret")
            .acl_user("app", "apppw", "~* +@all")
            .start()?;
        assert_eq!(server.command(&["ACL", "WHOAMI"])?, "default");
        let mut conn = Conn::connect(server.port(), None, Duration::from_secs(5))?;
        assert_eq!(
            conn.call(&["AUTH", "app", "apppw"])?,
            Reply::Status("OK".into())
        );
        assert_eq!(
            conn.call(&["ACL", "WHOAMI"])?,
            Reply::Bulk(Some(b"app".to_vec()))
        );
        Ok(())
    }

    #[test]
    fn paused_server_answers_nothing_until_resumed() -> Result<(), Error> {
        let server = RedisServer::start()?;
        server.pause()?;
        let mut s = TcpStream::connect(("127.0.0.1", server.port()))?;
        s.set_read_timeout(Some(Duration::from_millis(200)))?;
        write_command(&mut s, &["PING"])?;
        let mut buf = [0u8; 8];
        assert!(s.read(&mut buf).is_err());
        server.resume()?;
        assert_eq!(server.command(&["PING"])?, "+PONG");
        Ok(())
    }
}

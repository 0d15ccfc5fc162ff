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
//! [`layers`] checks that a crate's modules import only downwards, for a
//! test that keeps a crate's module structure free of import cycles.

pub mod layers;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
}

/// Options for a throwaway server; start it with [`ServerBuilder::start`].
#[derive(Debug, Clone, Default)]
pub struct ServerBuilder {
    aof: bool,
    password: Option<String>,
    extra_args: Vec<String>,
}

impl ServerBuilder {
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

    /// Start the server on a free port and wait until it answers PING.
    pub fn start(self) -> Result<RedisServer, Error> {
        let mut last_err = None;
        // A free port found by binding port 0 can be taken by someone else before
        // redis-server binds it; try a few ports before giving up.
        for _ in 0..5 {
            let dir = tempfile::Builder::new().prefix("dlm-redis-").tempdir()?;
            let port = free_port()?;
            let mut server = RedisServer {
                child: None,
                port,
                dir,
                opts: self.clone(),
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e @ Error::NotInstalled { .. }) => return Err(e),
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
    dir: tempfile::TempDir,
    opts: ServerBuilder,
}

impl RedisServer {
    /// Start a server with default options (no persistence, no password).
    pub fn start() -> Result<Self, Error> {
        ServerBuilder::default().start()
    }

    /// Options for a server: AOF, password, extra arguments.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// Start `n` independent servers (e.g. the masters of a Redlock).
    pub fn start_many(n: usize) -> Result<Vec<Self>, Error> {
        (0..n).map(|_| Self::start()).collect()
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://[:password@]127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        match &self.opts.password {
            Some(p) => format!("redis://:{p}@127.0.0.1:{}/", self.port),
            None => format!("redis://127.0.0.1:{}/", self.port),
        }
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

    /// Send a command with raw RESP over a fresh TCP connection and return the
    /// first reply line (e.g. `"+OK"`). Handy in tests that must not depend on
    /// the client library under test.
    pub fn command(&self, args: &[&str]) -> Result<String, Error> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        if let Some(p) = &self.opts.password {
            write_command(&mut stream, &["AUTH", p])?;
            read_line(&mut stream)?;
        }
        write_command(&mut stream, args)?;
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line)?;
        if let Some(len) = line.strip_prefix('$') {
            let len: i64 = len.trim().parse().unwrap_or(-1);
            if len < 0 {
                return Ok(String::new());
            }
            let mut body = vec![0u8; len as usize + 2];
            reader.read_exact(&mut body)?;
            body.truncate(len as usize);
            return Ok(String::from_utf8_lossy(&body).into_owned());
        }
        Ok(line.trim_end().to_string())
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
        let binary = std::env::var("DLM_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let log = self.dir.path().join("redis.log");
        let mut cmd = Command::new(&binary);
        cmd.current_dir(self.dir.path())
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--daemonize", "no"])
            .args(["--logfile", &log.to_string_lossy()])
            .args(["--dir", &self.dir.path().to_string_lossy()]);
        if self.opts.aof {
            cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            cmd.args(["--appendonly", "no"]);
        }
        if let Some(p) = &self.opts.password {
            cmd.args(["--requirepass", p]);
        }
        cmd.args(&self.opts.extra_args);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().map_err(|source| Error::NotInstalled {
            binary: binary.clone(),
            source,
        })?;
        self.child = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> Result<(), Error> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                let log =
                    std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                return Err(Error::NotReady {
                    port: self.port,
                    reason: format!("exited with {status}: {}", tail.join(" | ")),
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

fn free_port() -> Result<u16, Error> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

fn write_command(stream: &mut TcpStream, args: &[&str]) -> std::io::Result<()> {
    let mut buf = format!("*{}\r\n", args.len());
    for a in args {
        buf.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    stream.write_all(buf.as_bytes())
}

fn read_line(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut out = Vec::new();
    let mut byte = [0u8; 1];
    while stream.read(&mut byte)? == 1 {
        out.push(byte[0]);
        if out.ends_with(b"\r\n") {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

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

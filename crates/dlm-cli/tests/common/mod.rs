//! Shared helpers for the CLI tests: run the `dlm` binary with a deadline,
//! its output going to files (so a stray grandchild holding a pipe open
//! cannot make a test hang), against a throwaway redis-server.
#![allow(dead_code, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use dlm_testkit::RedisServer;

pub type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// The binary under test.
pub const DLM: &str = env!("CARGO_BIN_EXE_dlm");

pub fn server() -> RedisServer {
    RedisServer::start().expect("start redis-server (apt-get install -y redis-server)")
}

/// The lock key of `name` under the default prefix.
pub fn key(name: &str) -> String {
    format!("dlm:lock:{{{name}}}")
}

/// A `dlm` command with a clean environment (no DLM_REDIS_URL, no DLM_LOG).
pub fn dlm() -> Command {
    let mut cmd = Command::new(DLM);
    cmd.env_remove("DLM_REDIS_URL")
        .env_remove("DLM_LOG")
        .stdin(Stdio::null());
    cmd
}

/// What a finished `dlm` run left.
#[derive(Debug)]
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Run {
    pub fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }
}

/// A temporary directory, removed when dropped.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh empty directory under the system temp dir.
pub fn tempdir() -> std::io::Result<TempDir> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!("dlm-cli-test-{}-{n}-{nanos}", std::process::id()));
    std::fs::create_dir(&dir)?;
    Ok(TempDir(dir))
}

/// A started `dlm` whose output goes to files in its own temp dir.
pub struct Running {
    pub child: Child,
    dir: TempDir,
    started: Instant,
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait up to `limit` for it to exit (kill it and panic otherwise).
    pub fn finish(mut self, limit: Duration) -> Run {
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                break s;
            }
            if self.started.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "dlm did not exit within {limit:?}; stderr: {}",
                    read(&self.dir.path().join("stderr"))
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        Run {
            status,
            stdout: read(&self.dir.path().join("stdout")),
            stderr: read(&self.dir.path().join("stderr")),
            elapsed: self.started.elapsed(),
        }
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// Start `cmd` with stdout and stderr going to files.
pub fn start(mut cmd: Command) -> Running {
    let dir = tempdir().expect("tempdir");
    let out = std::fs::File::create(dir.path().join("stdout")).expect("stdout file");
    let err = std::fs::File::create(dir.path().join("stderr")).expect("stderr file");
    let started = Instant::now();
    let child = cmd
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .expect("spawn dlm");
    Running {
        child,
        dir,
        started,
    }
}

/// Run `dlm ARGS` to completion (at most 30 s).
pub fn run(args: &[&str]) -> Run {
    let mut cmd = dlm();
    cmd.args(args);
    start(cmd).finish(Duration::from_secs(30))
}

/// Run `dlm --redis URL ARGS` to completion.
pub fn run_on(server: &RedisServer, args: &[&str]) -> Run {
    let url = server.url();
    let mut all = vec!["--redis", url.as_str()];
    all.extend_from_slice(args);
    run(&all)
}

/// Wait until `path` exists (a child announcing itself), at most `limit`.
pub fn wait_for_file(path: &Path, limit: Duration) -> String {
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && s.ends_with('\n')
        {
            return s.trim().to_string();
        }
        assert!(
            start.elapsed() < limit,
            "{} did not appear within {limit:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Is process `pid` still there (zombies count as gone)?
pub fn alive(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Send a signal to a process we started, by pid, with kill(1).
pub fn signal(pid: &str, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), pid])
        .stderr(Stdio::null())
        .status();
}

/// A path in `dir`.
pub fn path_in(dir: &TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

/// `dlm --json lock status NAME` parsed.
pub fn status_json(server: &RedisServer, name: &str) -> serde_json::Value {
    let r = run_on(server, &["--json", "lock", "status", name]);
    assert_eq!(r.code(), 0, "status failed: {}", r.stderr);
    serde_json::from_str(r.stdout.trim()).expect("status prints JSON")
}

/// `dlm --json queue stats QUEUE` parsed.
pub fn queue_stats(server: &RedisServer, queue: &str) -> serde_json::Value {
    let r = run_on(server, &["--json", "queue", "stats", queue]);
    assert_eq!(r.code(), 0, "queue stats failed: {}", r.stderr);
    serde_json::from_str(r.stdout.trim()).expect("stats prints JSON")
}

/// Every stdout line of `r` parsed as JSON.
pub fn json_lines(r: &Run) -> Vec<serde_json::Value> {
    r.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect()
}

//! The subprocesses the soak starts (`dlm` clients and workers): a registry
//! by pid, so that faults stop and kill only them, and clean-up reaps them
//! all; and the optional libfaketime clock they run on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::rng::SplitMix;

/// libfaketime (Debian's `faketime` package).
pub const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// The live subprocesses by pid, with their role.
#[derive(Debug)]
pub struct Procs {
    live: Mutex<BTreeMap<u32, &'static str>>,
    exe: PathBuf,
    /// The file libfaketime reads the subprocesses' wall-clock offset from.
    offset_file: Option<PathBuf>,
}

impl Procs {
    /// A registry whose subprocesses run `exe`; with `offset_file`, under
    /// libfaketime reading the offset from that file.
    pub fn new(exe: PathBuf, offset_file: Option<PathBuf>) -> Self {
        Procs {
            live: Mutex::new(BTreeMap::new()),
            exe,
            offset_file,
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, &'static str>> {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A `dlm` command (killed when dropped), under libfaketime if on.
    pub fn dlm(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.exe);
        cmd.kill_on_drop(true)
            .stdin(std::process::Stdio::null())
            .env_remove("DLM_REDIS_URL")
            .env_remove("DLM_CLUSTER")
            .env_remove("DLM_SENTINEL");
        if let Some(file) = &self.offset_file {
            cmd.env("LD_PRELOAD", FAKETIME)
                .env("FAKETIME_TIMESTAMP_FILE", file)
                .env("FAKETIME_NO_CACHE", "1")
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        cmd
    }

    /// Set the subprocesses' wall-clock offset (e.g. `+2h`, `-3h`, `+0`).
    pub fn jump(&self, offset: &str) -> bool {
        match &self.offset_file {
            Some(f) => std::fs::write(f, offset).is_ok(),
            None => false,
        }
    }

    /// `pid` was started.
    pub fn started(&self, pid: Option<u32>, role: &'static str) {
        if let Some(pid) = pid {
            self.live().insert(pid, role);
        }
    }

    /// `pid` was reaped.
    pub fn ended(&self, pid: Option<u32>) {
        if let Some(pid) = pid {
            self.live().remove(&pid);
        }
    }

    /// A live subprocess chosen by `rng`.
    pub fn pick(&self, rng: &mut SplitMix) -> Option<(u32, &'static str)> {
        let live = self.live();
        if live.is_empty() {
            return None;
        }
        let i = rng.next() as usize % live.len();
        live.iter().nth(i).map(|(p, r)| (*p, *r))
    }

    /// Send `sig` to `pid` if it is one of ours and not reaped yet.
    #[allow(unsafe_code)]
    pub fn signal(&self, pid: u32, sig: libc::c_int) -> bool {
        let live = self.live();
        if !live.contains_key(&pid) {
            return false;
        }
        let Ok(p) = libc::pid_t::try_from(pid) else {
            return false;
        };
        // SAFETY: kill(2) takes plain integers and touches no memory of
        // ours; the pid is our own child, not reaped yet (its task removes
        // it from the registry, under this lock, before reaping it).
        unsafe { libc::kill(p, sig) == 0 }
    }

    /// SIGCONT then SIGKILL every subprocess still running.
    pub fn kill_all(&self) {
        let pids: Vec<u32> = self.live().keys().copied().collect();
        for pid in pids {
            self.signal(pid, libc::SIGCONT);
            self.signal(pid, libc::SIGKILL);
        }
    }
}

/// Is libfaketime installed?
pub fn faketime_installed() -> bool {
    Path::new(FAKETIME).exists()
}

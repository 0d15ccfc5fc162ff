//! The nemesis: faults on a seeded random schedule, each logged with its
//! time window, so that a violation can be attributed to a broken
//! assumption (or not).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlm_testkit::{Direction, FaultProxy, RedisServer};

use super::procs::Procs;
use super::record::{Kind, Recorder};
use crate::rng::SplitMix;

/// A broken assumption the soak can inject on purpose (RELIABILITY.md,
/// "The assumptions").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Break {
    /// Assumption 1 broken: Redis restarts WITHOUT persistence (no AOF), so
    /// it forgets the locks and tasks it acknowledged.
    NoPersistence,
    /// Assumption 2 broken: a `dlm lock run` holder is SIGSTOPped past its
    /// TTL while its command goes on, with no fencing check.
    PausedHolder,
}

impl Break {
    /// Its name in reports.
    pub fn label(self) -> &'static str {
        match self {
            Break::NoPersistence => "no-persistence",
            Break::PausedHolder => "paused-holder",
        }
    }
}

/// What a fault may have affected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every lock and queue of the deployment.
    All,
    /// One lock kind.
    Locks(Kind),
}

/// One fault injected.
#[derive(Debug, Clone)]
pub struct Event {
    /// Its kind (`partition`, `latency`, ...).
    pub kind: &'static str,
    /// When it began.
    pub at: Duration,
    /// When it ended.
    pub until: Duration,
    /// The assumption it breaks, if any.
    pub breaks: Option<Break>,
    /// What it may have affected.
    pub scope: Scope,
}

/// Every fault injected so far.
#[derive(Debug, Default)]
pub struct FaultLog {
    events: Mutex<Vec<Event>>,
}

impl FaultLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Event>> {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Log a fault.
    pub fn push(&self, e: Event) {
        self.lock().push(e);
    }

    /// Faults by kind.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for e in self.lock().iter() {
            *m.entry(e.kind.to_string()).or_default() += 1;
        }
        m
    }

    /// How many faults broke `b`.
    pub fn injected(&self, b: Break) -> u64 {
        self.lock().iter().filter(|e| e.breaks == Some(b)).count() as u64
    }

    /// The assumption broken by a fault that may explain a violation of
    /// `kind` (None: a queue) seen in `[from, until]`, allowing `slack`
    /// (the longest lease) on both sides.
    pub fn explain(
        &self,
        kind: Option<Kind>,
        from: Duration,
        until: Duration,
        slack: Duration,
    ) -> Option<Break> {
        self.lock().iter().find_map(|e| {
            let hits = e.at.saturating_sub(slack) <= until && e.until + slack >= from;
            let scoped = match (e.scope, kind) {
                (Scope::All, _) => true,
                (Scope::Locks(k), Some(v)) => k == v,
                (Scope::Locks(_), None) => false,
            };
            (hits && scoped).then_some(e.breaks).flatten()
        })
    }
}

/// What the nemesis may hit.
pub struct Targets {
    /// The standalone server (restarted with its persistence, or without
    /// under `--break no-persistence`).
    pub server: Arc<Mutex<RedisServer>>,
    /// The proxy every client goes through.
    pub proxy: Arc<FaultProxy>,
    /// The subprocesses.
    pub procs: Arc<Procs>,
    /// Restarts break assumption 1.
    pub no_persistence: bool,
}

/// The fault kinds the nemesis draws from.
const KINDS: [&str; 7] = [
    "partition",
    "latency",
    "connection-reset",
    "process-stop",
    "process-kill",
    "redis-restart",
    "clock-jump",
];

/// Inject faults every `every` (jittered by ±50 %) until the soak stops.
/// The kinds are drawn from a shuffled bag of all of them, refilled when
/// empty: each 7 draws in a row from a fresh bag hold every kind, so a short
/// soak (75 s in CI) meets each of them too.
pub async fn nemesis(
    rec: Arc<Recorder>,
    log: Arc<FaultLog>,
    t: Targets,
    every: Duration,
    seed: u64,
) {
    let mut rng = SplitMix(seed);
    let ms =
        |rng: &mut SplitMix, lo: u64, hi: u64| Duration::from_millis(lo + rng.next() % (hi - lo));
    let mut bag: Vec<&str> = Vec::with_capacity(KINDS.len());
    while !rec.stopping() {
        let pause = every / 2 + every.mul_f64((rng.next() % 1000) as f64 / 1000.0);
        sleep_unless_stopping(&rec, pause).await;
        if rec.stopping() {
            break;
        }
        // Breaking persistence on purpose: every other fault is a restart.
        let kind = if t.no_persistence && rng.next().is_multiple_of(2) {
            "redis-restart"
        } else {
            if bag.is_empty() {
                bag.extend(KINDS);
                // Fisher-Yates, on the soak's seed.
                for i in (1..bag.len()).rev() {
                    bag.swap(i, rng.next() as usize % (i + 1));
                }
            }
            bag.pop().unwrap_or(KINDS[0])
        };
        let at = rec.clock.now();
        let mut breaks = None;
        let mut kind_done = kind;
        match kind {
            "partition" => {
                t.proxy.partition();
                tokio::time::sleep(ms(&mut rng, 200, 1500)).await;
                t.proxy.heal();
            }
            "latency" => {
                let fixed = ms(&mut rng, 10, 80);
                t.proxy
                    .set_latency(Direction::ToClient, fixed, Duration::from_millis(20));
                tokio::time::sleep(ms(&mut rng, 1000, 4000)).await;
                t.proxy
                    .set_latency(Direction::ToClient, Duration::ZERO, Duration::ZERO);
            }
            "connection-reset" => t.proxy.reset_all(),
            "process-stop" | "process-kill" => {
                let Some((pid, role)) = t.procs.pick(&mut rng) else {
                    continue;
                };
                if kind == "process-kill" {
                    t.procs.signal(pid, libc::SIGKILL);
                } else if t.procs.signal(pid, libc::SIGSTOP) {
                    // Well within every lease (TTL/3 of the CLI's 3 s).
                    tokio::time::sleep(ms(&mut rng, 100, 500)).await;
                    t.procs.signal(pid, libc::SIGCONT);
                }
                tracing::debug!(pid, role, kind, "signalled");
            }
            "redis-restart" => {
                let server = t.server.clone();
                let r = tokio::task::spawn_blocking(move || {
                    let mut s = server
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    s.restart()
                })
                .await;
                if !matches!(r, Ok(Ok(()))) {
                    tracing::warn!("redis restart failed: {r:?}");
                }
                if t.no_persistence {
                    breaks = Some(Break::NoPersistence);
                    kind_done = "redis-restart-without-persistence";
                }
            }
            "clock-jump" => {
                const JUMPS: [&str; 4] = ["+2h", "-3h", "+1d", "+0"];
                if !t.procs.jump(JUMPS[rng.next() as usize % JUMPS.len()]) {
                    continue;
                }
            }
            _ => continue,
        }
        let scope = Scope::All;
        log.push(Event {
            kind: kind_done,
            at,
            until: rec.clock.now(),
            breaks,
            scope,
        });
    }
    t.proxy.clear();
    t.procs.jump("+0");
}

/// Sleep for `d`, waking early when the soak stops.
pub async fn sleep_unless_stopping(rec: &Recorder, d: Duration) {
    let end = tokio::time::Instant::now() + d;
    while !rec.stopping() && tokio::time::Instant::now() < end {
        let left = end - tokio::time::Instant::now();
        tokio::time::sleep(left.min(Duration::from_millis(200))).await;
    }
}

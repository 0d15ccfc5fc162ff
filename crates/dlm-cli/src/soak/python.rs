//! The Python package's lock clients: a `python` subprocess per kind and
//! epoch runs the script below on the epoch's lock names and prints every
//! operation with its wall-clock times (mapped onto the soak's clock at
//! spawn), which the soak records.

use std::sync::Arc;
use std::time::Duration;

use dlm_testkit::history::Hold;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::cli_locks::WallMap;
use super::lin::{LockAction, LockOp, LockResult, Mode};
use super::procs::Procs;
use super::record::{Kind, PERMITS, Recorder};

/// The interpreter: `$DLM_SOAK_PYTHON` (scripts/soak.sh points it at the
/// virtualenv scripts/test-python.sh makes), else `python3`.
pub fn interpreter() -> String {
    std::env::var("DLM_SOAK_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Why the package cannot be used (None: it can).
pub fn unavailable() -> Option<String> {
    let python = interpreter();
    let ok = std::process::Command::new(&python)
        .args(["-c", "import dlm"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    (!ok).then(|| {
        format!(
            "`{python} -c \"import dlm\"` fails (scripts/test-python.sh makes a virtualenv with it; scripts/soak.sh uses it)"
        )
    })
}

/// The client: acquire, hold 0-3 ms, release, pause; one line per operation.
const SCRIPT: &str = r#"
import os, random, sys, time
import dlm
url, kind, ttl, wait, seconds, names, me, permits = sys.argv[1:9]
me = me + "-" + str(os.getpid())
ttl, wait, seconds, permits = float(ttl), float(wait), float(seconds), int(permits)
names = names.split(",")
c = dlm.Client(url, timeout=1.0)
end = time.monotonic() + seconds
lease = 0
while time.monotonic() < end:
    name = random.choice(names)
    lease += 1
    write = kind == "rwlock" and random.random() < 0.25
    if kind == "mutex":
        h = c.lock(name, ttl=ttl, wait=wait)
    elif kind == "fair":
        h = c.fair_lock(name, ttl=ttl, wait=wait)
    elif kind == "rwlock":
        h = c.rwlock(name, write=write, ttl=ttl, wait=wait)
    elif kind == "semaphore":
        h = c.semaphore(name, permits, ttl=ttl, wait=wait)
    else:
        h = c.election(name, me, ttl=ttl, wait=wait)
    mode = "S" if kind == "semaphore" or (kind == "rwlock" and not write) else "X"
    g, fence, t0 = None, None, time.time_ns()
    try:
        g = h.acquire()
        r, fence = "G", g.fence
    except dlm.Busy:
        r = "R"
    except Exception:
        r = "U"
    print("A", lease, name, mode, t0, time.time_ns(), r, "-" if fence is None else fence, flush=True)
    if g is not None:
        time.sleep(random.random() * 0.003)
        t0 = time.time_ns()
        try:
            g.release()
            r = "D"
        except (dlm.Expired, dlm.NotHeld, dlm.Lost):
            r = "F"
        except Exception:
            r = "U"
        print("R", lease, name, "-", t0, time.time_ns(), r, "-", flush=True)
    time.sleep(0.005 + random.random() * 0.035)
"#;

/// One kind's Python clients, one subprocess per epoch, until the soak stops.
pub async fn run(
    rec: Arc<Recorder>,
    procs: Arc<Procs>,
    url: String,
    kind: Kind,
    holder: usize,
    ttl: Duration,
) {
    while !rec.stopping() {
        let epoch = rec.epoch();
        let left = rec.epoch_start(epoch + 1).saturating_sub(rec.clock.now());
        if left < Duration::from_secs(1) {
            tokio::time::sleep(left).await;
            continue;
        }
        let names: Vec<String> = (0..rec.names_per_kind)
            .map(|i| rec.lock_name("", kind, epoch, i))
            .collect();
        let map = WallMap::now(&rec);
        let mut cmd = tokio::process::Command::new(interpreter());
        cmd.kill_on_drop(true)
            .args(["-c", SCRIPT, &url, kind.label()])
            .arg(ttl.as_secs_f64().to_string())
            .arg("0.5")
            .arg(left.as_secs_f64().to_string())
            .arg(names.join(","))
            .arg(format!("python-{holder}"))
            .arg(PERMITS.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        let Ok(mut child) = cmd.spawn() else {
            return;
        };
        let pid = child.id();
        procs.started(pid, "python lock client");
        if let Some(out) = child.stdout.take() {
            let mut lines = BufReader::new(out).lines();
            let mut process = rec.process();
            let mut grants = std::collections::HashMap::new();
            let limit = left + Duration::from_secs(10);
            let read = async {
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(unknown) = record_line(
                        &rec,
                        kind,
                        epoch,
                        holder,
                        ttl,
                        map,
                        process,
                        &mut grants,
                        &line,
                    ) && unknown
                    {
                        process = rec.process();
                    }
                }
            };
            if tokio::time::timeout(limit, read).await.is_err() {
                let _ = child.start_kill();
            }
            procs.ended(pid);
            let _ = child.wait().await;
            // Killed holding: it may have released before it died.
            let exited = rec.clock.now();
            for (_, grant) in grants.drain() {
                unfinished(&rec, kind, epoch, process, grant, exited);
            }
        } else {
            procs.ended(pid);
            let _ = child.wait().await;
        }
    }
}

/// A grant whose release the process did not report (it was killed): its
/// release is of unknown outcome, from the grant to the process's end.
#[allow(clippy::too_many_arguments)]
fn unfinished(
    rec: &Recorder,
    kind: Kind,
    epoch: u64,
    process: usize,
    grant: Grant,
    exited: Duration,
) {
    // Its believed-held interval ended somewhere between the grant and its
    // death, or its release came first: not one the homegrown checkers can
    // judge (the linearizability checker judges the unknown release).
    rec.lock_op(
        kind,
        epoch,
        LockOp {
            process,
            lock: grant.name,
            lease: grant.id,
            action: LockAction::Release,
            result: LockResult::Unknown,
            invoke: grant.granted,
            complete: exited.max(grant.granted),
        },
    );
}

/// A grant the script reported, until its release.
struct Grant {
    id: u64,
    name: String,
    invoke: Duration,
    granted: Duration,
    fence: Option<u64>,
    exclusive: bool,
}

/// Record one line of the script's output; Some(true) when its outcome was
/// unknown (the process is then retired).
#[allow(clippy::too_many_arguments)]
fn record_line(
    rec: &Recorder,
    kind: Kind,
    epoch: u64,
    holder: usize,
    ttl: Duration,
    map: WallMap,
    process: usize,
    grants: &mut std::collections::HashMap<u64, Grant>,
    line: &str,
) -> Option<bool> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let [tag, lease, name, mode, t0, t1, r, fence] = f.as_slice() else {
        return None;
    };
    let own: u64 = lease.parse().ok()?;
    let invoke = map.map(t0.parse().ok()?);
    let complete = map.map(t1.parse().ok()?).max(invoke);
    let fence: Option<u64> = fence.parse().ok();
    rec.count(kind.label(), "python");
    let (action, result) = if *tag == "A" {
        let mode = if *mode == "S" {
            Mode::Shared
        } else {
            Mode::Exclusive
        };
        let id = rec.lease();
        let result = match *r {
            "G" => LockResult::Granted { fence },
            "R" => LockResult::Refused,
            _ => LockResult::Unknown,
        };
        if *r == "G" {
            let grant = Grant {
                id,
                name: name.to_string(),
                invoke,
                granted: complete,
                fence,
                exclusive: mode == Mode::Exclusive,
            };
            grants.insert(own, grant);
        }
        (LockAction::Acquire { mode, ttl }, (result, id))
    } else {
        let g = grants.remove(&own)?;
        let hold = Hold {
            holder,
            lock: name.to_string(),
            from: g.granted,
            until: invoke.min(g.invoke + ttl),
            fence: g.fence,
        };
        rec.hold(kind, epoch, hold, g.exclusive);
        let id = g.id;
        let result = match *r {
            "D" => LockResult::Done,
            "F" => LockResult::Failed,
            _ => LockResult::Unknown,
        };
        (LockAction::Release, (result, id))
    };
    let (result, id) = result;
    let unknown = result == LockResult::Unknown;
    rec.lock_op(
        kind,
        epoch,
        LockOp {
            process,
            lock: name.to_string(),
            lease: id,
            action,
            result,
            invoke,
            complete,
        },
    );
    Some(unknown)
}

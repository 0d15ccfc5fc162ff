//! Regression tests of issue 31's queue defects 1, 3, 6, 7 and 8, each
//! through the public API against a real redis-server: re-submitted
//! workflows (a dependent waits for every dependency of its current run),
//! a dependency enqueued again after an earlier run completed, a pop beside
//! a lease, what a popped or removed task leaves behind, the bounds on
//! results and on dependencies that never come, and that every key a queue
//! script touches is declared in KEYS.
mod common;

use std::time::Duration;

use common::TestResult;
use dlm::Client;
use dlm::queue::{Enqueued, NewTask, OnDuplicate, Queue, QueueSettings, Removed, TaskState};

const NOW: Duration = Duration::ZERO;
const LEASE: Duration = Duration::from_secs(30);

async fn start()
-> Result<(dlm_testkit::RedisServer, Client), Box<dyn std::error::Error + Send + Sync>> {
    let s = dlm_testkit::RedisServer::start()?;
    let c = Client::connect(&s.url()).await?;
    Ok((s, c))
}

async fn state(q: &Queue, id: &str) -> dlm::Result<Option<TaskState>> {
    Ok(q.task(id).await?.map(|t| t.state))
}

/// Claim every due task; the ids, sorted, and their leases.
async fn claim_all(q: &Queue) -> dlm::Result<(Vec<String>, Vec<dlm::queue::Lease>)> {
    let leases = q.claim(100, LEASE).await?;
    let mut ids: Vec<String> = leases.iter().map(|l| l.task().id.clone()).collect();
    ids.sort();
    Ok((ids, leases))
}

/// Settle the lease of `id` among `leases`: ack, or nack (it dies on its
/// last attempt); the others are returned.
async fn settle(
    leases: Vec<dlm::queue::Lease>,
    id: &str,
    ack: bool,
) -> Result<Vec<dlm::queue::Lease>, Box<dyn std::error::Error + Send + Sync>> {
    let mut rest = Vec::new();
    let mut found = false;
    for l in leases {
        if l.task().id == id && !found {
            found = true;
            if ack {
                l.ack().await?;
            } else {
                l.nack("boom").await?;
            }
        } else {
            rest.push(l);
        }
    }
    if !found {
        return Err(format!("no lease of {id}").into());
    }
    Ok(rest)
}

/// A workflow A, B -> report where A dies on its last attempt (so report
/// dies), then A and report are pushed again.
async fn failed_workflow(q: &Queue) -> TestResult {
    q.enqueue(["A", "B"], NOW, OnDuplicate::Keep).await?;
    q.enqueue(
        [NewTask::new("report").after(["A", "B"])],
        NOW,
        OnDuplicate::Keep,
    )
    .await?;
    let (ids, leases) = claim_all(q).await?;
    assert_eq!(ids, ["A", "B"]);
    let rest = settle(leases, "A", false).await?;
    for l in rest {
        l.abandon().await?; // B goes back, its attempt not counted
    }
    assert_eq!(state(q, "A").await?, Some(TaskState::Dead));
    assert_eq!(state(q, "report").await?, Some(TaskState::Dead));
    Ok(())
}

/// Defect 1: the re-submitted `report --after A,B` waits for the new A,
/// although B's stale edge to the first report was left behind.
#[tokio::test]
async fn a_resubmitted_workflow_waits_for_every_dependency() -> TestResult {
    let (_s, c) = start().await?;
    let q = c.queue("resubmit").max_attempts(1);
    failed_workflow(&q).await?;
    q.enqueue(["A"], NOW, OnDuplicate::Keep).await?;
    let r = q
        .enqueue(
            [NewTask::new("report").after(["A", "B"])],
            NOW,
            OnDuplicate::Keep,
        )
        .await?;
    assert!(matches!(r[0], Enqueued::Blocked(_)), "{r:?}");
    let (ids, leases) = claim_all(&q).await?;
    assert_eq!(ids, ["A", "B"]);
    let rest = settle(leases, "B", true).await?;
    let report = q.task("report").await?.ok_or("report is there")?;
    assert_eq!(
        (report.state, report.pending_deps),
        (TaskState::Blocked, 1),
        "B's ack may count once only: {report:?}"
    );
    // No stale edge is left under B (its finished view still names the
    // dependents it had when it ran: issue 31, defect 9).
    let check = q.check_invariants().await?;
    assert!(check.violations.is_empty(), "{:?}", check.violations);
    settle(rest, "A", true).await?;
    assert_eq!(state(&q, "report").await?, Some(TaskState::Waiting));
    let (ids, _) = claim_all(&q).await?;
    assert_eq!(ids, ["report"]);
    Ok(())
}

/// Defect 1's variant: `report` pushed again after C only is not killed
/// when B, a dependency of its earlier run, dies later.
#[tokio::test]
async fn a_dead_dependents_old_edges_do_not_kill_its_next_run() -> TestResult {
    let (_s, c) = start().await?;
    let q = c.queue("variant").max_attempts(1);
    failed_workflow(&q).await?;
    q.enqueue(["C"], NOW, OnDuplicate::Keep).await?;
    q.enqueue(
        [NewTask::new("report").after(["C"])],
        NOW,
        OnDuplicate::Keep,
    )
    .await?;
    assert_eq!(state(&q, "report").await?, Some(TaskState::Blocked));
    let (ids, leases) = claim_all(&q).await?;
    assert_eq!(ids, ["B", "C"]);
    let rest = settle(leases, "B", false).await?;
    assert_eq!(state(&q, "B").await?, Some(TaskState::Dead));
    let report = q.task("report").await?.ok_or("report is there")?;
    assert_eq!(
        (report.state, report.error.as_deref()),
        (TaskState::Blocked, None),
        "{report:?}"
    );
    settle(rest, "C", true).await?;
    assert_eq!(state(&q, "report").await?, Some(TaskState::Waiting));
    Ok(())
}

/// Defect 3: a dependency enqueued again is waited for, although its
/// earlier run is remembered as done.
#[tokio::test]
async fn a_dependency_enqueued_again_is_waited_for() -> TestResult {
    let (_s, c) = start().await?;
    let q = c.queue("daily");
    q.enqueue(["extract"], NOW, OnDuplicate::Keep).await?;
    q.enqueue(
        [NewTask::new("report1").after(["extract"])],
        NOW,
        OnDuplicate::Keep,
    )
    .await?;
    let (ids, leases) = claim_all(&q).await?;
    assert_eq!(ids, ["extract"]);
    settle(leases, "extract", true).await?;
    assert_eq!(state(&q, "extract").await?, Some(TaskState::Completed));
    q.enqueue(["extract"], NOW, OnDuplicate::Keep).await?;
    let r = q
        .enqueue(
            [NewTask::new("report2").after(["extract"])],
            NOW,
            OnDuplicate::Keep,
        )
        .await?;
    assert!(matches!(r[0], Enqueued::Blocked(_)), "{r:?}");
    let (ids, leases) = claim_all(&q).await?;
    assert_eq!(ids, ["extract", "report1"]);
    settle(leases, "extract", true).await?;
    assert_eq!(state(&q, "report2").await?, Some(TaskState::Waiting));
    Ok(())
}

/// Defect 7, with `pop` and with `remove_if_score`: taking out a waiting
/// copy of an id whose earlier run is in flight is no completion; the
/// dependents wait for the run in flight, and its ack releases them.
#[tokio::test]
async fn a_pop_beside_a_lease_is_no_completion() -> TestResult {
    let (_s, c) = start().await?;
    for remove in [false, true] {
        let q = c.queue(if remove {
            "beside-remove"
        } else {
            "beside-pop"
        });
        q.enqueue(["X"], NOW, OnDuplicate::Keep).await?;
        let lease = q.claim(1, LEASE).await?.pop().ok_or("X claimed")?;
        // A waiting copy of X beside its lease.
        q.enqueue(["X"], NOW, OnDuplicate::Replace).await?;
        q.enqueue([NewTask::new("Y").after(["X"])], NOW, OnDuplicate::Keep)
            .await?;
        assert_eq!(state(&q, "Y").await?, Some(TaskState::Blocked));
        if remove {
            // (A replacement held until the run settles is not in `top`:
            // then there is nothing to remove beside the lease.)
            let top = q.top(1).await?;
            if let Some(x) = top.first() {
                assert_eq!(q.remove_if_score("X", x.score).await?, Removed::Removed);
            }
        } else {
            // The replacement is held until X's run settles (issue 31,
            // defect 2): a pop finds nothing to take beside the lease.
            let popped: Vec<String> = q.pop(10).await?.into_iter().map(|e| e.id).collect();
            assert!(popped.is_empty() || popped == ["X"], "{popped:?}");
        }
        assert_eq!(
            state(&q, "Y").await?,
            Some(TaskState::Blocked),
            "no run of X succeeded yet (remove: {remove})"
        );
        lease.ack().await?;
        // A replacement that is still there (nothing took it beside the
        // lease) is the X that Y waits for: its run releases Y.
        if state(&q, "X").await? != Some(TaskState::Completed) {
            assert_eq!(state(&q, "Y").await?, Some(TaskState::Blocked));
            let again = q
                .claim(1, LEASE)
                .await?
                .pop()
                .ok_or("the replacement runs")?;
            assert_eq!(again.task().id, "X");
            again.ack().await?;
        }
        assert_eq!(state(&q, "Y").await?, Some(TaskState::Waiting));
    }
    Ok(())
}

/// Defect 6: a popped or removed task leaves nothing behind (its last
/// error and its progress went with it).
#[tokio::test]
async fn a_popped_or_removed_task_leaves_nothing_behind() -> TestResult {
    let s = dlm_testkit::RedisServer::start()?;
    let c = Client::connect(&s.url()).await?;
    let mut raw = common::raw(&s).await;
    for remove in [false, true] {
        let name = if remove { "left-remove" } else { "left-pop" };
        let q = c.queue(name);
        q.enqueue(["T"], NOW, OnDuplicate::Keep).await?;
        let lease = q.claim(1, LEASE).await?.pop().ok_or("T claimed")?;
        lease.progress(40, "reading").await?;
        lease.nack_after(Duration::ZERO, "boom").await?;
        if remove {
            let top = q.top(1).await?;
            let t = top.first().ok_or("T waits")?;
            assert_eq!(q.remove_if_score("T", t.score).await?, Removed::Removed);
        } else {
            assert_eq!(q.pop(10).await?.len(), 1);
        }
        assert_eq!(q.task("T").await?, None);
        assert_eq!(q.progress("T").await?, None, "{name}: progress left behind");
        let errors: Option<String> = redis::cmd("HGET")
            .arg(format!("dlm:queue:{{{name}}}:errors"))
            .arg("T")
            .query_async(&mut raw)
            .await?;
        assert_eq!(errors, None, "{name}: error left behind");
    }
    Ok(())
}

/// Defect 6: results are bounded by their total bytes per queue
/// (`keep_results_bytes`, default 64 MiB): the oldest go first, and the
/// evictions are counted (`QueueStats::results_evicted`, and the metric
/// `dlm_queue_results_evicted_total` that `stats` samples).
#[tokio::test]
async fn results_are_bounded_by_their_total_bytes() -> TestResult {
    #[cfg(feature = "metrics")]
    let (snap, _guard) = {
        let r: &'static metrics_util::debugging::DebuggingRecorder =
            Box::leak(Box::new(metrics_util::debugging::DebuggingRecorder::new()));
        (r.snapshotter(), metrics::set_default_local_recorder(r))
    };
    let (_s, c) = start().await?;
    let q = c.queue("bytes");
    assert_eq!(
        q.settings().await?.get_keep_results_bytes(),
        dlm::queue::DEFAULT_RESULT_BYTES
    );
    let cap = 1 << 20;
    q.configure(&QueueSettings::default().keep_results_bytes(cap))
        .await?;
    assert_eq!(q.settings().await?.get_keep_results_bytes(), cap);
    let big = vec![b'r'; 300 * 1024];
    for i in 0..5 {
        let id = format!("r{i}");
        q.enqueue([id.as_str()], NOW, OnDuplicate::Keep).await?;
        let lease = q.claim(1, LEASE).await?.pop().ok_or("claimed")?;
        lease.ack_with(big.clone()).await?;
    }
    let mut kept = Vec::new();
    for i in 0..5 {
        kept.push(q.result(&format!("r{i}")).await?.is_some());
    }
    assert_eq!(
        kept,
        [false, false, true, true, true],
        "oldest evicted first"
    );
    let stats = q.stats().await?;
    assert_eq!(stats.results_evicted, 2);
    // The results, and the summaries kept in front of some (issue 31, defect 9).
    assert!(
        (3 * 300 * 1024..3 * 301 * 1024).contains(&stats.result_bytes),
        "{}",
        stats.result_bytes
    );
    // A run that leaves no result drops its earlier result's bytes too.
    q.enqueue(["r4"], NOW, OnDuplicate::Keep).await?;
    q.claim(1, LEASE)
        .await?
        .pop()
        .ok_or("claimed")?
        .ack()
        .await?;
    let bytes = q.stats().await?.result_bytes;
    assert!((2 * 300 * 1024..2 * 301 * 1024).contains(&bytes), "{bytes}");
    assert!(
        q.configure(&QueueSettings::default().keep_results_bytes(1000))
            .await
            .is_err(),
        "a cap below one result's limit is refused"
    );
    #[cfg(feature = "metrics")]
    {
        let evicted = snap
            .snapshot()
            .into_vec()
            .into_iter()
            .find_map(|(k, _, _, v)| {
                (k.key().name() == "dlm_queue_results_evicted_total").then_some(v)
            });
        assert_eq!(
            evicted,
            Some(metrics_util::debugging::DebugValue::Counter(2)),
            "the metric"
        );
    }
    Ok(())
}

/// What MONITOR saw: per script call, the keys it declared and the
/// queue keys its commands named.
struct Calls {
    /// (declared keys, keys named by its commands)
    calls: Vec<(Vec<String>, Vec<String>)>,
}

/// The quoted arguments of one MONITOR line (`"a" "b\x00c"` ...), unescaped
/// as far as this test needs (queue keys are plain text).
fn monitor_args(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    let mut chars = line.chars();
    while let Some(ch) = chars.next() {
        match (&mut cur, ch) {
            (None, '"') => cur = Some(String::new()),
            (Some(s), '\\') => {
                if let Some(next) = chars.next() {
                    s.push('\\');
                    s.push(next);
                }
            }
            (Some(_), '"') => out.extend(cur.take()),
            (Some(s), c) => s.push(c),
            (None, _) => {}
        }
    }
    out
}

/// Run MONITOR on `url`'s server while `work` runs; the script calls seen.
async fn monitored<F: std::future::Future<Output = TestResult>>(
    addr: &str,
    work: F,
) -> Result<Calls, Box<dyn std::error::Error + Send + Sync>> {
    use std::io::{BufRead, BufReader, Write};
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.write_all(b"MONITOR\r\n")?;
    let reader = BufReader::new(stream.try_clone()?);
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    let reading = std::thread::spawn(move || {
        for line in reader.lines() {
            let Ok(line) = line else { break };
            if line.contains("\"dlm-monitor-end\"") {
                break;
            }
            if let Ok(mut l) = sink.lock() {
                l.push(line);
            }
        }
    });
    work.await?;
    // A marker command ends the reading.
    let mut marker = std::net::TcpStream::connect(addr)?;
    marker.write_all(b"ECHO dlm-monitor-end\r\n")?;
    reading.join().map_err(|_| "monitor thread")?;
    stream.shutdown(std::net::Shutdown::Both)?;
    let lines = lines.lock().map_err(|_| "lines")?.clone();
    let mut calls: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    for line in lines {
        let args = monitor_args(&line);
        let Some(cmd) = args.first().map(|c| c.to_ascii_uppercase()) else {
            continue;
        };
        if line.contains("lua]") {
            let named = args
                .iter()
                .skip(1)
                .filter(|a| a.starts_with("dlm:queue:{"))
                .cloned();
            if let Some(last) = calls.last_mut() {
                last.1.extend(named);
            }
        } else if cmd == "EVALSHA" || cmd == "EVAL" {
            let n: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(0);
            calls.push((args.iter().skip(3).take(n).cloned().collect(), Vec::new()));
        }
    }
    Ok(Calls { calls })
}

/// Defect 8: every key a queue script touches is declared in KEYS, the
/// payload buckets of compact payloads included, on every path that reads,
/// writes or deletes a payload; and a queue without small payloads still
/// sends the first 19 keys only on its hot calls.
#[tokio::test]
async fn every_key_a_script_touches_is_declared() -> TestResult {
    let s = dlm_testkit::RedisServer::start()?;
    let addr = format!("127.0.0.1:{}", s.port());
    let c = Client::connect(&s.url()).await?;
    let work = async {
        let q = c.queue("declared").compact_payloads(true);
        let tasks = (0..6).map(|i| NewTask::new(format!("t{i}")).payload(b"tiny".to_vec()));
        q.enqueue(tasks, NOW, OnDuplicate::Keep).await?;
        // A consumer without compact payloads reads and deletes them too.
        let plain = c.queue("declared");
        plain.top(10).await?;
        plain.tasks(TaskState::Waiting, 0, 10, 100).await?;
        plain.task("t0").await?;
        let leases = plain.claim(2, LEASE).await?;
        assert_eq!(leases.len(), 2);
        assert_eq!(leases[0].task().payload.as_deref(), Some(&b"tiny"[..]));
        for l in leases {
            l.ack().await?;
        }
        q.enqueue(
            [NewTask::new("t2").payload(b"again".to_vec())],
            NOW,
            OnDuplicate::Replace,
        )
        .await?;
        assert_eq!(plain.pop(1).await?.len(), 1);
        let top = plain.top(1).await?;
        let first = top.first().ok_or("a task waits")?;
        assert_eq!(
            plain.remove_if_score(&first.id, first.score).await?,
            Removed::Removed
        );
        let lease = plain.claim(1, LEASE).await?.pop().ok_or("claimed")?;
        lease.nack("boom").await?;
        let q1 = c.queue("declared").max_attempts(1);
        let lease = q1.claim(1, LEASE).await?.pop().ok_or("claimed")?;
        lease.nack("dead").await?;
        q1.dead(10).await?;
        q1.purge_dead().await?;
        // A plain queue: narrow hot calls.
        let narrow = c.queue("narrow");
        narrow.enqueue(["n1"], NOW, OnDuplicate::Keep).await?;
        for l in narrow.claim(1, LEASE).await? {
            l.ack().await?;
        }
        Ok(())
    };
    let seen = monitored(&addr, work).await?;
    assert!(seen.calls.len() > 10, "{} script calls", seen.calls.len());
    let mut buckets_touched = 0;
    for (declared, named) in &seen.calls {
        for k in named {
            assert!(
                declared.contains(k),
                "{k} is touched but not declared (declared: {} keys)",
                declared.len()
            );
            if k.contains(":payload:") {
                buckets_touched += 1;
            }
        }
    }
    assert!(buckets_touched > 0, "the test touched payload buckets");
    let narrow: Vec<usize> = seen
        .calls
        .iter()
        .filter(|(d, _)| d.first().is_some_and(|k| k.contains("{narrow}")))
        .map(|(d, _)| d.len())
        .collect();
    assert_eq!(narrow, [19, 19, 19], "enqueue, claim, ack of a plain queue");
    Ok(())
}

/// Defect 6: a dependency that may come later (`deps_may_come_later`) but
/// never does holds nothing for ever: once the dependent's due time is
/// `UNKNOWN_DEPENDENCY_WAIT` past (here: its score moved back by hand), a
/// claim finds it; it dies, naming the id, its dependents follow their
/// policy and no edge to the id is left.
#[tokio::test]
async fn a_dependency_that_never_comes_is_not_waited_for_for_ever() -> TestResult {
    let s = dlm_testkit::RedisServer::start()?;
    let c = Client::connect(&s.url()).await?;
    let mut raw = common::raw(&s).await;
    let q = c.queue("ghosts");
    q.enqueue(["real"], NOW, OnDuplicate::Keep).await?;
    q.enqueue(
        [
            NewTask::new("w")
                .after(["ghost", "real"])
                .deps_may_come_later(true),
            NewTask::new("next").after(["w"]),
            NewTask::new("lenient")
                .after(["ghost"])
                .deps_may_come_later(true)
                .on_dependency_failure(dlm::queue::DependencyFailure::Ignore),
        ],
        NOW,
        OnDuplicate::Keep,
    )
    .await?;
    assert_eq!(state(&q, "w").await?, Some(TaskState::Blocked));
    // A claim now finds nothing to expire: w has not waited long.
    let leases = q.claim(10, LEASE).await?;
    assert_eq!(leases.len(), 1);
    assert_eq!(state(&q, "w").await?, Some(TaskState::Blocked));
    // w's due time 24 hours and a minute ago; the next claim sweeps at once.
    let long_ago = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis(),
    )? - dlm::queue::UNKNOWN_DEPENDENCY_WAIT.as_millis() as u64
        - 60_000;
    let blocked = "dlm:queue:{ghosts}:blocked";
    let _: i64 = redis::cmd("ZADD")
        .arg(blocked)
        .arg("XX")
        .arg(long_ago)
        .arg("w")
        .arg(long_ago)
        .arg("lenient")
        .query_async(&mut raw)
        .await?;
    let _: i64 = redis::cmd("HDEL")
        .arg("dlm:queue:{ghosts}:config")
        .arg("deps_sweep_at")
        .query_async(&mut raw)
        .await?;
    // The claim that sweeps takes what the sweep released: `lenient`
    // ignores a dependency's death, and counts the one never enqueued as done.
    let lenient = q.claim(10, LEASE).await?;
    let ids: Vec<&str> = lenient.iter().map(|l| l.task().id.as_str()).collect();
    assert_eq!(ids, ["lenient"]);
    let w = q.task("w").await?.ok_or("w is there")?;
    assert_eq!(w.state, TaskState::Dead, "{w:?}");
    assert_eq!(
        w.error.as_deref(),
        Some("dependency 'ghost' was never enqueued")
    );
    assert_eq!(state(&q, "next").await?, Some(TaskState::Dead));
    let children: Vec<String> = redis::cmd("HKEYS")
        .arg("dlm:queue:{ghosts}:children")
        .query_async(&mut raw)
        .await?;
    assert!(children.is_empty(), "edges left: {children:?}");
    for l in leases.into_iter().chain(lenient) {
        l.ack().await?;
    }
    Ok(())
}

//! Every checker can fail: histories recorded against a real Redis pass
//! both the homegrown checkers (`dlm_testkit::history`) and the third-party
//! one (`dlm_testkit::linearizable`, todc-utils), and the same histories
//! with one defect written into them fail both:
//!
//! * a swapped fence: two consecutive grants of a mutex exchange their
//!   fencing tokens (`fences_out_of_grant_order`; the lock specification's
//!   "each grant's fence is greater than every earlier grant's");
//! * a doubled ack: one run's ack recorded twice (`QueueHistory`'s
//!   `acked_twice`; the queue specification's "each run's ack is unique");
//! * a dependent started early: a dependent's run moved before its
//!   dependency's ack (`dag_violations`; "a dependent runs only after every
//!   dependency's acked run").
mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{TestResult, ttl};
use dlm::queue::{NewTask, OnDuplicate};
use dlm_testkit::history::{
    Clock, DagRun, Hold, QueueHistory, dag_violations, fences_out_of_grant_order, overlapping_holds,
};
use dlm_testkit::linearizable::{
    LockAction, LockModel, LockOp, LockResult, Mode, OpLog, QueueAction, QueueOp, QueueResult,
    QueueSpec, check_locks, check_queue,
};

/// Three clients take turns on one mutex: the believed holds and every
/// operation.
async fn mutex_history(
    server: &common::RedisServer,
) -> Result<(Vec<Hold>, Vec<LockOp>), dlm::Error> {
    let log = std::sync::Arc::new(OpLog::new(Clock::new()));
    let holds = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for id in 0..3 {
        let client = common::client(server).await;
        let (log, holds) = (log.clone(), holds.clone());
        tasks.push(tokio::spawn(async move {
            let clock = log.clock();
            let opts = ttl(2000).wait(Duration::from_secs(5));
            for _ in 0..15 {
                let lease = log.next_id();
                let acquire = LockAction::Acquire {
                    mode: Mode::Exclusive,
                    ttl: opts.ttl(),
                };
                let pending = log.begin_lock(id, "m", lease, acquire);
                let Ok(g) = client.lock("m").acquire(&opts).await else {
                    log.end_lock(pending, LockResult::Unknown);
                    continue;
                };
                let fence = g.fence().map(dlm::Fence::get);
                log.end_lock(pending, LockResult::Granted { fence });
                let from = clock.now();
                tokio::time::sleep(Duration::from_millis(2)).await;
                let until = clock.now();
                let pending = log.begin_lock(id, "m", lease, LockAction::Release);
                let released = g.release().await;
                let result = if released.is_ok() {
                    LockResult::Done
                } else {
                    LockResult::Unknown
                };
                log.end_lock(pending, result);
                if let Ok(mut h) = holds.lock() {
                    h.push(Hold {
                        holder: id,
                        lock: "m".into(),
                        from,
                        until,
                        fence,
                    });
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let holds = holds.lock().map(|h| h.clone()).unwrap_or_default();
    Ok((holds, log.ops()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swapped_fence_fails_both_checkers() -> TestResult {
    let server = common::server();
    let (mut holds, mut ops) = mutex_history(&server).await?;
    assert!(holds.len() >= 40, "{} holds", holds.len());
    assert!(overlapping_holds(&holds).is_empty());
    assert!(fences_out_of_grant_order(&holds).is_empty());
    let verdict = check_locks(LockModel::Mutex, &ops);
    assert!(verdict.ok(), "{verdict:?}");

    // Two consecutive grants (by time) exchange their fences.
    holds.sort_by_key(|h| h.from);
    let (a, b) = (holds[10].fence, holds[11].fence);
    holds[10].fence = b;
    holds[11].fence = a;
    for op in &mut ops {
        if let LockResult::Granted { fence } = &mut op.result {
            if *fence == a {
                *fence = b;
            } else if *fence == b {
                *fence = a;
            }
        }
    }
    assert_eq!(fences_out_of_grant_order(&holds).len(), 1, "homegrown");
    let verdict = check_locks(LockModel::Mutex, &ops);
    assert_eq!(verdict.violations.len(), 1, "third-party: {verdict:?}");
    Ok(())
}

/// One event of a queue workload, replayed into the homegrown history.
#[derive(Debug, Clone)]
enum Event {
    Enqueued(String),
    Handled(String, u64),
    Acked(String, u64, bool),
}

/// What a small workflow recorded: the events, the runs with their times,
/// and every operation.
struct QueueRecord {
    events: Vec<Event>,
    runs: Vec<DagRun>,
    deps: HashMap<String, Vec<String>>,
    ops: Vec<QueueOp>,
}

impl QueueRecord {
    fn homegrown(&self) -> QueueHistory {
        let h = QueueHistory::default();
        for e in &self.events {
            match e {
                Event::Enqueued(id) => h.enqueued(id),
                Event::Handled(id, fence) => h.handled(id, *fence),
                Event::Acked(id, fence, ok) => h.acked(id, *fence, *ok),
            }
        }
        h
    }
}

/// A workflow (`a`, then `b` and `c` after `a`, `d` after `b` and `c`) and
/// 20 independent tasks, run by one worker that acks each task.
async fn workflow_history(server: &common::RedisServer) -> Result<QueueRecord, dlm::Error> {
    let client = common::client(server).await;
    let queue = client.queue("mutated");
    let log = OpLog::new(Clock::new());
    let clock = log.clock();
    let mut deps: HashMap<String, Vec<String>> = HashMap::new();
    let mut tasks = vec![
        NewTask::new("a"),
        NewTask::new("b").after(["a"]),
        NewTask::new("c").after(["a"]),
        NewTask::new("d").after(["b", "c"]),
    ];
    tasks.extend((0..20).map(|i| NewTask::new(format!("t{i}"))));
    let mut events = Vec::new();
    let invoke = clock.now();
    queue
        .enqueue(tasks.clone(), Duration::ZERO, OnDuplicate::Keep)
        .await?;
    for t in &tasks {
        let (id, after) = (t.id().to_string(), t.dependencies().to_vec());
        deps.insert(id.clone(), after.clone());
        events.push(Event::Enqueued(id.clone()));
        let enqueue = QueueAction::Enqueue {
            task: id,
            deps: after,
            group: None,
        };
        log.queue(0, enqueue, invoke, QueueResult::Done);
    }
    let lease = Duration::from_secs(10);
    let mut runs = Vec::new();
    for _ in 0..100 {
        let invoke = clock.now();
        let leases = queue.claim(1, lease).await?;
        let Some(l) = leases.into_iter().next() else {
            log.queue(1, QueueAction::Claim { lease }, invoke, QueueResult::Empty);
            break;
        };
        let (id, fence) = (l.task().id.clone(), l.task().fence.get());
        let leased = QueueResult::Leased {
            task: id.clone(),
            fence,
        };
        log.queue(1, QueueAction::Claim { lease }, invoke, leased);
        events.push(Event::Handled(id.clone(), fence));
        let started = clock.now().as_micros();
        tokio::time::sleep(Duration::from_millis(1)).await;
        let finished = clock.now().as_micros();
        let invoke = clock.now();
        let ok = l.ack().await.is_ok();
        let ack = QueueAction::Ack {
            task: id.clone(),
            fence,
        };
        let result = if ok {
            QueueResult::Done
        } else {
            QueueResult::Refused
        };
        log.queue(1, ack, invoke, result);
        events.push(Event::Acked(id.clone(), fence, ok));
        runs.push(DagRun {
            task: id,
            fence,
            started,
            finished: Some(finished),
        });
    }
    let invoke = clock.now();
    if queue.stats().await?.is_drained() {
        log.queue(0, QueueAction::Drained, invoke, QueueResult::Done);
    }
    Ok(QueueRecord {
        events,
        runs,
        deps,
        ops: log.ops(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_doubled_ack_and_a_dependent_started_early_fail_both_checkers() -> TestResult {
    let server = common::server();
    let record = workflow_history(&server).await?;
    let spec = QueueSpec::default();
    assert_eq!(record.runs.len(), 24, "every task ran once");
    assert!(record.homegrown().check().ok(), "homegrown: clean");
    assert!(dag_violations(&record.deps, &record.runs).is_empty());
    let verdict = check_queue(&spec, &record.ops);
    assert!(verdict.ok(), "third-party: clean: {verdict:?}");

    // A doubled ack: t5's ack recorded twice.
    let mut doubled = record.events.clone();
    let ack = doubled
        .iter()
        .position(|e| matches!(e, Event::Acked(id, _, true) if id == "t5"))
        .ok_or("t5's ack")?;
    doubled.push(doubled[ack].clone());
    let mutated = QueueRecord {
        events: doubled,
        runs: Vec::new(),
        deps: HashMap::new(),
        ops: Vec::new(),
    };
    assert_eq!(
        mutated.homegrown().check().acked_twice.len(),
        1,
        "homegrown"
    );
    let mut ops = record.ops.clone();
    let ack_op = ops
        .iter()
        .find(|op| matches!(&op.action, QueueAction::Ack { task, .. } if task == "t5"))
        .cloned()
        .ok_or("t5's ack op")?;
    let end = ops.iter().map(|op| op.complete).max().unwrap_or_default();
    ops.push(QueueOp {
        invoke: end + Duration::from_millis(1),
        complete: end + Duration::from_millis(2),
        ..ack_op
    });
    let verdict = check_queue(&spec, &ops);
    assert_eq!(verdict.violations.len(), 1, "third-party: {verdict:?}");
    assert!(
        verdict.violations[0].starts_with("task \"t5\""),
        "{verdict:?}"
    );

    // A dependent started early: b's run moved to before a's ack.
    let a_ack = record
        .ops
        .iter()
        .find(|op| matches!(&op.action, QueueAction::Ack { task, .. } if task == "a"))
        .ok_or("a's ack")?
        .invoke;
    let mut runs = record.runs.clone();
    let a_finished = runs
        .iter()
        .find(|r| r.task == "a")
        .and_then(|r| r.finished)
        .ok_or("a's run")?;
    for r in runs.iter_mut().filter(|r| r.task == "b") {
        r.started = a_finished - 1;
    }
    assert!(!dag_violations(&record.deps, &runs).is_empty(), "homegrown");
    let mut ops = record.ops.clone();
    for op in ops.iter_mut() {
        if matches!(&op.result, QueueResult::Leased { task, .. } if task == "b") {
            op.invoke = a_ack.saturating_sub(Duration::from_micros(2));
            op.complete = a_ack.saturating_sub(Duration::from_micros(1));
        }
    }
    let verdict = check_queue(&spec, &ops);
    assert!(
        verdict
            .violations
            .iter()
            .any(|v| v.starts_with("task \"b\"")),
        "third-party: {verdict:?}"
    );
    Ok(())
}

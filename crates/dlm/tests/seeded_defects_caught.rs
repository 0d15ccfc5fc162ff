//! Every checker fails on a seeded defect (issue 32): for each of the four
//! defects that issues 30 and 31 fixed, a workload against real
//! redis-servers records a history with a client built with the defect put
//! back (`ClientBuilder::seeded_defect`, the test-only `seeded-defects`
//! feature), and the same workload with a plain client. The homegrown
//! checkers (`dlm_testkit::history`, `Queue::check_invariants`) and the
//! third-party linearizability checker (`dlm_testkit::linearizable`) must
//! each find the defect in the seeded history and nothing in the plain one
//! (the few that cannot see a defect are asserted to pass on it, and named
//! in RELIABILITY.md). The Redlock revival has two workloads, one per half
//! of its fix: an extension by token, and a guard's late extension.
//! RELIABILITY.md ("Seeded defects: every checker can fail") has the table of
//! which checker caught what.
//!
//! Each workload is a function returning what it recorded (the homegrown
//! checkers' inputs and the third-party checker's operations), so that one
//! history feeds every checker.
//!
//! Run with `cargo test -p dlm --features seeded-defects --test seeded_defects_caught`.
mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{TestResult, delay_requests};
use dlm::SeededDefect;
use dlm::queue::{NewTask, OnDuplicate, Queue, QueueSettings};
use dlm_testkit::history::{
    Clock, DagRun, DagViolation, FencedRegister, Hold, QueueHistory, QueueReport, RegisterReport,
    dag_violations, fences_out_of_grant_order, overlapping_holds,
};
use dlm_testkit::{FaultProxy, RedisServer};

use common::lin::{queue_settled, settled};
use dlm_testkit::linearizable::{
    LockAction, LockModel, LockOp, LockResult, Mode, QueueAction, QueueOp, QueueResult, QueueSpec,
    Verdict, check_locks, check_queue,
};

type Boxed = Box<dyn std::error::Error + Send + Sync>;

/// A client builder with `defect` put back when `seeded`.
fn builder(seeded: bool, defect: SeededDefect) -> dlm::ClientBuilder {
    let b = dlm::Client::builder().timeout(Duration::from_millis(1500));
    if seeded { b.seeded_defect(defect) } else { b }
}

/// The clock-drift allowance dlm subtracts from a lease (1% + 2 ms): a
/// holder's lease runs out by its own clock at its acquire's start + ttl - drift.
fn lease_end(invoke: Duration, ttl: Duration) -> Duration {
    invoke + ttl - (ttl / 100 + Duration::from_millis(2))
}

// ---------------------------------------------------------------------------
// The locks' workloads.

/// What a lock workload recorded.
#[derive(Debug, Default)]
struct LockRun {
    /// Believed-held intervals, per holder (`overlapping_holds`).
    holds: Vec<Hold>,
    /// What the `FencedRegister` the holders wrote to saw (when they had fences).
    register: RegisterReport,
    /// The same operations for the third-party checker.
    ops: Vec<LockOp>,
}

/// Records a lock workload's calls as third-party ops on one clock.
struct LockRecorder {
    clock: Clock,
    lock: String,
    ops: Vec<LockOp>,
}

impl LockRecorder {
    fn new(lock: &str) -> Self {
        Self::with_clock(lock, Clock::new())
    }

    /// A recorder of another process on the same clock.
    fn with_clock(lock: &str, clock: Clock) -> Self {
        LockRecorder {
            clock,
            lock: lock.to_string(),
            ops: Vec::new(),
        }
    }

    /// The run of a workload of two holders of the lock, A (0) and B (1):
    /// each hold's (from, until).
    fn two_holds(self, a: (Duration, Duration), b: (Duration, Duration)) -> LockRun {
        let hold = |holder, (from, until)| Hold {
            holder,
            lock: self.lock.clone(),
            from,
            until,
            fence: None,
        };
        LockRun {
            holds: vec![hold(0, a), hold(1, b)],
            register: RegisterReport::default(),
            ops: self.ops.clone(),
        }
    }

    fn push(
        &mut self,
        process: usize,
        lease: u64,
        action: LockAction,
        result: LockResult,
        invoke: Duration,
    ) {
        self.ops.push(LockOp {
            process,
            lock: self.lock.clone(),
            lease,
            action,
            result,
            invoke,
            complete: self.clock.now(),
        });
    }

    /// Acquire the lock for `ttl` as `process` (lease id `lease`): the guard,
    /// when the call was made and when the grant was in hand.
    async fn acquire(
        &mut self,
        c: &dlm::Client,
        process: usize,
        lease: u64,
        ttl: Duration,
        node_timeout: Option<Duration>,
    ) -> Result<(dlm::LockGuard, Duration, Duration), Boxed> {
        let mut opts = dlm::LockOptions::new(ttl);
        if let Some(t) = node_timeout {
            opts = opts.node_timeout(t);
        }
        let invoke = self.clock.now();
        let g = c.lock(self.lock.as_str()).acquire(&opts).await?;
        let fence = g.fence().map(dlm::Fence::get);
        let action = LockAction::Acquire {
            mode: Mode::Exclusive,
            ttl,
        };
        self.push(
            process,
            lease,
            action,
            LockResult::Granted { fence },
            invoke,
        );
        Ok((g, invoke, self.clock.now()))
    }

    /// Release the guard; when the release was sent (the hold's end).
    async fn release(
        &mut self,
        g: dlm::LockGuard,
        process: usize,
        lease: u64,
    ) -> Result<Duration, Boxed> {
        let invoke = self.clock.now();
        let released = g.release().await.map(|_| ());
        self.push(
            process,
            lease,
            LockAction::Release,
            settled(&released),
            invoke,
        );
        released?;
        Ok(invoke)
    }
}

/// Defect 1, fence inversion. A client built by URL and a client built on
/// a connection the application passed in (`connection()`) take turns on
/// lock `x` on one Redis, after the URL client moved the shared counter
/// along on other locks; each holder writes to a fenced register with its
/// fence. With the defect the `connection()` client takes its fences from
/// the per-slot counter, far below the shared one.
async fn fence_inversion(seeded: bool) -> Result<LockRun, Boxed> {
    let s = RedisServer::start()?;
    let by_url = builder(seeded, SeededDefect::FenceInversion)
        .connect(&s.url())
        .await?;
    let conn = redis::Client::open(s.url())?
        .get_multiplexed_async_connection()
        .await?;
    let by_conn = builder(seeded, SeededDefect::FenceInversion).connection(conn)?;
    for i in 0..20 {
        let g = by_url
            .lock(format!("warm-{i}"))
            .acquire(&dlm::LockOptions::new(Duration::from_secs(5)))
            .await?;
        g.release().await?;
    }
    let mut rec = LockRecorder::new("x");
    let register = FencedRegister::new(true);
    let mut holds = Vec::new();
    for round in 0..6 {
        let (process, c) = if round % 2 == 0 {
            (0, &by_url)
        } else {
            (1, &by_conn)
        };
        let (g, _, granted) = rec
            .acquire(c, process, round, Duration::from_secs(5), None)
            .await?;
        let fence = g.fence().map(dlm::Fence::get);
        register.write(
            fence.ok_or("a fence on one Redis")?,
            &format!("round {round}"),
        );
        let until = rec.release(g, process, round).await?;
        holds.push(Hold {
            holder: process,
            lock: "x".into(),
            from: granted,
            until,
            fence,
        });
    }
    Ok(LockRun {
        holds,
        register: register.report(),
        ops: rec.ops,
    })
}

/// Defect 3 of issue 30, Redlock revival. Over three masters, A takes lock
/// `revive` for 300 ms and hands its token to a job (`detach`); the lease
/// runs out, B takes and releases the lock, then A's job extends the token.
/// A believes what dlm tells it: a successful extension means its lease
/// went on without a gap, so its hold lasts until it releases; a refused
/// one means it ended when its lease ran out by its own clock.
async fn redlock_revival(seeded: bool) -> Result<LockRun, Boxed> {
    let servers = RedisServer::start_many(3)?;
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let a = builder(seeded, SeededDefect::RedlockRevival)
        .connect_many(&urls)
        .await?;
    let b = builder(seeded, SeededDefect::RedlockRevival)
        .connect_many(&urls)
        .await?;
    let mut rec = LockRecorder::new("revive");
    let (short, long) = (Duration::from_millis(300), Duration::from_secs(5));
    let (g, a_invoke, a_granted) = rec.acquire(&a, 0, 0, short, None).await?;
    let (token, _) = g.detach();
    tokio::time::sleep(Duration::from_millis(450)).await;
    // B, once A's keys expired.
    let (gb, _, b_granted) = rec.acquire(&b, 1, 1, long, None).await?;
    let b_until = rec.release(gb, 1, 1).await?;
    // A's job extends the token.
    let invoke = rec.clock.now();
    let extended = a.lock("revive").extend_token(&token, long).await;
    rec.push(
        0,
        0,
        LockAction::Extend { ttl: long },
        settled(&extended),
        invoke,
    );
    let a_until = if extended.is_ok() {
        // Its work under the lock, then the release.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let invoke = rec.clock.now();
        let released = a.lock("revive").release_token(&token).await;
        rec.push(0, 0, LockAction::Release, settled(&released), invoke);
        invoke
    } else {
        lease_end(a_invoke, short)
    };
    Ok(rec.two_holds((a_granted, a_until), (b_granted, b_until)))
}

/// Defect 3 of issue 30 through a guard: the lease's end not read again
/// after an extension's replies. A (through fault proxies, per-node timeout
/// 1.8 s) holds `late` for 4 s; at 1 s its extension is held 3.8 s by the
/// proxies, so it times out and reaches the nodes after the keys expired,
/// taking them back. B (direct) takes and releases the lock in that gap.
/// At 3.5 s, its lease still running by its own clock, A extends again: the
/// request waits behind the first, and its replies come back by about
/// 4.8 s, after the lease ended (3.96 s). A's hold lasts to its release when
/// that extension succeeded, else to its lease's end by its own clock.
async fn redlock_late_extension(seeded: bool) -> Result<LockRun, Boxed> {
    let servers = RedisServer::start_many(3)?;
    let proxies: Vec<FaultProxy> = servers
        .iter()
        .zip(40..)
        .map(|(s, seed)| FaultProxy::in_front_of(s, seed))
        .collect::<Result<_, _>>()?;
    let via_proxy: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let direct: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let a = builder(seeded, SeededDefect::RedlockRevival)
        .timeout(Duration::from_secs(3))
        .connect_many(&via_proxy)
        .await?;
    let b = builder(seeded, SeededDefect::RedlockRevival)
        .connect_many(&direct)
        .await?;
    let mut rec = LockRecorder::new("late");
    let ttl = Duration::from_secs(4);
    let at = |ms| Duration::from_millis(ms);
    let (g, a_invoke, a_granted) = rec
        .acquire(&a, 0, 0, ttl, Some(Duration::from_millis(1_800)))
        .await?;
    // B, in the gap: after the keys expired (4 s after A's grant), before
    // the first extension lands (about 4.8 s).
    let mut rec_b = LockRecorder::with_clock("late", rec.clock);
    let b_run = tokio::spawn(async move {
        sleep_until(&rec_b.clock, at(4_100)).await;
        let (gb, _, b_granted) = rec_b.acquire(&b, 1, 1, ttl, None).await?;
        let b_until = rec_b.release(gb, 1, 1).await?;
        Ok::<_, Boxed>((rec_b.ops, b_granted, b_until))
    });
    sleep_until(&rec.clock, at(1_000)).await;
    delay_requests(&proxies, 3_800);
    let invoke = rec.clock.now();
    let first = g.extend(ttl).await;
    // It times out with its requests on their way (they land later): its
    // outcome is unknown, whatever error it returned.
    let first = if first.is_ok() {
        LockResult::Done
    } else {
        LockResult::Unknown
    };
    rec.push(0, 0, LockAction::Extend { ttl }, first, invoke);
    delay_requests(&proxies, 0);
    sleep_until(&rec.clock, at(3_500)).await;
    let invoke = rec.clock.now();
    let second = g.extend(ttl).await;
    rec.push(0, 0, LockAction::Extend { ttl }, settled(&second), invoke);
    let a_until = if second.is_ok() {
        tokio::time::sleep(Duration::from_millis(20)).await;
        rec.release(g, 0, 0).await?
    } else {
        lease_end(a_invoke, ttl)
    };
    let (b_ops, b_granted, b_until) = b_run.await??;
    rec.ops.extend(b_ops);
    Ok(rec.two_holds((a_granted, a_until), (b_granted, b_until)))
}

/// Sleep until `at` on `clock`.
async fn sleep_until(clock: &Clock, at: Duration) {
    tokio::time::sleep(at.saturating_sub(clock.now())).await;
}

// ---------------------------------------------------------------------------
// The queue's workloads.

const LEASE: Duration = Duration::from_secs(30);

/// What a queue workload recorded.
#[derive(Debug, Default)]
struct QueueRun {
    /// Each handler run (`dag_violations`).
    runs: Vec<DagRun>,
    /// Task -> its dependencies, of the graph's last submission.
    deps: HashMap<String, Vec<String>>,
    /// What `QueueHistory` made of the enqueues, handlings and acks.
    history: QueueReport,
    /// Each lease's interval as a hold of the lock "its task id"
    /// (`overlapping_holds`: one id is never leased twice at once).
    leases: Vec<Hold>,
    /// Every violation `Queue::check_invariants` reported after a step.
    invariants: Vec<String>,
    /// The operations for the third-party checker.
    ops: Vec<QueueOp>,
}

/// A call's result when it either returned or failed without an answer.
fn done_or_unknown(ok: bool) -> QueueResult {
    if ok {
        QueueResult::Done
    } else {
        QueueResult::Unknown
    }
}

/// What a `QueueHistory` is told.
enum Event {
    Enqueued(String),
    Handled(String, u64),
    AckStarted(String, u64),
    Acked(String, u64, bool),
    AckUnknown(String, u64),
}

/// Records a scripted queue workload: every call as a third-party op on
/// one clock, what `QueueHistory` needs, each handler run and lease, and the
/// invariant check after each step.
struct Recorder {
    q: Queue,
    clock: Clock,
    /// What `QueueHistory` is told, in order (see [`Recorder::finish`]).
    events: Vec<Event>,
    run: QueueRun,
    /// (task, fence) -> index in `run.runs` and `run.leases`.
    open: HashMap<(String, u64), (usize, usize)>,
}

impl Recorder {
    fn new(q: Queue) -> Self {
        Recorder {
            q,
            clock: Clock::new(),
            events: Vec::new(),
            run: QueueRun::default(),
            open: HashMap::new(),
        }
    }

    /// One third-party op, invoked at `invoke`, complete now.
    fn push(&mut self, process: usize, action: QueueAction, result: QueueResult, invoke: Duration) {
        let complete = self.clock.now();
        self.run.ops.push(QueueOp {
            process,
            action,
            result,
            invoke,
            complete,
        });
    }

    fn now_us(&self) -> u128 {
        self.clock.now().as_micros()
    }

    /// Enqueue `id` after `deps`, in `group`.
    async fn enqueue(
        &mut self,
        process: usize,
        (id, deps, group): (&str, &[&str], Option<&str>),
        mode: OnDuplicate,
    ) -> TestResult {
        let action = QueueAction::Enqueue {
            task: id.to_string(),
            deps: deps.iter().map(|d| d.to_string()).collect(),
            group: group.map(str::to_string),
        };
        let mut task = NewTask::new(id);
        if !deps.is_empty() {
            task = task.after(deps.iter().copied());
        }
        if let Some(g) = group {
            task = task.group(g);
        }
        let invoke = self.clock.now();
        let r = self.q.enqueue([task], Duration::ZERO, mode).await;
        self.push(process, action, done_or_unknown(r.is_ok()), invoke);
        r?;
        self.events.push(Event::Enqueued(id.to_string()));
        self.check().await
    }

    /// Claim up to `n` tasks; each one's handler starts at once.
    async fn claim(&mut self, process: usize, n: usize) -> Result<Vec<dlm::queue::Lease>, Boxed> {
        let invoke = self.clock.now();
        let got = self.q.claim(n, LEASE).await;
        let complete = self.clock.now();
        let got = match got {
            Ok(got) => got,
            Err(e) => {
                self.run.ops.push(QueueOp {
                    process,
                    action: QueueAction::Claim { lease: LEASE },
                    result: QueueResult::Unknown,
                    invoke,
                    complete,
                });
                return Err(e.into());
            }
        };
        if got.is_empty() {
            self.run.ops.push(QueueOp {
                process,
                action: QueueAction::Claim { lease: LEASE },
                result: QueueResult::Empty,
                invoke,
                complete,
            });
        }
        for l in &got {
            let (task, fence) = (l.task().id.clone(), l.task().fence.get());
            self.run.ops.push(QueueOp {
                process,
                action: QueueAction::Claim { lease: LEASE },
                result: QueueResult::Leased {
                    task: task.clone(),
                    fence,
                },
                invoke,
                complete,
            });
            self.events.push(Event::Handled(task.clone(), fence));
            self.run.runs.push(DagRun {
                task: task.clone(),
                fence,
                started: complete.as_micros(),
                finished: None,
            });
            self.run.leases.push(Hold {
                holder: usize::try_from(fence % (1 << 48)).unwrap_or(usize::MAX),
                lock: task.clone(),
                from: complete,
                until: Duration::MAX,
                fence: Some(fence),
            });
            self.open.insert(
                (task, fence),
                (self.run.runs.len() - 1, self.run.leases.len() - 1),
            );
        }
        self.check().await?;
        Ok(got)
    }

    /// The handler of `lease` finished its work (it then acks or nacks).
    fn finished(&mut self, lease: &dlm::queue::Lease) {
        let key = (lease.task().id.clone(), lease.task().fence.get());
        let now = self.now_us();
        if let Some((run, _)) = self.open.get(&key) {
            self.run.runs[*run].finished = Some(now);
        }
    }

    /// The lease ends (from its holder's view) as its ack or nack is sent.
    fn lease_ends(&mut self, task: &str, fence: u64, at: Duration) {
        if let Some((_, hold)) = self.open.remove(&(task.to_string(), fence)) {
            self.run.leases[hold].until = at;
        }
    }

    async fn ack(&mut self, process: usize, lease: dlm::queue::Lease) -> TestResult {
        let (task, fence) = (lease.task().id.clone(), lease.task().fence.get());
        let invoke = self.clock.now();
        self.lease_ends(&task, fence, invoke);
        self.events.push(Event::AckStarted(task.clone(), fence));
        let r = lease.ack().await;
        let result = queue_settled(&r);
        match result {
            QueueResult::Done => self.events.push(Event::Acked(task.clone(), fence, true)),
            QueueResult::Refused => self.events.push(Event::Acked(task.clone(), fence, false)),
            _ => self.events.push(Event::AckUnknown(task.clone(), fence)),
        }
        self.push(process, QueueAction::Ack { task, fence }, result, invoke);
        self.check().await
    }

    async fn nack(&mut self, process: usize, lease: dlm::queue::Lease) -> TestResult {
        let (task, fence) = (lease.task().id.clone(), lease.task().fence.get());
        let invoke = self.clock.now();
        self.lease_ends(&task, fence, invoke);
        let r = lease.nack("boom").await;
        let action = QueueAction::Nack { task, fence };
        self.push(process, action, done_or_unknown(r.is_ok()), invoke);
        r?;
        self.check().await
    }

    /// `Queue::check_invariants` after a step: every violation, once.
    async fn check(&mut self) -> TestResult {
        for v in self.q.check_invariants().await?.violations {
            let v = format!("{:?} {}: {}", v.invariant, v.id, v.detail);
            if !self.run.invariants.contains(&v) {
                self.run.invariants.push(v);
            }
        }
        Ok(())
    }

    fn finish(mut self) -> QueueRun {
        let end = self.clock.now();
        for hold in &mut self.run.leases {
            hold.until = hold.until.min(end);
        }
        // `QueueHistory` judges one submission per id (a later delivery of
        // an acked task is a violation there): the ids enqueued more than
        // once (replaced, or submitted again after they died) are left out.
        let mut submissions: HashMap<&str, usize> = HashMap::new();
        for e in &self.events {
            if let Event::Enqueued(id) = e {
                *submissions.entry(id).or_default() += 1;
            }
        }
        let history = QueueHistory::default();
        for e in &self.events {
            let (Event::Enqueued(id)
            | Event::Handled(id, _)
            | Event::AckStarted(id, _)
            | Event::Acked(id, _, _)
            | Event::AckUnknown(id, _)) = e;
            if submissions.get(id.as_str()) != Some(&1) {
                continue;
            }
            match e {
                Event::Enqueued(id) => history.enqueued(id),
                Event::Handled(id, f) => history.handled(id, *f),
                Event::AckStarted(id, f) => history.ack_started(id, *f),
                Event::Acked(id, f, ok) => history.acked(id, *f, *ok),
                Event::AckUnknown(id, f) => history.ack_unknown(id, *f),
            }
        }
        self.run.history = history.check();
        self.run
    }
}

/// The lease of `id` among `leases`, and the others.
fn take(
    leases: Vec<dlm::queue::Lease>,
    id: &str,
) -> Result<(dlm::queue::Lease, Vec<dlm::queue::Lease>), Boxed> {
    let (mine, rest): (Vec<_>, Vec<_>) = leases.into_iter().partition(|l| l.task().id == id);
    let mine = mine.into_iter().next().ok_or(format!("no lease of {id}"))?;
    Ok((mine, rest))
}

/// Issue 31's defect 1, a re-submitted workflow's dependent released early.
/// `report` waits for A and B; A dies on its only attempt (so report dies)
/// while B waits; A and report are submitted again; a worker (process 1)
/// runs what it can claim: A and B at once, B finishes first.
async fn early_dependent(seeded: bool) -> Result<QueueRun, Boxed> {
    let s = RedisServer::start()?;
    let c = builder(seeded, SeededDefect::EarlyDependent)
        .connect(&s.url())
        .await?;
    let mut r = Recorder::new(c.queue("workflow").max_attempts(1));
    let report = ("report", &["A", "B"][..], None);
    r.enqueue(0, ("A", &[][..], None), OnDuplicate::Keep)
        .await?;
    r.enqueue(0, ("B", &[][..], None), OnDuplicate::Keep)
        .await?;
    r.enqueue(0, report, OnDuplicate::Keep).await?;
    // A's only attempt fails: A dies, and report with it.
    let (a, _) = take(r.claim(1, 1).await?, "A")?;
    r.finished(&a);
    r.nack(1, a).await?;
    // The workflow again.
    r.enqueue(0, ("A", &[][..], None), OnDuplicate::Keep)
        .await?;
    r.enqueue(0, report, OnDuplicate::Keep).await?;
    let leases = r.claim(1, 2).await?;
    let (b, leases) = take(leases, "B")?;
    let (a, _) = take(leases, "A")?;
    r.finished(&b);
    r.ack(1, b).await?;
    // Whatever is due now runs while A still works.
    for l in r.claim(1, 10).await? {
        r.finished(&l);
        r.ack(1, l).await?;
    }
    r.finished(&a);
    r.ack(1, a).await?;
    // Then the rest, until nothing is left.
    loop {
        let got = r.claim(1, 10).await?;
        if got.is_empty() {
            break;
        }
        for l in got {
            r.finished(&l);
            r.ack(1, l).await?;
        }
    }
    let mut run = r.finish();
    run.deps = HashMap::from([
        ("A".to_string(), vec![]),
        ("B".to_string(), vec![]),
        ("report".to_string(), vec!["A".to_string(), "B".to_string()]),
    ]);
    Ok(run)
}

/// The group of the leaked-slot workload, and its limit once set.
const GROUP_LIMIT: u32 = 2;

/// Issue 31's defect 2, a leaked group slot. Twice: X (group g) is claimed
/// by process 1, replaced while in flight by process 0, process 2 claims;
/// both ack what they hold, then whatever is due runs. Then g gets a limit
/// of 2 and Y and Z are enqueued in g; processes 1 and 2 each claim (three
/// tries, 100 ms apart) and ack.
async fn leaked_slot(seeded: bool) -> Result<QueueRun, Boxed> {
    let s = RedisServer::start()?;
    let c = builder(seeded, SeededDefect::LeakedGroupSlot)
        .connect(&s.url())
        .await?;
    let q = c.queue("slots");
    let mut r = Recorder::new(q.clone());
    let x = ("X", &[][..], Some("g"));
    for _ in 0..2 {
        r.enqueue(0, x, OnDuplicate::Keep).await?;
        let first = r.claim(1, 1).await?;
        r.enqueue(0, x, OnDuplicate::Replace).await?;
        let second = r.claim(2, 1).await?;
        for l in first {
            r.finished(&l);
            r.ack(1, l).await?;
        }
        for l in second {
            r.finished(&l);
            r.ack(2, l).await?;
        }
        for l in r.claim(1, 10).await? {
            r.finished(&l);
            r.ack(1, l).await?;
        }
    }
    q.configure(&QueueSettings::default().group_concurrency(Some(GROUP_LIMIT)))
        .await?;
    r.enqueue(0, ("Y", &[], Some("g")), OnDuplicate::Keep)
        .await?;
    r.enqueue(0, ("Z", &[], Some("g")), OnDuplicate::Keep)
        .await?;
    let mut held = Vec::new();
    for process in [1, 2] {
        for attempt in 0..3 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let got = r.claim(process, 1).await?;
            if !got.is_empty() {
                held.extend(got.into_iter().map(|l| (process, l)));
                break;
            }
        }
    }
    for (process, l) in held {
        r.finished(&l);
        r.ack(process, l).await?;
    }
    Ok(r.finish())
}

// ---------------------------------------------------------------------------
// The tests: each checker fails on the seeded history, passes on the plain one.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_inversion_is_caught_by_every_checker() -> TestResult {
    let seeded = fence_inversion(true).await?;
    let plain = fence_inversion(false).await?;
    eprintln!(
        "seeded: register {:?}; out of order {}",
        seeded.register,
        fences_out_of_grant_order(&seeded.holds).len()
    );
    // Homegrown: the fenced register refuses the newer holder's write, and
    // the fences do not grow in grant order.
    assert!(
        seeded.register.stale_rejected > 0,
        "the register refused no write: {:?}",
        seeded.register
    );
    assert!(!fences_out_of_grant_order(&seeded.holds).is_empty());
    assert_eq!(plain.register.stale_rejected, 0, "{:?}", plain.register);
    assert_eq!(fences_out_of_grant_order(&plain.holds), []);
    // Not what this defect breaks: the holds never overlap either way.
    assert_eq!(overlapping_holds(&seeded.holds), []);
    third_party_caught(
        "lock \"x\"",
        &check_locks(LockModel::Mutex, &seeded.ops),
        &check_locks(LockModel::Mutex, &plain.ops),
    );
    Ok(())
}

/// A Redlock revival: the homegrown `overlapping_holds` and the
/// third-party checker (on `lock`) find it in the seeded run only.
fn revival_caught(lock: &str, seeded: &LockRun, plain: &LockRun) {
    assert!(
        !overlapping_holds(&seeded.holds).is_empty(),
        "A's revived lease overlaps B's hold: {:?}",
        seeded.holds
    );
    assert_eq!(overlapping_holds(&plain.holds), []);
    third_party_caught(
        &format!("lock {lock:?}"),
        &check_locks(LockModel::Mutex, &seeded.ops),
        &check_locks(LockModel::Mutex, &plain.ops),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_revival_is_caught_by_every_checker() -> TestResult {
    let seeded = redlock_revival(true).await?;
    let plain = redlock_revival(false).await?;
    revival_caught("revive", &seeded, &plain);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_revival_by_a_late_extension_is_caught_by_every_checker() -> TestResult {
    let (seeded, plain) = tokio::join!(redlock_late_extension(true), redlock_late_extension(false));
    let (seeded, plain) = (seeded?, plain?);
    revival_caught("late", &seeded, &plain);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_dependent_is_caught_by_every_checker() -> TestResult {
    let seeded = early_dependent(true).await?;
    let plain = early_dependent(false).await?;
    let early = dag_violations(&seeded.deps, &seeded.runs);
    eprintln!("seeded: dag {early:?}; invariants {:?}", seeded.invariants);
    assert!(
        early
            .iter()
            .any(|v| matches!(v, DagViolation::StartedEarly { task, dep, .. } if task == "report" && dep == "A")),
        "report started before A's acked run finished: {early:?}"
    );
    assert_eq!(dag_violations(&plain.deps, &plain.runs), []);
    // The invariant check sees the stale edges.
    assert!(!seeded.invariants.is_empty(), "{:?}", seeded.invariants);
    assert_eq!(plain.invariants, Vec::<String>::new());
    // Not what this defect breaks: every task was handled to an ack.
    assert!(seeded.history.ok(), "{:?}", seeded.history);
    assert!(plain.history.ok(), "{:?}", plain.history);
    let spec = QueueSpec { group_limit: None };
    third_party_caught(
        "task \"report\"",
        &check_queue(&spec, &seeded.ops),
        &check_queue(&spec, &plain.ops),
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaked_group_slot_is_caught_by_every_checker() -> TestResult {
    let seeded = leaked_slot(true).await?;
    let plain = leaked_slot(false).await?;
    // Two leases of X at once.
    let twice = overlapping_holds(&seeded.leases);
    eprintln!(
        "seeded: leases {twice:?}; {:?}; invariants {:?}",
        seeded.history, seeded.invariants
    );
    assert!(
        twice.iter().any(|(a, _)| a.lock == "X"),
        "X leased twice at once: {:?}",
        seeded.leases
    );
    assert_eq!(overlapping_holds(&plain.leases), []);
    // The group stalls: Y and Z are never handled.
    assert_eq!(seeded.history.lost, ["Y", "Z"], "{:?}", seeded.history);
    assert!(plain.history.ok(), "{:?}", plain.history);
    // The invariant check sees g counted with nothing in flight.
    assert!(
        seeded.invariants.iter().any(|v| v.contains("GroupCount")),
        "{:?}",
        seeded.invariants
    );
    assert_eq!(plain.invariants, Vec::<String>::new());
    let spec = QueueSpec {
        group_limit: Some(GROUP_LIMIT),
    };
    third_party_caught(
        "task \"X\"",
        &check_queue(&spec, &seeded.ops),
        &check_queue(&spec, &plain.ops),
    );
    Ok(())
}

/// The third-party checker (`dlm_testkit::linearizable`) finds a violation
/// in the seeded history's `object` (`lock "x"`, `task "X"`) and none in
/// the plain history.
fn third_party_caught(object: &str, seeded: &Verdict, plain: &Verdict) {
    eprintln!("third party, seeded: {:?}", seeded.violations);
    assert!(
        seeded.violations.iter().any(|v| v.starts_with(object)),
        "{} found nothing in {object}: {seeded:?}",
        seeded.checker
    );
    assert!(
        plain.ok(),
        "{} on the plain history: {plain:?}",
        plain.checker
    );
    assert!(seeded.undecided.is_empty() && plain.undecided.is_empty());
}

"""Type stubs of the native module dlm._dlm (built from python/src with PyO3)."""

import asyncio
from types import TracebackType
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Generator,
    Iterator,
    Literal,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    TypeVar,
    TypedDict,
    Union,
)

__version__: str

Bytes = Union[bytes, bytearray, memoryview]
Payload = Union[bytes, bytearray, memoryview, str]
"""A payload: bytes-like, or a str (stored encoded as UTF-8; read back as bytes)."""
TaskState = Literal["blocked", "waiting", "delayed", "in_flight", "dead", "completed"]

_T = TypeVar("_T", covariant=True)

class Call(Coroutine[Any, Any, _T]):
    """What every async method returns: a coroutine over the running call (it starts when the
    method is called). Await it, or hand it to `asyncio.create_task`, `TaskGroup.create_task`,
    `asyncio.gather`, `wait_for`, `ensure_future` (`asyncio.wait` wants tasks: wrap it with
    `create_task`). A call dropped before it ended (never awaited) is cancelled."""

    def send(self, value: Any, /) -> Any: ...
    def throw(self, typ: Any, val: Any = None, tb: Any = None, /) -> Any: ...
    def close(self) -> None: ...
    def __await__(self) -> Generator[Any, None, _T]: ...
    def cancel(self, msg: Any = None) -> bool:
        """Cancel the call."""

class StopEvent(Protocol):
    """What `Queue.work(stop=...)` polls: a `threading.Event`, or anything with `is_set()`."""

    def is_set(self) -> bool: ...

def enable_metrics() -> None:
    """Start recording the core's metrics (`dlm_*`) in this process."""

def metrics_text() -> str:
    """The core's metrics in the Prometheus text format (recording starts with the first call)."""

TaskResult = Union[bytes, bytearray, str, None]

class LockStatus(TypedDict, total=False):
    """What `status()` returns; the keys depend on the kind of lock."""

    held: bool
    held_count: int
    ttl: Optional[float]
    fence: Optional[int]
    waiting: int
    writer: bool
    writer_ttl: Optional[float]
    readers: int
    waiting_writers: int
    permits: Optional[int]
    in_use: int
    available: int
    holders: int
    term: int
    leader: Optional[str]
    leader_term: int

class QueueStats(TypedDict):
    """A queue's counts (`Queue.stats()`); oldest_due in seconds."""

    waiting: int
    delayed: int
    in_flight: int
    dead: int
    processed: int
    failed: int
    blocked: int
    result_bytes: int
    results_evicted: int
    paused: bool
    oldest_due: float

class WorkReport(TypedDict):
    """What a worker did (`Queue.work(...)`)."""

    acked: int
    retried: int
    dead: int
    lost: int
    returned: int

class QueueSettings(TypedDict):
    """A queue's shared settings (`Queue.configure()` / `settings()`)."""

    group_concurrency: Optional[int]
    rate_n: Optional[int]
    rate_period: Optional[float]
    keep_completed: Optional[int]
    events: Optional[int]
    keep_results: float
    keep_results_bytes: int
    shards: int
    """How many shards new tasks go to (1: not sharded)."""

class ShardInfo(TypedDict):
    """One shard of a queue (`Queue.shards()`)."""

    index: int
    tag: str
    """Its hash tag: the queue's name for shard 0, else `NAME#i` (or `NAME#i.n`)."""
    slot: int
    """Its Redis Cluster slot."""
    master: Optional[str]
    """The master serving that slot (`host:port`) on a Redis Cluster; None elsewhere."""

class ShardLayout(TypedDict):
    """How a queue is spread (`Queue.shards()`)."""

    k: int
    """Shards new tasks go to (1: not sharded)."""
    version: int
    """The layout's version: +1 at every change (0: never sharded)."""
    draining: Optional[int]
    """While a lowering drains: how many shards there were before it."""
    shards: list[ShardInfo]
    """Every shard workers claim from, in order (the draining ones last)."""

class Schedule(TypedDict):
    """A repeating task (`Queue.schedules()`); next_tick in float seconds since the epoch."""

    id: str
    repeat: str
    next_tick: float
    payload: Optional[bytes]

class TaskInfo(TypedDict):
    """Everything known about one task (`Queue.task(id)`)."""

    id: str
    state: str
    attempts: int
    fence: Optional[int]
    priority: int
    group: Optional[str]
    error: Optional[str]
    progress: Optional[int]
    message: Optional[str]
    payload_len: Optional[int]
    result_bytes: Optional[int]
    deps: list[str]
    pending_deps: int
    timeout: Optional[float]
    dependents: list[str]
    started_at: Optional[float]
    """Completed: when its last run started (float seconds since the epoch, Redis clock), if a worker ran it."""
    finished_at: Optional[float]
    """Completed: when it was acked (float seconds since the epoch, Redis clock)."""
    worker: Optional[str]
    """Completed: the id of the worker that ran it (None: acked by hand)."""

class WorkerInfo(TypedDict):
    """A live worker of a queue (`Queue.workers()`)."""

    id: str
    host: str
    pid: int
    version: str
    concurrency: int
    busy: int
    processed: int
    failed: int
    in_flight: list[str]
    stopping: bool
    beat_age: float

class HeldLock(TypedDict):
    """A lock held on the server (`Client.held_locks()`)."""

    name: str
    key: str
    ttl: Optional[float]
    fence: Optional[int]

class ServerInfo(TypedDict):
    """What one node is (`Client.server_info()`)."""

    product: str
    """"redis" or "valkey"."""
    version: str
    native: list[str]
    """The native commands dlm uses on it: "compare_and_delete", "compare_and_set"."""

class ReleaseAll(TypedDict):
    """What `Client.release_all()` did."""

    released: int
    already_lost: int
    failed: int

class DeadTask(TypedDict):
    """A dead-lettered task (`Queue.dead()`); died_at in float seconds since the epoch."""

    id: str
    error: Optional[str]
    payload: Optional[bytes]
    died_at: float

class Event(TypedDict):
    """An event of a queue's log (`Queue.events()`, `Queue.events_page()`)."""

    kind: str
    """enqueued, claimed, acked, failed, retried, dead, progress, ... (the core's EventKind)."""
    task: str
    at: float
    """When, in float seconds since the epoch (Redis clock)."""
    cursor: str
    """Pass it as `after=` to go on after this event."""
    error: Optional[str]
    progress: Optional[int]
    message: Optional[str]

class EventsPage(TypedDict):
    """One page of the event log: its events and the cursor to go on from."""

    events: list[Event]
    cursor: Optional[str]

class EventStream(Iterator[Event]):
    """The event log followed as it grows (`for ev in q.events():`); each
    step waits for the next event (Ctrl-C interrupts it)."""

    def __iter__(self) -> "EventStream": ...
    def __next__(self) -> Event: ...
    def close(self) -> None:
        """Stop following."""

class AsyncEventStream(AsyncIterator[Event]):
    """The event log followed as it grows (`async for ev in aq.events():`)."""

    def __aiter__(self) -> "AsyncEventStream": ...
    def __anext__(self) -> "Call[Event]": ...
    def aclose(self) -> "Call[None]":
        """Stop following."""

class _GuardProps:
    @property
    def fence(self) -> Optional[int]:
        """The fencing token, or None (Redlock hands out none)."""
    @property
    def token(self) -> str:
        """The random owner token of this acquisition."""
    @property
    def name(self) -> str:
        """The lock's name."""
    @property
    def key(self) -> str:
        """The lock's Redis key."""
    @property
    def ttl(self) -> float:
        """The lease the lock was acquired with, in seconds."""
    @property
    def permits(self) -> Optional[int]:
        """Permits held (semaphores), else None."""
    def is_lost(self) -> bool:
        """True once the lease ran out or renewal failed while held (no round
        trip). After a successful release() it is False: the lock was given
        back, not lost; after a release that found it lost, True."""
    def remaining(self) -> float:
        """Seconds of the lease surely left; 0.0 once lost (no round trip)."""
    def is_released(self) -> bool:
        """True once released through this guard."""
    @property
    def fences(self) -> list[Optional[int]]:
        """The fence of every lock of the guard (one entry but for multi_lock)."""

class LockGuard(_GuardProps):
    """A held lock (or read/write share, semaphore permits, leadership)."""

    def wait_lost(self, timeout: Optional[float] = None) -> bool:
        """Wait until the lock is lost: True, or False after `timeout` seconds."""
    def extend(self, ttl: float) -> None:
        """Renew the lease to `ttl` seconds from now."""
    def release(self) -> None:
        """Release; raises Expired/NotHeld when it was not ours any more."""

class AsyncLockGuard(_GuardProps):
    """The asyncio flavour of LockGuard."""

    def lost(self) -> "Call[None]":
        """Resolves when the lock is lost."""
    def extend(self, ttl: float) -> "Call[None]":
        """Renew the lease to `ttl` seconds from now."""
    def release(self) -> "Call[None]":
        """Release; raises Expired/NotHeld when it was not ours any more."""

class Lock:
    """A lock handle: `with c.lock(...) as guard:` or acquire()/release()."""

    @property
    def name(self) -> str: ...
    def acquire(self) -> LockGuard:
        """Acquire (waiting as configured); raises Busy when not in time, and
        StateError when this thread holds it through this handle already."""
    def release(self) -> None:
        """Release the guard of this thread's last acquire() through this
        handle; StateError when this thread holds nothing through it."""
    def status(self) -> LockStatus:
        """The lock's state in Redis."""
    def force_release(self) -> bool:
        """Delete the lock whoever holds it; True if it was held (plain locks only)."""
    def __enter__(self) -> LockGuard: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Literal[False]: ...

class AsyncLock:
    """The asyncio flavour of Lock: `async with ac.lock(...) as guard:`."""

    @property
    def name(self) -> str: ...
    def acquire(self) -> "Call[AsyncLockGuard]": ...
    def release(self) -> "Call[None]": ...
    def status(self) -> "Call[LockStatus]": ...
    def force_release(self) -> "Call[bool]": ...
    def __aenter__(self) -> "Call[AsyncLockGuard]": ...
    def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> "Call[Literal[False]]": ...

class Task:
    """A task as a handler sees it."""

    @property
    def id(self) -> str: ...
    @property
    def payload(self) -> bytes:
        """The payload (b"" when none)."""
    @property
    def fence(self) -> int:
        """The fencing token of this claim (grows with every claim)."""
    @property
    def attempts(self) -> int:
        """Claims of this task so far, this one included."""
    @property
    def priority(self) -> int: ...
    @property
    def group(self) -> Optional[str]: ...
    @property
    def deps(self) -> list[str]: ...
    def progress(self, pct: int, message: str = "") -> None:
        """Report progress (0..=100, a message) of this run; in a worker's handler only. Blocks."""
    def aprogress(self, pct: int, message: str = "") -> "Call[None]":
        """`progress`, awaitable (for async handlers)."""
    def extend(self, lease: float) -> None:
        """Renew this run's lease to `lease` seconds from now and keep it that long. Blocks."""
    def aextend(self, lease: float) -> "Call[None]":
        """`extend`, awaitable (for async handlers)."""

class Lease:
    """A claimed task (`Queue.claim`): ack, nack or extend it in time."""

    @property
    def task(self) -> Task: ...
    def ack(self, result: TaskResult = None) -> None: ...
    def nack(self, error: str = "", retry_after: Optional[float] = None) -> str:
        """Returns "retrying" or "dead"."""
    def abandon(self) -> None: ...
    def extend(self, lease: float) -> None: ...
    def progress(self, pct: int, message: str = "") -> None: ...

class AsyncLease:
    """A claimed task (`await AsyncQueue.claim`): awaitable ack, nack, extend."""

    @property
    def task(self) -> Task: ...
    def ack(self, result: TaskResult = None) -> "Call[None]": ...
    def nack(self, error: str = "", retry_after: Optional[float] = None) -> "Call[str]": ...
    def abandon(self) -> "Call[None]": ...
    def extend(self, lease: float) -> "Call[None]": ...
    def progress(self, pct: int, message: str = "") -> "Call[None]": ...

class Queue:
    """A task queue (sync calls)."""

    @property
    def name(self) -> str: ...
    def push(
        self,
        id: str,
        payload: Optional[Payload] = None,
        *,
        delay: float = 0.0,
        priority: int = 0,
        group: Optional[str] = None,
        after: Optional[Sequence[str]] = None,
        timeout: Optional[float] = None,
        replace: bool = False,
        shard_key: Optional[str] = None,
    ) -> bool:
        """Add a task; False when the id is already queued. shard_key: on a
        sharded queue, place it by this key instead of its id."""
    def push_many(
        self, tasks: Sequence[Union[str, Tuple[str, Payload]]], *, delay: float = 0.0, replace: bool = False
    ) -> list[bool]: ...
    def stats(self) -> QueueStats: ...
    def shard_stats(self) -> list[QueueStats]:
        """Each shard's counts, in shard order (one for a queue not sharded)."""
    def shards(self) -> ShardLayout:
        """How the queue is spread over its shards."""
    def result(self, id: str) -> Optional[bytes]:
        """The stored result, or None (none yet, none at all, or unknown)."""
    def wait_result(self, id: str, timeout: float) -> Optional[bytes]:
        """The task's outcome within `timeout` seconds: its result (None: it
        completed without one), else raises TaskFailed (dead), NotFound
        (unknown) or ResultTimeout (not finished in time)."""
    def status(self, id: str) -> Optional[TaskState]:
        """Where the task is now, or None when it is not known."""
    def cancel(self, id: str) -> bool:
        """Remove the task if it is waiting (due or delayed); False otherwise
        (blocked on dependencies, in flight, completed, dead or unknown). The
        queue keeps no trace of a cancelled task: `status(id)` is then None."""
    def clear(self) -> int:
        """Remove every task waiting and due now; how many."""
    def events_page(self, after: Optional[str] = None, count: int = 100) -> EventsPage:
        """One page of the event log (after a cursor; None: from the oldest kept)."""
    def events(self, *, start: bool = False, after: Optional[str] = None) -> EventStream:
        """Follow the event log: from now on, from the oldest kept (start=True) or after a cursor."""
    def dead(self, count: int = 100) -> list[DeadTask]: ...
    def retry_dead(self, ids: Optional[Sequence[str]] = None) -> int: ...
    def purge_dead(self) -> int: ...
    def pause(self) -> bool: ...
    def resume(self) -> bool: ...
    def claim(self, count: int = 1, lease: float = 30.0) -> list[Lease]: ...
    def configure(
        self,
        *,
        group_concurrency: Optional[int] = None,
        rate: Optional[Tuple[int, float]] = None,
        keep_completed: Optional[int] = None,
        events: Optional[int] = None,
        keep_results: Optional[float] = None,
        keep_results_bytes: Optional[int] = None,
        shards: Optional[int] = None,
        drain: bool = False,
    ) -> QueueSettings:
        """Change the settings given (None: unchanged); return them all.
        shards: spread the queue over K shards (1 to 64); lowering K is refused
        (InvalidArgument) while the removed shards hold tasks, unless
        drain=True; the same call again finishes the drain."""
    def settings(self) -> QueueSettings: ...
    def schedule(
        self, id: str, *, every: Optional[float] = None, cron: Optional[str] = None, payload: Optional[Payload] = None
    ) -> str: ...
    def unschedule(self, id: str) -> bool: ...
    def schedules(self, limit: int = 100) -> list[Schedule]: ...
    def progress(self, id: str) -> Optional[Tuple[int, str]]: ...
    def task(self, id: str) -> Optional[TaskInfo]: ...
    def workers(self) -> list[WorkerInfo]: ...
    def work(
        self,
        handler: Callable[[Task], TaskResult],
        concurrency: int = 1,
        stop_when_idle: bool = False,
        *,
        lease: Optional[float] = None,
        task_timeout: Optional[float] = None,
        worker_id: Optional[str] = None,
        grace: Optional[float] = None,
        keep_results: Optional[float] = None,
        stop: Optional[StopEvent] = None,
    ) -> WorkReport:
        """Run `handler` for every task until stopped: gracefully on stop(),
        `stop` set, Ctrl-C or SIGTERM (then KeyboardInterrupt or
        SystemExit(143)); a second Ctrl-C or SIGTERM stops it at once, its
        tasks given back."""
    def stop(self) -> None:
        """Stop every `work` running on this handle, gracefully."""

class AsyncQueue:
    """A task queue (awaitable calls)."""

    @property
    def name(self) -> str: ...
    def push(
        self,
        id: str,
        payload: Optional[Payload] = None,
        *,
        delay: float = 0.0,
        priority: int = 0,
        group: Optional[str] = None,
        after: Optional[Sequence[str]] = None,
        timeout: Optional[float] = None,
        replace: bool = False,
        shard_key: Optional[str] = None,
    ) -> "Call[bool]": ...
    def push_many(
        self, tasks: Sequence[Union[str, Tuple[str, Payload]]], *, delay: float = 0.0, replace: bool = False
    ) -> "Call[list[bool]]": ...
    def stats(self) -> "Call[QueueStats]": ...
    def shard_stats(self) -> "Call[list[QueueStats]]":
        """Each shard's counts, in shard order (one for a queue not sharded)."""
    def shards(self) -> "Call[ShardLayout]":
        """How the queue is spread over its shards."""
    def result(self, id: str) -> "Call[Optional[bytes]]":
        """The stored result, or None (none yet, none at all, or unknown)."""
    def wait_result(self, id: str, timeout: float) -> "Call[Optional[bytes]]":
        """The task's outcome within `timeout` seconds: its result (None: it
        completed without one), else raises TaskFailed (dead), NotFound
        (unknown) or ResultTimeout (not finished in time)."""
    def status(self, id: str) -> "Call[Optional[TaskState]]":
        """Where the task is now, or None when it is not known."""
    def cancel(self, id: str) -> "Call[bool]":
        """As Queue.cancel: remove the task if it is waiting (due or delayed)."""
    def clear(self) -> "Call[int]":
        """Remove every task waiting and due now; how many."""
    def events_page(self, after: Optional[str] = None, count: int = 100) -> "Call[EventsPage]":
        """One page of the event log (after a cursor; None: from the oldest kept)."""
    def events(self, *, start: bool = False, after: Optional[str] = None) -> AsyncEventStream:
        """Follow the event log: from now on, from the oldest kept (start=True) or after a cursor."""
    def dead(self, count: int = 100) -> "Call[list[DeadTask]]": ...
    def retry_dead(self, ids: Optional[Sequence[str]] = None) -> "Call[int]": ...
    def purge_dead(self) -> "Call[int]": ...
    def pause(self) -> "Call[bool]": ...
    def resume(self) -> "Call[bool]": ...
    def claim(self, count: int = 1, lease: float = 30.0) -> "Call[list[AsyncLease]]": ...
    def configure(
        self,
        *,
        group_concurrency: Optional[int] = None,
        rate: Optional[Tuple[int, float]] = None,
        keep_completed: Optional[int] = None,
        events: Optional[int] = None,
        keep_results: Optional[float] = None,
        keep_results_bytes: Optional[int] = None,
        shards: Optional[int] = None,
        drain: bool = False,
    ) -> "Call[QueueSettings]": ...
    def settings(self) -> "Call[QueueSettings]": ...
    def schedule(
        self, id: str, *, every: Optional[float] = None, cron: Optional[str] = None, payload: Optional[Payload] = None
    ) -> "Call[str]": ...
    def unschedule(self, id: str) -> "Call[bool]": ...
    def schedules(self, limit: int = 100) -> "Call[list[Schedule]]": ...
    def progress(self, id: str) -> "Call[Optional[Tuple[int, str]]]": ...
    def task(self, id: str) -> "Call[Optional[TaskInfo]]": ...
    def workers(self) -> "Call[list[WorkerInfo]]": ...
    def work(
        self,
        handler: Callable[[Task], Union[Awaitable[TaskResult], TaskResult]],
        concurrency: int = 1,
        stop_when_idle: bool = False,
        *,
        lease: Optional[float] = None,
        task_timeout: Optional[float] = None,
        worker_id: Optional[str] = None,
        grace: Optional[float] = None,
        keep_results: Optional[float] = None,
        stop: Optional["asyncio.Event"] = None,
    ) -> "Call[WorkReport]":
        """As Queue.work, on the running loop: a second Ctrl-C or SIGTERM
        stops it at once too; cancelling the awaiting task stops it at once."""
    def stop(self) -> None:
        """Stop every `work` running on this handle, gracefully."""

class Versioned:
    """A record written with compare-and-set on its version."""

    def read(self) -> Optional[Tuple[bytes, int]]: ...
    def write(self, expected: int, data: Payload) -> int: ...
    def update(self, f: Callable[[Optional[bytes]], Payload], max_attempts: int = 10) -> Tuple[int, bytes]:
        """Read-compute-write with retries on conflict; returns (version, data)."""

class Stock:
    """An atomic stock counter."""

    def get(self) -> int: ...
    def set(self, n: int) -> None: ...
    def add(self, n: int) -> int: ...
    def take(self, n: int) -> Tuple[bool, int]: ...

class Ids:
    """Unique increasing ids."""

    def next(self) -> int: ...
    def next_batch(self, n: int) -> list[int]: ...

class RateLimiter:
    """At most n grants per period, exact over any window."""

    def try_acquire(self) -> bool: ...
    def acquire(self, wait: Optional[float] = None) -> None: ...

class AsyncVersioned:
    """Versioned, with awaitable calls."""

    def read(self) -> "Call[Optional[Tuple[bytes, int]]]": ...
    def write(self, expected: int, data: Payload) -> "Call[int]": ...
    def update(
        self, f: Callable[[Optional[bytes]], Payload], max_attempts: int = 10
    ) -> "Call[Tuple[int, bytes]]":
        """update, awaitable; `f` is a plain function run in a runtime thread."""

class AsyncStock:
    """Stock, with awaitable calls."""

    def get(self) -> "Call[int]": ...
    def set(self, n: int) -> "Call[None]": ...
    def add(self, n: int) -> "Call[int]": ...
    def take(self, n: int) -> "Call[Tuple[bool, int]]": ...

class AsyncIds:
    """Ids, with awaitable calls."""

    def next(self) -> "Call[int]": ...
    def next_batch(self, n: int) -> "Call[list[int]]": ...

class AsyncRateLimiter:
    """RateLimiter, with awaitable calls."""

    def try_acquire(self) -> "Call[bool]": ...
    def acquire(self, wait: Optional[float] = None) -> "Call[None]": ...

class Client:
    """A connection to Redis with the sync API."""

    def __init__(
        self,
        url: Optional[str] = None,
        *,
        urls: Optional[Sequence[str]] = None,
        cluster: bool = False,
        sentinel: Optional[str] = None,
        cacert: Optional[str] = None,
        cert: Optional[str] = None,
        key: Optional[str] = None,
        timeout: Optional[float] = None,
        connect_timeout: Optional[float] = None,
        key_prefix: Optional[str] = None,
        lazy: bool = False,
        native_commands: bool = True,
    ) -> None: ...
    @property
    def timeout(self) -> float:
        """The deadline of every call to Redis in seconds (default 2.0; a fresh
        client's first call may also wait up to connect_timeout to connect)."""
    @property
    def closed(self) -> bool: ...
    def close(self) -> None:
        """Release every lock this client holds, wait for background releases,
        and refuse further calls (StateError). Closing twice does nothing."""
    def __enter__(self) -> "Client": ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Literal[False]: ...
    def lock(
        self,
        name: str,
        ttl: float = 30.0,
        wait: float = 0.0,
        watchdog: bool = False,
        raw_key: bool = False,
        *,
        retry_interval: Optional[float] = None,
        node_timeout: Optional[float] = None,
        replicas: Optional[Tuple[int, float]] = None,
    ) -> Lock: ...
    def fair_lock(
        self,
        name: str,
        ttl: float = 30.0,
        wait: float = 0.0,
        watchdog: bool = False,
        *,
        retry_interval: Optional[float] = None,
        node_timeout: Optional[float] = None,
        replicas: Optional[Tuple[int, float]] = None,
    ) -> Lock: ...
    def rwlock(
        self,
        name: str,
        write: bool = False,
        ttl: float = 30.0,
        wait: float = 0.0,
        watchdog: bool = False,
        *,
        retry_interval: Optional[float] = None,
        node_timeout: Optional[float] = None,
        replicas: Optional[Tuple[int, float]] = None,
    ) -> Lock: ...
    def semaphore(
        self,
        name: str,
        permits: int,
        n: int = 1,
        ttl: float = 30.0,
        wait: float = 0.0,
        watchdog: bool = False,
        *,
        retry_interval: Optional[float] = None,
        node_timeout: Optional[float] = None,
        replicas: Optional[Tuple[int, float]] = None,
    ) -> Lock:
        """The capacity stored in Redis counts: another `permits` is refused (InvalidArgument) at the first acquire."""
    def election(
        self,
        name: str,
        id: str,
        ttl: float = 30.0,
        wait: float = 0.0,
        watchdog: bool = False,
        *,
        retry_interval: Optional[float] = None,
        node_timeout: Optional[float] = None,
        replicas: Optional[Tuple[int, float]] = None,
    ) -> Lock: ...
    def multi_lock(
        self,
        names: Sequence[str],
        ttl: float = 30.0,
        wait: float = 0.0,
        watchdog: bool = False,
        *,
        retry_interval: Optional[float] = None,
        node_timeout: Optional[float] = None,
        replicas: Optional[Tuple[int, float]] = None,
    ) -> Lock: ...
    def queue(
        self,
        name: str,
        max_attempts: Optional[int] = None,
        backoff: Optional[Tuple[float, float]] = None,
        max_payload: Optional[int] = None,
    ) -> Queue: ...
    def held_count(self) -> int: ...
    def nodes(self) -> int: ...
    def fenced_write(self, resource: str, fence: int, value: Payload) -> None: ...
    def fenced_read(self, resource: str) -> Optional[Tuple[int, bytes]]: ...
    def versioned(self, name: str) -> Versioned: ...
    def stock(self, name: str) -> Stock: ...
    def ids(self, name: str, block: Optional[int] = None) -> Ids: ...
    def rate_limiter(self, name: str, n: int, period: float) -> RateLimiter: ...
    def settle(self, timeout: float = 2.0) -> bool: ...
    def server_info(self) -> list[ServerInfo]: ...
    def release_all(self) -> ReleaseAll: ...
    def held_locks(self, pattern: str = "*", limit: int = 100) -> list[HeldLock]: ...
    def queue_names(self, limit: int = 100) -> list[str]: ...

class AsyncClient:
    """A connection to Redis with the asyncio API: `await AsyncClient.connect(url)`."""

    @staticmethod
    def connect(
        url: Optional[str] = None,
        *,
        urls: Optional[Sequence[str]] = None,
        cluster: bool = False,
        sentinel: Optional[str] = None,
        cacert: Optional[str] = None,
        cert: Optional[str] = None,
        key: Optional[str] = None,
        timeout: Optional[float] = None,
        connect_timeout: Optional[float] = None,
        key_prefix: Optional[str] = None,
        lazy: bool = False,
        native_commands: bool = True,
    ) -> "Call[AsyncClient]": ...
    @property
    def timeout(self) -> float: ...
    @property
    def closed(self) -> bool: ...
    def aclose(self) -> "Call[None]":
        """close(), awaitable."""
    def __aenter__(self) -> "Call[AsyncClient]": ...
    def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> "Call[Literal[False]]": ...
    def lock(
        self,
        name: str,
        ttl: float = 30.0,
        wait: float = 0.0,
        watchdog: bool = False,
        raw_key: bool = False,
        *,
        retry_interval: Optional[float] = None,
        node_timeout: Optional[float] = None,
        replicas: Optional[Tuple[int, float]] = None,
    ) -> AsyncLock: ...
    def fair_lock(
        self,
        name: str,
        ttl: float = 30.0,
        wait: float = 0.0,
        watchdog: bool = False,
        *,
        retry_interval: Optional[float] = None,
        node_timeout: Optional[float] = None,
        replicas: Optional[Tuple[int, float]] = None,
    ) -> AsyncLock: ...
    def rwlock(
        self,
        name: str,
        write: bool = False,
        ttl: float = 30.0,
        wait: float = 0.0,
        watchdog: bool = False,
        *,
        retry_interval: Optional[float] = None,
        node_timeout: Optional[float] = None,
        replicas: Optional[Tuple[int, float]] = None,
    ) -> AsyncLock: ...
    def semaphore(
        self,
        name: str,
        permits: int,
        n: int = 1,
        ttl: float = 30.0,
        wait: float = 0.0,
        watchdog: bool = False,
        *,
        retry_interval: Optional[float] = None,
        node_timeout: Optional[float] = None,
        replicas: Optional[Tuple[int, float]] = None,
    ) -> AsyncLock:
        """The capacity stored in Redis counts: another `permits` is refused (InvalidArgument) at the first acquire."""
    def election(
        self,
        name: str,
        id: str,
        ttl: float = 30.0,
        wait: float = 0.0,
        watchdog: bool = False,
        *,
        retry_interval: Optional[float] = None,
        node_timeout: Optional[float] = None,
        replicas: Optional[Tuple[int, float]] = None,
    ) -> AsyncLock: ...
    def multi_lock(
        self,
        names: Sequence[str],
        ttl: float = 30.0,
        wait: float = 0.0,
        watchdog: bool = False,
        *,
        retry_interval: Optional[float] = None,
        node_timeout: Optional[float] = None,
        replicas: Optional[Tuple[int, float]] = None,
    ) -> AsyncLock: ...
    def queue(
        self,
        name: str,
        max_attempts: Optional[int] = None,
        backoff: Optional[Tuple[float, float]] = None,
        max_payload: Optional[int] = None,
    ) -> AsyncQueue: ...
    def held_count(self) -> int: ...
    def nodes(self) -> int: ...
    def fenced_write(self, resource: str, fence: int, value: Payload) -> "Call[None]": ...
    def fenced_read(self, resource: str) -> "Call[Optional[Tuple[int, bytes]]]": ...
    def settle(self, timeout: float = 2.0) -> "Call[bool]": ...
    def server_info(self) -> "Call[list[ServerInfo]]": ...
    def release_all(self) -> "Call[ReleaseAll]": ...
    def held_locks(self, pattern: str = "*", limit: int = 100) -> "Call[list[HeldLock]]": ...
    def queue_names(self, limit: int = 100) -> "Call[list[str]]": ...
    def versioned(self, name: str) -> AsyncVersioned: ...
    def stock(self, name: str) -> AsyncStock: ...
    def ids(self, name: str, block: Optional[int] = None) -> AsyncIds: ...
    def rate_limiter(self, name: str, n: int, period: float) -> AsyncRateLimiter: ...

"""A small task layer over :class:`dlm.Queue`, the way arq, RQ and Celery users
write tasks: functions registered with ``@tasks.task``, called with
``.delay(...)``, routed to the function by its name, with arguments and
results as JSON (or msgpack), and a :class:`Job` handle per call.

    import dlm
    from dlm.tasks import Tasks

    tasks = Tasks(dlm.Client(url), "mail")

    @tasks.task
    def send(to: str, subject: str) -> dict:
        ...
        return {"sent": to}

    job = send.delay("ann@example.com", subject="hi")   # a Job
    tasks.work(stop_when_idle=True)                       # or a CLI worker
    job.result(timeout=5.0)                               # {'sent': 'ann@example.com'}

Everything is plain dlm underneath, so any dlm worker can drain these tasks.
The payload is ``{"task": NAME, "args": [...], "kwargs": {...}}`` and the
result is the function's return value, both encoded with the serializer
(``"json"``, the default, or ``"msgpack"`` when the msgpack package is
installed). A ``dlm queue work QUEUE -- python -m dlm.tasks run MODULE:TASKS``
worker runs the registered functions from the CLI (the payload on stdin, the
result on stdout).

This module is pure Python over the native binding; the only queue calls it
makes are ``push``, ``task``, ``result``, ``wait_result``, ``cancel`` and
``work``.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import importlib
import inspect
import json
import sys
import time
import uuid
from typing import (
    Any,
    Callable,
    Dict,
    TYPE_CHECKING,
    Generic,
    List,
    Optional,
    Tuple,
    TypeVar,
    Union,
    cast,
    overload,
)

from ._dlm import AsyncClient, AsyncQueue, Call, Client, Queue, Task
from .errors import Error, NotFound, ResultTimeout, TaskFailed

if TYPE_CHECKING:  # TypedDicts of the stubs only
    from ._dlm import TaskInfo, WorkReport

__all__ = [
    "AsyncJob",
    "AsyncTaskFunction",
    "AsyncTasks",
    "Job",
    "JobCancelled",
    "JobFailed",
    "JobNotFound",
    "JobStatus",
    "JobTimeout",
    "TaskFunction",
    "Tasks",
    "UnknownTask",
]

R = TypeVar("R")


class JobStatus(str, enum.Enum):
    """Where a job is. A ``str``, so ``job.status() == "complete"`` works."""

    QUEUED = "queued"
    """Waiting for a worker (due now, delayed, or blocked on dependencies)."""
    RUNNING = "running"
    """Leased to a worker."""
    COMPLETE = "complete"
    """Returned; its result is readable until the queue forgets it
    (``keep_results``, a day by default)."""
    FAILED = "failed"
    """Failed ``max_attempts`` times: in the dead-letter set."""
    CANCELLED = "cancelled"
    """Cancelled before it ran, by this handle's :meth:`Job.cancel`. The
    queue removes a cancelled task (``Queue.cancel``) and keeps no trace of
    it, so only the handle that cancelled it says so; any other handle on
    the id says :attr:`NOT_FOUND`."""
    NOT_FOUND = "not_found"
    """Never pushed, completed and forgotten, or cancelled (by another
    handle)."""


class JobFailed(Error):
    """The job failed for good (dead-lettered); ``error`` is its last error."""

    def __init__(self, id: str, error: Optional[str]) -> None:
        super().__init__(f"job {id!r} failed: {error}")
        self.id = id
        self.error = error


class JobCancelled(JobFailed):
    """The job was cancelled before it ran."""

    def __init__(self, id: str) -> None:
        Error.__init__(self, f"job {id!r} was cancelled")
        self.id = id
        self.error = "cancelled"


class JobNotFound(Error, LookupError):
    """No such job: never pushed, or completed and forgotten."""

    def __init__(self, id: str) -> None:
        super().__init__(f"no job {id!r} (never pushed, or completed and forgotten)")
        self.id = id


class JobTimeout(Error, TimeoutError):
    """``result(timeout)`` ran out before the job finished (it still may)."""

    def __init__(self, id: str, status: JobStatus) -> None:
        super().__init__(f"job {id!r} not finished in time (it is {status.value})")
        self.id = id
        self.status = status


class UnknownTask(Error):
    """A worker got a task whose name no function is registered under."""


# ------------------------------------------------------------------------ serializers
class _Serializer:
    name = "json"

    def dumps(self, value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data)


class _Msgpack(_Serializer):
    name = "msgpack"

    def __init__(self) -> None:
        try:
            import msgpack  # type: ignore[import-untyped,import-not-found,unused-ignore]
        except ImportError as e:  # pragma: no cover - depends on the install
            raise ImportError("serializer='msgpack' needs the msgpack package: pip install msgpack") from e
        self._m = msgpack

    def dumps(self, value: Any) -> bytes:
        return cast(bytes, self._m.packb(value, use_bin_type=True))

    def loads(self, data: bytes) -> Any:
        return self._m.unpackb(data, raw=False)


def _serializer(name: str) -> _Serializer:
    if name == "json":
        return _Serializer()
    if name == "msgpack":
        return _Msgpack()
    raise ValueError(f"serializer must be 'json' or 'msgpack', not {name!r}")


# ------------------------------------------------------------------- the shared part
def _status(info: Optional[TaskInfo], cancelled: bool) -> JobStatus:
    """The job's status from the queue's view of its task (``Queue.task``);
    ``cancelled``: the handle removed it (the queue keeps no trace of that)."""
    if info is None:
        return JobStatus.CANCELLED if cancelled else JobStatus.NOT_FOUND
    state = info["state"]
    if state in ("waiting", "delayed", "blocked"):
        return JobStatus.QUEUED
    if state == "in_flight":
        return JobStatus.RUNNING
    if state == "dead":
        return JobStatus.FAILED
    return JobStatus.COMPLETE


class _Registry:
    """The functions of a task queue by name, and the encoding of calls."""

    def __init__(self, serializer: str) -> None:
        self.serializer = _serializer(serializer)
        self.functions: Dict[str, Callable[..., Any]] = {}

    def register(self, fn: Callable[..., Any], name: Optional[str]) -> str:
        name = name or fn.__name__
        if name in self.functions and self.functions[name] is not fn:
            raise ValueError(f"a task named {name!r} is already registered")
        self.functions[name] = fn
        return name

    def encode(self, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> bytes:
        return self.serializer.dumps({"task": name, "args": list(args), "kwargs": kwargs})

    def decode(self, payload: bytes) -> Tuple[Callable[..., Any], Tuple[Any, ...], Dict[str, Any]]:
        """The function a payload calls and its arguments."""
        call = self.serializer.loads(payload)
        if not isinstance(call, dict):
            raise UnknownTask(f"not a dlm.tasks payload: {payload[:80]!r}")
        name = call.get("task")
        fn = self.functions.get(name) if isinstance(name, str) else None
        if fn is None:
            known = ", ".join(sorted(self.functions)) or "none"
            raise UnknownTask(f"no task named {name!r} is registered here (registered: {known})")
        return fn, tuple(call.get("args") or ()), dict(call.get("kwargs") or {})

    def outcome(self, id: str, status: JobStatus, info: Optional[TaskInfo], raw: Optional[bytes]) -> Any:
        """The value `result()` returns for a finished job, or the error it raises."""
        if status is JobStatus.CANCELLED:
            raise JobCancelled(id)
        if status is JobStatus.FAILED:
            raise JobFailed(id, info.get("error") if info else None)
        if status is JobStatus.NOT_FOUND:
            raise JobNotFound(id)
        if raw is None:
            return None  # acked without a result (e.g. by hand)
        try:
            return self.serializer.loads(raw)
        except ValueError:
            return raw  # a result another worker wrote that is no JSON: the bytes

    def run_sync(self, task: Task) -> bytes:
        fn, args, kwargs = self.decode(task.payload)
        value = fn(*args, **kwargs)
        if asyncio.iscoroutine(value):
            value = asyncio.run(value)
        return self.serializer.dumps(value)


def _new_id() -> str:
    return uuid.uuid4().hex


# ----------------------------------------------------------------------------- sync
class Job:
    """A handle on one task pushed by :meth:`TaskFunction.delay`: its id, and
    ``status()``, ``result(timeout)`` and ``cancel()``."""

    def __init__(self, tasks: "Tasks", id: str) -> None:
        self.tasks = tasks
        self.id = id
        self._cancelled = False

    def __repr__(self) -> str:
        return f"Job({self.id!r}, queue={self.tasks.queue.name!r})"

    def info(self) -> Optional[TaskInfo]:
        """Everything the queue knows about the task (``Queue.task``), or None."""
        return self.tasks.queue.task(self.id)

    def status(self) -> JobStatus:
        """Where the job is; ``CANCELLED`` only on the handle that cancelled it."""
        return _status(self.tasks.queue.task(self.id), self._cancelled)

    def result(self, timeout: Optional[float] = None) -> Any:
        """The function's return value, waiting up to ``timeout`` seconds for
        the job to finish (None: for ever). Raises :class:`JobFailed`,
        :class:`JobCancelled`, :class:`JobNotFound` or :class:`JobTimeout`."""
        q = self.tasks.queue
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            info = q.task(self.id)
            status = _status(info, self._cancelled)
            if status not in (JobStatus.QUEUED, JobStatus.RUNNING):
                raw = q.result(self.id) if status is JobStatus.COMPLETE else None
                return self.tasks.registry.outcome(self.id, status, info, raw)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise JobTimeout(self.id, status)
            # Woken by the result; every second a look at the state (a job
            # that died leaves no result).
            try:
                q.wait_result(self.id, 1.0 if left is None else max(0.01, min(1.0, left)))
            except (ResultTimeout, TaskFailed, NotFound):
                pass  # the state is read again above

    def cancel(self) -> bool:
        """Keep the job from running (``Queue.cancel``): True when it was
        waiting (due or delayed) and is now removed from the queue, False
        when it is blocked on dependencies, runs, ran, failed or is unknown.
        After True, this handle's ``status()`` says ``CANCELLED`` and
        ``result()`` raises :class:`JobCancelled`."""
        cancelled = self.tasks.queue.cancel(self.id)
        self._cancelled = self._cancelled or cancelled
        return cancelled


class TaskFunction(Generic[R]):
    """A function registered with ``@tasks.task``: call it to run it here,
    ``.delay(*args, **kwargs)`` to queue it, ``.push(args, kwargs, id=...)``
    for the queue's options."""

    __name__: str

    def __init__(self, tasks: "Tasks", fn: Callable[..., R], name: str) -> None:
        self.tasks = tasks
        self.fn = fn
        self.name = name
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        return self.fn(*args, **kwargs)

    def delay(self, *args: Any, **kwargs: Any) -> Job:
        """Queue a call with a generated id, due now."""
        return self.push(args, kwargs)

    def push(
        self,
        args: Tuple[Any, ...] = (),
        kwargs: Optional[Dict[str, Any]] = None,
        *,
        id: Optional[str] = None,
        delay: float = 0.0,
        priority: int = 0,
        group: Optional[str] = None,
        after: Optional[List[Union[str, Job]]] = None,
        timeout: Optional[float] = None,
    ) -> Job:
        """Queue a call. With ``id`` given, a job with that id already queued
        is kept (pushing is idempotent); the returned handle is on it."""
        job_id = id or _new_id()
        payload = self.tasks.registry.encode(self.name, args, kwargs or {})
        deps = None if after is None else [a.id if isinstance(a, Job) else a for a in after]
        self.tasks.queue.push(job_id, payload, delay=delay, priority=priority, group=group,
                              after=deps, timeout=timeout)
        return Job(self.tasks, job_id)


class Tasks:
    """The task functions of one queue (sync API). ``client`` is a
    :class:`dlm.Client` (or pass ``queue=``, a :class:`dlm.Queue`)."""

    def __init__(
        self,
        client: Optional[Client] = None,
        name: Optional[str] = None,
        *,
        queue: Optional[Queue] = None,
        serializer: str = "json",
        max_attempts: Optional[int] = None,
        backoff: Optional[Tuple[float, float]] = None,
    ) -> None:
        if queue is None:
            if client is None or name is None:
                raise TypeError("Tasks(client, name) or Tasks(queue=...)")
            queue = client.queue(name, max_attempts=max_attempts, backoff=backoff)
        self.queue = queue
        self.registry = _Registry(serializer)

    @overload
    def task(self, fn: Callable[..., R]) -> TaskFunction[R]: ...
    @overload
    def task(self, *, name: Optional[str] = None) -> Callable[[Callable[..., R]], TaskFunction[R]]: ...

    def task(
        self, fn: Optional[Callable[..., R]] = None, *, name: Optional[str] = None
    ) -> Union[TaskFunction[R], Callable[[Callable[..., R]], TaskFunction[R]]]:
        """Register a function as a task, under its ``__name__`` or ``name``."""

        def register(f: Callable[..., R]) -> TaskFunction[R]:
            return TaskFunction(self, f, self.registry.register(f, name))

        return register(fn) if fn is not None else register

    def job(self, id: str) -> Job:
        """A handle on a job by its id (e.g. one pushed by another process)."""
        return Job(self, id)

    def handle(self, task: Task) -> bytes:
        """Run one task: the handler :meth:`work` gives ``Queue.work``."""
        return self.registry.run_sync(task)

    def work(self, concurrency: int = 1, stop_when_idle: bool = False, **options: Any) -> WorkReport:
        """Run the registered functions for the queue's tasks (``Queue.work``
        with its options: ``lease``, ``task_timeout``, ``worker_id``, ...)."""
        return self.queue.work(self.handle, concurrency, stop_when_idle, **options)


# ---------------------------------------------------------------------------- asyncio
class AsyncJob:
    """:class:`Job` with awaitable methods."""

    def __init__(self, tasks: "AsyncTasks", id: str) -> None:
        self.tasks = tasks
        self.id = id
        self._cancelled = False

    def __repr__(self) -> str:
        return f"AsyncJob({self.id!r}, queue={self.tasks.queue.name!r})"

    async def info(self) -> Optional[TaskInfo]:
        return await self.tasks.queue.task(self.id)

    async def _status(self) -> Tuple[JobStatus, Optional[TaskInfo], Optional[bytes]]:
        q = self.tasks.queue
        info = await q.task(self.id)
        raw = await q.result(self.id) if info is not None and info["state"] == "completed" else None
        return _status(info, self._cancelled), info, raw

    async def status(self) -> JobStatus:
        return (await self._status())[0]

    async def result(self, timeout: Optional[float] = None) -> Any:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            status, info, raw = await self._status()
            if status not in (JobStatus.QUEUED, JobStatus.RUNNING):
                return self.tasks.registry.outcome(self.id, status, info, raw)
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                raise JobTimeout(self.id, status)
            try:
                await self.tasks.queue.wait_result(self.id, 1.0 if left is None else max(0.01, min(1.0, left)))
            except (ResultTimeout, TaskFailed, NotFound):
                pass  # the state is read again above

    async def cancel(self) -> bool:
        """As :meth:`Job.cancel` (``AsyncQueue.cancel``)."""
        cancelled = await self.tasks.queue.cancel(self.id)
        self._cancelled = self._cancelled or cancelled
        return cancelled


class AsyncTaskFunction(Generic[R]):
    """:class:`TaskFunction` of :class:`AsyncTasks`: ``await f.delay(...)``."""

    __name__: str

    def __init__(self, tasks: "AsyncTasks", fn: Callable[..., Any], name: str) -> None:
        self.tasks = tasks
        self.fn = fn
        self.name = name
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    async def delay(self, *args: Any, **kwargs: Any) -> AsyncJob:
        return await self.push(args, kwargs)

    async def push(
        self,
        args: Tuple[Any, ...] = (),
        kwargs: Optional[Dict[str, Any]] = None,
        *,
        id: Optional[str] = None,
        delay: float = 0.0,
        priority: int = 0,
        group: Optional[str] = None,
        after: Optional[List[Union[str, AsyncJob]]] = None,
        timeout: Optional[float] = None,
    ) -> AsyncJob:
        job_id = id or _new_id()
        payload = self.tasks.registry.encode(self.name, args, kwargs or {})
        deps = None if after is None else [a.id if isinstance(a, AsyncJob) else a for a in after]
        await self.tasks.queue.push(job_id, payload, delay=delay, priority=priority, group=group,
                                    after=deps, timeout=timeout)
        return AsyncJob(self.tasks, job_id)


class AsyncTasks:
    """:class:`Tasks` over an :class:`dlm.AsyncClient`; task functions may be
    ``async def`` (awaited on the loop) or plain (run in the worker's threads
    by ``AsyncQueue.work``'s rules for sync handlers)."""

    def __init__(
        self,
        client: Optional[AsyncClient] = None,
        name: Optional[str] = None,
        *,
        queue: Optional[AsyncQueue] = None,
        serializer: str = "json",
        max_attempts: Optional[int] = None,
        backoff: Optional[Tuple[float, float]] = None,
    ) -> None:
        if queue is None:
            if client is None or name is None:
                raise TypeError("AsyncTasks(client, name) or AsyncTasks(queue=...)")
            queue = client.queue(name, max_attempts=max_attempts, backoff=backoff)
        self.queue = queue
        self.registry = _Registry(serializer)

    @overload
    def task(self, fn: Callable[..., Any]) -> AsyncTaskFunction[Any]: ...
    @overload
    def task(self, *, name: Optional[str] = None) -> Callable[[Callable[..., Any]], AsyncTaskFunction[Any]]: ...

    def task(
        self, fn: Optional[Callable[..., Any]] = None, *, name: Optional[str] = None
    ) -> Union[AsyncTaskFunction[Any], Callable[[Callable[..., Any]], AsyncTaskFunction[Any]]]:
        def register(f: Callable[..., Any]) -> AsyncTaskFunction[Any]:
            return AsyncTaskFunction(self, f, self.registry.register(f, name))

        return register(fn) if fn is not None else register

    def job(self, id: str) -> AsyncJob:
        return AsyncJob(self, id)

    async def handle(self, task: Task) -> bytes:
        fn, args, kwargs = self.registry.decode(task.payload)
        if inspect.iscoroutinefunction(fn):
            value = await fn(*args, **kwargs)
        else:  # a plain function runs in a thread: the loop goes on
            value = await asyncio.to_thread(fn, *args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
        return self.registry.serializer.dumps(value)

    def work(self, concurrency: int = 1, stop_when_idle: bool = False, **options: Any) -> "Call[WorkReport]":
        return self.queue.work(self.handle, concurrency, stop_when_idle, **options)


# ------------------------------------------------------------------- the CLI's worker
def _load(spec: str) -> Union[Tasks, AsyncTasks]:
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise SystemExit(f"expected MODULE:ATTR (e.g. myapp.jobs:tasks), not {spec!r}")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, (Tasks, AsyncTasks)):
        raise SystemExit(f"{spec} is a {type(obj).__name__}, not dlm.tasks.Tasks")
    return obj


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m dlm.tasks run MODULE:TASKS``: run the one task whose
    payload is on stdin and print its encoded result on stdout, as
    ``dlm queue work QUEUE -- python -m dlm.tasks run MODULE:TASKS`` needs
    (exit 0 acks; an exception exits 1, and the CLI retries the task)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "run":
        print("usage: python -m dlm.tasks run MODULE:TASKS  (payload on stdin)", file=sys.stderr)
        return 2
    sys.path.insert(0, "")
    registry = _load(args[1]).registry
    fn, fargs, fkwargs = registry.decode(sys.stdin.buffer.read())
    value = fn(*fargs, **fkwargs)
    if asyncio.iscoroutine(value):
        value = asyncio.run(value)
    sys.stdout.buffer.write(registry.serializer.dumps(value))
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    # Run as `python -m dlm.tasks`, this file is `__main__`; the user's module
    # imports `dlm.tasks`, whose classes are the ones to find.
    from dlm.tasks import main as _main

    sys.exit(_main())

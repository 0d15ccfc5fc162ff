"""dlm.tasks: the task layer over the queue (decorators routing by name, JSON or msgpack
arguments, generated ids, job handles), its asyncio twin, and its interop with the CLI's worker."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import dlm
from dlm.tasks import (
    AsyncTasks,
    JobCancelled,
    JobFailed,
    JobNotFound,
    JobStatus,
    JobTimeout,
    Tasks,
)
from _servers import dlm_bin, run_cli  # noqa: F401 - fixtures


def make(redis_url: str, name: str = "jobs", **kw: Any) -> Tasks:
    return Tasks(dlm.Client(redis_url), name, **kw)


def test_delay_routes_by_name_and_returns_the_result(redis_url: str) -> None:
    tasks = make(redis_url)
    calls: list[str] = []

    @tasks.task
    def add(a: int, b: int) -> int:
        calls.append("add")
        return a + b

    @tasks.task(name="greeting")
    def greet(who: str, *, punct: str = ".") -> dict[str, str]:
        calls.append("greet")
        return {"text": f"hello {who}{punct}"}

    assert add(1, 2) == 3 and add.__name__ == "add"  # still a plain function
    calls.clear()
    j1 = add.delay(2, 3)
    j2 = greet.delay("ann", punct="!")
    assert j1.id != j2.id and len(j1.id) == 32  # generated (uuid4 hex)
    assert j1.status() is JobStatus.QUEUED and isinstance(j1.status(), str)
    assert j1.status().value == "queued"
    report = tasks.work(concurrency=2, stop_when_idle=True)
    assert report["acked"] == 2, report
    assert sorted(calls) == ["add", "greet"]
    assert j1.result(timeout=5) == 5
    assert j2.result(timeout=5) == {"text": "hello ann!"}
    assert j1.status() is JobStatus.COMPLETE


def test_the_payload_is_plain_json_any_worker_can_read(redis_url: str) -> None:
    tasks = make(redis_url)

    @tasks.task
    def send(to: str, subject: str = "") -> None:
        pass

    job = send.delay("a@example.com", subject="hi")
    (lease,) = tasks.queue.claim(1, lease=10.0)
    assert lease.task.id == job.id
    assert json.loads(lease.task.payload) == {
        "task": "send", "args": ["a@example.com"], "kwargs": {"subject": "hi"}}
    assert job.status() is JobStatus.RUNNING
    lease.ack(b'"by hand"')
    assert job.result(timeout=1) == "by hand"


def test_an_id_given_is_idempotent_and_none_returns_none(redis_url: str) -> None:
    tasks = make(redis_url)
    runs: list[int] = []

    @tasks.task
    def once(n: int) -> None:
        runs.append(n)

    a = once.push((1,), id="order-42")
    b = once.push((2,), id="order-42")  # already queued: kept
    assert a.id == b.id == "order-42"
    tasks.work(stop_when_idle=True)
    assert runs == [1]
    assert a.result(timeout=1) is None and a.status() is JobStatus.COMPLETE


def test_a_failing_job_raises_job_failed_with_its_error(redis_url: str) -> None:
    tasks = make(redis_url, max_attempts=2, backoff=(0.01, 0.02))

    @tasks.task
    def boom() -> None:
        raise RuntimeError("no stock left")

    job = boom.delay()
    report = tasks.work(stop_when_idle=True)
    assert report["dead"] == 1, report
    assert job.status() is JobStatus.FAILED
    with pytest.raises(JobFailed, match="no stock left") as e:
        job.result(timeout=5)
    assert isinstance(e.value, dlm.Error) and "no stock left" in (e.value.error or "")


def test_unknown_ids_and_timeouts(redis_url: str) -> None:
    tasks = make(redis_url)

    @tasks.task
    def slow() -> None:
        pass

    ghost = tasks.job("never-pushed")
    assert ghost.status() is JobStatus.NOT_FOUND
    with pytest.raises(JobNotFound):
        ghost.result(timeout=0.1)
    job = slow.delay()
    t0 = time.monotonic()
    with pytest.raises(JobTimeout) as e:
        job.result(timeout=0.3)
    assert 0.25 < time.monotonic() - t0 < 3
    assert e.value.status is JobStatus.QUEUED and isinstance(e.value, TimeoutError)
    assert ghost.cancel() is False


def test_result_waits_for_a_worker_in_another_thread(redis_url: str) -> None:
    import threading

    tasks = make(redis_url)

    @tasks.task
    def double(x: int) -> int:
        time.sleep(0.2)
        return 2 * x

    job = double.delay(21)
    t = threading.Thread(target=tasks.work, kwargs={"stop_when_idle": True})
    t.start()
    try:
        assert job.result(timeout=10) == 42
    finally:
        t.join(10)


def test_cancel_keeps_a_waiting_job_from_running(redis_url: str) -> None:
    tasks = make(redis_url)
    runs: list[str] = []

    @tasks.task
    def charge(who: str) -> str:
        runs.append(who)
        return who

    keep = charge.delay("kept")
    drop = charge.delay("dropped")
    later = charge.push(("later",), delay=60.0)
    blocked = charge.push(("blocked",), after=[keep])
    assert drop.cancel() is True
    assert later.cancel() is True  # a delayed job too
    assert blocked.cancel() is False  # blocked on its dependency: the queue's cancel leaves it
    # The queue's own cancel: the task is gone, no marker stays queued for a worker to drain.
    assert tasks.queue.status(drop.id) is None and tasks.queue.task(later.id) is None
    assert tasks.queue.stats()["waiting"] == 1 and tasks.queue.stats()["blocked"] == 1
    assert drop.status() is JobStatus.CANCELLED  # this handle cancelled it
    assert tasks.job(drop.id).status() is JobStatus.NOT_FOUND  # the queue keeps no trace
    report = tasks.work(stop_when_idle=True)
    assert report["acked"] == 2, report  # the kept one and its dependent ran
    assert runs == ["kept", "blocked"]
    assert drop.status() is JobStatus.CANCELLED
    with pytest.raises(JobCancelled):
        drop.result(timeout=1)
    with pytest.raises(JobNotFound):
        tasks.job(drop.id).result(timeout=1)
    assert keep.result(timeout=1) == "kept"
    assert keep.cancel() is False  # it ran already
    assert drop.cancel() is False
    assert drop.status() is JobStatus.CANCELLED


def test_msgpack_serializer(redis_url: str) -> None:
    msgpack = pytest.importorskip("msgpack")
    tasks = make(redis_url, "mp", serializer="msgpack")

    @tasks.task
    def echo(data: bytes) -> dict[str, Any]:
        return {"len": len(data), "data": data}

    job = echo.delay(b"\x00\xff")
    (lease,) = tasks.queue.claim(1, lease=10.0)
    assert msgpack.unpackb(lease.task.payload) == {"task": "echo", "args": [b"\x00\xff"], "kwargs": {}}
    lease.abandon()
    tasks.work(stop_when_idle=True)
    assert job.result(timeout=5) == {"len": 2, "data": b"\x00\xff"}
    with pytest.raises(ValueError):
        make(redis_url, serializer="pickle")


def test_a_name_is_registered_once(redis_url: str) -> None:
    tasks = make(redis_url)

    @tasks.task
    def f() -> None:
        pass

    with pytest.raises(ValueError, match="already registered"):
        @tasks.task(name="f")
        def g() -> None:
            pass


def test_asyncio_tasks(redis_url: str) -> None:
    async def main() -> None:
        ac = await dlm.AsyncClient.connect(redis_url)
        tasks = AsyncTasks(ac, "ajobs")

        @tasks.task
        async def fetch(n: int) -> list[int]:
            await asyncio.sleep(0.01)
            return list(range(n))

        @tasks.task
        def blocking(x: str) -> str:  # a plain function: run in a thread
            time.sleep(0.05)
            return x.upper()

        j1 = await fetch.delay(3)
        j2 = await blocking.delay("x")
        j3 = await fetch.delay(1)
        assert await j3.cancel() is True
        assert await tasks.queue.status(j3.id) is None  # removed, not a marker to drain
        assert await j1.status() is JobStatus.QUEUED
        report = await tasks.work(concurrency=4, stop_when_idle=True)
        assert report["acked"] == 2, report
        assert await j1.result(timeout=5) == [0, 1, 2]
        assert await j2.result(timeout=5) == "X"
        assert await j3.status() is JobStatus.CANCELLED
        with pytest.raises(JobCancelled):
            await j3.result(timeout=1)
        assert await tasks.job(j3.id).status() is JobStatus.NOT_FOUND
        with pytest.raises(JobNotFound):
            await tasks.job("nope").result(timeout=1)

    asyncio.run(main())


# ------------------------------------------------------------------ a CLI worker drains them
JOBS_MODULE = textwrap.dedent('''
    import os
    import dlm
    from dlm.tasks import Tasks

    tasks = Tasks(dlm.Client(os.environ["DLM_REDIS_URL"]), "cli-jobs")

    @tasks.task
    def area(w: int, h: int) -> dict:
        return {"area": w * h, "pid": os.getpid()}

    @tasks.task
    def fails() -> None:
        raise ValueError("bad input")
''')


def test_a_cli_worker_drains_python_tasks(dlm_bin: str, redis_url: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "jobs_mod.py").write_text(JOBS_MODULE)
    monkeypatch.setenv("DLM_REDIS_URL", redis_url)
    monkeypatch.syspath_prepend(str(tmp_path))
    import jobs_mod  # type: ignore[import-not-found]

    tasks: Tasks = jobs_mod.tasks
    j1 = jobs_mod.area.delay(3, 4)
    j2 = jobs_mod.area.delay(w=5, h=6)
    bad = jobs_mod.fails.delay()
    dropped = jobs_mod.area.delay(1, 1)
    assert dropped.cancel()
    # The CLI's worker runs each task as `python -m dlm.tasks run jobs_mod:tasks` (payload on
    # stdin, result on stdout), with its own leases and retries.
    r = run_cli(dlm_bin, redis_url, "--json", "queue", "work", "cli-jobs", "--exit-when-empty",
                "--max-attempts", "1", "--", sys.executable, "-m", "dlm.tasks", "run",
                "jobs_mod:tasks", cwd=tmp_path, timeout=60)
    assert r.returncode == 0, (r.stdout, r.stderr)
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["acked"] == 2 and summary["dead"] == 1, summary  # the cancelled one is gone
    assert j1.result(timeout=5)["area"] == 12
    assert j2.result(timeout=5)["area"] == 30
    assert j1.result(timeout=5)["pid"] != __import__("os").getpid()
    with pytest.raises(JobFailed, match="exit"):
        bad.result(timeout=5)
    assert dropped.status() is JobStatus.CANCELLED
    # And a plain shell command drains them too: the payload is JSON on stdin.
    j3 = jobs_mod.area.delay(7, 8)
    r = run_cli(dlm_bin, redis_url, "queue", "work", "cli-jobs", "--exit-when-empty", "--",
                "sh", "-c", "cat >/dev/null; echo '{\"area\": 56}'", timeout=60)
    assert r.returncode == 0, r.stderr
    assert j3.result(timeout=5) == {"area": 56}
    assert tasks.queue.stats()["waiting"] == 0

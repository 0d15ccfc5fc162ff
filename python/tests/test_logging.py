"""Issue 33: the `dlm` logger (worker start and stop, failed tasks with their traceback, the core's
tracing events, Redis unreachable then back) and the core's metrics."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import threading
import time
import urllib.request
from typing import Any, Callable, Iterator

import pytest

import dlm
from _servers import RedisServer

LONG = 60.0


def wait_for(cond: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + LONG
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"not within {LONG} s: {what}")
        time.sleep(0.1)


@pytest.fixture
def dlm_info(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG, logger="dlm")
    try:
        yield caplog
    finally:
        logging.getLogger("dlm").setLevel(logging.NOTSET)


def test_worker_logs_its_start_stop_and_failures(redis_url: str, dlm_info: pytest.LogCaptureFixture) -> None:
    q = dlm.Client(redis_url).queue("logged", max_attempts=1)
    q.push("bad", b"x")

    def fails(task: dlm.Task) -> None:
        raise ValueError("bad input")

    q.work(fails, stop_when_idle=True)
    texts = [r.getMessage() for r in dlm_info.records]
    assert any("started" in t and "logged" in t for t in texts), texts
    assert any("stopped" in t and "dead 1" in t for t in texts), texts
    failed = [r for r in dlm_info.records if "failed" in r.getMessage() and r.levelno == logging.ERROR]
    assert failed and failed[0].exc_info is not None
    assert failed[0].exc_info[0] is ValueError
    # The core's own event (tracing) reached logging, under the module's logger.
    assert any(
        r.name.startswith("dlm.queue") and "dead-letter" in r.getMessage() for r in dlm_info.records
    ), [(r.name, r.getMessage()) for r in dlm_info.records]
    # The task's error holds the exception and its traceback.
    error = q.dead()[0]["error"] or ""
    assert error.startswith("ValueError: bad input"), error
    assert "Traceback (most recent call last)" in error and "in fails" in error
    assert len(error.encode()) <= 4096 + 3


def test_a_long_traceback_is_bounded(redis_url: str) -> None:
    q = dlm.Client(redis_url).queue("deep", max_attempts=1)
    q.push("t", b"x")

    def deep(n: int) -> None:
        if n == 0:
            raise RuntimeError("at the bottom")
        deep(n - 1)

    def handler(task: dlm.Task) -> None:
        deep(200)

    q.work(handler, stop_when_idle=True)
    error = q.dead()[0]["error"] or ""
    assert error.startswith("RuntimeError: at the bottom")
    assert error.rstrip().endswith("RuntimeError: at the bottom")  # the traceback's end is kept
    assert len(error.encode()) <= 4096 + 3


def test_redis_unreachable_then_back_is_logged(dlm_info: pytest.LogCaptureFixture) -> None:
    srv = RedisServer()
    try:
        q = dlm.Client(srv.url, timeout=1.0).queue("outage")
        t = threading.Thread(target=q.work, args=(lambda task: None,))
        t.start()
        try:
            wait_for(lambda: bool(q.workers()), "the worker is up")
            os.kill(srv.proc.pid, signal.SIGSTOP)
            try:
                wait_for(
                    lambda: any("unreachable" in r.getMessage() for r in dlm_info.records),
                    "'Redis unreachable' logged",
                )
            finally:
                os.kill(srv.proc.pid, signal.SIGCONT)
            wait_for(
                lambda: any("reachable again" in r.getMessage() for r in dlm_info.records),
                "'reachable again' logged",
            )
        finally:
            q.stop()
            t.join(LONG)
        assert not t.is_alive()
        warnings = [r for r in dlm_info.records if "reachable" in r.getMessage()]
        assert all(r.levelno == logging.WARNING and r.name.startswith("dlm.") for r in warnings)
    finally:
        srv.stop()


def test_metrics_are_readable_and_served(redis_url: str) -> None:
    dlm.enable_metrics()
    q = dlm.Client(redis_url).queue("metered")
    q.push("m")
    q.work(lambda t: None, stop_when_idle=True)
    text = dlm.metrics_text()
    assert 'dlm_queue_tasks_total{queue="metered",outcome="acked"}' in text, text
    server = dlm.serve_metrics(port=0)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        body = urllib.request.urlopen(url, timeout=LONG).read().decode()
        assert "dlm_queue_tasks_total" in body
    finally:
        server.shutdown()
        server.server_close()


def test_a_forgotten_async_worker_stops(redis_url: str) -> None:
    """A worker coroutine that nobody awaits any more (garbage collected) stops and gives its
    task back, instead of renewing its lease unseen."""
    q = dlm.Client(redis_url).queue("forgotten")
    q.push("slow", b"x")

    async def main() -> None:
        aq = (await dlm.AsyncClient.connect(redis_url)).queue("forgotten")

        def slow(task: dlm.Task) -> None:
            time.sleep(2)

        call: Any = aq.work(slow, lease=1.0)
        await asyncio.to_thread(wait_for, lambda: q.stats()["in_flight"] == 1, "the task runs")
        del call
        gc.collect()
        await asyncio.to_thread(
            wait_for,
            lambda: q.stats()["in_flight"] == 0 and q.stats()["waiting"] == 1,
            "the forgotten worker's task is given back",
        )

    asyncio.run(main())

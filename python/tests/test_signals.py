"""Ctrl-C interrupts a sync wait."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dlm


def test_sigint_interrupts_sync_acquire(redis_url: str, tmp_path: Path) -> None:
    c = dlm.Client(redis_url)
    holder = c.lock("held", ttl=60.0).acquire()
    code = textwrap.dedent(
        f"""
        import signal, sys, dlm
        # Python's own Ctrl-C handler, even when started with SIGINT ignored.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        c = dlm.Client({redis_url!r})
        print("waiting", flush=True)
        try:
            c.lock("held", ttl=10.0, wait=30.0).acquire()
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            raise
        """
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    try:
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "waiting"
        time.sleep(0.5)
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=10)
        assert time.monotonic() - t0 < 3.0
        assert "interrupted" in out
        assert "KeyboardInterrupt" in err
        assert p.returncode != 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert c.lock("held").status()["held"] is True
    holder.release()


def test_sigint_stops_sync_worker_gracefully(redis_url: str, tmp_path: Path) -> None:
    c = dlm.Client(redis_url)
    q = c.queue("graceful")
    q.push("slow", b"x")
    q.push("next", b"y")
    code = textwrap.dedent(
        f"""
        import signal, time, dlm
        signal.signal(signal.SIGINT, signal.default_int_handler)
        q = dlm.Client({redis_url!r}).queue("graceful")
        def handle(task):
            print("started", task.id, flush=True)
            time.sleep(1.0)
            return "done"
        q.work(handle, concurrency=1)
        """
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    try:
        assert p.stdout is not None
        first = p.stdout.readline().split()[1]
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=15)
        assert "KeyboardInterrupt" in err
        # The running handler finished and its task was acked; the other one was not started.
        assert q.result(first) == b"done"
        st = q.stats()
        assert st["processed"] == 1 and st["waiting"] == 1 and st["in_flight"] == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()

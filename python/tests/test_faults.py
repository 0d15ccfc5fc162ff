"""Safety under the faults of the Rust tests, with Python processes: a holder
frozen past its lease (SIGSTOP) has its late write refused by the fence, and
SIGKILLed Python workers lose no task."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dlm


def child(code: str, cwd: Path) -> "subprocess.Popen[str]":
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )


def test_frozen_holder_late_write_is_refused(redis_url: str, tmp_path: Path) -> None:
    p = child(
        f"""
        import sys, dlm
        c = dlm.Client({redis_url!r})
        g = c.lock("account", ttl=1.0).acquire()
        print(g.fence, flush=True)
        sys.stdin.readline()              # frozen (SIGSTOP) around here
        print("lost" if g.is_lost() else "held", flush=True)
        try:
            c.fenced_write("account", g.fence, b"late")
            print("written", flush=True)
        except dlm.StaleFence:
            print("refused", flush=True)
        """,
        tmp_path,
    )
    try:
        assert p.stdin is not None and p.stdout is not None
        old_fence = int(p.stdout.readline())
        os.kill(p.pid, signal.SIGSTOP)
        c = dlm.Client(redis_url)
        # The frozen holder's lease runs out; a new holder writes with a newer fence.
        with c.lock("account", ttl=5.0, wait=5.0) as g:
            assert g.fence is not None and g.fence > old_fence
            c.fenced_write("account", g.fence, b"fresh")
        os.kill(p.pid, signal.SIGCONT)
        p.stdin.write("go\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "lost"
        assert p.stdout.readline().strip() == "refused"
        assert p.wait(timeout=10) == 0
        fence, value = c.fenced_read("account") or (0, b"")
        assert value == b"fresh"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_killed_workers_lose_no_task(redis_url: str, tmp_path: Path) -> None:
    c = dlm.Client(redis_url)
    q = c.queue("jobs", backoff=(0.0, 0.0))
    n = 60
    for i in range(n):
        q.push(f"t{i}", payload=str(i).encode())
    workers = [
        child(
            f"""
            import time, dlm
            q = dlm.Client({redis_url!r}).queue("jobs")
            def handle(task):
                time.sleep(0.05)
                return task.payload
            q.work(handle, concurrency=4, lease=1.0)
            """,
            tmp_path,
        )
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 20
        while q.stats()["processed"] < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        for w in workers:
            os.kill(w.pid, signal.SIGKILL)
            w.wait()
        assert q.stats()["processed"] < n
        # The killed workers' leases run out; their tasks come back.
        deadline = time.monotonic() + 30
        while q.stats()["processed"] < n and time.monotonic() < deadline:
            q.work(lambda t: t.payload, concurrency=8, stop_when_idle=True, lease=1.0)
            time.sleep(0.1)
        st = q.stats()
        assert st["processed"] == n, st
        assert st["waiting"] == 0 and st["in_flight"] == 0 and st["dead"] == 0
        for i in range(n):
            assert q.result(f"t{i}") == str(i).encode()
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()

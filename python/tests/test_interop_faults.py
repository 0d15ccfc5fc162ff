"""Safety under process faults, with real Python processes and a real redis-server (beside the package's
test_faults.py: here the workers are killed again and again, and the reruns are checked):

* a lock holder frozen past its lease (SIGSTOP of its Python process) has its late fenced write
  refused once another process took the lock and wrote with its newer fence;
* Python queue workers SIGKILLed again and again lose no task: every task is processed at least once
  and acked exactly once (processed == N), nothing is left waiting, in flight or dead.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import dlm
from _servers import kill_proc, python_proc, redis_server, redis_url  # noqa: F401 - fixtures

# ----------------------------------------------------------------------- frozen holder, fenced
FROZEN_HOLDER = textwrap.dedent("""
    import sys, dlm
    url, ttl = sys.argv[1], float(sys.argv[2])
    c = dlm.Client(url)
    lk = c.lock("ledger", ttl=ttl, watchdog=True)
    g = lk.acquire()
    print("fence", g.fence, flush=True)
    sys.stdin.readline()                # frozen (SIGSTOP) meanwhile; the parent says "go" after SIGCONT
    print("lost", g.is_lost(), g.remaining(), flush=True)
    try:
        c.fenced_write("ledger", g.fence, b"written by the frozen holder")
        print("write ok", flush=True)
    except dlm.StaleFence as e:         # the fence is stale: refused
        print("write refused", type(e).__name__, flush=True)
    try:
        lk.release()
        print("release ok", flush=True)
    except dlm.Error as e:              # not ours any more
        print("release refused", type(e).__name__, flush=True)
""")


def test_frozen_holder_late_fenced_write_is_refused(redis_url: str) -> None:
    ttl = 1.0
    p = python_proc(FROZEN_HOLDER, redis_url, str(ttl), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, text=True)
    assert p.stdin is not None and p.stdout is not None and p.stderr is not None
    try:
        line = p.stdout.readline().split()
        assert line and line[0] == "fence", (line, p.stderr.read() if p.poll() is not None else "")
        old_fence = int(line[1])
        os.kill(p.pid, signal.SIGSTOP)     # frozen: its watchdog cannot renew either
        time.sleep(ttl * 2.5)              # well past the lease

        c = dlm.Client(redis_url)
        with c.lock("ledger", ttl=10.0, wait=5.0) as g:   # the lease ran out: another holder gets it
            assert g.fence is not None and g.fence > old_fence, (g.fence, old_fence)
            c.fenced_write("ledger", g.fence, b"written by the new holder")
            os.kill(p.pid, signal.SIGCONT)
            time.sleep(0.5)                # its watchdog wakes up and finds the lease gone
            p.stdin.write("go\n")
            p.stdin.flush()
            out, err = p.communicate(timeout=20)
            assert p.returncode == 0, err
            assert "lost True" in out, out            # the old holder learns it lost the lock
            assert "write refused" in out, out        # and its late write is refused by the fence
            assert "write ok" not in out
            # what the store holds is the new holder's write, with the new fence
            assert c.fenced_read("ledger") == (g.fence, b"written by the new holder")
        # the same refusal seen from here: the old fence is below the highest that wrote
        with pytest.raises(dlm.StaleFence):
            c.fenced_write("ledger", old_fence, b"late")
        assert c.fenced_read("ledger") == (g.fence, b"written by the new holder")
    finally:
        kill_proc(p)


# ------------------------------------------------------------------------ SIGKILLed workers
WORKER = textwrap.dedent("""
    import os, random, sys, time, dlm
    url, done_path = sys.argv[1], sys.argv[2]
    fd = os.open(done_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    c = dlm.Client(url)
    q = c.queue("faults", max_attempts=1000)

    def handler(task):
        time.sleep(random.uniform(0.02, 0.08))                  # some work; SIGKILL may land here
        os.write(fd, f"{task.id} {task.attempts}\\n".encode())  # one O_APPEND write: whole lines
        return None

    print("ready", flush=True)
    q.work(handler, concurrency=4, stop_when_idle=False, lease=LEASE)
""")
LEASE_S = 1.0


def test_sigkilled_python_workers_lose_no_task(redis_url: str, tmp_path: Path) -> None:
    n = 600
    c = dlm.Client(redis_url)
    q = c.queue("faults", max_attempts=1000)
    ids = [f"task-{i}" for i in range(n)]
    for i in ids:
        assert q.push(i) is True
    done = tmp_path / "done.txt"
    code = WORKER.replace("LEASE", repr(LEASE_S))
    rng = random.Random(25)

    def spawn() -> "subprocess.Popen[str]":
        w = python_proc(code, redis_url, str(done), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        text=True)
        assert w.stdout is not None and w.stderr is not None
        assert w.stdout.readline().strip() == "ready", w.stderr.read() if w.poll() is not None else ""
        return w

    workers = [spawn() for _ in range(3)]
    kills = 0
    try:
        deadline = time.monotonic() + 60
        while kills < 8 and time.monotonic() < deadline:
            time.sleep(rng.uniform(0.15, 0.35))
            victim = rng.randrange(len(workers))
            os.kill(workers[victim].pid, signal.SIGKILL)    # no goodbye: its tasks stay leased
            workers[victim].wait(timeout=10)
            kills += 1
            workers[victim] = spawn()
            if kills >= 5 and q.stats()["waiting"] == 0:
                break
    finally:
        for w in workers:
            kill_proc(w)

    # Drain what is left here: waits for the dead workers' leases to run out, then runs those tasks.
    def handler(task: dlm.Task) -> None:
        with open(done, "a") as f:
            f.write(f"{task.id} {task.attempts}\n")
        return None

    report = q.work(handler, concurrency=8, stop_when_idle=True, lease=LEASE_S)

    runs = [line.split() for line in done.read_text().splitlines()]
    processed = [r[0] for r in runs]
    reruns = sum(1 for r in runs if int(r[1]) > 1)
    assert set(processed) == set(ids), f"lost: {sorted(set(ids) - set(processed))[:10]}"
    st = q.stats()
    assert st["processed"] == n, st                 # every task acked exactly once
    assert st["waiting"] == 0 and st["delayed"] == 0 and st["in_flight"] == 0 and st["dead"] == 0, st
    assert kills >= 5, kills
    # the kills did interrupt running tasks: some were claimed again (attempt > 1) after their lease
    assert reruns >= 1, (kills, report)
    # at-least-once: a task whose worker died mid-run ran again; never fewer runs than tasks
    assert len(processed) >= n

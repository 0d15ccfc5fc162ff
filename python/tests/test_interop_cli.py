"""Interop of the Python package with the `dlm` CLI and with redis-py, against a real redis-server.

Each test starts its own redis-server on a free loopback port (tests/_servers.py) and runs the real
`dlm` binary ($DLM_BIN, else the workspace's target/release/dlm or target/debug/dlm).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pytest

import dlm
from _servers import dlm_bin, redis_server, redis_url, run_cli  # noqa: F401 - fixtures

NAME = "interop:orders:42"


def wait_for_file(path: str, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            with open(path) as f:
                text = f.read()
            if text.endswith("\n"):
                return text
        time.sleep(0.02)
    raise AssertionError(f"{path} was not written within {timeout}s")


# ------------------------------------------------------------------------------ locks vs the CLI
def test_python_lock_excludes_cli_lock_run(dlm_bin: str, redis_url: str,
                                           tmp_path: Path) -> None:
    c = dlm.Client(redis_url)
    marker = tmp_path / "ran"
    cmd = ["lock", "run", NAME, "--ttl", "5s", "--", "sh", "-c", f"echo ran > {marker}"]
    with c.lock(NAME, ttl=10.0) as g:
        assert g.fence is not None
        busy = run_cli(dlm_bin, redis_url, "--json", *cmd)
        assert busy.returncode == 1, (busy.returncode, busy.stdout, busy.stderr)
        assert not marker.exists(), "the CLI ran its command while Python held the lock"
        st = run_cli(dlm_bin, redis_url, "--json", "lock", "status", NAME)
        assert st.returncode == 0 and '"held":true' in st.stdout.replace(" ", ""), st.stdout
    # released by the `with`: now the CLI gets it at once
    ok = run_cli(dlm_bin, redis_url, "--json", *cmd)
    assert ok.returncode == 0, (ok.stdout, ok.stderr)
    assert marker.read_text() == "ran\n"


def test_cli_lock_run_excludes_python_lock(dlm_bin: str, redis_url: str,
                                           tmp_path: Path) -> None:
    c = dlm.Client(redis_url)
    fence_file = tmp_path / "fence"
    done_file = tmp_path / "done"
    # The CLI holds NAME while its command sleeps; the command writes the fence it was given first.
    p = subprocess.Popen(
        [dlm_bin, "--redis", redis_url, "lock", "run", NAME, "--ttl", "5s", "--",
         "sh", "-c", f'echo "$DLM_FENCE" > {fence_file}.tmp && mv {fence_file}.tmp {fence_file} && sleep 2 && touch {done_file}'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        cli_fence = int(wait_for_file(str(fence_file)).strip())
        with pytest.raises(dlm.Busy):
            with c.lock(NAME, ttl=5.0):
                pytest.fail("Python acquired a lock the CLI holds")
        # Waiting for it: dlm wakes the waiter when `lock run` releases, after its 2 s command.
        t0 = time.monotonic()
        with c.lock(NAME, ttl=5.0, wait=10.0) as g:
            waited = time.monotonic() - t0
            assert done_file.exists(), "Python got the lock before the CLI's command ended"
            # One fencing sequence across the CLI and Python: the later holder has the higher fence.
            assert g.fence is not None and g.fence > cli_fence, (g.fence, cli_fence)
        assert waited < 9.0
        assert p.wait(timeout=10) == 0, p.stderr.read() if p.stderr else ""
    finally:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


# ------------------------------------------------------------------------------ queue vs the CLI
def test_python_worker_drains_tasks_pushed_by_cli(dlm_bin: str, redis_url: str) -> None:
    ids = [f"cli-{i}" for i in range(25)]
    push = run_cli(dlm_bin, redis_url, "--json", "queue", "push", "interop-q", *ids,
                   "--payload", "from the cli")
    assert push.returncode == 0, push.stderr
    assert push.stdout.count('"added"') == len(ids)

    c = dlm.Client(redis_url)
    q = c.queue("interop-q")
    seen: dict[str, tuple[bytes, Optional[int], int]] = {}

    def handler(task: dlm.Task) -> None:
        seen[task.id] = (task.payload, task.fence, task.attempts)
        return None

    q.work(handler, concurrency=4, stop_when_idle=True)
    assert set(seen) == set(ids)
    assert all(p == b"from the cli" for p, _, _ in seen.values())
    assert all(f is not None for _, f, _ in seen.values())
    st = q.stats()
    assert st["waiting"] == 0 and st["in_flight"] == 0 and st["dead"] == 0, st
    assert st["processed"] == len(ids), st
    # The CLI sees the same queue drained.
    cli = run_cli(dlm_bin, redis_url, "--json", "queue", "stats", "interop-q")
    assert '"waiting":0' in cli.stdout and f'"processed":{len(ids)}' in cli.stdout, cli.stdout


def test_cli_worker_drains_tasks_pushed_from_python(dlm_bin: str, redis_url: str,
                                                    tmp_path: Path) -> None:
    c = dlm.Client(redis_url)
    q = c.queue("interop-q2")
    ids = [f"py-{i}" for i in range(25)]
    for i in ids:
        assert q.push(i, payload=f"payload of {i}".encode()) is True
    assert q.push(ids[0], payload=b"again") is False  # already queued: kept, not added
    out = tmp_path / "out"
    out.mkdir()
    w = run_cli(dlm_bin, redis_url, "queue", "work", "interop-q2", "--concurrency", "4",
                "--exit-when-empty", "--", "sh", "-c", f'cat > "{out}/$DLM_TASK_ID"', timeout=60)
    assert w.returncode == 0, (w.stdout, w.stderr)
    got = {p.name: p.read_bytes() for p in out.iterdir()}
    assert got == {i: f"payload of {i}".encode() for i in ids}
    st = q.stats()
    assert st["waiting"] == 0 and st["in_flight"] == 0 and st["dead"] == 0, st
    assert st["processed"] == len(ids), st


# ------------------------------------------------------------------------- raw key vs redis-py
def test_python_raw_key_lock_excludes_redis_py_lock(redis_url: str) -> None:
    redis = pytest.importorskip("redis")
    r = redis.Redis.from_url(redis_url)
    c = dlm.Client(redis_url)
    with c.lock("shared-raw", raw_key=True, ttl=10.0) as g:
        assert r.exists("shared-raw") == 1  # the key is the name itself, as redis-py's
        assert r.get("shared-raw") == g.token.encode()
        other = r.lock("shared-raw", timeout=10, blocking=False)
        assert other.acquire(blocking=False) is False
    assert r.exists("shared-raw") == 0
    other = r.lock("shared-raw", timeout=10, blocking=False)
    assert other.acquire(blocking=False) is True
    other.release()


def test_redis_py_lock_excludes_python_raw_key_lock(redis_url: str) -> None:
    redis = pytest.importorskip("redis")
    r = redis.Redis.from_url(redis_url)
    c = dlm.Client(redis_url)
    theirs = r.lock("shared-raw", timeout=10, blocking=False)
    assert theirs.acquire(blocking=False) is True
    with pytest.raises(dlm.Busy):
        with c.lock("shared-raw", raw_key=True, ttl=5.0):
            pytest.fail("dlm acquired a key redis-py holds")
    theirs.release()
    with c.lock("shared-raw", raw_key=True, ttl=5.0) as g:
        assert r.get("shared-raw") == g.token.encode()
        # redis-py's release of a lock it no longer holds must not free ours
        with pytest.raises(redis.exceptions.LockError):
            theirs.release()
        assert r.get("shared-raw") == g.token.encode()


@pytest.mark.skipif(sys.version_info < (3, 9), reason="asyncio API needs 3.9")
def test_async_lock_excludes_cli_lock_run(dlm_bin: str, redis_url: str) -> None:
    import asyncio

    async def main() -> None:
        ac = await dlm.AsyncClient.connect(redis_url)
        async with ac.lock(NAME, ttl=10.0) as g:
            assert g.fence is not None
            busy = await asyncio.to_thread(
                run_cli, dlm_bin, redis_url, "lock", "run", NAME, "--ttl", "5s", "--", "true")
            assert busy.returncode == 1, busy.stderr
        ok = await asyncio.to_thread(
            run_cli, dlm_bin, redis_url, "lock", "run", NAME, "--ttl", "5s", "--", "true")
        assert ok.returncode == 0, ok.stderr

    asyncio.run(main())

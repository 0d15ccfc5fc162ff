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
        import sys, dlm
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

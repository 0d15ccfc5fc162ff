"""Real processes for the tests: a private redis-server (also behind conftest.py's fixtures) and the
`dlm` CLI.

Not a conftest (the package's own tests/conftest.py lives beside this): test modules import the
fixtures from here, e.g. `from _servers import redis_url, dlm_bin`.

Each redis-server listens on a free loopback port (never 6379), saves nothing, and is killed by its
pid when the fixture ends, also when the test failed.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional

import pytest

from dlm import testing
from dlm.testing import free_port as free_port  # re-exported for the test modules

if TYPE_CHECKING:
    import redis

ROOT = Path(__file__).resolve().parents[2]  # the repository (python/tests/ -> python/ -> root)


class RedisServer(testing.RedisServer):
    """One server process ($DLM_REDIS_SERVER, else redis-server) on 127.0.0.1:<free port>,
    stopped by pid: dlm.testing's, skipping the test when there is no server binary."""

    proc: "subprocess.Popen[bytes]"  # always set once started

    def __init__(self) -> None:
        try:
            super().__init__()
        except testing.RedisServerMissing as e:
            pytest.skip(str(e))

    def redis(self) -> "redis.Redis":
        """A redis-py client of this server (for looking behind dlm's back)."""
        import redis

        return redis.Redis(port=self.port)


def find_dlm_bin() -> Optional[str]:
    """$DLM_BIN, else the workspace's target/release/dlm, else target/debug/dlm (the one
    `cargo test --workspace` builds)."""
    env = os.environ.get("DLM_BIN")
    if env:
        return env
    for p in (ROOT / "target" / "release" / "dlm", ROOT / "target" / "debug" / "dlm"):
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return None


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    srv = RedisServer()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture(scope="session")
def dlm_bin() -> str:
    b = find_dlm_bin()
    if b is None:
        why = "no dlm binary: set DLM_BIN or run `cargo build --release -p dlm-cli`"
        if os.environ.get("CI"):
            pytest.fail(why)  # in CI a missing binary must not pass as skipped interop tests
        pytest.skip(why)
    return b


def run_cli(dlm_bin: str, url: str, *args: str, timeout: float = 30,
            **kw: Any) -> "subprocess.CompletedProcess[str]":
    """`dlm --redis URL ARGS...`, captured, text mode."""
    return subprocess.run([dlm_bin, "--redis", url, *args], capture_output=True, text=True,
                          timeout=timeout, **kw)


def python_proc(code: str, *args: str, **kw: Any) -> "subprocess.Popen[str]":
    """A child Python (this interpreter, so the same `dlm` package) running CODE."""
    kw.setdefault("text", True)
    return subprocess.Popen([sys.executable, "-c", code, *args], **kw)


def kill_proc(p: "subprocess.Popen[str]") -> None:
    """Stop a child we started, by pid, whatever state it is in (also SIGSTOPped)."""
    if p.poll() is None:
        try:
            os.kill(p.pid, signal.SIGCONT)
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=10)

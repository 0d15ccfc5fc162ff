"""Throwaway redis-servers for your own tests, and a pytest plugin.

The plugin is registered with pytest when dlm is installed (entry point
``pytest11``), so these fixtures need no import:

- ``dlm_redis`` (session): a :class:`RedisServer` on 127.0.0.1 and a free
  port, no persistence, killed by its pid at the end of the session;
- ``dlm_redis_url``: its URL, after a ``FLUSHALL`` (each test starts empty);
- ``dlm_client``: a :class:`dlm.Client` of it.

Without pytest: ``with dlm.testing.RedisServer() as srv: ... srv.url``.

A redis-server executable is needed (``$DLM_REDIS_SERVER``, else
``redis-server`` on the PATH); when there is none, the fixtures skip the
test (and fail it when ``$CI`` is set, so that CI never passes by skipping).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from types import TracebackType
from typing import TYPE_CHECKING, Iterator, Optional, Type

if TYPE_CHECKING:
    from ._dlm import Client

__all__ = ["RedisServer", "RedisServerMissing", "free_port", "server_executable"]


class RedisServerMissing(RuntimeError):
    """No redis-server executable was found."""


def server_executable() -> Optional[str]:
    """The server binary to run: ``$DLM_REDIS_SERVER`` (a redis-server or a
    valkey-server), else ``redis-server`` on the PATH, else None."""
    return os.environ.get("DLM_REDIS_SERVER") or shutil.which("redis-server")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RedisServer:
    """One redis-server process on 127.0.0.1:<free port>, saving nothing;
    :meth:`stop` kills it by its pid (the context manager does)."""

    def __init__(self, executable: Optional[str] = None, *args: str) -> None:
        exe = executable or server_executable()
        if exe is None:
            raise RedisServerMissing("redis-server is not installed (or set $DLM_REDIS_SERVER)")
        self.dir = tempfile.mkdtemp(prefix="dlm-testing-redis-")
        self.proc: Optional["subprocess.Popen[bytes]"] = None
        for _ in range(20):
            self.port = free_port()
            self.proc = subprocess.Popen(
                [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", self.dir, "--daemonize", "no", *args],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            if self._wait_ready():
                break
            self._kill()
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise RuntimeError("could not start redis-server on a free port")
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def _wait_ready(self) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False  # the port was taken between the probe and the bind
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def command(self, *words: str) -> bytes:
        """Send one command (inline protocol) and return the raw reply line."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall((" ".join(words) + "\r\n").encode())
            return s.recv(65536)

    def flushall(self) -> None:
        if not self.command("FLUSHALL").startswith(b"+OK"):
            raise RuntimeError("FLUSHALL failed")

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        self._kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "RedisServer":
        return self

    def __exit__(
        self, t: Optional[Type[BaseException]], v: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.stop()


# ------------------------------------------------------------------------ pytest
try:
    import pytest
except ImportError:  # pragma: no cover - the plugin is only loaded by pytest
    pass
else:

    @pytest.fixture(scope="session")
    def dlm_redis() -> Iterator[RedisServer]:
        """A throwaway redis-server for the test session."""
        try:
            srv = RedisServer()
        except RedisServerMissing as e:
            if os.environ.get("CI"):
                pytest.fail(str(e))
            pytest.skip(str(e))
        try:
            yield srv
        finally:
            srv.stop()

    @pytest.fixture
    def dlm_redis_url(dlm_redis: RedisServer) -> str:
        """The URL of the session's redis-server, emptied for this test."""
        dlm_redis.flushall()
        return dlm_redis.url

    @pytest.fixture
    def dlm_client(dlm_redis_url: str) -> "Client":
        """A dlm.Client of the session's redis-server, emptied for this test."""
        from ._dlm import Client

        return Client(dlm_redis_url)

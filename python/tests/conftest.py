"""Throwaway redis-server processes for the tests: each on a free loopback
port (never 6379), without persistence, stopped by pid even when a test fails."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Iterator

import pytest
import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RedisServer:
    def __init__(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.skip("redis-server is not installed")
        self.dir = tempfile.mkdtemp(prefix="dlm-py-redis-")
        for _ in range(5):
            self.port = free_port()
            self.proc = subprocess.Popen(
                [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", self.dir],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if self._wait_ready():
                break
            self.stop()
        else:
            raise RuntimeError("could not start redis-server")
        self.url = f"redis://127.0.0.1:{self.port}"

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if redis.Redis(port=self.port, socket_timeout=0.5).ping():
                    return True
            except redis.exceptions.ConnectionError:
                time.sleep(0.02)
        return False

    def redis(self) -> "redis.Redis":
        return redis.Redis(port=self.port)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture(scope="session")
def server() -> Iterator[RedisServer]:
    s = RedisServer()
    try:
        yield s
    finally:
        s.stop()
        shutil.rmtree(s.dir, ignore_errors=True)


@pytest.fixture
def redis_url(server: RedisServer) -> str:
    server.redis().flushall()
    return server.url


@pytest.fixture
def r(server: RedisServer) -> "redis.Redis":
    return server.redis()


@pytest.fixture(scope="session")
def three_servers() -> Iterator[list[RedisServer]]:
    servers: list[RedisServer] = []
    try:
        for _ in range(3):
            servers.append(RedisServer())
        yield servers
    finally:
        for s in servers:
            s.stop()
            shutil.rmtree(s.dir, ignore_errors=True)

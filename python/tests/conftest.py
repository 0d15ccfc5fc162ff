"""Throwaway redis-server processes for the tests: each on a free loopback
port (never 6379), without persistence, stopped by pid even when a test fails."""

from __future__ import annotations

from typing import Iterator

import pytest
import redis

from _servers import RedisServer


@pytest.fixture(scope="session")
def server() -> Iterator[RedisServer]:
    s = RedisServer()
    try:
        yield s
    finally:
        s.stop()


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

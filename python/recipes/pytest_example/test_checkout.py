"""Recipe: your own tests against a throwaway redis-server, with the fixtures
dlm ships (dlm.testing, loaded by pytest on its own once dlm is installed):
dlm_redis (the session's server), dlm_redis_url (its URL, emptied for each
test) and dlm_client (a dlm.Client of it).

Run: pytest python/recipes/pytest_example
"""
from __future__ import annotations

import pytest

import dlm
from dlm.tasks import Tasks
from dlm.testing import RedisServer


def checkout(client: dlm.Client, order: str) -> int:
    """The code under test: one checkout per order at a time."""
    with client.lock(f"orders:{order}", ttl=5.0) as g:
        assert g.fence is not None
        return g.fence


def test_checkout_takes_the_lock(dlm_client: dlm.Client) -> None:
    assert checkout(dlm_client, "42") >= 1
    holder = dlm_client.lock("orders:42", ttl=5.0).acquire()
    with pytest.raises(dlm.Busy):
        checkout(dlm_client, "42")
    holder.release()


def test_each_test_starts_empty(dlm_client: dlm.Client) -> None:
    assert dlm_client.held_locks() == []


def test_tasks_on_the_throwaway_server(dlm_redis_url: str, dlm_redis: RedisServer) -> None:
    assert dlm_redis_url.startswith(f"redis://127.0.0.1:{dlm_redis.port}")
    tasks = Tasks(dlm.Client(dlm_redis_url), "mail")

    @tasks.task
    def shout(s: str) -> str:
        return s.upper()

    job = shout.delay("hi")
    tasks.work(stop_when_idle=True)
    assert job.result(timeout=5) == "HI"

"""The asyncio API against a real redis-server."""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine

import pytest

import dlm


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


def test_async_lock_contract(redis_url: str) -> None:
    async def main() -> None:
        ac = await dlm.AsyncClient.connect(redis_url)
        async with ac.lock("orders:42", ttl=10.0, wait=5.0, watchdog=True) as g:
            assert isinstance(g, dlm.AsyncLockGuard)
            assert isinstance(g.fence, int)
            assert isinstance(g.token, str)
            assert not g.is_lost()
            assert 0 < g.remaining() <= 10.0
            await g.extend(15.0)
            st = await ac.lock("orders:42").status()
            assert st["held"] is True
            with pytest.raises(dlm.Busy):
                await ac.lock("orders:42", wait=0.1).acquire()
        assert (await ac.lock("orders:42").status())["held"] is False
        lock = ac.lock("by-hand", ttl=5.0)
        g2 = await lock.acquire()
        assert g2.fence is not None
        await lock.release()

    run(main())


def test_many_tasks_one_lock(redis_url: str) -> None:
    async def main() -> None:
        ac = await dlm.AsyncClient.connect(redis_url)
        inside = 0
        most = 0

        async def one() -> None:
            nonlocal inside, most
            async with ac.lock("contended", ttl=5.0, wait=10.0):
                inside += 1
                most = max(most, inside)
                await asyncio.sleep(0.001)
                inside -= 1

        await asyncio.gather(*(one() for _ in range(20)))
        assert most == 1

    run(main())


def test_cancel_waiting_acquire_leaves_no_holder(redis_url: str) -> None:
    async def main() -> None:
        ac = await dlm.AsyncClient.connect(redis_url)
        holder = await ac.lock("cancel-me", ttl=10.0).acquire()
        waiter = asyncio.ensure_future(ac.lock("cancel-me", ttl=10.0, wait=30.0).acquire())
        await asyncio.sleep(0.3)
        assert not waiter.done()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await holder.release()
        await asyncio.sleep(0.3)
        assert (await ac.lock("cancel-me").status())["held"] is False
        assert ac.held_count() == 0

    run(main())


def test_async_queue(redis_url: str) -> None:
    async def main() -> None:
        ac = await dlm.AsyncClient.connect(redis_url)
        q = ac.queue("amail", max_attempts=1)
        assert await q.push("t1", payload=b"a") is True
        assert await q.push("t1", payload=b"a") is False
        await q.push("t2", payload=b"b")
        await q.push("t3", payload=b"c")
        assert (await q.stats())["waiting"] == 3

        async def handler(task: dlm.Task) -> bytes:
            await asyncio.sleep(0.01)
            if task.id == "t3":
                raise RuntimeError("nope")
            return task.payload * 2

        report = await q.work(handler, concurrency=4, stop_when_idle=True)
        assert report["acked"] == 2
        assert await q.result("t1") == b"aa"
        assert await q.wait_result("t2", 1.0) == b"bb"
        st = await q.stats()
        assert st["processed"] == 2 and st["dead"] == 1

    run(main())


def test_async_errors(redis_url: str) -> None:
    async def main() -> None:
        from _servers import free_port

        with pytest.raises(dlm.ConnectionError):
            ac = await dlm.AsyncClient.connect(
                f"redis://127.0.0.1:{free_port()}", timeout=0.5, connect_timeout=0.5
            )
            await ac.lock("x").acquire()
        ac = await dlm.AsyncClient.connect(redis_url)
        with pytest.raises(dlm.InvalidArgument):
            await ac.queue("q").push("t", b"x", delay=-1.0)
        with pytest.raises(dlm.InvalidArgument):
            ac.lock("x", ttl=-2.0)

    run(main())


def test_cancel_worker(redis_url: str) -> None:
    async def main() -> None:
        ac = await dlm.AsyncClient.connect(redis_url)
        q = ac.queue("forever")
        w = asyncio.ensure_future(q.work(lambda t: None, concurrency=2))
        await asyncio.sleep(0.3)
        w.cancel()
        with pytest.raises(asyncio.CancelledError):
            await w

    run(main())


def test_tasks_sharing_a_handle_release_their_own(redis_url: str) -> None:
    async def main() -> None:
        ac = await dlm.AsyncClient.connect(redis_url)
        sem = ac.semaphore("ashared", 3, ttl=10.0, wait=5.0)
        held: list[dlm.AsyncLockGuard] = []

        async def one(i: int) -> None:
            async with sem as g:
                held.append(g)
                await asyncio.sleep(0.05 * (3 - i))
                assert not g.is_released()

        await asyncio.gather(*(one(i) for i in range(3)))
        assert all(g.is_released() for g in held)
        assert (await sem.status())["in_use"] == 0

    run(main())


def test_async_lost(redis_url: str) -> None:
    async def main() -> None:
        ac = await dlm.AsyncClient.connect(redis_url)
        g = await ac.lock("alose", ttl=0.3).acquire()
        done, _ = await asyncio.wait([asyncio.ensure_future(g.lost())], timeout=5.0)
        assert done and g.is_lost()

    run(main())


def test_async_work_timeout_cancels_handler(redis_url: str) -> None:
    async def main() -> None:
        ac = await dlm.AsyncClient.connect(redis_url)
        q = ac.queue("slowq", max_attempts=1)
        await q.push("slow")
        await q.push("plain")
        cancelled: list[str] = []

        async def handler(task: dlm.Task) -> str:
            if task.id == "plain":
                return "ok"
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(task.id)
                raise
            return "late"

        report = await q.work(handler, concurrency=2, stop_when_idle=True, task_timeout=0.3)
        await asyncio.sleep(0.1)
        assert report["acked"] == 1 and report["dead"] == 1
        assert cancelled == ["slow"]
        dead = await q.dead()
        assert "timed out" in (dead[0]["error"] or "")
        assert await q.result("plain") == b"ok"

        # A plain function works as an asyncio handler too.
        await q.push("sync-fn")
        await q.work(lambda t: t.id.upper(), stop_when_idle=True)
        assert await q.result("sync-fn") == b"SYNC-FN"

    run(main())

"""Issue 33, defects 5-10: every error is one of dlm's, says what happened in
Python's words, and the binding's result, event and client calls tell their
outcomes apart."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
from typing import Any, Callable

import pytest

import dlm
from _servers import RedisServer


def invalid(f: Callable[[], Any], arg: str) -> dlm.InvalidArgument:
    with pytest.raises(dlm.InvalidArgument) as e:
        f()
    assert e.value.arg == arg, (e.value.arg, str(e.value))
    return e.value


# Defect 5: bad arguments are dlm.InvalidArgument, str payloads are UTF-8.


def test_bad_integers_are_invalid_arguments(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    stock = c.stock("s")
    q = c.queue("q")
    invalid(lambda: stock.take(-1), "n")
    invalid(lambda: stock.set(2**64), "n")
    invalid(lambda: q.claim(-1), "count")
    invalid(lambda: c.fenced_write("r", -1, b""), "fence")
    invalid(lambda: c.semaphore("pool", permits=-1), "permits")
    invalid(lambda: q.push("t", priority=2**63), "priority")
    invalid(lambda: c.queue("q2", max_attempts=-3), "max_attempts")
    invalid(lambda: c.ids("i", block=-1), "block")
    e = invalid(lambda: stock.take(-1), "n")
    assert "-1" in e.reason
    assert q.stats()["waiting"] == 0


def test_str_payloads_are_utf8(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    q = c.queue("q")
    assert q.push("t", "héllo")
    (lease,) = q.claim(1)
    assert lease.task.payload == "héllo".encode()
    lease.ack()
    c.fenced_write("r", 1, "v")
    assert c.fenced_read("r") == (1, b"v")
    assert c.versioned("v").write(0, "x") == 1
    invalid(lambda: q.push("u", 12), "payload")  # type: ignore[arg-type]


# Defect 6: every Busy has ttl.


def test_no_permits_is_a_busy_with_ttl(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    with c.semaphore("pool", permits=1, ttl=10.0):
        with pytest.raises(dlm.Busy) as e:
            c.semaphore("pool", permits=1).acquire()
    assert isinstance(e.value, dlm.NoPermits)
    assert e.value.ttl is None


# Defect 7: errors named for what happened.


def test_wrong_password_is_an_authentication_error() -> None:
    s = RedisServer()
    try:
        s.redis().config_set("requirepass", "right")
        with pytest.raises(dlm.AuthenticationError) as e:
            dlm.Client(f"redis://:wrong@127.0.0.1:{s.port}/0")
        assert isinstance(e.value, dlm.RedisError)
        assert not isinstance(e.value, dlm.ConnectionError)
    finally:
        s.stop()


def test_silent_server_is_a_timeout() -> None:
    # A listening socket that never answers: the kernel accepts the connection.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    try:
        with pytest.raises(dlm.Timeout):
            dlm.Client(f"redis://127.0.0.1:{port}/0", timeout=0.3, connect_timeout=0.3)
    finally:
        silent.close()


def test_server_gone_silent_is_a_timeout() -> None:
    s = RedisServer()
    try:
        c = dlm.Client(s.url, timeout=0.3)
        c.stock("s").set(1)
        os.kill(s.proc.pid, signal.SIGSTOP)
        try:
            with pytest.raises(dlm.Timeout):
                c.stock("s").get()
            with pytest.raises(dlm.Timeout):
                c.lock("x", ttl=5.0).acquire()
        finally:
            os.kill(s.proc.pid, signal.SIGCONT)
    finally:
        s.stop()


def test_default_deadline_is_two_seconds(redis_url: str) -> None:
    assert dlm.Client(redis_url).timeout == 2.0


def test_misuse_raises_state_errors(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    g = c.lock("m", ttl=10.0).acquire()
    g.release()
    with pytest.raises(dlm.StateError) as e:
        g.release()
    assert "released already" in str(e.value)
    assert not isinstance(e.value, dlm.InvalidArgument)

    lock = c.lock("m2", ttl=10.0)
    lock.acquire()
    errors: list[BaseException] = []

    def other() -> None:
        try:
            lock.release()
        except BaseException as x:  # noqa: BLE001 - recorded for the assertion
            errors.append(x)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert len(errors) == 1 and isinstance(errors[0], dlm.StateError), errors
    assert "thread" in str(errors[0])
    with pytest.raises(dlm.StateError) as e:
        lock.acquire()  # this thread holds it through this handle already
    assert "already" in str(e.value)
    lock.release()
    with pytest.raises(dlm.StateError):
        lock.release()


def test_async_misuse_raises_state_errors(redis_url: str) -> None:
    async def main() -> None:
        ac = await dlm.AsyncClient.connect(redis_url)
        lock = ac.lock("am", ttl=10.0)
        with pytest.raises(dlm.StateError):
            await lock.release()  # this task acquired nothing through it
        await lock.acquire()
        with pytest.raises(dlm.StateError) as e:
            await lock.acquire()
        assert "asyncio task" in str(e.value)
        await lock.release()
        async with ac.semaphore("sem", permits=2, ttl=10.0) as sem:
            async with ac.semaphore("sem", permits=2, ttl=10.0):
                pass  # permits may be taken again: not a misuse
            assert not sem.is_lost()

    asyncio.run(main())


# Defect 8: Python reprs, seconds, Python wording.


def test_guard_repr_and_is_lost_after_release(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    g = c.lock("r", ttl=10.0).acquire()
    assert "Some(" not in repr(g) and f"fence={g.fence}" in repr(g)
    g.release()
    assert not g.is_lost() and g.is_released()
    short = c.lock("r2", ttl=0.05).acquire()
    assert short.wait_lost(10.0)
    try:
        short.release()  # the lease ran out: nothing left to release
    except (dlm.Expired, dlm.NotHeld):
        pass
    assert short.is_lost() and short.is_released()


def test_messages_use_python_words(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    with pytest.raises(dlm.InvalidArgument) as e:
        c.lock("x", ttl=0.0).acquire()
    msg = str(e.value)
    assert "ns" not in msg.split() and "0ns" not in msg and "604800s" not in msg, msg
    assert "seconds" in msg, msg
    holder = c.lock("y", ttl=5.0).acquire()
    with pytest.raises(dlm.Busy) as b:
        c.lock("y").acquire()
    assert " ms" not in str(b.value) and "seconds" in str(b.value), str(b.value)
    holder.release()


def test_instants_are_epoch_seconds(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    q = c.queue("d", max_attempts=1)
    q.push("t")
    (lease,) = q.claim(1)
    lease.nack("boom")
    (dead,) = q.dead()
    assert isinstance(dead["died_at"], float)
    assert abs(dead["died_at"] - time.time()) < 60
    q.schedule("s", every=3600.0)
    (s,) = q.schedules()
    assert isinstance(s["next_tick"], float)
    assert time.time() - 60 < s["next_tick"] < time.time() + 3600 + 60


# Defect 9: the outcome of a task.


def test_wait_result_tells_outcomes_apart(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    q = c.queue("o", max_attempts=1)
    q.configure(keep_completed=100)
    with pytest.raises(dlm.NotFound) as nf:
        q.wait_result("never", 0.2)
    assert nf.value.id == "never"
    assert q.status("never") is None

    q.push("dies")
    (lease,) = q.claim(1)
    lease.nack("it broke")
    assert q.status("dies") == "dead"
    with pytest.raises(dlm.TaskFailed) as tf:
        q.wait_result("dies", 5.0)
    assert tf.value.id == "dies" and tf.value.error == "it broke"

    q.push("none")
    (lease,) = q.claim(1)
    lease.ack()
    t0 = time.monotonic()
    assert q.wait_result("none", 30.0) is None
    assert time.monotonic() - t0 < 10
    assert q.status("none") == "completed"

    q.push("pending")
    with pytest.raises(dlm.ResultTimeout) as rt:
        q.wait_result("pending", 0.2)
    assert rt.value.state == "waiting" and isinstance(rt.value, TimeoutError)
    assert q.cancel("pending")

    q.push("value")
    (lease,) = q.claim(1)
    lease.ack(b"v")
    assert q.wait_result("value", 5.0) == b"v"


# Defect 10: one prefix, refused options.


def test_key_prefix_namespaces_everything(redis_url: str, r: Any) -> None:
    c = dlm.Client(redis_url, key_prefix="myapp")
    with c.lock("orders:42", ttl=10.0) as g:
        assert g.key == "myapp:lock:{orders:42}"
    c.queue("mail").push("t", b"x")
    c.stock("s").set(3)
    c.versioned("v").write(0, b"x")
    c.ids("i").next()
    with c.semaphore("pool", permits=2, ttl=10.0):
        pass
    c.fenced_write("res", 1, b"x")
    keys = [k.decode() for k in r.keys("*")]
    assert keys and all(k.startswith("myapp:") for k in keys), keys
    # Without a prefix the keys stay what they were.
    plain = dlm.Client(redis_url)
    with plain.lock("orders:42", ttl=10.0) as g:
        assert g.key == "dlm:lock:{orders:42}"


def test_inconsistent_options_are_refused(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    invalid(lambda: c.queue("q", backoff=(2.0, 1.0)), "backoff")
    with c.semaphore("pool", permits=3, ttl=10.0):
        with pytest.raises(dlm.InvalidArgument) as e:
            c.semaphore("pool", permits=5, ttl=10.0).acquire()
        assert e.value.arg == "permits"


# Queue operations and options next to the existing ones.


def test_cancel_and_clear(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    q = c.queue("cc")
    q.push("a")
    q.push("b", delay=60.0)
    q.push("c")
    assert q.cancel("a") is True
    assert q.cancel("a") is False
    assert q.cancel("b") is True
    assert q.status("a") is None
    assert q.clear() == 1
    assert q.stats()["waiting"] == 0


def test_events_sync_and_async(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    q = c.queue("ev")
    q.configure(events=1000)
    q.push("a")
    page = q.events_page()
    assert [(e["kind"], e["task"]) for e in page["events"]] == [("added", "a")]
    it = q.events(start=True)
    first = next(it)
    assert first["kind"] == "added" and first["task"] == "a"
    assert isinstance(first["at"], float)
    it.close()

    async def main() -> None:
        ac = await dlm.AsyncClient.connect(redis_url)
        aq = ac.queue("ev")
        seen = []
        async for ev in aq.events(start=True):
            seen.append(ev["task"])
            break
        assert seen == ["a"]

    asyncio.run(main())


def test_async_versioned_update(redis_url: str) -> None:
    async def main() -> None:
        ac = await dlm.AsyncClient.connect(redis_url)
        v = ac.versioned("cfg")
        version, data = await v.update(lambda old: (old or b"") + b"x")
        assert (version, data) == (1, b"x")
        version, data = await v.update(lambda old: (old or b"") + b"y")
        assert (version, data) == (2, b"xy")

    asyncio.run(main())


def test_lock_options_on_every_primitive(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    more: dict[str, Any] = {"retry_interval": 0.01, "node_timeout": 0.5}
    for lock in [
        c.fair_lock("f", ttl=5.0, **more),
        c.rwlock("rw", write=True, ttl=5.0, **more),
        c.semaphore("sem", permits=2, ttl=5.0, **more),
        c.election("el", "me", ttl=5.0, **more),
        c.multi_lock(["m1", "m2"], ttl=5.0, **more),
    ]:
        with lock:
            pass
    invalid(lambda: c.fair_lock("f", retry_interval=-1.0), "retry_interval")


# Connecting.


def test_client_context_managers_and_close(redis_url: str) -> None:
    with dlm.Client(redis_url) as c:
        g = c.lock("cm", ttl=30.0).acquire()
    assert not dlm.Client(redis_url).lock("cm").status()["held"]  # close() released it
    with pytest.raises(dlm.StateError):
        c.lock("cm")
    c.close()  # twice is fine

    async def main() -> None:
        async with await dlm.AsyncClient.connect(redis_url) as ac:
            await ac.lock("acm", ttl=30.0).acquire()
        with pytest.raises(dlm.StateError):
            ac.queue("x")
        await ac.aclose()

    asyncio.run(main())


def test_lazy_connection_errors_at_first_use() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    # Nothing listens there: without lazy=True this raises at once.
    c = dlm.Client(f"redis://127.0.0.1:{port}/0", lazy=True, connect_timeout=0.5, timeout=0.5)
    with pytest.raises(dlm.ConnectionError) as e:  # a Timeout is one too
        c.lock("x").acquire()
    assert str(e.value)

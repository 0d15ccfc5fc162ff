"""The sync lock API against a real redis-server."""

from __future__ import annotations

import time
from typing import Callable

import pytest
import redis

import dlm


def test_contract(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    with c.lock("orders:42", ttl=10.0, wait=5.0, watchdog=True) as g:
        assert isinstance(g, dlm.LockGuard)
        assert isinstance(g.fence, int) and g.fence > 2**48
        assert isinstance(g.token, str) and len(g.token) >= 16
        assert g.is_lost() is False
        assert 0.0 < g.remaining() <= 10.0
        assert g.name == "orders:42"
        assert c.lock("orders:42").status()["held"] is True
    assert c.lock("orders:42").status()["held"] is False


def test_busy_when_held(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    other = dlm.Client(redis_url)
    with c.lock("busy", ttl=10.0):
        t0 = time.monotonic()
        with pytest.raises(dlm.Busy) as e:
            other.lock("busy", ttl=10.0, wait=0.3).acquire()
        assert 0.25 < time.monotonic() - t0 < 3.0
        assert e.value.name == "busy"
        assert e.value.ttl is not None and 0 < e.value.ttl <= 10.0
        assert isinstance(e.value, dlm.Error)
        assert "busy" in str(e.value)


def test_wait_wakes_on_release(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    g = c.lock("handover", ttl=10.0).acquire()
    import threading

    threading.Timer(0.2, g.release).start()
    t0 = time.monotonic()
    g2 = dlm.Client(redis_url).lock("handover", ttl=10.0, wait=5.0).acquire()
    assert time.monotonic() - t0 < 2.0
    assert g2.fence is not None and g.fence is not None and g2.fence > g.fence
    g2.release()


def test_acquire_release_by_hand(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    lock = c.lock("manual", ttl=5.0)
    g = lock.acquire()
    g.extend(20.0)
    assert g.remaining() > 10.0
    lock.release()
    assert g.is_released()
    with pytest.raises(dlm.StateError):
        g.release()
    with pytest.raises(dlm.StateError):
        lock.release()


def test_expired_release(redis_url: str, r: "redis.Redis") -> None:
    c = dlm.Client(redis_url)
    g = c.lock("short", ttl=0.2).acquire()
    time.sleep(0.4)
    assert g.is_lost()
    assert g.remaining() == 0.0
    with pytest.raises((dlm.Expired, dlm.NotHeld)):
        g.release()


@pytest.mark.parametrize(
    "make",
    [
        lambda c: c.lock("x", ttl=-1.0),
        lambda c: c.lock("x", ttl=float("nan")),
        lambda c: c.lock("x", wait=-0.5),
        lambda c: c.lock(""),
        lambda c: c.lock("x", ttl=0.0),
        lambda c: c.semaphore("s", 0),
        lambda c: c.queue("q").push("", b"x"),
        lambda c: c.queue("q").push("t", b"x", delay=-1.0),
        lambda c: c.queue("").push("t"),
        lambda c: c.fenced_write("", 1, b"x"),
        lambda c: c.rate_limiter("rl", 0, 1.0).try_acquire(),
    ],
)
def test_invalid_argument_writes_nothing(
    redis_url: str, r: "redis.Redis", make: Callable[[dlm.Client], object]
) -> None:
    c = dlm.Client(redis_url)
    with pytest.raises(dlm.InvalidArgument) as e:
        obj = make(c)
        # Handles whose arguments are checked by the core on first use.
        if isinstance(obj, dlm.Lock):
            obj.acquire()
    assert isinstance(e.value, ValueError)
    assert r.dbsize() == 0


def test_connection_error_on_closed_port() -> None:
    from _servers import free_port

    url = f"redis://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(dlm.ConnectionError):
        c = dlm.Client(url, timeout=0.5, connect_timeout=0.5)
        c.lock("x").acquire()
    assert time.monotonic() - t0 < 5.0


def test_raw_key_shares_redis_py_lock(redis_url: str, r: "redis.Redis") -> None:
    c = dlm.Client(redis_url)
    # redis-py holds it: dlm's raw-key lock is busy.
    rl = r.lock("shared", timeout=10)
    assert rl.acquire(blocking=False)
    with pytest.raises(dlm.Busy):
        c.lock("shared", raw_key=True, ttl=5.0).acquire()
    rl.release()
    # dlm holds it: redis-py cannot take it.
    with c.lock("shared", raw_key=True, ttl=5.0) as g:
        assert g.key == "shared"
        assert r.exists("shared") == 1
        assert not r.lock("shared", timeout=10).acquire(blocking=False)
    assert r.exists("shared") == 0


def test_exception_in_block_releases(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    with pytest.raises(RuntimeError):
        with c.lock("boom", ttl=10.0):
            raise RuntimeError("x")
    assert c.lock("boom").status()["held"] is False


def test_force_release(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    g = c.lock("stuck", ttl=10.0).acquire()  # kept: a collected guard releases its lock
    assert c.lock("stuck").force_release() is True
    assert g.is_released() is False
    assert c.lock("stuck").force_release() is False


def test_fenced_write(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    assert c.fenced_read("ledger") is None
    with c.lock("ledger", ttl=5.0) as g1:
        fence1 = g1.fence
    with c.lock("ledger", ttl=5.0) as g2:
        fence2 = g2.fence
    assert fence1 is not None and fence2 is not None
    c.fenced_write("ledger", fence2, b"new")
    with pytest.raises(dlm.StaleFence) as e:
        c.fenced_write("ledger", fence1, b"old")
    assert e.value.given == fence1 and e.value.highest == fence2
    assert c.fenced_read("ledger") == (fence2, b"new")


def test_semaphore(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    a = c.semaphore("pool", 2, ttl=5.0).acquire()
    b = c.semaphore("pool", 2, ttl=5.0).acquire()
    assert a.permits == 1
    with pytest.raises(dlm.NoPermits) as e:
        c.semaphore("pool", 2, ttl=5.0, wait=0.1).acquire()
    assert isinstance(e.value, dlm.Busy)
    assert c.semaphore("pool", 2).status()["in_use"] == 2
    a.release()
    b.release()


def test_rwlock_and_fair_lock(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    r1 = c.rwlock("doc", ttl=5.0).acquire()
    r2 = c.rwlock("doc", ttl=5.0).acquire()
    with pytest.raises(dlm.Busy):
        c.rwlock("doc", write=True, ttl=5.0, wait=0.1).acquire()
    assert c.rwlock("doc").status()["readers"] == 2
    r1.release()
    r2.release()
    with c.rwlock("doc", write=True, ttl=5.0) as w:
        assert w.fence is not None
    with c.fair_lock("fifo", ttl=5.0) as f:
        assert f.fence is not None
        assert c.fair_lock("fifo").status()["held"] is True


def test_election(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    with c.election("sched", "host-a", ttl=5.0) as lead:
        assert lead.fence is not None
        st = c.election("sched", "host-b").status()
        assert st["leader"] == "host-a"
        with pytest.raises(dlm.Busy):
            c.election("sched", "host-b", ttl=5.0).acquire()


def test_helpers(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    v = c.versioned("cfg")
    assert v.read() is None
    ver = v.write(0, b"one")
    assert v.read() == (b"one", ver)
    with pytest.raises(dlm.Conflict):
        v.write(0, b"two")
    s = c.stock("sku")
    s.set(3)
    assert s.take(2) == (True, 1)
    assert s.take(2) == (False, 1)
    assert s.add(4) == 5
    ids = c.ids("orders")
    a, b = ids.next(), ids.next()
    assert b > a
    assert len(ids.next_batch(5)) == 5
    rl = c.rate_limiter("api", 2, 10.0)
    assert rl.try_acquire() and rl.try_acquire()
    assert not rl.try_acquire()
    with pytest.raises(dlm.RateLimited):
        rl.acquire(wait=0.05)


def test_threads_sharing_a_handle_release_their_own(redis_url: str) -> None:
    import threading

    c = dlm.Client(redis_url)
    sem = c.semaphore("shared-handle", 2, ttl=10.0, wait=5.0)
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    fences: dict[str, int] = {}

    def a() -> None:
        with sem as g:
            fences["a"] = g.fence or 0
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def b() -> None:
        a_in.wait(5)
        with sem as g:
            fences["b"] = g.fence or 0
            b_in.set()
            a_out.wait(5)
            # A left its block: B's own permit is still held.
            assert not g.is_released()
            assert sem.status()["in_use"] == 1

    ts = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(10)
    assert len(fences) == 2
    assert sem.status()["in_use"] == 0


def test_wait_lost(redis_url: str, r: "redis.Redis") -> None:
    c = dlm.Client(redis_url)
    g = c.lock("losing", ttl=5.0, watchdog=True).acquire()
    assert g.wait_lost(0.2) is False
    r.delete("dlm:lock:{losing}")  # somebody removed it: the watchdog's renewal fails
    assert g.wait_lost(10.0) is True
    assert g.is_lost()


def test_lock_more_options(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    with c.lock("opts", ttl=5.0, retry_interval=0.01, node_timeout=0.1) as g:
        assert g.fence is not None
    # No replica to acknowledge the grant: NotReplicated, and the lock is released again.
    with pytest.raises(dlm.NotReplicated) as e:
        c.lock("repl", ttl=5.0, replicas=(1, 0.1)).acquire()
    assert e.value.wanted == 1 and e.value.replicas == 0
    assert c.lock("repl").status()["held"] is False
    with pytest.raises(dlm.InvalidArgument):
        c.lock("opts", retry_interval=-1.0)


def test_versioned_update(redis_url: str, r: "redis.Redis") -> None:
    import threading

    c = dlm.Client(redis_url)
    v = c.versioned("counter")

    def bump(old: bytes | None) -> bytes:
        return str(int(old or b"0") + 1).encode()

    ts = [threading.Thread(target=lambda: [v.update(bump, max_attempts=1000) for _ in range(10)]) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    data = v.read()
    assert data is not None and data[0] == b"40"

    def boom(old: bytes | None) -> bytes:
        raise KeyError("no")

    with pytest.raises(KeyError):
        c.versioned("untouched").update(boom)
    assert c.versioned("untouched").read() is None
    with pytest.raises(dlm.InvalidArgument):
        v.update(bump, max_attempts=0)

"""The sync queue API against a real redis-server."""

from __future__ import annotations

import threading

import pytest

import dlm


def test_push_stats_work_result(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    q = c.queue("mail")
    assert q.push("task-1", payload=b"hello", delay=0.0, priority=0) is True
    assert q.push("task-1", payload=b"again") is False
    assert q.push("task-2", payload=b"world") is True
    st = q.stats()
    assert {"waiting", "delayed", "in_flight", "dead", "processed", "failed"} <= set(st)
    assert st["waiting"] == 2

    seen: list[tuple[str, bytes, int, int]] = []
    lock = threading.Lock()

    def handler(task: dlm.Task) -> bytes:
        with lock:
            seen.append((task.id, task.payload, task.fence, task.attempts))
        return task.payload.upper()

    report = q.work(handler, concurrency=4, stop_when_idle=True)
    assert report["acked"] == 2
    assert sorted(s[0] for s in seen) == ["task-1", "task-2"]
    assert all(isinstance(s[2], int) and s[3] == 1 for s in seen)
    assert dict((s[0], s[1]) for s in seen)["task-1"] == b"hello"
    assert q.result("task-1") == b"HELLO"
    assert q.result("nope") is None
    st = q.stats()
    assert st["waiting"] == 0 and st["in_flight"] == 0 and st["processed"] == 2


def test_handler_exception_nacks_then_dead(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    q = c.queue("fail", max_attempts=2, backoff=(0.0, 0.0))
    q.push("bad", b"x")
    calls: list[int] = []

    def handler(task: dlm.Task) -> None:
        calls.append(task.attempts)
        raise ValueError("broken input")

    report = q.work(handler, concurrency=1, stop_when_idle=True)
    assert calls == [1, 2]
    assert report["dead"] == 1
    dead = q.dead()
    assert dead[0]["id"] == "bad" and "broken input" in (dead[0]["error"] or "")
    assert q.stats()["dead"] == 1
    assert q.retry_dead() == 1
    assert q.stats()["waiting"] == 1


def test_wait_result(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    q = c.queue("thumbs")
    q.push("img:7", b"7")

    def worker() -> None:
        dlm.Client(redis_url).queue("thumbs").work(lambda t: "done " + t.payload.decode(), stop_when_idle=True)

    threading.Timer(0.2, worker).start()
    assert q.wait_result("img:7", 10.0) == b"done 7"
    with pytest.raises(dlm.NotFound):
        q.wait_result("never", 0.2)


def test_claim_ack_nack(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    q = c.queue("manual", backoff=(0.0, 0.0))
    q.push("a", b"1")
    q.push("b", b"2")
    leases = q.claim(2, lease=10.0)
    assert sorted(lease.task.id for lease in leases) == ["a", "b"]
    assert q.stats()["in_flight"] == 2
    by_id = {lease.task.id: lease for lease in leases}
    by_id["a"].extend(20.0)
    by_id["a"].ack(b"ok")
    assert by_id["b"].nack("try later") == "retrying"
    with pytest.raises(dlm.StateError):
        by_id["a"].ack()
    assert q.result("a") == b"ok"
    again = q.claim(1, lease=10.0)
    assert again[0].task.id == "b" and again[0].task.attempts == 2
    again[0].abandon()


def test_dependencies_and_delay(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    q = c.queue("flow")
    q.push("parent", b"p")
    q.push("child", b"c", after=["parent"])
    q.push("later", b"l", delay=0.5)
    st = q.stats()
    assert st["blocked"] == 1 and st["delayed"] == 1 and st["waiting"] == 1
    order: list[str] = []
    # stop_when_idle waits for delayed tasks too: the queue is drained.
    q.work(lambda t: order.append(t.id), stop_when_idle=True)
    assert sorted(order) == ["child", "later", "parent"]
    assert order.index("parent") < order.index("child")


def test_bad_handler_result_is_a_failure(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    q = c.queue("weird", max_attempts=1)
    q.push("t")
    report = q.work(lambda t: 42, stop_when_idle=True)  # type: ignore[arg-type,return-value]
    assert report["dead"] == 1
    assert "return bytes, str or None" in (q.dead()[0]["error"] or "")


def test_handler_uses_sync_dlm_calls(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    q = c.queue("nested")
    for i in range(5):
        q.push(f"n{i}", b"x")

    def handler(task: dlm.Task) -> str:
        # A sync call from a handler thread (one of the runtime's threads).
        with c.lock("per-task:" + task.id, ttl=5.0) as g:
            return str(g.fence)

    report = q.work(handler, concurrency=3, stop_when_idle=True)
    assert report["acked"] == 5
    assert all(int(q.result(f"n{i}") or b"0") > 0 for i in range(5))


def test_threads_hammer_one_lock(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    inside = 0
    most = 0
    guard = threading.Lock()

    def worker() -> None:
        nonlocal inside, most
        for _ in range(20):
            with c.lock("hammer", ttl=5.0, wait=20.0):
                with guard:
                    inside += 1
                    most = max(most, inside)
                with guard:
                    inside -= 1

    ts = [threading.Thread(target=worker) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert most == 1


def test_push_many(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    q = c.queue("bulk")
    assert q.push_many(["a", ("b", b"payload"), "c"]) == [True, True, True]
    assert q.push_many(["a", "d"]) == [False, True]
    assert q.stats()["waiting"] == 4
    with pytest.raises(dlm.InvalidArgument):
        q.push_many(["e"], delay=-1.0)
    with pytest.raises(TypeError):
        q.push_many([42])  # type: ignore[list-item]
    seen: dict[str, bytes] = {}
    q.work(lambda t: seen.__setitem__(t.id, t.payload), concurrency=2, stop_when_idle=True, grace=1.0, keep_results=60.0)
    assert seen == {"a": b"", "b": b"payload", "c": b"", "d": b""}

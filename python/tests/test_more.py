"""Queue settings, schedules, progress, multi-locks, the asyncio helpers and
leases, and the stubs' completeness."""

from __future__ import annotations

import ast
import asyncio
import inspect
from pathlib import Path

import pytest

import dlm
from dlm import _dlm


def test_stubs_cover_the_native_module() -> None:
    stub = ast.parse((Path(__file__).resolve().parent.parent / "dlm" / "_dlm.pyi").read_text())
    classes: dict[str, set[str]] = {}
    names: set[str] = set()
    for node in stub.body:
        if isinstance(node, ast.ClassDef):
            members: set[str] = set()
            for base in node.bases:
                if isinstance(base, ast.Name) and base.id in classes:
                    members |= classes[base.id]
            members |= {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
            classes[node.name] = members
            names.add(node.name)
        elif isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, (ast.AnnAssign, ast.Assign)):
            target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
            if isinstance(target, ast.Name):
                names.add(target.id)
    missing = []
    for name, obj in vars(_dlm).items():
        if name.startswith("_") and name != "__version__":
            continue
        if name not in names:
            missing.append(name)
            continue
        if inspect.isclass(obj):
            for attr in vars(obj):
                if not attr.startswith("_") and attr not in classes[name]:
                    missing.append(f"{name}.{attr}")
    assert missing == []
    # Every public class and method has a docstring.
    undocumented = [
        f"{n}.{a}"
        for n, o in vars(_dlm).items()
        if inspect.isclass(o)
        for a, v in vars(o).items()
        if not a.startswith("_") and not (getattr(v, "__doc__", None) or "").strip()
    ]
    undocumented += [n for n, o in vars(_dlm).items() if inspect.isclass(o) and not (o.__doc__ or "").strip()]
    assert undocumented == []


def test_queue_settings_schedules_progress(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    q = c.queue("ops")
    s = q.configure(group_concurrency=2, rate=(100, 1.0), keep_results=60.0)
    assert s["group_concurrency"] == 2 and s["rate_n"] == 100 and s["rate_period"] == 1.0
    assert s["keep_results"] == 60.0
    s = q.configure(group_concurrency=0)
    assert s["group_concurrency"] is None and s["rate_n"] == 100
    assert q.settings() == s
    with pytest.raises(dlm.InvalidArgument):
        q.configure(rate=(5, -1.0))
    assert q.schedule("tick", every=60.0, payload=b"p") == "added"
    assert q.schedule("tick", every=60.0, payload=b"p") == "unchanged"
    assert q.schedule("nightly", cron="0 3 * * *") == "added"
    with pytest.raises(dlm.InvalidArgument):
        q.schedule("bad", cron="not a cron")
    with pytest.raises(dlm.InvalidArgument):
        q.schedule("both", every=1.0, cron="* * * * *")
    assert sorted(x["id"] for x in q.schedules()) == ["nightly", "tick"]
    assert q.unschedule("tick") is True
    assert q.unschedule("tick") is False
    q.push("p1", b"x")
    (lease,) = q.claim(1, lease=10.0)
    lease.progress(40, "halfway")
    assert q.progress("p1") == (40, "halfway")
    lease.ack("ok")
    assert q.result("p1") == b"ok"


def test_multi_lock(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    with c.multi_lock(["from:7", "to:9"], ttl=5.0) as g:
        assert len(g.fences) == 2 and all(isinstance(f, int) for f in g.fences)
        assert not g.is_lost() and g.remaining() > 0
        with pytest.raises(dlm.Busy):
            c.lock("to:9", ttl=5.0).acquire()
        assert c.multi_lock(["from:7", "to:9"]).status()["held"] is True
    assert c.lock("to:9").status()["held"] is False
    with pytest.raises(dlm.InvalidArgument):
        c.multi_lock([])


def test_async_helpers_and_leases(redis_url: str) -> None:
    async def main() -> None:
        ac = await dlm.AsyncClient.connect(redis_url)
        v = ac.versioned("cfg")
        ver = await v.write(0, b"a")
        assert await v.read() == (b"a", ver)
        s = ac.stock("sku")
        await s.set(2)
        assert await s.take(1) == (True, 1)
        assert await ac.ids("n").next() >= 1
        assert await ac.rate_limiter("r", 1, 10.0).try_acquire() is True
        q = ac.queue("aq", backoff=(0.0, 0.0))
        await q.push("x", b"1")
        (lease,) = await q.claim(1, lease=5.0)
        assert isinstance(lease, dlm.AsyncLease) and lease.task.id == "x"
        assert await lease.nack("later") == "retrying"
        (lease,) = await q.claim(1, lease=5.0)
        await lease.ack(b"r")
        assert await q.result("x") == b"r"
        async with ac.semaphore("pool", 1, ttl=5.0) as g:
            assert g.permits == 1
            with pytest.raises(dlm.NoPermits):
                await ac.semaphore("pool", 1, ttl=5.0).acquire()
        async with ac.multi_lock(["a", "b"], ttl=5.0) as m:
            assert len(m.fences) == 2
        g1 = await ac.lock("f", ttl=5.0).acquire()
        assert g1.fence is not None
        await ac.fenced_write("f", g1.fence, b"v")
        assert await ac.fenced_read("f") == (g1.fence, b"v")
        await g1.release()

    asyncio.run(main())


def test_inspection(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    g = c.lock("inspect:a", ttl=10.0).acquire()
    held = c.held_locks("inspect:*")
    assert [h["name"] for h in held] == ["inspect:a"] and held[0]["fence"] == g.fence
    assert c.release_all()["released"] == 1
    assert g.is_lost()
    q = c.queue("inspected")
    q.push("t1", b"abc", group="g")
    info = q.task("t1")
    assert info is not None and info["state"] == "waiting" and info["group"] == "g"
    assert info["payload_len"] == 3 and info["deps"] == []
    assert q.task("nope") is None
    # (The core's queue_names misses queues whose tasks wait in groups: their
    # keys are :group/:ready, not :waiting; so a plain queue here.)
    c.queue("listed").push("t")
    assert "listed" in c.queue_names()
    assert q.workers() == []


def stub_typeddict_fields() -> dict[str, set[str]]:
    stub = ast.parse((Path(__file__).resolve().parent.parent / "dlm" / "_dlm.pyi").read_text())
    out: dict[str, set[str]] = {}
    for node in stub.body:
        if isinstance(node, ast.ClassDef) and any(
            isinstance(b, ast.Name) and b.id == "TypedDict" for b in node.bases
        ):
            out[node.name] = {
                n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
            }
    return out


def test_dicts_match_their_stub_types(redis_url: str) -> None:
    fields = stub_typeddict_fields()
    c = dlm.Client(redis_url)
    q = c.queue("shapes", max_attempts=1)
    q.push("ok")
    q.push("bad")
    q.schedule("tick", every=60.0)

    def handler(t: dlm.Task) -> None:
        if t.id == "bad":
            raise RuntimeError("x")

    report = q.work(handler, stop_when_idle=True)
    assert set(report) == fields["WorkReport"]
    assert set(q.stats()) == fields["QueueStats"]
    assert set(q.settings()) == fields["QueueSettings"]
    assert set(q.dead()[0]) == fields["DeadTask"]
    assert set(q.schedules()[0]) == fields["Schedule"]
    q.push("t")
    assert set(q.task("t") or {}) == fields["TaskInfo"]
    g = c.lock("shape", ttl=5.0).acquire()
    assert set(c.held_locks()[0]) == fields["HeldLock"]
    for handle in [
        c.lock("shape"),
        c.fair_lock("f"),
        c.rwlock("r"),
        c.semaphore("s", 2),
        c.election("e", "me"),
        c.multi_lock(["a", "b"]),
    ]:
        assert set(handle.status()) <= fields["LockStatus"]
    g.release()
    assert set(c.release_all()) == fields["ReleaseAll"]


def test_server_info_names_the_server_and_the_native_commands_in_use(redis_url: str) -> None:
    with dlm.Client(redis_url) as c:
        (info,) = c.server_info()
        assert info["product"] in ("redis", "valkey")
        assert info["version"].count(".") == 2
        if info["product"] == "redis":
            assert info["native"] == []
        else:
            assert "compare_and_delete" in info["native"], info
        with c.lock("native", ttl=5.0):
            pass
    with dlm.Client(redis_url, native_commands=False) as scripts:
        assert scripts.server_info()[0]["native"] == []
        with scripts.lock("native", ttl=5.0):
            pass


def test_async_server_info(redis_url: str) -> None:
    async def main() -> None:
        ac = await dlm.AsyncClient.connect(redis_url, native_commands=False)
        async with ac:
            (info,) = await ac.server_info()
            assert info["native"] == []

    asyncio.run(main())
